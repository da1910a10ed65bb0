"""The reproduction engine (ran_fairseq/reproduce.py) through scripts/reproduce-ran.py, end to end in a
short setting (2 trained systems and one that decodes another's checkpoint with other flags, 1 pair,
3 updates) on a tiny corpus prepared by the project's pipeline; then --resume, the engine's errors,
and the RAN configs' agreement with each other (configs/ran/*.json, configs/bench/ran.json)."""
import functools
import json
import math
import re
import subprocess
import sys

import pytest

import helpers

SCRIPT = helpers.REPO / "scripts" / "reproduce-ran.py"
CONFIGS = helpers.REPO / "configs"
SYSTEMS = ["TransF", "RAN-ALL", "RAN-ALL greedy"]  # the last decodes RAN-ALL's checkpoint
PAPER_TRANSF = 12.34  # a paper number planted in a copy of the config
PAPER_COLUMN = json.loads((CONFIGS / "ran" / "paper.json").read_text())["columns"][0]["title"]


reproduce = functools.partial(helpers.run_reproduction, SCRIPT)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A de-en data-bin with BPE codes and raw references, as scripts/prepare-*.sh make them."""
    root = tmp_path_factory.mktemp("reproduce-data")
    raw = helpers.make_synthetic_corpus(root / "raw")
    out = root / "bin.de-en"
    proc = subprocess.run(
        [sys.executable, "-m", "ran_fairseq.data.prepare", "custom", "--src", "de", "--tgt", "en",
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
               checkpoints=str(root / "ckpt"))
    path = root / "cpu.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def first_run(corpus, config):
    root, data = corpus
    out = root / "out"
    proc = reproduce("--config", config, "--data", data, "--pairs", "de-en", "--systems",
                     ",".join(SYSTEMS), "--max-update", "3", "--out", out)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return out


def test_table_has_a_finite_row_per_system_and_the_paper_column(first_run):
    rows = helpers.table_rows((first_run / "TABLE.md").read_text())
    assert list(rows) == SYSTEMS
    for name, row in rows.items():
        for heading in ("tok BLEU", "sacreBLEU", "chrF", "TER", "decode sent/s", "decode tok/s",
                        "train words/s", "train time ×TransF"):
            value = float(row[heading].replace(",", ""))
            assert math.isfinite(value) and value >= 0, (name, heading, row[heading])
        assert float(row["decode sent/s"]) > 0
        assert int(row["params"].replace(",", "")) > 0
    assert float(rows["TransF"][PAPER_COLUMN]) == PAPER_TRANSF
    assert rows["RAN-ALL"][PAPER_COLUMN] == ""
    assert float(rows["TransF"]["sent/s ×TransF"]) == 1.0
    assert float(rows["TransF"]["train time ×TransF"]) == 1.0
    # RAN drops W_q and W_k but adds n×n matrices: the two models differ in size.
    assert rows["TransF"]["params"] != rows["RAN-ALL"]["params"]


def test_results_match_fairseq_and_sacrebleu(first_run, corpus):
    from sacrebleu.metrics import BLEU, TER

    root, _ = corpus
    report = json.loads((first_run / "results.json").read_text())
    refs = (root / "bin.de-en" / "test.raw.en").read_text().splitlines()
    for result in report["results"]:
        run_dir = first_run / "de-en" / result["system"].replace(" ", "_")
        hyps = (run_dir / "hyp.detok.txt").read_text().splitlines()
        assert len(hyps) == len(refs) == result["decode"]["sentences"]
        assert result["sacrebleu"] == pytest.approx(BLEU().corpus_score(hyps, [refs]).score)
        assert result["ter"] == pytest.approx(TER().corpus_score(hyps, [refs]).score)
        # the engine's tokenized BLEU is fairseq-generate's own (its default --scoring bleu)
        assert f"BLEU4 = {result['tok_bleu']:.2f}" in (run_dir / "generate.txt").read_text()
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
    assert not (first_run / "de-en" / "RAN-ALL_greedy" / "train.log").exists()


def test_resume_skips_finished_systems_and_refuses_other_settings(first_run, corpus, config):
    _, data = corpus
    stamps = {p: p.stat().st_mtime_ns for p in first_run.glob("de-en/*/result.json")}
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
                       "postprocess": ["m", "{hyp}"]}}, "unknown placeholder {hyp}"),
])
def test_systems_file_errors_name_the_problem(tmp_path, change, message):
    from ran_fairseq.reproduce import ReproError, load_systems

    systems = json.loads((CONFIGS / "ran" / "systems.json").read_text())
    if "extra_system" in change:
        systems["systems"].append(change["extra_system"])
    else:
        systems.update(change)
    path = tmp_path / "systems.json"
    path.write_text(json.dumps(systems))
    with pytest.raises(ReproError, match=re.escape(message)):
        load_systems(path)


@pytest.mark.parametrize("full", [
    {}, {"full_config": "x.json", "full_settings": ["a"]}, {"full_settings": ["a", "a"]},
], ids=["none", "both", "same-name"])
def test_paper_takes_one_full_config_or_distinct_named_ones(full):
    """A Paper's full-size settings: full_config (a bare --full) or full_settings (--full NAME,
    tested through scripts/reproduce-rosendahl.py), never both, neither or a name twice."""
    from ran_fairseq.reproduce import FullSetting, Paper

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


def test_configs_agree():
    systems = json.loads((CONFIGS / "ran" / "systems.json").read_text())["systems"]
    paper = json.loads((CONFIGS / "ran" / "paper.json").read_text())
    for column in paper["columns"]:
        assert set(column["values"]) == {s["name"] for s in systems}, column["title"]
    assert all(s["tables"] for s in systems)
    # the benchmark file: the same ran_transformer systems, the CPU config's training flags
    bench = json.loads((CONFIGS / "bench" / "ran.json").read_text())
    by_name = {s["name"]: s for s in systems}
    for system in bench["systems"]:
        if system["arch"].startswith("ran_transformer"):
            assert system["flags"] == by_name[system["name"]]["flags"], system["name"]
            assert system["arch"] == by_name[system["name"]]["arch"], system["name"]
    cpu = helpers.flag_pairs(json.loads((CONFIGS / "ran" / "cpu.json").read_text())["train_flags"])
    for flag, value in helpers.flag_pairs(bench["common_flags"]).items():
        assert cpu.get(flag, "missing") == value, flag


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
    prepare = helpers.flag_pairs(cfg["prepare"][cfg["prepare"].index("--bpe-merges"):])
    assert prepare["--clean-max-len"] == "256" and prepare["--clean-on"] == "tok"
    assert prepare["--bpe-merges"] == {"wmt14-base.json": "40000",
                                       "wmt17-en-tr-base.json": "32000"}[name]
