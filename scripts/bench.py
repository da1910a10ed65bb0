#!/usr/bin/env python3
"""Speed, memory and size benchmark of fairseq translation systems on one binarized data set.

A systems file (JSON) lists the systems: ``{"baseline": NAME, "common_flags": [...], "systems":
[{"name": ..., "arch": ..., "flags": [...]}, ...]}``, where flags are fairseq-train flags. Each
system runs in its own worker subprocess (``bench.py --worker SPEC``), so peak memory and
fairseq's registries belong to that system alone. The worker builds task, model, criterion and
``fairseq.trainer.Trainer`` exactly as fairseq-train does, times ``--train-updates`` calls of
``Trainer.train_step`` after ``--warmup-updates`` untimed ones, then times beam search
(``task.build_generator`` + ``task.inference_step``) over the first ``--decode-sentences``
sentences of ``--gen-subset``.

Figures per system: parameter count; training target tokens/s (``sample["ntokens"]``); decoding
sentences/s and generated tokens/s (top hypothesis lengths, EOS included, as fairseq-generate
counts them); peak memory of training and of decoding (CUDA: ``max_memory_allocated``; CPU: the
resident set high-water mark) and its increment over the memory in use when the phase began.
The parent writes ``OUT/bench.json`` and ``OUT/bench.md`` (every figure also as a ratio to the
baseline system; a path inside the checkout written ``{repo}/PATH``) and prints the table.
``--decode-breakdown`` adds one more decoding pass with timers around the encoder, the decoder
layers' parts, the output projection and the cache reorder, and a second table of each part's
share of that pass.

    python scripts/bench.py --data data-bin/multi30k.de-en \
        --systems configs/bench/foundation.json --out bench-out/foundation

``--checkpoint PATTERN`` decodes trained weights: each system's model, built from its flags and
timed in training as usual, takes the weights of PATTERN with ``{system}`` replaced by the
system's result folder name (e.g. ``checkpoints/ran/de-en/{system}/seed1/checkpoint_best.pt``, a
reproduction's layout) before decoding; a system without such a file is an error.
``--sweep-batch-sizes`` and ``--sweep-beams`` (Zeng et al. 2021, Fig. 3) run the benchmark once per
batch size (at ``--beam``) and once per beam size (at ``--decode-batch-size``), each into
OUT/batch-N or OUT/beam-K, and write OUT/speed-sweep.csv and OUT/speed-sweep.png: decoding
tokens/s per system, from the mean time of the ``--decode-repeats`` passes (the paper averages 3
runs).

    python scripts/bench.py --data data-bin/multi30k.de-en --systems configs/ran/systems.json \
        --train-flags-of configs/ran/cpu.json \
        --systems-only RAN-ALL --checkpoint 'checkpoints/ran/de-en/{system}/seed1/checkpoint_best.pt' \
        --train-updates 1 --warmup-updates 0 --decode-sentences 500 --decode-repeats 3 \
        --beam 4 --decode-batch-size 100 --sweep-batch-sizes 1 10 25 50 100 200 \
        --sweep-beams 1 2 4 8 12 --out results/ran/analysis/speed
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "ran_fairseq"
sys.path.insert(0, str(REPO))

from ran_fairseq.lab import portable  # noqa: E402
from ran_fairseq.reproduce import available_cores, check_flags as check_flag_list  # noqa: E402

# Flags the harness sets itself; a systems file that sets them would be silently overridden.
RESERVED_FLAGS = {
    "--arch": "the system's 'arch' field",
    "-a": "the system's 'arch' field",
    "--task": "nothing (the benchmark is for --task translation)",
    "--user-dir": "nothing (the harness loads ran_fairseq)",
    "--source-lang": "bench.py --source-lang",
    "-s": "bench.py --source-lang",
    "--target-lang": "bench.py --target-lang",
    "-t": "bench.py --target-lang",
    "--max-tokens": "bench.py --max-tokens",
    "--seed": "bench.py --seed",
    "--cpu": "bench.py --device",
}

# (key in a result's "metrics", table heading, format); memory headings get the memory kind.
METRICS = [
    ("params", "params", "{:,.0f}"),
    ("train_tokens_per_s", "train tok/s", "{:,.1f}"),
    ("decode_sentences_per_s", "decode sent/s", "{:,.2f}"),
    ("decode_tokens_per_s", "decode tok/s", "{:,.1f}"),
    ("train_mem_peak_mib", "train peak {mem} (MiB)", "{:,.1f}"),
    ("train_mem_increment_mib", "train Δ{mem} (MiB)", "{:,.1f}"),
    ("decode_mem_peak_mib", "decode peak {mem} (MiB)", "{:,.1f}"),
    ("decode_mem_increment_mib", "decode Δ{mem} (MiB)", "{:,.1f}"),
]
MEMORY_KINDS = {"cuda": "CUDA alloc", "cpu": "RSS"}
# --decode-breakdown: the decoding parts timed, matched on module names of fairseq's transformer
# decoder layers (and of the plugin's models built on them). The first parts do not overlap; the
# value/output projections are a share of the self-attention. "rest" is all else: beam search,
# embeddings, layer norms.
BREAKDOWN_PARTS = [
    ("encoder", None),  # timed around encoder.forward_torchscript, which bypasses module hooks
    ("self-attention", r"decoder\.layers\.\d+\.self_attn"),
    ("cross-attention", r"decoder\.layers\.\d+\.encoder_attn"),
    ("feed-forward", r"decoder\.layers\.\d+\.fc[12]"),
    ("output projection", r"decoder\.output_projection"),
    ("cache reorder", None),  # timed around decoder.reorder_incremental_state_scripting
]
BREAKDOWN_SHARE = ("self-attention value/output projections",
                   r"decoder\.layers\.\d+\.self_attn\.(v_proj|out_proj)")
# --live-memory: every allocation of 64 KiB or more is mapped and unmapped on its own, so the
# resident set follows the live tensors (glibc's default threshold grows up to 32 MiB and keeps
# freed tensors in the heap).
LIVE_MEMORY_MMAP_THRESHOLD = 65536


class BenchError(Exception):
    """A problem with the benchmark's input; the message names it and the flag to change."""


