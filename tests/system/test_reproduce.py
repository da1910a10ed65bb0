"""The reproduction engine (ran_lab/reproduce) through scripts/reproduce-ran.sh, end to end in a
short setting (2 trained systems and one that decodes another's checkpoint with other flags, 1 pair,
3 updates, the recipe's model at width 32) on a tiny corpus prepared by the project's pipeline;
then --resume, the engine's errors and the RAN configs' agreement with each other (configs/ran/*.json). The table's logic over seeds,
subsets and engines that interleave is tested on a stand-in for fairseq (tests/unit/test_engine.py)."""
import functools
import json
import math
import re
import shutil
import subprocess
import sys

import pytest

import helpers

SCRIPT = helpers.REPO / "scripts" / "reproduce-ran.sh"
CONFIGS = helpers.REPO / "configs"
SYSTEMS = ["TransF", "RAN-ALL", "RAN-ALL greedy"]  # the last decodes RAN-ALL's checkpoint
PAPER_TRANSF = 12.34  # a paper number planted in a copy of the config
PAPER_COLUMN = json.loads((CONFIGS / "ran" / "paper.json").read_text())["columns"][0]["title"]


# the recipe's own model is 3+3 layers of width 256; the tests train and decode it at width 32
# (the engine's path does not depend on the size, and fairseq's updates cost a tenth)
TINY = {"--encoder-embed-dim": "32", "--decoder-embed-dim": "32",
        "--encoder-ffn-embed-dim": "64", "--decoder-ffn-embed-dim": "64",
        "--encoder-attention-heads": "2", "--decoder-attention-heads": "2",
        "--max-attention-positions": "64"}


reproduce = functools.partial(helpers.run_reproduction, SCRIPT)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A de-en data-bin with BPE codes and raw references, as scripts/prepare-*.sh make them."""
    root = tmp_path_factory.mktemp("reproduce-data")
    # 21 test sentences: not a multiple of fairseq's --required-batch-size-multiple (8)
    raw = helpers.make_synthetic_corpus(root / "raw", n_test=21)
    out = root / "bin.de-en"
    proc = subprocess.run(
        [sys.executable, "-m", "ran_text.prepare", "custom", "--src", "de", "--tgt", "en",
         "--out", str(out), "--train-prefix", str(raw / "train"), "--valid-prefix",
         str(raw / "valid"), "--test-prefix", str(raw / "test"), "--bpe-merges", "30",
         "--workers", "1", "--work-dir", str(root / "work")],
        env=helpers.fairseq_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, str(root / "bin.{src}-{tgt}")


@pytest.fixture(scope="module")
def config(corpus):
    """configs/ran/cpu.json with its paper numbers replaced by a file holding one number, and its
    systems file extended by a system that decodes RAN-ALL's checkpoint greedily."""
    root, _ = corpus
    systems = json.loads((CONFIGS / "ran" / "systems.json").read_text())
    ran_all = next(s for s in systems["systems"] if s["name"] == "RAN-ALL")
    systems["systems"].append(dict(ran_all, name="RAN-ALL greedy", checkpoint_of="RAN-ALL",
                                   generate_flags=["--beam", "1"]))
    (root / "systems.json").write_text(json.dumps(systems))
    paper = json.loads((CONFIGS / "ran" / "paper.json").read_text())
    column = paper["columns"][0]
    column["values"] = {name: None for name in column["values"]}
    column["values"]["TransF"] = PAPER_TRANSF
    (root / "paper.json").write_text(json.dumps(paper))
    cfg = json.loads((CONFIGS / "ran" / "cpu.json").read_text())
    cfg.update(paper=str(root / "paper.json"), systems=str(root / "systems.json"),
               checkpoints=str(root / "ckpt"), set_train_flags=TINY)
    path = root / "cpu.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def first_run(corpus, config):
    root, data = corpus
    out = root / "out"
    # two runs at a time: RAN-ALL greedy waits for RAN-ALL's training, TransF trains beside it
    proc = reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                     ",".join(SYSTEMS), "--max-update", "3", "--out", out, "--jobs", "2")
    assert proc.returncode == 0, proc.stderr[-5000:]
    # later tests rewrite the report (--resume); this run's is kept for the --jobs test
    shutil.copytree(out, root / "first-run", ignore=shutil.ignore_patterns("de-en"))
    return out


def test_table_has_a_finite_row_per_system_and_the_paper_column(first_run):
    rows = helpers.table_rows((first_run / "TABLE.md").read_text())
    assert list(rows) == SYSTEMS
    for name, row in rows.items():
        for heading in ("tok BLEU", "sacreBLEU", "chrF", "TER", "decode sent/s",
                        "train words/s", "train time ×TransF"):
            value = float(row[heading].replace(",", "").rstrip("†↓"))
            assert math.isfinite(value) and value >= 0, (name, heading, row[heading])
        assert float(row["decode sent/s"]) > 0
        assert int(row["params"].replace(",", "")) > 0
    assert float(rows["TransF"][PAPER_COLUMN]) == PAPER_TRANSF
    assert rows["RAN-ALL"][PAPER_COLUMN] == ""
    assert float(rows["TransF"]["sent/s ×TransF"]) == 1.0
    assert float(rows["TransF"]["train time ×TransF"]) == 1.0
    # RAN drops W_q and W_k but adds n×n matrices: the two models differ in size.
    assert rows["TransF"]["params"] != rows["RAN-ALL"]["params"]
    # 3 updates are less than the 3 epochs the loss trend needs: a blank cell, not a number
    assert rows["TransF"]["valid loss Δ % per epoch (last 3)"] == ""


def test_results_match_fairseq_and_sacrebleu(first_run, corpus):
    from sacrebleu.metrics import BLEU, TER

    from ran_text.evaluate import read_generate_output

    root, _ = corpus
    report = json.loads((first_run / "results.json").read_text())
    refs = (root / "bin.de-en" / "test.raw.en").read_text().splitlines()
    for result in report["results"]:
        run_dir = first_run / "de-en" / result["system"].replace(" ", "_") / "seed1"
        hyps = (run_dir / "hyp.detok.txt").read_text().splitlines()
        # every sentence translated, though 21 is not a multiple of 8
        assert len(hyps) == len(refs) == result["decode"]["sentences"] == 21
        # sacreBLEU's, with each <unk> (an untrained model writes many) one wrong word
        one = [h.replace("<unk>", "\u2047") for h in hyps]
        assert result["sacrebleu"] == pytest.approx(BLEU().corpus_score(one, [refs]).score)
        assert result["ter"] == pytest.approx(TER().corpus_score(one, [refs]).score)
        # the engine's tokenized BLEU is fairseq-generate's own (its default --scoring bleu) when
        # no reference word is unknown, as here: the data-bin's tokenized text equals its T- lines
        assert result["subsets"]["test"]["ref_unk_words"] == 0
        assert f"BLEU4 = {result['tok_bleu']:.2f}" in (run_dir / "generate.txt").read_text()
        # and the references the engine reads from fairseq's T- lines are the tokenized text
        tok_refs = (root / "bin.de-en" / "test.tok.en").read_text().splitlines()
        assert read_generate_output(run_dir / "generate.txt", prefix="T") == tok_refs
        assert "--max-update" in result["train_argv"]
        assert result["train_argv"][result["train_argv"].index("--max-update") + 1] == "3"


