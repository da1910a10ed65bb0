"""scripts/bench.py (ran_lab.bench): one run of the harness on the synthetic data-bin with
a tiny transformer (baseline) and a tiny LSTM, checked for complete, finite, consistent figures;
and its errors. Its workers are forked from a server that has imported torch and fairseq
(``bench_env``)."""
import csv
import json
import math
import subprocess
import sys

import pytest

import helpers

BENCH = helpers.REPO / "scripts" / "bench.py"
COMMON = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
          "--optimizer", "adam", "--lr", "1e-3", "--dropout", "0.1"]
SYSTEMS = {
    "transformer": ("transformer", [
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2"]),
    "lstm": ("lstm", [
        "--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--decoder-embed-dim", "16",
        "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16"]),
}
METRICS = ["params", "train_tokens_per_s", "decode_sentences_per_s", "decode_tokens_per_s",
           "train_mem_peak_mib", "train_mem_increment_mib", "decode_mem_peak_mib",
           "decode_mem_increment_mib"]


@pytest.fixture(scope="module")
def data_bin(request, tmp_path_factory):
    try:
        return request.getfixturevalue("synthetic_databin")
    except pytest.FixtureLookupError:
        root = tmp_path_factory.mktemp("bench-data")
        return helpers.binarize(helpers.make_synthetic_corpus(root / "raw"), root / "bin")


@pytest.fixture(scope="module")
def systems_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench-systems") / "tiny.json"
    path.write_text(json.dumps({
        "baseline": "transformer", "common_flags": COMMON,
        "systems": [{"name": n, "arch": a, "flags": f} for n, (a, f) in SYSTEMS.items()]}))
    return path


def bench_env():
    """The benchmark's environment: its workers (``python -m ran_lab.bench.worker``, except under
    --live-memory) forked from a server that has imported torch and fairseq once, each about 3
    CPU-seconds less (``RAN_LAB_MODULE_LAUNCHER``, as the engine's tests run its commands)."""
    return dict(helpers.fairseq_env(), **{helpers.MODULE_LAUNCHER: helpers.module_launcher()})


def run_bench(data, systems, out, *extra):
    cmd = [sys.executable, str(BENCH), "--data", str(data), "--systems", str(systems),
           "--out", str(out), "--source-lang", helpers.SRC, "--target-lang", helpers.TGT,
           "--train-updates", "2", "--warmup-updates", "1", "--max-tokens", "400",
           "--beam", "2", "--decode-batch-size", "4", "--decode-sentences", "8",
           "--device", "cpu", "--threads", "1", *extra]
    return subprocess.run(cmd, env=bench_env(), capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def bench_out(data_bin, systems_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-out")
    proc = run_bench(data_bin, systems_file, out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads((out / "bench.json").read_text()), proc.stdout


def test_every_figure_is_positive_and_finite(bench_out):
    _, report, _ = bench_out
    assert [r["name"] for r in report["systems"]] == list(SYSTEMS)
    for r in report["systems"]:
        for key in METRICS:
            value = r["metrics"][key]
            assert math.isfinite(value) and value > 0, (r["name"], key, value)
        assert r["train"]["updates"] == 2
        assert r["decode"]["sentences"] == 8
        assert r["decode"]["generated_tokens"] >= 8
    assert report["machine"]["device"] == "cpu"
    assert report["settings"]["beam"] == 2


def test_ratios_are_relative_to_the_baseline(bench_out):
    _, report, _ = bench_out
    base, other = report["systems"]
    assert base["name"] == report["settings"]["baseline"] == "transformer"
    assert base["ratios"] == {key: 1.0 for key in METRICS}
    for key in METRICS:
        assert other["ratios"][key] == other["metrics"][key] / base["metrics"][key]


def test_parameter_count_matches_fairseq_model(bench_out, data_bin):
    _, report, _ = bench_out
    for r in report["systems"]:
        arch, flags = SYSTEMS[r["name"]]
        _, model = helpers.build_model(arch, data_bin, COMMON + flags)
        assert r["metrics"]["params"] == sum(p.numel() for p in model.parameters())


def test_markdown_has_a_row_per_system(bench_out):
    out, report, stdout = bench_out
    table = (out / "bench.md").read_text()
    assert table in stdout
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert "peak RSS" in rows[0]
    assert len(rows) == 1 + len(report["systems"])
    for r, row in zip(report["systems"], rows[1:]):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[:2] == [r["name"], r["arch"]]
        assert len(cells) == 2 + len(METRICS)
        assert cells[2] == f"{r['metrics']['params']:,} (×{r['ratios']['params']:.2f})"


def test_bench_json_names_the_checkouts_files_relative_to_it(bench_out, data_bin):
    """bench.json and bench.md hold no path of this checkout: its files are written relative to
    it (the plugin's folder in every fairseq command); a data-bin elsewhere keeps its path."""
    out, report, _ = bench_out
    for name in ("bench.json", "bench.md"):
        assert str(helpers.REPO) not in (out / name).read_text(), name
    for r in report["systems"]:
        argv = r["fairseq_argv"]
        assert argv[argv.index("--user-dir") + 1] == "ran_fairseq"
        assert argv[0] == str(data_bin.resolve())
    assert report["settings"]["data"] == str(data_bin.resolve())


@pytest.mark.parametrize("case", ["unknown_system", "missing_data", "reserved_flag", "fp16_cpu",
                                  "lengths_alone", "count_without_length"])
def test_bad_input_gives_a_clear_error(case, data_bin, systems_file, tmp_path):
    data, systems, extra = data_bin, systems_file, []
    if case == "fp16_cpu":
        extra, expected = ["--fp16"], "drop --fp16 or use --device cuda"
    elif case == "lengths_alone":
        extra, expected = ["--also-decode-lengths", "9"], "--also-decode-lengths needs --decode-length"
    elif case == "count_without_length":
        extra, expected = ["--count-kernels"], "add --decode-length N"
    elif case == "unknown_system":
        extra, expected = ["--systems-only", "lstm,nosuch"], "unknown system(s) nosuch"
    elif case == "missing_data":
        data, expected = tmp_path / "absent", "does not exist (--data)"
    else:
        spec = json.loads(systems_file.read_text())
        spec["systems"][1]["flags"] += ["--max-tokens", "100"]
        systems = tmp_path / "bad.json"
        systems.write_text(json.dumps(spec))
        expected = "sets --max-tokens, which the harness controls"
    proc = run_bench(data, systems, tmp_path / "out", *extra)
    assert proc.returncode != 0
    assert expected in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def forced_length_out(data_bin, systems_file, tmp_path_factory):
    """One benchmark of both systems with the measurements beside the timings: a forced decoding
    length (and one more), the kernel counts and the decoding breakdown."""
    out = tmp_path_factory.mktemp("bench-forced")
    proc = run_bench(data_bin, systems_file, out, "--decode-length", "5",
                     "--also-decode-lengths", "9", "--count-kernels", "--count-sentences", "6",
                     "--warm-shapes", "--decode-breakdown")
    assert proc.returncode == 0, proc.stderr[-3000:]
    systems = {r["name"]: r for r in json.loads((out / "bench.json").read_text())["systems"]}
    return systems, (out / "bench.md").read_text()


def test_decode_length_gives_every_system_the_same_decoding_work(forced_length_out):
    systems, table = forced_length_out
    for name, r in systems.items():
        decode = r["decode"]
        assert decode["generated_tokens"] == decode["sentences"] * 6, name  # 5 + EOS
    assert "forced to 5 tokens + EOS" in table


def test_kernel_counts_and_more_forced_lengths(forced_length_out):
    systems, table = forced_length_out
    for name, r in systems.items():
        assert r["decode_at_length"]["9"]["sentences_per_s"] > 0, name
        decoding, training = r["kernels"]["decoding"], r["kernels"]["training"]
        assert decoding["length"] == 5 and decoding["beam"] == 2
        assert decoding["total"] == pytest.approx(sum(decoding["components"].values()), abs=0.05)
        assert training["sentences"] == 6
        assert training["total"] == training["forward"] + training["backward"] > 0
    # the transformer's parts are found by module name; the LSTM has no such modules
    assert systems["transformer"]["kernels"]["decoding"]["components"]["self_attn"] > 0
    assert set(systems["lstm"]["kernels"]["decoding"]["components"]) <= {"encoder", "rest"}
    assert "decode sent/s, 9 tokens" in table and "decoding kernels per step" in table
    assert "one untimed update on each timed batch (--warm-shapes)" in table
    assert all(r["train"]["updates"] == 2 for r in systems.values())
    base = systems["transformer"]["kernels"]["decoding"]["total"]
    assert f"{base:,.2f} (×1.00)" in table


def test_decode_repeats_and_live_memory(data_bin, systems_file, tmp_path):
    """--decode-repeats reports the median pass; --live-memory runs the workers with freed memory
    returned (one benchmark run for both)."""
    proc = run_bench(data_bin, systems_file, tmp_path, "--decode-repeats", "3", "--live-memory",
                     "--systems-only", "transformer")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "bench.json").read_text())
    decode = report["systems"][0]["decode"]
    passes = sorted(decode["pass_seconds"])
    assert len(passes) == 3 and decode["seconds"] == passes[1]
    assert decode["sentences_per_s"] == pytest.approx(decode["sentences"] / passes[1])
    table = (tmp_path / "bench.md").read_text()
    assert "median of 3 timed passes" in table
    assert report["settings"]["live_memory"] is True
    assert report["machine"]["malloc_mmap_threshold"] == "65536"  # what the worker saw
    assert "MALLOC_MMAP_THRESHOLD_=65536" in table


def test_decode_breakdown_times_the_parts_of_one_more_pass(forced_length_out):
    systems, table = forced_length_out
    for name, r in systems.items():
        b = r["decode"]["breakdown"]
        seconds = b["parts_seconds"]
        assert 0 < seconds["encoder"] and 0 < seconds["cache reorder"]
        separate = sum(v for k, v in seconds.items()
                       if k not in ("rest", "self-attention value/output projections"))
        assert separate + seconds["rest"] == pytest.approx(b["pass_seconds"])
        assert 0 <= seconds["rest"] < b["pass_seconds"]
    transformer = systems["transformer"]["decode"]["breakdown"]["parts_seconds"]
    for part in ("self-attention", "cross-attention", "feed-forward", "output projection"):
        assert transformer[part] > 0, part
    assert 0 < transformer["self-attention value/output projections"] < \
        transformer["self-attention"]
    assert "self-attention" not in systems["lstm"]["decode"]["breakdown"]["parts_seconds"]
    rows = helpers.table_rows(next(block for block in table.split("\n\n") if "pass (s)" in block))
    assert list(rows["transformer"])[:5] == ["system", "pass (s)", "encoder", "self-attention",
                                             "(of which W_v, W_o)"]
    shares = list(rows["transformer"].values())[2:]
    assert sum(c.endswith(" %") for c in shares) == 8 and "–" not in shares
    # no self-attention, no projections
    assert [rows["lstm"][h] for h in ("self-attention", "(of which W_v, W_o)")] == ["–", "–"]


def test_cuda_peak_survives_the_resets_of_fairseqs_trainer(monkeypatch):
    """fairseq's Trainer.train_step calls torch.cuda.reset_peak_memory_stats() after every update;
    the probe must still report the largest peak of the phase (a fake CUDA allocator here)."""
    import torch

    from ran_lab.bench.worker import MemoryProbe

    allocator = {"now": 100 * 2**20, "peak": 100 * 2**20}

    def allocate(mib):
        allocator["now"] = mib * 2**20
        allocator["peak"] = max(allocator["peak"], allocator["now"])

    def reset_peak():
        allocator["peak"] = allocator["now"]

    for name, fake in {"synchronize": lambda: None, "empty_cache": lambda: None,
                       "reset_peak_memory_stats": reset_peak,
                       "memory_allocated": lambda: allocator["now"],
                       "max_memory_allocated": lambda: allocator["peak"]}.items():
        monkeypatch.setattr(torch.cuda, name, fake)
    probe = MemoryProbe(cuda=True)
    probe.start()
    for step_peak in (900, 1500, 700):  # three updates, each followed by the Trainer's reset
        allocate(step_peak)
        allocate(300)
        torch.cuda.reset_peak_memory_stats()
    allocate(400)
    result = probe.stop()
    assert result["mem_before_mib"] == 100
    assert result["mem_peak_mib"] == 1500
    assert torch.cuda.reset_peak_memory_stats is reset_peak  # restored after the phase


# ---- trained checkpoints and the Fig. 3 sweep (Zeng et al. 2021) ------------------------------
@pytest.fixture(scope="module")
def tiny_checkpoint_dir(data_bin, tmp_path_factory):
    """checkpoints/{system}/checkpoint_last.pt for the baseline, trained with its flags."""
    root = tmp_path_factory.mktemp("bench-ckpt")
    arch, flags = SYSTEMS["transformer"]
    helpers.train(data_bin, root / "transformer", arch, flags, max_update=2)
    return root


def test_sweep_decodes_the_checkpoint_per_batch_size_and_beam(data_bin, systems_file,
                                                              tiny_checkpoint_dir, tmp_path):
    pattern = str(tiny_checkpoint_dir / "{system}" / "checkpoint_last.pt")
    generated = {}
    # the whole sweep with seed 1; with seed 2, its last point alone, to compare the decoding
    for seed, sweep, points in (
            ("1", ["--sweep-batch-sizes", "2", "4", "--sweep-beams", "1", "3"],
             [("batch", "2", "2"), ("batch", "4", "2"), ("beam", "4", "1"), ("beam", "4", "3")]),
            ("2", ["--sweep-beams", "3"], [("beam", "4", "3")])):
        out = tmp_path / f"seed{seed}"
        proc = run_bench(data_bin, systems_file, out, "--systems-only", "transformer",
                         "--checkpoint", pattern, "--seed", seed, "--decode-repeats", "2", *sweep)
        assert proc.returncode == 0, proc.stderr[-4000:]
        with open(out / "speed-sweep.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [(r["sweep"], r["batch_size"], r["beam"]) for r in rows] == points
        for r in rows:
            report = json.loads((out / (f"batch-{r['batch_size']}" if r["sweep"] == "batch"
                                        else f"beam-{r['beam']}") / "bench.json").read_text())
            decode = report["systems"][0]["decode"]
            assert report["settings"]["checkpoint"] == pattern
            mean = sum(decode["pass_seconds"]) / 2
            assert float(r["tokens_per_s"]) == pytest.approx(decode["generated_tokens"] / mean,
                                                             rel=1e-5)
            assert int(r["passes"]) == 2 and int(r["sentences"]) == 8
        assert (out / "speed-sweep.png").read_bytes()[:4] == b"\x89PNG"
        generated[seed] = [r["generated_tokens"] for r in rows]
    # the benchmark's own training differs by seed; the decoded weights are the checkpoint's
    assert generated["1"][-1:] == generated["2"]


def test_checkpoint_errors_name_the_problem(data_bin, systems_file, tiny_checkpoint_dir, tmp_path):
    proc = run_bench(data_bin, systems_file, tmp_path / "a", "--checkpoint",
                     str(tmp_path / "{system}.pt"))
    assert proc.returncode != 0 and "no checkpoint at" in proc.stderr
    # the lstm system decoding the transformer's checkpoint: a model that does not fit
    (tiny_checkpoint_dir / "lstm").mkdir(exist_ok=True)
    link = tiny_checkpoint_dir / "lstm" / "checkpoint_last.pt"
    if not link.exists():
        link.symlink_to(tiny_checkpoint_dir / "transformer" / "checkpoint_last.pt")
    proc = run_bench(data_bin, systems_file, tmp_path / "b", "--systems-only", "lstm",
                     "--checkpoint", str(tiny_checkpoint_dir / "{system}" / "checkpoint_last.pt"))
    assert proc.returncode != 0 and "does not fit the model its flags build" in proc.stderr
    proc = run_bench(data_bin, systems_file, tmp_path / "c", "--checkpoint", "x.pt")
    assert proc.returncode != 0 and "'{system}'" in proc.stderr


def test_train_flags_of_a_reproduction_config_leave_out_what_the_harness_sets(
        data_bin, systems_file, tmp_path):
    """--train-flags-of: the config's training flags (its base and set_train_flags applied) reach
    every worker, without the flags the harness sets or a timed step does not use; the config's
    --max-tokens becomes the default of --max-tokens."""
    from ran_lab.bench.systems import train_flags_of

    flags, max_tokens, arch = train_flags_of(
        str(helpers.REPO / "configs/recurrent_cross/cpu.json"))
    assert max_tokens == 4096 and arch is None
    assert flags[flags.index("--adam-betas") + 1] == "(0.9, 0.98)"
    assert "--share-all-embeddings" in flags and "--lr-scheduler" in flags
    for dropped in ("--max-tokens", "--max-update", "--log-format", "--num-workers",
                    "--no-epoch-checkpoints", "4096", "1300", "simple"):
        assert dropped not in flags
    flags, max_tokens, arch = train_flags_of(
        str(helpers.REPO / "configs/dynmem/gpu-paper-epochs.json"))
    assert max_tokens is None and "--max-epoch" not in flags and "12" not in flags
    assert flags[flags.index("--init-range") + 1] == "0.1"

    cfg = json.loads((helpers.REPO / "configs/ran/cpu.json").read_text())
    # the config's other keys are not needed: a speed_bench not measured yet is no error
    cfg.update(systems=str(systems_file), paper=str(helpers.REPO / "configs/ran/paper.json"),
               speed_bench=str(tmp_path / "not-yet" / "bench.json"),
               train_flags=["--label-smoothing", "0.2", "--max-tokens", "300", "--max-update", "9",
                            "--log-format", "simple"])
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "out"

    def bench_with_config():  # the tiny transformer, one timed update, flags of the config at path
        return subprocess.run(
            [sys.executable, str(BENCH), "--data", str(data_bin), "--systems", str(systems_file),
             "--out", str(out), "--source-lang", helpers.SRC, "--target-lang", helpers.TGT,
             "--train-flags-of", str(path), "--systems-only", "transformer", "--train-updates",
             "1", "--warmup-updates", "0", "--beam", "1", "--decode-sentences", "2", "--device",
             "cpu", "--threads", "1"], env=bench_env(), capture_output=True, text=True,
            timeout=300)

    proc = bench_with_config()
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((out / "bench.json").read_text())
    assert report["settings"]["max_tokens"] == 300
    assert report["settings"]["config_flags"] == ["--label-smoothing", "0.2"]
    assert f"the training flags of `{path}`" in (out / "bench.md").read_text()
    assert report["settings"]["config_arch"] is None
    assert [r["arch"] for r in report["systems"]] == ["transformer"]
    # a full-size config's 'arch' (e.g. the GPU timing at base size of Rosendahl et al.'s systems)
    # replaces every system's, as the reproduction engine does; the systems' flags still apply
    path.write_text(json.dumps(dict(cfg, arch="transformer_iwslt_de_en")))
    proc = bench_with_config()
    assert proc.returncode == 0, proc.stderr[-4000:]
    arch_report = json.loads((out / "bench.json").read_text())
    assert arch_report["settings"]["config_arch"] == "transformer_iwslt_de_en"
    assert [r["arch"] for r in arch_report["systems"]] == ["transformer_iwslt_de_en"]
    params = [r["systems"][0]["metrics"]["params"] for r in (arch_report, report)]
    assert params[0] == params[1]  # the systems' own flags set the dimensions
    assert "every system trained as `transformer_iwslt_de_en`" in (out / "bench.md").read_text()
    flags, _, arch = train_flags_of(
        str(helpers.REPO / "configs/recurrent_cross/full-wmt16-ro-en.json"))
    assert arch == "recurrent_cross_transformer" and "--fp16" in flags
    # ... whose --fp16 fairseq trains only on a GPU: on the CPU, a clear error first
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--data", str(data_bin), "--systems", str(systems_file),
         "--out", str(out), "--source-lang", helpers.SRC, "--target-lang", helpers.TGT,
         "--train-flags-of", str(helpers.REPO / "configs/recurrent_cross/full-wmt16-ro-en.json"),
         "--device", "cpu"], env=bench_env(), capture_output=True, text=True,
        timeout=120)
    assert proc.returncode != 0 and "trains with --fp16" in proc.stderr, proc.stderr[-2000:]
    assert "--device cuda" in proc.stderr
    # training flags the engine refuses are the harness's error, naming the flag
    path.write_text(json.dumps(dict(cfg, set_train_flags={"--seed": "3"})))
    proc = subprocess.run([sys.executable, str(BENCH), "--data", str(data_bin), "--systems",
                           str(systems_file), "--out", str(out), "--train-flags-of", str(path)],
                          env=bench_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "--train-flags-of: config" in proc.stderr and "set_train_flags sets --seed" in proc.stderr


def test_worker_files_take_any_system_name(tmp_path):
    """A system's name becomes part of its worker's file names: one with '/' (Zeng et al.'s
    'RAN-ALL w/o LN&RES') stays a file inside the work folder, and distinct names stay distinct."""
    from ran_lab.bench.harness import worker_files

    names = ["RAN-ALL w/o LN&RES", "RAN-ALL w-o LN-RES", "TransF", "−Pos-E"]
    paths = [worker_files(tmp_path, name) for name in names]
    assert len({p for pair in paths for p in pair}) == 2 * len(names)
    for spec_path, result_path in paths:
        assert spec_path.parent == result_path.parent == tmp_path
        spec_path.write_text("{}")  # a plain file name: writable


def test_a_running_mps_daemon_is_named_in_the_report(tmp_path):
    from ran_lab.bench.report import settings_lines
    from ran_lab.common.machine import cuda_mps_running

    proc = tmp_path / "proc"
    for pid, name in (("1", "systemd"), ("77", "python3"), ("self", "x")):
        (proc / pid).mkdir(parents=True)
        (proc / pid / "comm").write_text(name + "\n")
    assert not cuda_mps_running(str(proc))
    (proc / "812").mkdir()
    (proc / "812" / "comm").write_text("nvidia-cuda-mps\n")  # the kernel's 15-character name
    assert cuda_mps_running(str(proc))
    assert not cuda_mps_running(str(tmp_path / "none"))

    machine = {"device": "cuda", "device_name": "GPU", "threads": 1, "load_average_before": 1.0,
               "load_average_after": 1.0, "torch": "t", "fairseq": "f", "date": "d",
               "cuda_mps": True}
    settings = {"baseline": "b", "train_updates": 1, "warmup_updates": 0, "max_tokens": 4096,
                "decode_sentences": 5, "gen_subset": "test", "beam": 4, "decode_batch_size": 5,
                "decode_length": 30, "decode_repeats": 1, "memory": "m"}
    first = settings_lines(settings, machine)[0]
    assert "MPS daemon running" in first
    assert "MPS" not in settings_lines(settings, dict(machine, cuda_mps=False))[0]
    assert "MPS" not in settings_lines(settings, {k: v for k, v in machine.items()
                                                  if k != "cuda_mps"})[0]