# ----------------------------------------------------------------------------------------------
# Parent: read the systems file, run one worker per system, write JSON and markdown.
# ----------------------------------------------------------------------------------------------

def parse_cli(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="fairseq-preprocess output directory")
    p.add_argument("--systems", required=True, help="systems file (JSON)")
    p.add_argument("--out", required=True, help="directory for bench.json and bench.md")
    p.add_argument("--source-lang", help="source language (default: inferred from --data)")
    p.add_argument("--target-lang", help="target language (default: inferred from --data)")
    p.add_argument("--train-flags-of", metavar="CONFIG",
                   help="take the training flags of a reproduction config (e.g. "
                        "configs/recurrent_cross/cpu.json, its 'base' and 'set_train_flags' "
                        "applied) before the systems file's common flags, so that the benchmark "
                        "trains as the reproduction does; flags the harness sets itself are "
                        "left out, and the config's --max-tokens is the default of --max-tokens; "
                        "a config with an 'arch' (the full-size ones) trains every system at "
                        "that architecture, as the reproduction does")
    p.add_argument("--systems-only",
                   help="comma-separated system names to run; the baseline is always included")
    p.add_argument("--train-updates", type=int, default=20, help="timed training updates")
    p.add_argument("--warmup-updates", type=int, default=3,
                   help="untimed updates before timing (not fairseq's LR --warmup-updates, "
                        "which belongs in the systems file)")
    p.add_argument("--max-tokens", type=int,
                   help="fairseq --max-tokens per update (default: --train-flags-of's, else 4096)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--decode-batch-size", type=int, default=64, help="sentences per decoding batch")
    p.add_argument("--decode-sentences", type=int, default=200,
                   help="decode the first N sentences of --gen-subset")
    p.add_argument("--decode-repeats", type=int, default=1, metavar="K",
                   help="time K passes over the decoded sentences and report the median pass, "
                        "to damp other load on the machine (bench.json keeps every pass)")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--max-len-a", type=float, default=1.2,
                   help="hypotheses stop at max-len-a * source length + max-len-b tokens")
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--decode-length", type=int, metavar="N",
                   help="force every hypothesis to N tokens plus EOS (overrides --max-len-a/-b), "
                        "so that systems do the same decoding work whatever they predict: "
                        "compare decoding speed of untrained or unequally trained models")
    p.add_argument("--also-decode-lengths", type=int, nargs="+", metavar="N", default=[],
                   help="with --decode-length: time decoding again at each forced length N "
                        "(a table of its own in bench.md)")
    p.add_argument("--warm-shapes", action="store_true",
                   help="before timing, train one untimed update on each of the timed batches, so "
                        "that costs paid once per new batch shape (GPU libraries' per-shape plans "
                        "and autotuning, the allocator's growth) fall outside the timing: the "
                        "steady state of a long training, where shapes repeat")
    p.add_argument("--fp16", action="store_true",
                   help="train and decode in float16 (fairseq's --fp16; CUDA only)")
    p.add_argument("--count-kernels", action="store_true",
                   help="add each system's kernel counts (ran_fairseq/lab/bench/kernels.py: aten "
                        "operators dispatched on the CPU in float32, views excluded) per "
                        "decoding step of the first decoding batch at --decode-length, and per "
                        "training step (forward and backward) over the first --count-sentences "
                        "sentences of --count-subset, by component")
    p.add_argument("--count-sentences", type=int, default=64,
                   help="sentences of the training step --count-kernels counts")
    p.add_argument("--count-subset", default="valid",
                   help="the split whose first sentences --count-kernels trains on")
    p.add_argument("--cuda-launches", action="store_true",
                   help="CUDA: also count the kernels the GPU ran in one decoding batch per "
                        "forced length (torch.profiler), per decoding step")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=available_cores(),
                   help="torch CPU threads per worker")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--decode-breakdown", action="store_true",
                   help="time one more decoding pass by part (encoder, self-attention and its "
                        "value/output projections, cross-attention, feed-forward, output "
                        "projection, cache reorder, rest) and add a table of the shares")
    p.add_argument("--checkpoint", metavar="PATTERN",
                   help="decode trained weights: the checkpoint at PATTERN, '{system}' replaced "
                        "by each system's folder name (its name with spaces as '_' and other "
                        "signs as '-', as the reproduction engine names it)")
    p.add_argument("--sweep-batch-sizes", type=int, nargs="+", metavar="N",
                   help="Fig. 3: run once per decoding batch size N (at --beam) and plot "
                        "decoding speed against it (OUT/speed-sweep.csv and .png)")
    p.add_argument("--sweep-beams", type=int, nargs="+", metavar="K",
                   help="Fig. 3: run once per beam size K (at --decode-batch-size) and plot "
                        "decoding speed against it")
    p.add_argument("--live-memory", action="store_true",
                   help="CPU: run the workers with glibc's MALLOC_MMAP_THRESHOLD_=%d, so that "
                        "freed tensors go back to the system and the resident set follows the "
                        "memory in use, as CUDA's max_memory_allocated does, instead of also "
                        "holding freed heap (allocation gets slower)" % LIVE_MEMORY_MMAP_THRESHOLD)
    args = p.parse_args(argv)
    args.config_flags, args.config_max_tokens, args.config_arch = [], None, None
    if args.train_flags_of:
        try:
            args.config_flags, args.config_max_tokens, args.config_arch = \
                config_train_flags(args.train_flags_of)
        except BenchError as e:
            p.error(str(e))
    if args.max_tokens is None:
        args.max_tokens = args.config_max_tokens or 4096
    for flag in ("train_updates", "max_tokens", "beam", "decode_batch_size", "decode_sentences",
                 "decode_repeats", "threads"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.warmup_updates < 0:
        p.error("--warmup-updates must be at least 0")
    if args.decode_length is not None and args.decode_length < 1:
        p.error("--decode-length must be at least 1")
    if args.also_decode_lengths and args.decode_length is None:
        p.error("--also-decode-lengths needs --decode-length (the first forced length)")
    if any(n < 1 for n in args.also_decode_lengths):
        p.error("--also-decode-lengths takes lengths of at least 1")
    if args.count_kernels and args.decode_length is None:
        p.error("--count-kernels counts per decoding step of a forced length: add "
                "--decode-length N")
    if args.count_sentences < 1:
        p.error("--count-sentences must be at least 1")
    for flag in ("sweep_batch_sizes", "sweep_beams"):
        values = getattr(args, flag) or []
        if any(v < 1 for v in values) or len(set(values)) != len(values):
            p.error(f"--{flag.replace('_', '-')} takes distinct values of at least 1")
    if args.checkpoint is not None and "{system}" not in args.checkpoint:
        p.error("--checkpoint needs '{system}' in its pattern, e.g. "
                "checkpoints/ran/de-en/{system}/seed1/checkpoint_best.pt")
    return args


def load_systems(path):
    """Read and check a systems file; return (baseline name, common flags, systems by name)."""
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"systems file {path} does not exist (--systems)")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BenchError(f"systems file {path} is not valid JSON: {e}") from e
    if not (isinstance(spec, dict) and isinstance(spec.get("systems"), list) and spec["systems"]):
        raise BenchError(f"{path}: expected an object with a non-empty 'systems' list")
    common = spec.get("common_flags", [])
    check_flags(common, f"{path}: common_flags")
    systems = {}
    for i, system in enumerate(spec["systems"]):
        if not isinstance(system, dict) or not all(
                isinstance(system.get(k), str) and system[k] for k in ("name", "arch")):
            raise BenchError(f"{path}: systems[{i}] needs string fields 'name' and 'arch'")
        if system["name"] in systems:
            raise BenchError(f"{path}: system name {system['name']!r} appears twice")
        check_flags(system.get("flags", []), f"{path}: system {system['name']!r} flags")
        systems[system["name"]] = {"name": system["name"], "arch": system["arch"],
                                   "flags": list(system.get("flags", []))}
    baseline = spec.get("baseline")
    if baseline not in systems:
        raise BenchError(f"{path}: baseline {baseline!r} is not one of the systems "
                         f"({', '.join(systems)})")
    return baseline, list(common), systems