def test_a_system_can_decode_another_systems_checkpoint(first_run):
    report = json.loads((first_run / "results.json").read_text())
    by_name = {r["system"]: r for r in report["results"]}
    greedy, ran_all = by_name["RAN-ALL greedy"], by_name["RAN-ALL"]
    assert greedy["generate_argv"][greedy["generate_argv"].index("--path") + 1] == \
        ran_all["generate_argv"][ran_all["generate_argv"].index("--path") + 1]
    assert greedy["generate_argv"][-2:] == ["--beam", "1"]
    assert "--beam 1" not in " ".join(ran_all["generate_argv"])
    # trained once: the training figures are RAN-ALL's, and no training log was written
    assert greedy["train_seconds"] == ran_all["train_seconds"]
    assert not (first_run / "de-en" / "RAN-ALL_greedy" / "seed1" / "train.log").exists()


def test_resume_skips_finished_systems_and_refuses_other_settings(first_run, corpus, config):
    _, data = corpus
    stamps = {p: p.stat().st_mtime_ns for p in first_run.glob("de-en/*/seed1/result.json")}
    assert len(stamps) == len(SYSTEMS)
    args = ["--config", config, "--data", data, "--pairs", "de-en", "--systems",
            ",".join(SYSTEMS), "--out", first_run, "--resume"]
    proc = reproduce(*args, "--max-update", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("skipped (--resume)") == len(SYSTEMS)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert list(helpers.table_rows((first_run / "TABLE.md").read_text())) == SYSTEMS

    proc = reproduce(*args, "--max-update", "4")
    assert proc.returncode != 0
    assert "was made with other settings" in proc.stderr


def test_bad_system_name_is_a_clear_error(config):
    proc = reproduce("--config", config, "--systems", "TransF,RAN-X", "--dry-run")
    assert proc.returncode != 0
    assert "--systems: unknown system(s) 'RAN-X'" in proc.stderr
    assert "RAN-ALL w/o LN&RES" in proc.stderr  # lists the valid names


def test_runs_start_in_the_order_systems_names_them(config):
    """--systems orders the runs (a plan puts the systems that matter most first), and a system
    that decodes another's checkpoint comes after the training it waits for; without --systems,
    the file's order."""
    def started(*systems):
        proc = reproduce("--config", config, *systems, "--dry-run")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return re.findall(r"^# de-en (.+) seed 1$", proc.stdout, re.M)

    assert started("--systems", "RAN-ALL greedy,TransF") == ["RAN-ALL", "RAN-ALL greedy", "TransF"]
    assert started("--systems", "RAN-D,TransF,RAN-ALL greedy,RAN-ALL") == [
        "RAN-D", "TransF", "RAN-ALL", "RAN-ALL greedy"]
    everything = started()
    assert everything[:2] == ["TransF", "HC-SA"] and everything[-1] == "RAN-ALL greedy"


@pytest.mark.parametrize("change, message", [
    ({"baseline": "RAN-Z"}, "'baseline' must name one of its systems"),
    ({"extra_system": {"name": "X", "arch": "ran_transformer_small", "checkpoint_of": "RAN-Z"}},
     "decodes the checkpoint of 'RAN-Z'"),
    ({"extra_system": {"name": "X", "arch": "ran_transformer_small", "checkpoint_of": "RAN-ALL",
                       "flags": ["--dropout", "0.5"]}}, "its arch and flags must equal 'RAN-ALL'"),
    ({"extra_system": {"name": "X", "arch": "ran_transformer_small", "bleu": 3}},
     "unknown field(s) bleu"),
    ({"extra_system": {"name": "X", "arch": "ran_transformer_small",
                       "generate_flags": ["--path", "x.pt"]}}, "sets --path"),
    ({"extra_system": {"name": "X", "arch": "ran_transformer_small",
                       "postprocess": ["m", "{hyp}"]}}, "names a step of the engine"),
])
def test_systems_file_errors_name_the_problem(tmp_path, change, message):
    from ran_lab.reproduce.config import load_systems
    from ran_lab.common import LabError

    systems = json.loads((CONFIGS / "ran" / "systems.json").read_text())
    if "extra_system" in change:
        systems["systems"].append(change["extra_system"])
    else:
        systems.update(change)
    path = tmp_path / "systems.json"
    path.write_text(json.dumps(systems))
    with pytest.raises(LabError, match=re.escape(message)):
        load_systems(path)


@pytest.mark.parametrize("full", [
    {}, {"full_config": "x.json", "full_settings": ["a"]}, {"full_settings": ["a", "a"]},
], ids=["none", "both", "same-name"])
def test_paper_takes_one_full_config_or_distinct_named_ones(full):
    """A Paper's full-size settings: full_config (a bare --full) or full_settings (--full NAME,
    tested through scripts/reproduce-recurrent_cross.sh), never both, neither or a name twice."""
    from ran_lab.reproduce.config import FullSetting, Paper

    if "full_settings" in full:
        full["full_settings"] = [FullSetting(name, CONFIGS / "ran" / "wmt14-base.json", "help")
                                 for name in full["full_settings"]]
    with pytest.raises(ValueError, match="full_"):
        Paper(key="ran", title="t", cpu_config=CONFIGS / "ran" / "cpu.json", **full)


def test_full_settings_print_base_model_commands_on_wmt17_en_tr():
    proc = reproduce("--full", "wmt17-en-tr", "--systems", "TransF", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert len(commands) == 4  # train and generate, en-tr and tr-en
    assert "data-bin/wmt17.en-tr" in commands[0] and "data-bin/wmt17.tr-en" in commands[2]
    assert "--max-update 20000" in commands[0] and "--lenpen 0.6" in commands[1]


def test_full_settings_print_base_model_commands_on_wmt14():
    proc = reproduce("--full", "--systems", "RAN-D", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert len(commands) == 4  # en-de and de-en, as Table 1
    train, generate = commands[:2]
    assert "--arch ran_transformer " in train and "data-bin/wmt14.en-de" in train
    assert "--cpu" not in train and "--decoder-self-attention ran" in train
    assert "--beam 4" in generate


def test_fp16_on_the_cpu_is_refused_before_fairseq_runs():
    """fairseq trains --fp16 only on a CUDA GPU (on a CPU it fails deep in its fp16 optimizer):
    the engine says so first, naming the flag, where it comes from and the CPU recipe."""
    from ran_lab.reproduce.config import check_device_flags
    from ran_lab.common import LabError

    proc = reproduce("--full", "--systems", "RAN-D", "--device", "cpu", "--dry-run")
    assert proc.returncode != 0
    assert "trains with --fp16" in proc.stderr and "configs/ran/cpu.json" in proc.stderr
    systems = [{"name": "a", "flags": []}, {"name": "b", "flags": ["--fp16"]}]
    with pytest.raises(LabError, match="system 'b' trains with --fp16"):
        check_device_flags("cpu", ["--lr", "1e-3"], systems, "config c", "change")
    check_device_flags("cuda", ["--fp16"], systems, "config c", "change")  # a GPU trains it
    with pytest.raises(LabError, match="config c trains with --fp16"):
        check_device_flags("cpu", ["--fp16"], systems[:1], "config c", "change")
    # fairseq's memory-efficient fp16 trains on a CPU (tests/integration/test_conformance.py runs it), and so
    # does its fp16 optimizer without the flat fp32 copy
    check_device_flags("cpu", ["--fp16-init-scale", "4", "--memory-efficient-fp16"], systems[:1],
                       "config c", "change")
    check_device_flags("cpu", ["--fp16-no-flatten-grads"], systems, "config c", "change")


def test_configs_agree():
    systems = json.loads((CONFIGS / "ran" / "systems.json").read_text())["systems"]
    paper = json.loads((CONFIGS / "ran" / "paper.json").read_text())
    for column in paper["columns"]:
        assert set(column["values"]) == {s["name"] for s in systems}, column["title"]
    assert all(s["tables"] for s in systems)


# ---------------------------------------------------------------------------------------------
# The paper's settings, rows and numbers (Zeng et al. 2021, §3.1, Tables 1-3)
# ---------------------------------------------------------------------------------------------

def ran_systems():
    return {s["name"]: s for s in
            json.loads((CONFIGS / "ran" / "systems.json").read_text())["systems"]}


def test_table2_rows_are_the_papers_ablations():
    """§4.4: −Pos-E / −Pos-D are TransF without one side's positional embeddings, the +RAN rows
    RAN-E / RAN-D without them; rows not in the paper are tagged 'ours'."""
    systems = ran_systems()
    table2 = [name for name, s in systems.items() if "2" in s["tables"]]
    assert table2 == ["TransF", "−Pos-E", "−Pos-E+RAN-E", "−Pos-D", "−Pos-D+RAN-D"]
    for row, base, flag in [("−Pos-E", "TransF", "--no-encoder-positional-embeddings"),
                            ("−Pos-E+RAN-E", "RAN-E", "--no-encoder-positional-embeddings"),
                            ("−Pos-D", "TransF", "--no-decoder-positional-embeddings"),
                            ("−Pos-D+RAN-D", "RAN-D", "--no-decoder-positional-embeddings")]:
        assert systems[row]["flags"] == systems[base]["flags"] + [flag], row
        assert systems[row]["arch"] == systems[base]["arch"], row
    assert [n for n, s in systems.items() if "3" in s["tables"]] == [
        "RAN-ALL", "RAN-ALL fixed", "RAN-ALL w/o LN&RES"]
    paper_rows = {"TransF", "HC-SA", "Syn-R", "RAN-E", "RAN-D", "RAN-ALL", "RAN-ALL fixed",
                  "RAN-ALL w/o LN&RES", *table2}
    for name, s in systems.items():
        assert (s["tables"] == ["ours"]) == (name not in paper_rows), name


def test_paper_numbers_are_complete_and_consistent():
    """Table 1: every task and metric, the averages equal to the mean of the tasks (to rounding),
    † marks only on Table 1 cells better than TransF; Tables 2 and 3: their rows only."""
    paper = json.loads((CONFIGS / "ran" / "paper.json").read_text())
    columns = {c["key"]: c for c in paper["columns"]}
    tasks = ["en_de", "de_en", "en_fr", "en_lv", "lv_en", "en_fi", "fi_en", "en_tr", "tr_en"]
    table1 = ["TransF", "HC-SA", "Syn-R", "RAN-E", "RAN-D", "RAN-ALL"]
    for metric, keys in [("bleu", tasks + ["zh_en"]), ("sacrebleu", tasks)]:
        cells = [columns[f"t1_{task}_{metric}"] for task in keys]
        average = columns[f"t1_average_{metric}"]
        for name in table1:
            assert all(c["values"][name] is not None for c in cells + [average]), name
            mean = sum(c["values"][name] for c in cells) / len(cells)
            assert abs(mean - average["values"][name]) <= 0.005 + 1e-9, (metric, name)
    assert "t1_zh_en_sacrebleu" not in columns  # not printed (NIST, Table 1)
    for column in paper["columns"]:
        filled = {n for n, v in column["values"].items() if v is not None}
        assert set(column["significant"]) <= filled, column["key"]
        for name in column["significant"]:
            assert column["table"] == "1" and name != "TransF"
            assert column["values"][name] > column["values"]["TransF"], (column["key"], name)
        expected = {"1": set(table1),
                    "2": {"TransF", "−Pos-E", "−Pos-E+RAN-E", "−Pos-D", "−Pos-D+RAN-D"},
                    "3": {"RAN-ALL", "RAN-ALL fixed", "RAN-ALL w/o LN&RES"}}[column["table"]]
        assert filled == expected, column["key"]
    # spot checks against the text: RAN-D's Tr⇒En gain (§3.2), the −Pos-E collapse (§4.4)
    assert columns["t1_tr_en_bleu"]["values"]["RAN-D"] == 18.62
    assert columns["t2_en_de_bleu"]["values"]["−Pos-E"] == 13.14


@pytest.mark.parametrize("name, steps, update_freq", [
    ("wmt14-base.json", "250000", "8"), ("wmt17-en-tr-base.json", "20000", "2")])
def test_full_configs_carry_the_papers_settings(name, steps, update_freq):
    """§3.1: base size, residual dropout 0.1, RAN attention dropout 0.2, the training steps, the
    GPUs' batch, beam 4 with length penalty 0.6, 256-word filtering, best validation checkpoint."""
    cfg = json.loads((CONFIGS / "ran" / name).read_text())
    train = helpers.flag_pairs(cfg["train_flags"])
    generate = helpers.flag_pairs(cfg["generate_flags"])
    assert cfg["arch"] == "ran_transformer" and cfg["select"] == "bleu"
    assert train["--dropout"] == "0.1" and train["--positional-attention-dropout"] == "0.2"
    assert train["--max-update"] == steps and train["--update-freq"] == update_freq
    assert generate["--beam"] == "4" and generate["--lenpen"] == "0.6"
    prepare = cfg["prepare"]
    assert prepare["clean_max_len"] == 256 and prepare["clean_on"] == "tok"
    assert prepare["bpe_merges"] == {"wmt14-base.json": 40000,
                                     "wmt17-en-tr-base.json": 32000}[name]


# --- engine: significance, selection, seeds, subsets, resume of a finished training ------------
def test_significance_against_the_baseline_is_sacrebleus_paired_bootstrap(first_run, corpus):
    from ran_lab.reproduce.scores import paired_bootstrap

    root, _ = corpus
    report = json.loads((first_run / "results.json").read_text())
    refs = (root / "bin.de-en" / "test.raw.en").read_text().splitlines()
    by_name = {r["system"]: r for r in report["results"]}
    assert by_name["TransF"]["subsets"]["test"]["p_value"] is None  # the baseline itself
    base = (first_run / "de-en" / "TransF" / "seed1" / "hyp.detok.txt").read_text().splitlines()
    for name in ("RAN-ALL", "RAN-ALL greedy"):
        scores = by_name[name]["subsets"]["test"]
        hyps = (first_run / "de-en" / name.replace(" ", "_") / "seed1" /
                "hyp.detok.txt").read_text().splitlines()
        p, _, _ = paired_bootstrap(base, hyps, refs, 1000)
        assert scores["p_value"] == pytest.approx(p) and 0 < p <= 1
        base_bleu = by_name["TransF"]["sacrebleu"]
        assert scores["better"] == (None if scores["sacrebleu"] == base_bleu
                                    else scores["sacrebleu"] > base_bleu)
        p_ter, _, _ = paired_bootstrap(base, hyps, refs, 1000, "TER")
        assert scores["ter_p_value"] == pytest.approx(p_ter) and 0 < p_ter <= 1
        base_ter = by_name["TransF"]["subsets"]["test"]["ter"]
        assert scores["ter_better"] == (None if scores["ter"] == base_ter
                                        else scores["ter"] < base_ter)


def test_paired_bootstrap_separates_a_better_system_from_a_copy():
    from ran_lab.reproduce.scores import paired_bootstrap

    refs = [f"the {w} sat on the mat near {v}" for w in "abcdefghij" for v in "klmnop"]
    worse = [" ".join(r.split()[:4]) for r in refs]
    nearly = [refs[0]] + worse[1:]  # one sentence of 60 better
    p_better, _, _ = paired_bootstrap(worse, refs, refs, 1000)
    p_nearly, _, _ = paired_bootstrap(worse, nearly, refs, 1000)
    assert p_better < 0.01 and p_nearly > 0.05
    # TER, where lower is better: the same separation, and the means say which way
    p_better, (system_ter, _), (base_ter, _) = paired_bootstrap(worse, refs, refs, 1000, "TER")
    p_nearly, _, _ = paired_bootstrap(worse, nearly, refs, 1000, "TER")
    assert p_better < 0.01 and p_nearly > 0.05 and system_ter < base_ter
    with pytest.raises(ValueError, match="chrF"):
        paired_bootstrap(worse, refs, refs, 1000, "chrF")


def test_significance_mark_needs_every_seed():
    from ran_lab.reproduce.markdown import significance_mark

    better = {"p_value": 0.001, "better": True}
    worse = {"p_value": 0.001, "better": False}
    assert significance_mark([better, better], 0.01) == "†"
    assert significance_mark([worse], 0.01) == "↓"
    assert significance_mark([better, {"p_value": 0.2, "better": True}], 0.01) == ""
    assert significance_mark([{"p_value": None, "better": None}], 0.01) == ""
    # sacrebleu gives a system identical to the baseline a small p-value: no mark without a gain
    assert significance_mark([{"p_value": 0.001, "better": None}], 0.01) == ""
    # TER's keys: its own p-value and direction, independent of sacreBLEU's
    ter = {"p_value": 0.5, "better": True, "ter_p_value": 0.001, "ter_better": False}
    assert significance_mark([ter], 0.01) == "" and significance_mark([ter], 0.01, "ter") == "↓"
    assert significance_mark([dict(ter, ter_better=True)] * 2, 0.01, "ter") == "†"
    assert significance_mark([better], 0.01, "ter") == ""  # no TER test stored: no mark


def test_tokenized_bleu_rewards_a_restored_unknown_word():
    """Scored against the reference text, a hypothesis whose <unk> a postprocess replaced by the
    right word gains; against fairseq's T- lines (<<unk>> for the unknown word) it could not."""
    from ran_lab.reproduce.scores import tokenized_bleu

    refs = ["a man in a Zwergensee hat is standing on the street ."] * 4
    with_unk = ["a man in a <unk> hat is standing on the street ."] * 4
    replaced = ["a man in a Zwergensee hat is standing on the street ."] * 4
    t_lines = ["a man in a <<unk>> hat is standing on the street ."] * 4
    assert tokenized_bleu(replaced, refs) == pytest.approx(100)
    assert tokenized_bleu(with_unk, refs) < tokenized_bleu(replaced, refs)
    assert tokenized_bleu(replaced, t_lines) == tokenized_bleu(with_unk, t_lines)


def test_result_records_the_selected_checkpoint_and_the_validation_curve(first_run):
    report = json.loads((first_run / "results.json").read_text())
    assert report["settings"]["select"] == "loss"
    for result in report["results"]:
        selected = result["selected"]
        assert selected["file"] == "checkpoint_best.pt"
        assert 1 <= selected["num_updates"] <= 3 and selected["epoch"] >= 1
        curve = result["valid_curve"]
        assert curve and all({"loss", "epoch", "num_updates"} <= set(point) for point in curve)
        assert [p["num_updates"] for p in curve] == sorted(p["num_updates"] for p in curve)
        # fairseq's best checkpoint is the one with the lowest validation loss of the curve
        best = min(curve, key=lambda p: p["loss"])
        assert selected["val_score"] == pytest.approx(best["loss"], abs=5e-3)
        assert (selected["epoch"], selected["num_updates"]) == (best["epoch"], best["num_updates"])
        assert "--path" in result["generate_argv"]
        assert result["generate_argv"][result["generate_argv"].index("--path") + 1].endswith(
            "seed1/checkpoint_best.pt")
        assert "--required-batch-size-multiple" in result["generate_argv"]


def test_resume_decodes_again_without_training_again(first_run, corpus, config):
    _, data = corpus
    ran_dir = first_run / "de-en" / "RAN-ALL" / "seed1"
    log_before = (ran_dir / "train.log").read_text()
    (ran_dir / "result.json").unlink()
    proc = reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                     ",".join(SYSTEMS), "--max-update", "3", "--out", first_run, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("skipped (--resume)") == len(SYSTEMS) - 1
    assert (ran_dir / "result.json").is_file()
    assert (ran_dir / "train.log").read_text() == log_before  # fairseq-train did not run


def test_resume_takes_a_training_at_its_budget_as_finished(first_run, corpus, config):
    """An engine killed as fairseq-train ended leaves no train_finished.json: --resume
    finds checkpoint_last.pt at the budget and does not train again (fairseq-train, resumed from
    it, would take one more update: 4 of a 3-update budget)."""
    from ran_lab.reproduce.checkpoints import checkpoint_updates

    root, data = corpus
    ran_dir = first_run / "de-en" / "RAN-ALL" / "seed1"
    save = root / "ckpt" / "de-en" / "RAN-ALL" / "seed1"
    log_before = (ran_dir / "train.log").read_text()
    (save / "train_finished.json").unlink()
    (ran_dir / "result.json").unlink()
    proc = reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                     ",".join(SYSTEMS), "--max-update", "3", "--out", first_run, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is at update 3 of 3: its training had finished; not trained again" in proc.stderr
    assert (ran_dir / "train.log").read_text() == log_before
    assert checkpoint_updates(save / "checkpoint_last.pt") == 3
    assert (save / "train_finished.json").is_file()  # recorded now


def test_a_removed_checkpoint_of_a_kept_result_is_named(first_run, corpus, config):
    """RAN-ALL's result is kept (--resume skips it) but its checkpoints were removed: the system
    that decodes them says which checkpoint is gone and how to make it again, in one line."""
    root, data = corpus
    save = root / "ckpt" / "de-en" / "RAN-ALL" / "seed1"
    greedy = first_run / "de-en" / "RAN-ALL_greedy" / "seed1" / "result.json"
    kept = greedy.read_bytes()
    aside = root / "ckpt-aside"
    save.rename(aside)
    greedy.unlink()
    try:
        proc = reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                         ",".join(SYSTEMS), "--max-update", "3", "--out", first_run, "--resume")
    finally:
        aside.rename(save)
        greedy.write_bytes(kept)
    assert proc.returncode != 0
    assert "decodes the checkpoint of 'RAN-ALL'" in proc.stderr
    assert f"{save / 'checkpoint_best.pt'} is gone" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("change, message", [
    ({"checkpoint": "checkpoint_last.pt"}, "'checkpoint' is replaced by 'select'"),
    ({"select": "best"}, '"select": expected one of "last", "loss", "bleu", found a string "best"'),
    ({"seeds": [1, 1]}, '"seeds": expected a non-empty list of integers 0..4294967295, each once'),
    ({"gen_subset": []}, '"gen_subset": expected a non-empty string or a non-empty list'),
    ({"significance": {"samples": 10}}, '"significance.samples": expected an integer >= 100'),
    ({"checkpionts": "x"}, '"checkpionts": expected no such key (known: '),
    ({"train_flags": ["--seed", "3"]}, "sets --seed"),
    ({"set_train_flags": {"--seed": "3"}}, "set_train_flags sets --seed"),
    ({"set_train_flags": ["--max-epoch", "12"]},
     '"set_train_flags": expected an object whose values are strings'),
])
def test_config_errors_name_the_key(tmp_path, change, message):
    from ran_lab.reproduce.config import load_config
    from ran_lab.common import LabError

    cfg = json.loads((CONFIGS / "ran" / "cpu.json").read_text())
    cfg.update(change)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(LabError, match=re.escape(message)):
        load_config(path)


def test_jobs_keep_the_order_and_stop_after_names_what_did_not_run(first_run, corpus, config):
    """--jobs 2 (first_run): results in the systems' order, the table says 2 runs at a time.
    --stop-after 0 with --resume: the finished runs are tabulated, the one without a result is not
    started and is named; with nothing finished it is an error."""
    _, data = corpus
    kept = first_run.parent / "first-run"
    report = json.loads((kept / "results.json").read_text())
    assert [r["system"] for r in report["results"]] == SYSTEMS
    assert report["settings"]["jobs"] == 2 and report["settings"]["not_run"] == []
    assert "2 runs at a time" in (kept / "TABLE.md").read_text()
    out = first_run.parent / "out-stop"
    shutil.copytree(first_run, out)
    (out / "de-en" / "TransF" / "seed1" / "result.json").unlink()
    args = ("--config", config, "--data", data, "--pairs", "de-en", "--systems", ",".join(SYSTEMS),
            "--max-update", "3", "--out", out, "--stop-after", "0", "--resume")
    proc = reproduce(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not run before --stop-after 0 min: de-en TransF seed 1" in proc.stderr
    report = json.loads((out / "results.json").read_text())
    assert [r["system"] for r in report["results"]] == SYSTEMS[1:]
    assert report["settings"]["not_run"] == ["de-en TransF seed 1"]
    assert "**Not run**" in (out / "TABLE.md").read_text()
    assert not (out / "de-en" / "TransF" / "seed1" / "result.json").exists()
    empty = first_run.parent / "out-empty"
    proc = reproduce(*args[:-5], "--out", empty, "--stop-after", "0")
    assert proc.returncode != 0 and "no run finished before --stop-after" in proc.stderr


def test_the_table_holds_the_finished_runs_of_other_invocations(first_run, corpus, config):
    """An invocation that selects some systems tabulates the other finished runs in its --out
    beside them (so two engines training different systems into one folder leave one table),
    with significance against the baseline, in the systems file's order; a stored result made
    with other settings is left out (with --force), and said so."""
    _, data = corpus
    out = first_run.parent / "out-beside"
    shutil.copytree(first_run, out)
    args = ("--config", config, "--data", data, "--pairs", "de-en", "--systems", "RAN-ALL",
            "--max-update", "3", "--out", out, "--resume")
    proc = reproduce(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("skipped (--resume)") == 1
    assert "de-en TransF seed 1; de-en RAN-ALL greedy seed 1" in proc.stderr
    report = json.loads((out / "results.json").read_text())
    assert [r["system"] for r in report["results"]] == SYSTEMS
    assert report["settings"]["systems"] == SYSTEMS
    by_name = {r["system"]: r for r in report["results"]}
    assert 0 < by_name["RAN-ALL"]["subsets"]["test"]["p_value"] <= 1  # against TransF, merged
    assert list(helpers.table_rows((out / "TABLE.md").read_text())) == SYSTEMS

    stored = out / "de-en" / "RAN-ALL_greedy" / "seed1" / "result.json"
    other = json.loads(stored.read_text())
    other["commands"]["generate"]["test"].append("--nbest")
    stored.write_text(json.dumps(other))
    # leaving it out of the table needs --force: refused, nothing changed
    table = (out / "TABLE.md").read_text()
    proc = reproduce(*args)
    assert proc.returncode != 0
    assert "RAN-ALL_greedy/seed1/result.json was made with other settings (decoding test: " \
           "--nbest set → unset) and would be left out of the table" in proc.stderr
    assert "--force" in proc.stderr and (out / "TABLE.md").read_text() == table
    proc = reproduce(*args, "--force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RAN-ALL_greedy/seed1/result.json left out of the table: made with other settings" \
        in proc.stderr
    report = json.loads((out / "results.json").read_text())
    assert [r["system"] for r in report["results"]] == SYSTEMS[:2]


def test_a_config_inherits_its_base(tmp_path):
    """A config's 'base' fills in the keys it does not set (the GPU configs are their CPU configs on
    another device); a base that leads back to the config is an error."""
    from ran_lab.reproduce.config import load_config
    from ran_lab.common import LabError

    for paper in ("ran", "recurrent_cross", "dynmem", "pervasive"):
        cpu = load_config(CONFIGS / paper / "cpu.json")
        gpu = load_config(CONFIGS / paper / "gpu.json")
        assert gpu["device"] == "cuda" and gpu["seeds"] == [1, 2, 3]
        assert gpu["out"].startswith(f"results/{paper}/") and gpu["out"] != cpu["out"]
        # dynmem's GPU table was made with the copy method of UNK replacement (its systems file)
        same = set(cpu) - {"device", "seeds", "out", "checkpoints", "notes", "path"} \
            - ({"systems", "systems_file"} if paper == "dynmem" else set())
        assert {k: gpu[k] for k in same} == {k: cpu[k] for k in same}, paper
    # set_train_flags changes values of the inherited train_flags (or adds flags)
    cpu = load_config(CONFIGS / "dynmem" / "gpu.json")["train_flags"]
    long = load_config(CONFIGS / "dynmem" / "gpu-paper-epochs.json")["train_flags"]
    changed = {i for i, (x, y) in enumerate(zip(cpu, long)) if x != y}
    assert len(cpu) == len(long) and {long[i - 1] for i in changed} == {"--max-epoch",
                                                                         "--force-anneal"}
    assert long[long.index("--max-epoch") + 1] == "12" and long[long.index("--force-anneal") + 1] == "9"
    # the CPU twin trains with the same flags, on the CPU, into its own directories
    cpu_long = load_config(CONFIGS / "dynmem" / "cpu-paper-epochs.json")
    assert cpu_long["train_flags"] == long and cpu_long["device"] == "cpu"
    assert cpu_long["out"] != load_config(CONFIGS / "dynmem" / "cpu.json")["out"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"base": str(b)}))
    b.write_text(json.dumps({"base": str(a)}))
    with pytest.raises(LabError, match="no cycle"):
        load_config(a)


def test_resume_takes_results_made_in_another_checkout(first_run, corpus, config, tmp_path):
    """What the engine writes names the checkout's files relative to it (results; its logs as
    {repo}/PATH where fairseq prints an absolute path), so results
    made on another machine (its checkout elsewhere, e.g. a GPU box) are taken by --resume as they
    are; another change in the commands is still refused."""
    _, data = corpus
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    here = str(helpers.REPO)
    for log in list(out.glob("de-en/*/seed1/train.log")) + list(out.glob("de-en/*/seed1/gen*.txt")):
        text = log.read_text()
        assert here not in text and "ran_fairseq" in text, log
    for path in sorted(out.glob("de-en/*/seed1/result.json")):
        text = path.read_text()
        result = json.loads(text)
        assert here not in text and "repo" not in result and result["machine"]["device"] == "cpu"
        argv = result["train_argv"]
        assert argv[argv.index("--user-dir") + 1] == "ran_fairseq"
        result = dict(result, machine=dict(result["machine"], device_name="Elsewhere CPU"))
        path.write_text(json.dumps(result))
    args = ("--config", config, "--data", data, "--pairs", "de-en", "--systems", ",".join(SYSTEMS),
            "--max-update", "3", "--out", out, "--resume", "--stop-after", "0")
    proc = reproduce(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("skipped (--resume)") == len(SYSTEMS)
    report = json.loads((out / "results.json").read_text())
    assert report["machine"]["device_name"] == "Elsewhere CPU"
    # the table's records name no checkout
    text = (out / "results.json").read_text()
    assert here not in text and '"repo"' not in text
    assert all(r["subsets"]["test"]["p_value"] is not None for r in report["results"][1:])
    changed = out / "de-en" / "TransF" / "seed1" / "result.json"
    changed.write_text(changed.read_text().replace('"--dropout", "0.3"', '"--dropout", "0.1"'))
    proc = reproduce(*args)
    assert proc.returncode != 0 and "was made with other settings" in proc.stderr


def test_a_run_recorded_in_one_checkout_is_the_same_run_in_another(tmp_path, monkeypatch):
    """Data, results and checkpoints inside the checkout: a run's stored commands (its result's,
    and its checkpoint folder's train_argv.json) written in one checkout name its files relative to
    it, and are the same run's in a copy of the checkout at another path. Other flags are not."""
    import argparse

    from ran_lab.common import paths
    from ran_lab.reproduce.config import load_config
    from ran_lab.reproduce.runs import Run
    from ran_lab.reproduce.store import difference, stored_train_argv

    config = load_config(CONFIGS / "ran" / "cpu.json")

    def run_in(checkout):
        # the checkout the engine runs in: every module of the engine looks it up there
        monkeypatch.setattr(paths, "REPO", checkout)
        args = argparse.Namespace(out=checkout / "results" / "ran", max_update=None,
                                  checkpoints=checkout / "checkpoints" / "ran")
        return Run(args, config, ("de", "en"), config["systems"]["TransF"],
                   checkout / "data-bin" / "multi30k.de-en", 1)

    first = tmp_path / "first"
    run = run_in(first)
    stored = json.loads(json.dumps({"system": "TransF", "commands": run.recorded()}))
    assert str(first) not in json.dumps(stored)
    assert stored["commands"]["train"][:3] == ["data-bin/multi30k.de-en", "--user-dir",
                                               "ran_fairseq"]
    assert "checkpoints/ran/de-en/TransF/seed1" in stored["commands"]["train"]
    assert difference(run, stored) is None

    second = tmp_path / "elsewhere" / "copy"
    moved = run_in(second)
    assert moved.train_argv == run.train_argv
    assert difference(moved, stored) is None
    other = json.loads(json.dumps(stored).replace('"--dropout", "0.3"', '"--dropout", "0.1"'))
    assert difference(moved, other) == "training: --dropout 0.1 → 0.3"

    # the checkpoint folder's record of its training command, copied with the checkout
    moved.save_dir.mkdir(parents=True)
    (moved.save_dir / "train_argv.json").write_text(json.dumps(run.train_argv))
    assert stored_train_argv(moved) == moved.train_argv


def test_speed_bench_adds_the_quiet_training_time_column(first_run, corpus, config, tmp_path):
    """A config's speed_bench (bench.py reports) gives each system the baseline's training tokens/s
    over its own, the median over the reports, in a column of its own with the bench's machine in
    the legend; a report without the baseline, or no file, is an error naming the key."""
    from ran_lab.reproduce.config import load_config
    from ran_lab.common import LabError

    _, data = corpus
    paths = []
    for i, ran_all in enumerate([800.0, 1000.0, 500.0]):  # RAN-ALL ×1.25, ×1.0, ×2.0
        bench = {"machine": {"device": "cpu", "device_name": "Quiet CPU", "threads": 2,
                             "load_average_before": 0.1, "load_average_after": 1.9 + i,
                             "date": f"2026-11-24T0{i}:00:00+00:00"},
                 "settings": {"train_updates": 30, "max_tokens": 4096,
                              "train_flags_of": "configs/ran/cpu.json"},
                 "systems": [{"name": "TransF", "metrics": {"train_tokens_per_s": 1000.0}},
                             {"name": "RAN-ALL", "metrics": {"train_tokens_per_s": ran_all}}]}
        paths.append(tmp_path / f"bench{i}.json")
        paths[-1].write_text(json.dumps(bench))
    cfg = json.loads(config.read_text())
    cfg["speed_bench"] = [str(x) for x in paths]
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    proc = reproduce("--config", path, "--data", data, "--pairs", "de-en", "--systems",
                     ",".join(SYSTEMS), "--max-update", "3", "--out", out, "--resume",
                     "--stop-after", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (out / "TABLE.md").read_text()
    rows = helpers.table_rows(table)
    column = "train time ×TransF, quiet cpu bench"
    assert {name: rows[name][column] for name in SYSTEMS} == {
        "TransF": "1.00", "RAN-ALL": "1.25", "RAN-ALL greedy": ""}
    assert "(the median of the 3 runs)" in table
    assert "on Quiet CPU with 2 thread(s) and nothing else running (load average at most 3.9" in table
    report = json.loads((out / "results.json").read_text())
    assert report["settings"]["speed_bench"]["train_time_ratio"] == {"TransF": 1.0, "RAN-ALL": 1.25}
    # one report, given as a path
    cfg["speed_bench"] = str(paths[2])
    path.write_text(json.dumps(cfg))
    assert load_config(path)["speed_bench"]["train_time_ratio"]["RAN-ALL"] == 2.0
    bench["systems"] = bench["systems"][1:]
    paths[2].write_text(json.dumps(bench))
    with pytest.raises(LabError, match="speed_bench .* has no training speed of the baseline"):
        load_config(path)
    paths[2].unlink()
    with pytest.raises(LabError, match="speed_bench .* does not exist"):
        load_config(path)


def test_loss_trend_is_the_last_epochs_change_in_percent():
    """The table's 'valid loss Δ % per epoch': the change over the last three epoch ends per
    epoch, in percent of the last loss; a short partial last epoch (fairseq validates again when
    --max-update stops mid-epoch) is left out; too short a curve gives None."""
    from ran_lab.reproduce.logs import loss_trend

    curve = [{"epoch": e, "num_updates": 100 * e, "loss": loss}
             for e, loss in enumerate([9.0, 6.0, 5.0, 4.5, 4.0], start=1)]
    assert loss_trend(curve) == pytest.approx(100 * (4.0 - 5.0) / 2 / 4.0)
    partial = curve + [{"epoch": 6, "num_updates": 510, "loss": 1.0}]
    assert loss_trend(partial) == loss_trend(curve)
    flat = [dict(c, loss=4.0) for c in curve]
    assert loss_trend(flat) == 0.0
    assert loss_trend(curve[:2]) is None and loss_trend([]) is None and loss_trend(None) is None


def test_a_config_continues_another_configs_trainings(corpus, config, tmp_path):
    """A config with 'continues' starts each training from the continued config's finished one
    (same flags, fewer updates) and ends where one training to its budget from the start ends:
    with the whole corpus in one batch and no dropout (fairseq groups and orders sentences anew
    in a resumed process, so dropout masks fall on other sentences) and a learning rate high from
    the first update, a resume that lost the model, the optimizer state or the schedule would
    show. The table says so."""
    _, data = corpus
    earlier = json.loads(config.read_text())
    earlier.update(out=str(tmp_path / "earlier"), checkpoints=str(tmp_path / "ckpt-earlier"),
                   set_train_flags=dict(TINY, **{"--warmup-updates": "1", "--lr": "3e-3",
                                                 "--max-tokens": "100000", "--dropout": "0.0"}))
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    longer = {"base": str(tmp_path / "earlier.json"), "continues": str(tmp_path / "earlier.json"),
              "out": str(tmp_path / "longer"), "checkpoints": str(tmp_path / "ckpt-longer")}
    (tmp_path / "longer.json").write_text(json.dumps(longer))
    scratch = dict(earlier, out=str(tmp_path / "scratch"), checkpoints=str(tmp_path / "ckpt-0"))
    (tmp_path / "scratch.json").write_text(json.dumps(scratch))
    common = ("--data", data, "--pairs", "de-en", "--systems", "TransF")
    for name, updates in (("earlier", 2), ("longer", 4), ("scratch", 4)):
        proc = reproduce("--config", tmp_path / f"{name}.json", *common, "--max-update", updates)
        assert proc.returncode == 0, proc.stderr[-5000:]
        if name == "longer":
            assert "continues" in proc.stderr and "from update 2" in proc.stderr
    first, run, ref = (json.loads((tmp_path / name / "results.json").read_text())["results"][0]
                       for name in ("earlier", "longer", "scratch"))
    assert run["continued_from"]["max_update"] == 2 and "continued_from" not in ref
    # the earlier training's log comes first, then fairseq-train's resumed one
    log = (tmp_path / "longer" / "de-en" / "TransF" / "seed1" / "train.log").read_text()
    old_log = (tmp_path / "earlier" / "de-en" / "TransF" / "seed1" / "train.log").read_text()
    assert log.startswith(old_log) and "continued (--resume)" in log
    assert run["selected"]["num_updates"] == ref["selected"]["num_updates"] == 4

    def loss(result, update):
        return {c["num_updates"]: c["loss"] for c in result["valid_curve"]}[update]

    assert loss(run, 4) == pytest.approx(loss(ref, 4), abs=2e-3)
    assert abs(loss(ref, 4) - loss(first, 2)) > 0.1  # the last two updates moved the loss
    assert run["tok_bleu"] == pytest.approx(ref["tok_bleu"], abs=0.05)
    # the train time is the whole training's: the earlier run's and the continuation's
    # (fairseq-train's own count, at most the continuation's process time more than the earlier's)
    added = json.loads((tmp_path / "ckpt-longer" / "de-en" / "TransF" / "seed1" /
                        "train_finished.json").read_text())["seconds"]
    assert first["train_seconds"] < run["train_seconds"] <= first["train_seconds"] + added
    table = (tmp_path / "longer" / "TABLE.md").read_text()
    assert "**continued trainings**: TransF (seed 1)" in table and "to update 2" in table


@pytest.mark.parametrize("change, message", [
    ({}, None),
    ({"argv": ["--dropout", "0.2"]}, "other flags (--dropout 0.1, --dropout 0.2)"),
    ({"updates": 9}, "--max-update 9 is not below this run's 5"),
    ({"no_checkpoint": True}, "holds no finished training"),
    ({"no_log": True}, "train.log is missing"),
])
def test_continuing_takes_only_a_finished_training_with_the_same_flags(tmp_path, capsys, change,
                                                                       message):
    """What a continued training must be (else the run trains from the start, and says why)."""
    from types import SimpleNamespace

    from ran_lab.reproduce.training import start_from_continued

    flags = ["data", "--arch", "ran_transformer_small", "--dropout", "0.1", "--max-update"]
    old_dir, old_ckpt = tmp_path / "old", tmp_path / "old-ckpt"
    old_dir.mkdir()
    old_ckpt.mkdir()
    old_argv = flags + [str(change.get("updates", 3)), "--save-dir", str(old_ckpt)]
    if "argv" in change:
        old_argv[old_argv.index("--dropout"):old_argv.index("--dropout") + 2] = change["argv"]
    (old_ckpt / "train_finished.json").write_text(json.dumps({"argv": old_argv, "seconds": 1}))
    if not change.get("no_checkpoint"):
        (old_ckpt / "checkpoint_last.pt").write_text("last")
    if not change.get("no_log"):
        (old_dir / "train.log").write_text("old log\n")
    run = SimpleNamespace(
        continues={"config": "earlier.json", "save_dir": old_ckpt, "dir": old_dir},
        train_argv=flags + ["5", "--save-dir", str(tmp_path / "new-ckpt")],
        save_dir=tmp_path / "new-ckpt", dir=tmp_path / "new")
    run.save_dir.mkdir()
    run.dir.mkdir()
    start_from_continued(run, "(de-en, TransF, seed 1)")
    err = capsys.readouterr().err
    if message is None:
        assert (run.save_dir / "checkpoint_last.pt").read_text() == "last"
        assert (run.dir / "train.log").read_text() == "old log\n"
        assert json.loads((run.dir / "continued_from.json").read_text())["max_update"] == 3
    else:
        assert "trains from the start" in err and message in err, err
        assert not any(run.save_dir.iterdir()) and not any(run.dir.iterdir())



def test_training_seconds_are_fairseqs_count_of_the_whole_training(tmp_path):
    """The train time is checkpoint_last.pt's previous_training_time (fairseq keeps it across
    resumes, while the epoch lines' wall starts again); without a checkpoint, the last epoch
    line's wall, as a CPU logs it and as a GPU does (gb_free between the two); else the engine's."""
    import torch

    from ran_lab.reproduce.logs import WALL_RE, training_seconds

    cpu = "x | INFO | train | epoch 010 | loss 5 | gnorm 0.7 | train_wall 39 | wall 4575\n"
    gpu = "x | INFO | train | epoch 010 | loss 5 | train_wall 3 | gb_free 78.3 | wall 212\n"
    assert training_seconds(tmp_path, WALL_RE.findall(cpu), 9.0) == 4575
    assert training_seconds(tmp_path, WALL_RE.findall(gpu), 9.0) == 212
    assert training_seconds(tmp_path, WALL_RE.findall("no epoch line"), 9.0) == 9.0
    torch.save({"extra_state": {"previous_training_time": 7483.0}}, tmp_path / "checkpoint_last.pt")
    assert training_seconds(tmp_path, WALL_RE.findall(cpu), 9.0) == 7483.0


def test_not_run_groups_by_pair_and_seed():
    """The table's "Not run" line names each pair and seed once, its systems in order."""
    from ran_lab.reproduce.markdown import _group_not_run

    labels = ["de-en HC-SA seed 2", "de-en RAN-ALL w/o LN&RES seed 2", "en-de TransF seed 2",
              "de-en TransF seed 3"]
    assert _group_not_run(labels) == ("de-en, seed 2: HC-SA, RAN-ALL w/o LN&RES; "
                                      "en-de, seed 2: TransF; de-en, seed 3: TransF")
    assert _group_not_run(["something else"]) == "something else"


def test_resume_rescores_a_stored_result_with_this_scoring(first_run, corpus, config):
    """A finished run's sacreBLEU is recomputed from its hypotheses on --resume, so a change of
    scoring reaches old tables without training again."""
    _, data = corpus
    out = first_run.parent / "out-rescore"
    shutil.copytree(first_run, out)
    path = out / "de-en" / "TransF" / "seed1" / "result.json"
    stored = json.loads(path.read_text())
    right = stored["sacrebleu"]
    stale = dict(stored, sacrebleu=right + 7.0)
    stale["subsets"] = {k: dict(v, sacrebleu=v["sacrebleu"] + 7.0)
                        for k, v in stored["subsets"].items()}
    path.write_text(json.dumps(stale))
    proc = reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                     ",".join(SYSTEMS), "--max-update", "3", "--out", out, "--resume",
                     "--stop-after", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"de-en TransF seed 1: done before, skipped (--resume); rescored: sacreBLEU {right:.2f}" \
        in proc.stderr
    again = json.loads(path.read_text())
    assert again["sacrebleu"] == pytest.approx(right)
    assert all(v["sacrebleu"] == pytest.approx(stored["subsets"][k]["sacrebleu"])
               for k, v in again["subsets"].items())
    report = json.loads((out / "results.json").read_text())
    assert {r["system"]: r["sacrebleu"] for r in report["results"]}["TransF"] == pytest.approx(right)


def test_runs_made_on_two_devices_tabulate_together(first_run, corpus, config, tmp_path):
    """A GPU config's stored run (no --cpu in its commands) is taken by --resume of the same recipe
    on the CPU (--device), and back; the table names each machine with its systems and leaves
    the speed ratios blank between machines. --device changes only fairseq's --cpu."""
    _, data = corpus
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    path = out / "de-en" / "RAN-ALL" / "seed1" / "result.json"
    result = json.loads(path.read_text())
    gpu = json.loads(json.dumps(result["commands"]).replace('"--cpu", ', ""))
    assert gpu != result["commands"] and "--cpu" not in json.dumps(gpu)
    path.write_text(json.dumps(dict(result, commands=gpu, machine=dict(
        result["machine"], device="cuda", device_name="Fake GPU"))))
    args = ["--config", config, "--data", data, "--pairs", "de-en", "--systems",
            ",".join(SYSTEMS), "--max-update", "3", "--out", out, "--resume", "--stop-after", "0"]
    for device in ([], ["--device", "cuda"]):  # stored runs of both devices, taken either way
        proc = reproduce(*args, *device)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stderr.count("skipped (--resume)") == len(SYSTEMS)
    table = (out / "TABLE.md").read_text()
    cpu_name = result["machine"]["device_name"]
    assert (f"cpu ({cpu_name}) for TransF, RAN-ALL greedy; cuda (Fake GPU) for RAN-ALL"
            in table), table.splitlines()[2]
    rows = helpers.table_rows(table)
    for column in ("sent/s ×TransF", "train time ×TransF"):
        assert rows["TransF"][column] == "1.00" and rows["RAN-ALL"][column] == ""
        assert rows["RAN-ALL greedy"][column] != ""
    # the flag itself: the same commands but fairseq's --cpu
    dry = [reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                     "TransF", "--dry-run", *device).stdout for device in ([], ["--device", "cuda"])]
    assert "--cpu" in dry[0] and "--cpu" not in dry[1]
    assert dry[0].replace(" --cpu", "") == dry[1]


def test_speed_ratios_compare_runs_made_under_the_same_conditions():
    """A speed ratio divides by baseline runs made under the row's conditions (device, threads,
    runs side by side), by seed where it can: a run alone on two threads against one of two
    side by side on one thread each is no comparison, even on the same CPU."""
    from ran_lab.reproduce.markdown import speed_baseline

    def run(seed, name="AMD", threads=1, jobs=2):
        return {"seed": seed, "machine": {"device": "cpu", "device_name": name,
                                          "threads": threads, "jobs": jobs}}

    base = [run(1, "Intel", 2, 1), run(2), run(3, threads=2, jobs=1)]
    # pairs by seed under the same conditions; a row seed without its pair is left out
    row = [run(1, "Intel", 2, 1), run(2), run(3)]
    timed, against, other = speed_baseline(row, base)
    assert timed == row[:2] and against == base[:2] and not other
    # no pair: the baseline's other seeds under the row's conditions, marked
    timed, against, other = speed_baseline([run(4)], base)
    assert timed == [run(4)] and against == [base[1]] and other
    # two threads alone, where the baseline ran on this CPU only one thread of two side by side
    assert speed_baseline([run(1, threads=2, jobs=1)], [run(2)]) == ([], [], False)
    # a GPU's run against a CPU's
    gpu = {"seed": 1, "machine": {"device": "cuda", "device_name": "H100", "threads": 1,
                                  "jobs": 2}}
    assert speed_baseline([gpu], [run(1)]) == ([], [], False)


def test_speed_ratio_against_the_baselines_other_seed_on_the_rows_machine(first_run, corpus,
                                                                          config, tmp_path):
    """A system run on a machine where the baseline ran only another seed (seed 1 moved to a new
    machine, the baseline's seed 1 made elsewhere; both moved runs with the same threads and runs
    side by side) gets its speed ratios against the baseline's run of the other seed there, marked
    '°'; where the baseline has the row's seed on the row's machine, that run is used and nothing
    is marked."""
    _, data = corpus
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    base1 = out / "de-en" / "TransF" / "seed1"
    shutil.copytree(base1, out / "de-en" / "TransF" / "seed2")
    moved = {"TransF/seed2": 100.0, "RAN-ALL/seed1": 150.0}
    for run, seconds in moved.items():
        path = out / "de-en" / run / "result.json"
        result = json.loads(path.read_text())
        if run.endswith("seed2"):  # the commands of seed 2: its --seed and its folder
            result = json.loads(json.dumps(result).replace('"--seed", "1"', '"--seed", "2"')
                                .replace("/seed1", "/seed2"))
        path.write_text(json.dumps(dict(
            result, seed=int(run[-1]), train_seconds=seconds,
            machine=dict(result["machine"], device_name="Other CPU", threads=1, jobs=1))))
    proc = reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                     ",".join(SYSTEMS), "--seeds", "1,2", "--max-update", "3", "--out", out,
                     "--resume", "--stop-after", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (out / "TABLE.md").read_text()
    rows = helpers.table_rows(table)
    at = "train time ×TransF"
    assert "skipped (--resume)" in proc.stderr and "TransF seed 2" in proc.stderr, proc.stderr
    assert rows["RAN-ALL"][at] == "1.50°", rows["RAN-ALL"]
    assert rows["RAN-ALL"]["sent/s ×TransF"].endswith("°")
    assert rows["TransF"][at] == "1.00" and not rows["RAN-ALL greedy"][at].endswith("°")
    assert rows["RAN-ALL greedy"][at] != ""
    assert "marked **°**" in table


def test_the_engine_prepares_with_the_data_package_in_its_own_process(tmp_path):
    """A config's ``prepare`` naming a corpus of files on disk runs ran_text.prepare in the
    engine's process (no shell script in between), its output in the log; a failed preparation
    names the log."""
    from ran_lab.reproduce import process
    from ran_lab.common import LabError

    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=40, n_valid=8, n_test=8)
    config = {"prepare": {"corpus": "files", "train": str(raw / "train"),
                          "valid": str(raw / "valid"), "test": str(raw / "test"),
                          "bpe_merges": 0, "out": str(tmp_path / "bin.{src}-{tgt}")}}
    log = tmp_path / "logs" / "prepare.de-en.log"
    process.prepare(config, ("de", "en"), log, env={})
    assert (tmp_path / "bin.de-en" / "test.de-en.de.bin").is_file()
    assert "prepare:" in log.read_text()
    with pytest.raises(LabError, match=r"(?s)preparing de-en failed: ran-prepare custom "
                                         r".*\n.*prepare\.de-en\.log"):
        process.prepare({"prepare": {"corpus": "files", "train": str(raw / "none"),
                                     "valid": str(raw / "valid"), "test": str(raw / "test")}},
                        ("de", "en"), log, env={})


def test_an_old_paper_name_runs_the_paper_with_a_one_line_notice(capsys):
    """``ran-reproduce rosendahl`` (the name before the paper took its folder's name) runs
    recurrent_cross and says so in one line on stderr."""
    from ran_lab.reproduce.cli import main

    main(["rosendahl", "--pairs", "de-en", "--systems", "baseline", "--dry-run"])
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "ran-reproduce: 'rosendahl' is now called 'recurrent_cross' (the name of its configs/ and "
        "results/ folders)"]
    assert "--arch recurrent_cross_transformer" in captured.out


# ---- two engines on one --out whose runs interleave ---------------------------------------------