# Flags of a reproduction config (--train-flags-of) that the benchmark leaves out besides
# RESERVED_FLAGS: they name files, logging or the end of training, none of which a timed step uses.
NOT_BENCHED_FLAGS = {"--save-dir", "--max-update", "--max-epoch", "--log-format",
                     "--log-interval", "--no-epoch-checkpoints", "--num-workers",
                     "--best-checkpoint-metric", "--maximize-best-checkpoint-metric"}


def config_train_flags(path):
    """The training flags of reproduction config ``path`` without those the harness sets or does
    not use, the config's --max-tokens (or None), and its ``arch`` (or None): a full-size config
    such as configs/recurrent_cross/full-wmt16-ro-en.json trains every system of its systems file
    at that architecture, and so does the benchmark."""
    from ran_fairseq.reproduce import ReproError, flag_pairs, read_config
    from ran_fairseq.reproduce import config_train_flags as engine_train_flags

    try:  # only the training flags: the config's other keys (e.g. its speed_bench) may not exist
        config = read_config(path)
        pairs = flag_pairs(engine_train_flags(config, path))
    except ReproError as e:
        raise BenchError(f"--train-flags-of: {e}") from e
    max_tokens = pairs.get("--max-tokens")
    kept = []
    for flag, value in pairs.items():
        name = flag.split("=", 1)[0]
        if name not in RESERVED_FLAGS and name not in NOT_BENCHED_FLAGS:
            kept += [flag] if value is None else [flag, value]
    arch = config.get("arch")
    if arch is not None and not (isinstance(arch, str) and arch):
        raise BenchError(f"--train-flags-of: config {path}: 'arch' must be an architecture name, "
                         f"not {arch!r}")
    return kept, int(max_tokens) if max_tokens is not None else None, arch


def check_flags(flags, where):
    check_flag_list(flags, RESERVED_FLAGS, where, error=BenchError, verb="the harness controls")


def select_systems(systems, baseline, only):
    """The systems to run, in file order; ``only`` is the --systems-only value or None."""
    if only is None:
        return list(systems.values())
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in systems]
    if unknown:
        raise BenchError(f"--systems-only: unknown system(s) {', '.join(unknown)}; "
                         f"the systems file has: {', '.join(systems)}")
    return [s for name, s in systems.items() if name == baseline or name in wanted]


def check_data(data, src, tgt):
    data = Path(data)
    if not data.is_dir():
        raise BenchError(f"data directory {data} does not exist (--data)")
    langs = [src, tgt] if src and tgt else []
    missing = [f"dict.{lang}.txt" for lang in langs if not (data / f"dict.{lang}.txt").is_file()]
    if missing or not list(data.glob("dict.*.txt")):
        raise BenchError(f"{data} is not a fairseq-preprocess output directory for this language "
                         f"pair: missing {', '.join(missing) or 'dict.*.txt'} (--data, "
                         f"--source-lang, --target-lang)")
    return data.resolve()


def resolve_device(device):
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise BenchError("--device cuda: torch sees no CUDA device; use --device cpu")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def fairseq_argv(data, system, common, args, device):
    """The fairseq-train command line (without the program name) for one system."""
    argv = [str(data), "--user-dir", str(USER_DIR), "--task", "translation",
            "--arch", system["arch"], "--max-tokens", str(args.max_tokens),
            "--seed", str(args.seed), "--num-workers", "0"]
    if args.source_lang and args.target_lang:
        argv += ["--source-lang", args.source_lang, "--target-lang", args.target_lang]
    if device == "cpu":
        argv.append("--cpu")
    if getattr(args, "fp16", False):
        argv.append("--fp16")
    return argv + args.config_flags + common + system["flags"]


def worker_files(workdir, name):
    """The spec and result files of system ``name``'s worker in ``workdir``: a file name made of
    the system's (which may hold '/', as 'RAN-ALL w/o LN&RES'), distinct for distinct names."""
    from ran_fairseq.reproduce import slug

    stem = f"{slug(name)}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return Path(workdir) / f"{stem}.spec.json", Path(workdir) / f"{stem}.result.json"


def run_worker_process(spec, workdir):
    """Run one system's worker; return its result dict or raise BenchError with its stderr."""
    spec_path, result_path = worker_files(workdir, spec["name"])
    spec["result_path"] = str(result_path)
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]),
               MKL_NUM_THREADS=str(spec["threads"]), PYTHONUNBUFFERED="1")
    if spec["live_memory"]:
        env["MALLOC_MMAP_THRESHOLD_"] = str(LIVE_MEMORY_MMAP_THRESHOLD)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker",
                           str(spec_path)], env=env, capture_output=True, text=True)
    result_path = Path(spec["result_path"])
    if proc.returncode != 0 or not result_path.is_file():
        raise BenchError(
            f"system {spec['name']!r} (arch {spec['arch']}) failed with exit code "
            f"{proc.returncode}\nfairseq flags: {' '.join(spec['argv'])}\n"
            f"--- worker stderr (tail) ---\n{proc.stderr[-5000:]}")
    return json.loads(result_path.read_text())


def progress_line(result):
    """One system's main figures, printed as it finishes (kept in the log if a later one fails)."""
    t, d = result["train"], result["decode"]
    return (f"{t['seconds'] / t['updates']:.4f} s/update, train {t['tokens_per_s']:,.1f} tok/s, "
            f"decode {d['sentences_per_s']:,.2f} sent/s, peak train {t['mem_peak_mib']:,.1f} "
            f"MiB, peak decode {d['mem_peak_mib']:,.1f} MiB")


def add_ratios(results, baseline):
    """Give every result a 'ratios' dict: each metric divided by the baseline's (None if 0)."""
    base = next(r for r in results if r["name"] == baseline)["metrics"]
    for r in results:
        r["ratios"] = {k: (v / base[k] if base[k] else None) for k, v in r["metrics"].items()}


def machine_info(device, threads, worker_env, load_before):
    """Where the benchmark ran; ``worker_env`` is the versions and device name a worker saw,
    ``load_before`` the 1-minute load average when the benchmark began (other work skews it)."""
    cpu_model = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        cpu_model = m.group(1).strip() if m else cpu_model
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                         text=True)
    return {
        "device": device,
        "device_name": worker_env["cuda_device"] if device == "cuda" else cpu_model,
        "cpu_model": cpu_model,
        "cores": available_cores(),
        "threads": threads,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "torch": worker_env["torch"],
        "cuda": worker_env["cuda"],
        "fairseq": worker_env["fairseq"],
        "malloc_mmap_threshold": worker_env["malloc_mmap_threshold"],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git.stdout.strip() if git.returncode == 0 else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def markdown(report):
    """The results as a markdown table, each figure with its ratio to the baseline."""
    mem = MEMORY_KINDS[report["machine"]["device"]]
    heads = ["system", "arch"] + [h.format(mem=mem) for _, h, _ in METRICS]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * 2 + "---:|" * len(METRICS)]
    for r in report["systems"]:
        cells = [r["name"], r["arch"]]
        for key, _, fmt in METRICS:
            ratio = r["ratios"][key]
            cells.append(fmt.format(r["metrics"][key])
                         + (f" (×{ratio:.2f})" if ratio is not None else " (×n/a)"))
        lines.append("| " + " | ".join(cells) + " |")
    s, m = report["settings"], report["machine"]
    lines += ["", f"Ratios are to `{s['baseline']}`. Device: {m['device_name']} ({m['device']}, "
              f"{m['threads']} threads, load average {m['load_average_before']:.1f} before and "
              f"{m['load_average_after']:.1f} after); torch {m['torch']}, "
              f"fairseq {m['fairseq']}; {m['date']}.",
              f"Training: {s['train_updates']} timed updates after {s['warmup_updates']} untimed"
              + (" and one untimed update on each timed batch (--warm-shapes)"
                 if s.get("warm_shapes") else "") + ", "
              f"--max-tokens {s['max_tokens']}"
              + (f", the training flags of `{s['train_flags_of']}`" if s.get("train_flags_of")
                 else "")
              + (f" and its architecture (every system trained as `{s['config_arch']}`)"
                 if s.get("config_arch") else "")
              + f". Decoding: first {s['decode_sentences']} sentences of `{s['gen_subset']}`, "
              f"beam {s['beam']}, {s['decode_batch_size']} sentences per "
              f"batch, " + (f"every hypothesis forced to {s['decode_length']} tokens + EOS"
                            if s.get("decode_length") else
                            f"max length {s['max_len_a']}·src+{s['max_len_b']}")
              + (f", median of {s['decode_repeats']} timed passes"
                 if s.get("decode_repeats", 1) > 1 else "")
              + f". Memory: {s['memory']}."]
    if s.get("decode_breakdown"):
        lines += [""] + breakdown_markdown(report)
    lines += extras_markdown(report)
    return "\n".join(lines) + "\n"


def _ratio(value, base):
    return f"{value:,.2f} (×{value / base:.2f})" if base else f"{value:,.2f} (×n/a)"


def extras_markdown(report):
    """Tables of --also-decode-lengths, --cuda-launches and --count-kernels, where run."""
    systems, s = report["systems"], report["settings"]
    base = next(r for r in systems if r["name"] == s["baseline"])
    lines = []
    if base.get("decode_at_length"):
        lengths = [str(s["decode_length"])] + list(base["decode_at_length"])
        lines += ["", "| system | " + " | ".join(f"decode sent/s, {n} tokens" for n in lengths)
                  + " |", "|---|" + "---:|" * len(lengths)]
        for r in systems:
            at = {str(s["decode_length"]): r["decode"], **r.get("decode_at_length", {})}
            b = {str(s["decode_length"]): base["decode"], **base["decode_at_length"]}
            lines.append("| " + " | ".join([r["name"]] + [
                _ratio(at[n]["sentences_per_s"], b[n]["sentences_per_s"]) for n in lengths])
                + " |")
        lines += ["", "Decoding speed at each forced length (every hypothesis forced to that "
                      "many tokens + EOS), ratios to the baseline."]
    if base.get("cuda_launches"):
        lengths = list(base["cuda_launches"])
        lines += ["", "| system | " + " | ".join(f"GPU kernels per decoding step, {n} tokens"
                                                 for n in lengths) + " |",
                  "|---|" + "---:|" * len(lengths)]
        for r in systems:
            lines.append("| " + " | ".join([r["name"]] + [
                _ratio(r["cuda_launches"][n]["per_step"], base["cuda_launches"][n]["per_step"])
                for n in lengths]) + " |")
        lines += ["", "Kernels the GPU ran in one decoding batch (torch.profiler's CUDA kernel "
                      "events) divided by the forced length."]
    if base.get("kernels"):
        parts = ["encoder", "self_attn", "encoder_attn", "ffn", "rest"]
        lines += ["", "| system | decoding kernels per step | " + " | ".join(parts)
                  + " | training kernels per step | forward | backward |",
                  "|---|" + "---:|" * (len(parts) + 4)]
        bd, bt = base["kernels"]["decoding"], base["kernels"]["training"]
        for r in systems:
            d, t = r["kernels"]["decoding"], r["kernels"]["training"]
            lines.append("| " + " | ".join(
                [r["name"], _ratio(d["total"], bd["total"])]
                + [f"{d['components'].get(p, 0):,.2f}" for p in parts]
                + [_ratio(t["total"], bt["total"]), str(t["forward"]), str(t["backward"])])
                + " |")
        lines += ["", f"Kernels (ran_fairseq/lab/bench/kernels.py): aten operators dispatched on "
                      f"the CPU in float32, views and aliases excluded. Decoding: the first "
                      f"decoding batch ({bd['sentences']} sentences, beam {bd['beam']}) forced to "
                      f"{bd['length']} tokens, per step (the call's count divided by "
                      f"{bd['length']}), by module; training: one forward and backward over the "
                      f"first {bt['sentences']} sentences of `{s['count_subset']}` (target "
                      f"length {bt['target_length']}), no optimizer step. On a GPU a small "
                      f"model's step costs about one launch per kernel."]
    return lines


def breakdown_markdown(report):
    """--decode-breakdown: each system's decoding time by part, as shares of that pass."""
    parts = [p for p, _ in BREAKDOWN_PARTS] + ["rest"]
    heads = ["system", "pass (s)"] + parts[:2] + ["(of which W_v, W_o)"] + parts[2:]
    lines = ["| " + " | ".join(heads) + " |", "|---|" + "---:|" * (len(heads) - 1)]
    for r in report["systems"]:
        b = r["decode"]["breakdown"]
        seconds = b["parts_seconds"]
        share = [f"{100 * seconds[p] / b['pass_seconds']:.1f} %" if p in seconds else "–"
                 for p in parts[:2] + [BREAKDOWN_SHARE[0]] + parts[2:]]
        lines.append("| " + " | ".join([r["name"], f"{b['pass_seconds']:.2f}"] + share) + " |")
    lines += ["", "Decoding time by part: one more pass over the same batches, with a timer "
                  "around each part (the timers add a little time; on CUDA each one "
                  "synchronizes). W_v, W_o: the self-attention's value and output projections, "
                  "a share of its time; rest: beam search, embeddings, layer norms and all "
                  "else."]
    return lines


# The settings each worker reads from its spec.
WORKER_SETTINGS = ("train_updates", "warmup_updates", "beam", "decode_batch_size",
                   "decode_sentences", "decode_repeats", "gen_subset", "max_len_a", "max_len_b",
                   "decode_length", "seed", "decode_breakdown", "also_decode_lengths",
                   "count_kernels", "count_sentences", "count_subset", "cuda_launches",
                   "warm_shapes")
SWEEP_FIELDS = ["sweep", "system", "batch_size", "beam", "sentences", "generated_tokens",
                "mean_seconds", "tokens_per_s", "sentences_per_s", "passes"]


def system_checkpoint(pattern, name):
    """The checkpoint of system ``name`` under ``--checkpoint PATTERN``, which must exist."""
    from ran_fairseq.reproduce import slug

    path = Path(pattern.replace("{system}", slug(name)))
    if not path.is_file():
        raise BenchError(f"system {name!r}: no checkpoint at {path} (--checkpoint)")
    return str(path.resolve())


def sweep_rows(sweep, report):
    """Fig. 3 rows of one benchmark run: decoding tokens/s and sentences/s of each system from
    the mean time of its timed passes."""
    rows = []
    for r in report["systems"]:
        d = r["decode"]
        mean = statistics.mean(d["pass_seconds"])
        rows.append({"sweep": sweep, "system": r["name"],
                     "batch_size": report["settings"]["decode_batch_size"],
                     "beam": report["settings"]["beam"], "sentences": d["sentences"],
                     "generated_tokens": d["generated_tokens"], "mean_seconds": mean,
                     "tokens_per_s": d["generated_tokens"] / mean,
                     "sentences_per_s": d["sentences"] / mean, "passes": len(d["pass_seconds"])})
    return rows


def run_parent(args):
    if not (args.sweep_batch_sizes or args.sweep_beams):
        return run_benchmark(args, Path(args.out))
    from ran_fairseq.analysis.plots import plot_speed_sweep
    from ran_fairseq.analysis.tables import write_csv

    out = Path(args.out)
    points = ([("batch", dict(decode_batch_size=n), f"batch-{n}")
               for n in args.sweep_batch_sizes or []]
              + [("beam", dict(beam=k), f"beam-{k}") for k in args.sweep_beams or []])
    rows = []
    for sweep, change, folder in points:
        print(f"bench: sweep point {folder}", file=sys.stderr, flush=True)
        report = run_benchmark(argparse.Namespace(**{**vars(args), **change}), out / folder)
        rows += sweep_rows(sweep, report)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "speed-sweep.csv", rows, SWEEP_FIELDS)
    plot_speed_sweep(rows, out / "speed-sweep.png")
    print(out / "speed-sweep.csv")
    print(out / "speed-sweep.png")


def run_benchmark(args, out):
    """One benchmark run of every selected system into ``out``; returns the report."""
    baseline, common, systems = load_systems(args.systems)
    if args.config_arch:  # as the reproduction engine trains a config with an 'arch'
        for system in systems.values():
            system["arch"] = args.config_arch
    selected = select_systems(systems, baseline, args.systems_only)
    data = check_data(args.data, args.source_lang, args.target_lang)
    device = resolve_device(args.device)
    from ran_fairseq.reproduce import GPU_ONLY_FLAG, ReproError, check_device_flags, flag_names

    where = (f"--train-flags-of {args.train_flags_of}" if GPU_ONLY_FLAG in
             flag_names(args.config_flags) else f"{args.systems} (common_flags)")
    try:
        check_device_flags(device, args.config_flags + common, selected, where,
                           "time it on a GPU (--device cuda), or on the CPU without the flag (a "
                           "config or systems file without it)")
    except ReproError as e:
        raise BenchError(str(e)) from e
    settings = {
        "data": str(data), "systems_file": str(Path(args.systems).resolve()),
        "baseline": baseline, "common_flags": common,
        "train_flags_of": args.train_flags_of, "config_flags": args.config_flags,
        "config_arch": args.config_arch,
        "source_lang": args.source_lang, "target_lang": args.target_lang,
        "train_updates": args.train_updates, "warmup_updates": args.warmup_updates,
        "max_tokens": args.max_tokens, "beam": args.beam,
        "decode_batch_size": args.decode_batch_size, "decode_sentences": args.decode_sentences,
        "decode_repeats": args.decode_repeats, "gen_subset": args.gen_subset,
        "max_len_a": args.max_len_a, "max_len_b": args.max_len_b,
        "decode_length": args.decode_length, "seed": args.seed,
        "also_decode_lengths": args.also_decode_lengths, "fp16": args.fp16,
        "warm_shapes": args.warm_shapes,
        "count_kernels": args.count_kernels, "count_sentences": args.count_sentences,
        "count_subset": args.count_subset, "cuda_launches": args.cuda_launches,
        "decode_breakdown": args.decode_breakdown,
        "checkpoint": args.checkpoint,
        "memory": ("torch.cuda.max_memory_allocated; increment over memory_allocated at the "
                   "phase start" if device == "cuda" else
                   "peak resident set size (VmHWM, reset at each phase start); increment over "
                   "the RSS at the phase start"),
        "live_memory": args.live_memory,
    }
    if args.fp16 and device != "cuda":
        raise BenchError("--fp16 trains in float16, which fairseq runs on CUDA only: drop --fp16 "
                         "or use --device cuda")
    if args.cuda_launches and device != "cuda":
        raise BenchError("--cuda-launches counts GPU kernels: drop it or use --device cuda")
    if args.live_memory and device == "cuda":
        raise BenchError("--live-memory applies to CPU memory; on CUDA the peak is already the "
                         "memory allocated to live tensors: drop --live-memory or use "
                         "--device cpu")
    load_before = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
        for system in selected:
            print(f"bench: {system['name']} ({system['arch']}) ...", file=sys.stderr, flush=True)
            spec = dict(system, argv=fairseq_argv(data, system, common, args, device),
                        device=device, threads=args.threads, live_memory=args.live_memory,
                        **{k: settings[k] for k in WORKER_SETTINGS})
            if args.checkpoint:
                spec["checkpoint"] = system_checkpoint(args.checkpoint, system["name"])
            results.append(run_worker_process(spec, workdir))
            print(f"bench: {system['name']}: {progress_line(results[-1])}", file=sys.stderr,
                  flush=True)
    if not all(r["train"]["mem_peak_since_phase_start"] for r in results):
        settings["memory"] = ("process-lifetime peak resident set size (ru_maxrss; this kernel "
                              "cannot reset VmHWM); increment over the RSS at the phase start")
    add_ratios(results, baseline)
    worker_env = [r.pop("environment") for r in results][0]
    threshold = worker_env["malloc_mmap_threshold"]  # set by --live-memory or by the user
    if device == "cpu" and threshold:
        settings["memory"] += (f", with MALLOC_MMAP_THRESHOLD_={threshold} (freed tensors are "
                               "returned to the system)")
    report = {"machine": machine_info(device, args.threads, worker_env, load_before),
              "settings": settings, "systems": results}
    # the checkout's files as {repo}/PATH (ran_fairseq.lab.portable), not this machine's paths
    report = portable.record(report, REPO)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (out / "bench.md").write_text(table)
    print(table)
    return report


# ----------------------------------------------------------------------------------------------
# Worker: one system, in its own process.
# ----------------------------------------------------------------------------------------------

class MemoryProbe:
    """Peak memory of one phase, in MiB, and its increment over the memory in use at the start.

    CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; fairseq's
    ``Trainer.train_step`` resets the peak itself after every update, so while a phase runs that
    reset first records the peak it would drop. CPU: the
    resident set high-water mark (VmHWM), reset at the phase start by writing 5 to
    /proc/self/clear_refs; where the kernel refuses, the process-lifetime peak (ru_maxrss).
    """

    def __init__(self, cuda):
        self.cuda = cuda
        self.before = None
        self.peak_resettable = None
        self.dropped_peak = 0.0  # CUDA: the largest peak that a reset during the phase dropped
        self._reset = None

    def start(self):
        import gc

        import torch

        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.before = torch.cuda.memory_allocated() / 2**20
            self.dropped_peak = 0.0
            self._reset = torch.cuda.reset_peak_memory_stats

            def keep_peak_then_reset(*args, **kwargs):
                self.dropped_peak = max(self.dropped_peak, torch.cuda.max_memory_allocated())
                self._reset(*args, **kwargs)

            torch.cuda.reset_peak_memory_stats = keep_peak_then_reset
            return
        release_free_heap()
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.peak_resettable = True
        except OSError:
            self.peak_resettable = False
        self.before = current_rss_mib()

    def stop(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats = self._reset
            peak = max(self.dropped_peak, torch.cuda.max_memory_allocated()) / 2**20
        elif self.peak_resettable:
            peak = proc_status_kib("VmHWM") / 1024
        else:
            peak = max_rss_mib()
        return {"mem_before_mib": self.before, "mem_peak_mib": peak,
                "mem_increment_mib": peak - self.before,
                "mem_peak_since_phase_start": self.cuda or self.peak_resettable}


def proc_status_kib(field):
    m = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1))


def max_rss_mib():
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, else KiB


def current_rss_mib():
    if Path("/proc/self/status").is_file():
        return proc_status_kib("VmRSS") / 1024
    return max_rss_mib()


def release_free_heap():
    """Return freed heap pages to the OS (glibc malloc_trim) so RSS shows what is in use."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def train_batches(trainer, count):
    """The first ``count`` training batches in fairseq's order, starting new epochs as needed."""
    epoch_itr = trainer.get_train_iterator(epoch=1, load_dataset=True)
    batches = []
    while len(batches) < count:
        trainer.begin_epoch(epoch_itr.next_epoch_idx)
        before = len(batches)
        for sample in epoch_itr.next_epoch_itr(shuffle=True):
            batches.append(sample)
            if len(batches) == count:
                break
        if len(batches) == before:
            raise BenchError("the training set yields no batches; check --data and "
                             "--max-tokens")
    return batches


def decode_batches(task, model, subset, n, batch_size, seed):
    """The first ``n`` sentences of ``subset`` (by index), batched as fairseq-generate batches
    them: sorted by length, at most ``batch_size`` sentences per batch."""
    from fairseq import utils
    from fairseq.data import data_utils

    task.load_dataset(subset, combine=False, epoch=1)
    dataset = task.dataset(subset)
    n = min(n, len(dataset))
    if n == 0:
        raise BenchError(f"the {subset!r} split of --data is empty; pick another --gen-subset")
    with data_utils.numpy_seed(seed):
        order = dataset.ordered_indices()
    order = order[order < n]
    max_positions = utils.resolve_max_positions(task.max_positions(), model.max_positions())
    order, ignored = dataset.filter_indices_by_size(order, max_positions)
    if len(ignored):
        raise BenchError(f"{len(ignored)} of the first {n} sentences of {subset!r} are longer "
                         f"than the model allows ({max_positions}); lower --decode-sentences "
                         f"or pick another --gen-subset")
    return [dataset.collater([dataset[i] for i in batch])
            for batch in dataset.batch_by_size(order, max_sentences=batch_size)]


def decode_breakdown(task, generator, model, samples, clock):
    """Seconds of one more decoding pass over ``samples`` spent in each of BREAKDOWN_PARTS and
    BREAKDOWN_SHARE (parts a model does not have are absent), and in the whole pass."""
    import torch

    parts = {}
    started = {}

    def timed(part, key):
        def pre(*_):
            started[key] = clock()

        def post(*_):
            parts[part] = parts.get(part, 0.0) + clock() - started.pop(key)
        return pre, post

    def timed_call(method, pre, post):
        def call(*args, **kwargs):
            pre()
            try:
                return method(*args, **kwargs)
            finally:
                post()
        return call

    patterns = [(part, re.compile(p)) for part, p in BREAKDOWN_PARTS + [BREAKDOWN_SHARE] if p]
    handles = []
    for name, module in model.named_modules():
        part = next((part for part, p in patterns if p.fullmatch(name)), None)
        if part is not None:
            pre, post = timed(part, name)
            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    wrapped = [(model.encoder, "forward_torchscript", "encoder"),
               (model.decoder, "reorder_incremental_state_scripting", "cache reorder")]
    for owner, method, part in wrapped:
        setattr(owner, method, timed_call(getattr(owner, method), *timed(part, method)))
    try:
        start = clock()
        with torch.no_grad():
            for sample in samples:
                task.inference_step(generator, [model], sample)
        total = clock() - start
    finally:
        for handle in handles:
            handle.remove()
        for owner, method, _ in wrapped:
            delattr(owner, method)  # the instance attribute; the class's method shows again
    timed_parts = sum(v for k, v in parts.items() if k != BREAKDOWN_SHARE[0])
    return {"pass_seconds": total, "parts_seconds": dict(parts, rest=total - timed_parts)}


def generation_config(spec, length):
    """Beam search as fairseq-generate runs it; a forced ``length``: min = max length, so EOS is
    banned before it and forced at it."""
    from fairseq.dataclass.configs import GenerationConfig

    if length:
        return GenerationConfig(beam=spec["beam"], min_len=length, max_len_a=0, max_len_b=length)
    return GenerationConfig(beam=spec["beam"], max_len_a=spec["max_len_a"],
                            max_len_b=spec["max_len_b"])


def timed_decoding(task, model, samples, spec, length, clock, memory):
    """One untimed warm-up batch, then ``decode_repeats`` timed passes over ``samples``."""
    import torch

    generator = task.build_generator([model], generation_config(spec, length))
    memory.start()
    with torch.no_grad():
        task.inference_step(generator, [model], samples[0])  # untimed warm-up batch
        passes = []
        for _ in range(spec["decode_repeats"]):
            start = clock()
            sentences = generated = 0
            for sample in samples:
                hypos = task.inference_step(generator, [model], sample)
                sentences += len(hypos)
                generated += sum(len(h[0]["tokens"]) for h in hypos)
            passes.append(clock() - start)
        seconds = statistics.median(passes)
    return ({"sentences": sentences, "generated_tokens": generated, "batches": len(samples),
             "seconds": seconds, "pass_seconds": passes, "sentences_per_s": sentences / seconds,
             "tokens_per_s": generated / seconds, **memory.stop()}, generator)


def cuda_launches_per_step(task, model, sample, beam, length):
    """Kernels the GPU ran (torch.profiler's CUDA kernel events) in one decoding batch forced to
    ``length`` tokens, divided by ``length``: the launches that kernel counts stand for."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ran_fairseq.lab.bench.kernels import decoding_generator

    generator = decoding_generator(task, model, beam, length)
    with torch.no_grad():
        task.inference_step(generator, [model], sample)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            task.inference_step(generator, [model], sample)
            torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"kernels": kernels, "per_step": round(kernels / length, 2)}


def kernel_counts(task, model, criterion, sample, spec):
    """--count-kernels: ran_fairseq/lab/bench/kernels.py's counts on a float32 CPU copy."""
    from fairseq import utils

    from ran_fairseq.lab.bench import kernels

    task.load_dataset(spec["count_subset"], combine=False, epoch=1)
    dataset = task.dataset(spec["count_subset"])
    n = min(spec["count_sentences"], len(dataset))
    train_sample = dataset.collater([dataset[i] for i in range(n)])
    with kernels.cpu_float_copy(model) as copy:
        decoding = kernels.count_decoding(task, copy, utils.move_to_cpu(sample), spec["beam"],
                                          spec["decode_length"])
        training = kernels.count_training(copy, criterion, train_sample)
    return {"decoding": decoding, "training": training}


def run_worker(spec):
    import fairseq
    import numpy as np
    import torch
    from fairseq import options, tasks, utils
    from fairseq.dataclass.initialize import add_defaults
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    torch.set_num_threads(spec["threads"])
    cuda = spec["device"] == "cuda"

    def clock():
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    # As fairseq_cli.train.main sets up a run.
    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, spec["argv"]))
    utils.import_user_module(cfg.common)
    add_defaults(cfg)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    params = sum(p.numel() for p in model.parameters())
    trainer = Trainer(cfg, task, model, criterion)

    batches = train_batches(trainer, spec["warmup_updates"] + spec["train_updates"])
    memory = MemoryProbe(cuda)
    memory.start()
    timed = batches[spec["warmup_updates"]:]
    untimed = batches[:spec["warmup_updates"]] + (timed if spec.get("warm_shapes") else [])
    for sample in untimed:
        trainer.train_step([sample])
    start = clock()
    for sample in timed:
        trainer.train_step([sample])
    seconds = clock() - start
    tokens = sum(int(s["ntokens"]) for s in timed)
    train = {"updates": len(timed), "target_tokens": tokens,
             "sentences": sum(int(s["nsentences"]) for s in timed), "seconds": seconds,
             "tokens_per_s": tokens / seconds, **memory.stop()}

    # Decoding: the trained model alone, without optimizer state or gradients.
    model = trainer.model
    criterion_for_count = criterion if spec.get("count_kernels") else None
    del trainer, criterion
    if spec.get("checkpoint"):  # --checkpoint: the trained weights replace the benchmark's
        from fairseq import checkpoint_utils

        state = checkpoint_utils.load_checkpoint_to_cpu(spec["checkpoint"])
        try:
            model.load_state_dict(state["model"], strict=True)
        except RuntimeError as e:
            raise BenchError(f"system {spec['name']!r}: {spec['checkpoint']} does not fit the "
                             f"model its flags build (the systems file's arch and flags, and "
                             f"common_flags, must be those it was trained with):\n{e}") from None
        del state
    model.zero_grad(set_to_none=True)
    model.eval()
    samples = decode_batches(task, model, spec["gen_subset"], spec["decode_sentences"],
                             spec["decode_batch_size"], spec["seed"])
    if cuda:
        samples = [utils.move_to_cuda(s) for s in samples]
    decode, generator = timed_decoding(task, model, samples, spec, spec.get("decode_length"),
                                       clock, memory)
    if spec.get("decode_breakdown"):
        decode["breakdown"] = decode_breakdown(task, generator, model, samples, clock)
    lengths = ([spec["decode_length"]] if spec.get("decode_length") else []) \
        + list(spec.get("also_decode_lengths") or [])
    at_length = {}
    for n in lengths[1:]:
        other, _ = timed_decoding(task, model, samples, spec, n, clock, memory)
        at_length[str(n)] = {k: other[k] for k in ("sentences_per_s", "tokens_per_s", "seconds",
                                                   "pass_seconds", "mem_peak_mib")}
    extra = {}
    if at_length:
        extra["decode_at_length"] = at_length
    if spec.get("cuda_launches") and cuda:
        extra["cuda_launches"] = {str(n): cuda_launches_per_step(task, model, samples[0],
                                                                 spec["beam"], n)
                                  for n in lengths}
    if spec.get("count_kernels"):
        extra["kernels"] = kernel_counts(task, model, criterion_for_count, samples[0], spec)

    metrics = {"params": params, "train_tokens_per_s": train["tokens_per_s"],
               "decode_sentences_per_s": decode["sentences_per_s"],
               "decode_tokens_per_s": decode["tokens_per_s"],
               "train_mem_peak_mib": train["mem_peak_mib"],
               "train_mem_increment_mib": train["mem_increment_mib"],
               "decode_mem_peak_mib": decode["mem_peak_mib"],
               "decode_mem_increment_mib": decode["mem_increment_mib"]}
    result = {"name": spec["name"], "arch": spec["arch"], "flags": spec["flags"],
              "fairseq_argv": spec["argv"], "metrics": metrics, "train": train, "decode": decode,
              **extra,
              "environment": {"torch": torch.__version__, "fairseq": fairseq.__version__,
                              "cuda": torch.version.cuda if cuda else None,
                              "cuda_device": torch.cuda.get_device_name() if cuda else None,
                              "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_")}}
    Path(spec["result_path"]).write_text(json.dumps(result, indent=2))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["--worker"]:
            if len(argv) != 2:
                raise BenchError("usage: bench.py --worker SPEC.json (run by the parent)")
            run_worker(json.loads(Path(argv[1]).read_text()))
        else:
            run_parent(parse_cli(argv))
    except BenchError as e:
        sys.exit(f"bench.py: error: {e}")


if __name__ == "__main__":
    main()
