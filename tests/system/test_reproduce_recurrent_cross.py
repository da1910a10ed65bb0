"""scripts/reproduce-recurrent_cross.sh (Rosendahl et al. 2021) end to end in a short setting (the
baseline of Tables 1 and 2 and a Table 2 system at width 32, 1 pair, 2 updates) on a tiny
word-level corpus; the commands of its named full-size settings (--full NAME); and the agreement of
configs/recurrent_cross/*.json with each other and with configs/bench/recurrent_cross.json."""
import json
import math
import re

import pytest

import helpers
from ran_lab.reproduce.cli import run_paper
from ran_lab.reproduce.papers import paper_of

SCRIPT = helpers.REPO / "scripts" / "reproduce-recurrent_cross.sh"
CONFIGS = helpers.REPO / "configs"
DIR = CONFIGS / "recurrent_cross"
SYSTEMS = ["baseline", "coverage"]
PAPER_BASELINE = 23.45  # a paper number planted in a copy of paper.json
# --full NAME -> (data-bin, source, target, dropout, BPE merges, decoded subsets), as Rosendahl
# et al. (2021) §4 states them (Table 1 on the Ro-En development set, Table 2 on the test sets);
# configs/recurrent_cross/full-NAME.json
FULL = {"wmt16-ro-en": ("data-bin/wmt16.ro-en", "ro", "en", "0.2", "20000", ["test", "valid"]),
        "wmt18-tr-en": ("data-bin/wmt18.tr-en", "tr", "en", "0.3", "20000", ["test"]),
        "iwslt17-en-it": ("data-bin/iwslt17.en-it", "en", "it", "0.3", "8000", ["test"])}
# the recipe's model (3+3 layers of width 256) at width 32: the engine's path is the same
TINY = {"--encoder-embed-dim": "32", "--decoder-embed-dim": "32",
        "--encoder-ffn-embed-dim": "64", "--decoder-ffn-embed-dim": "64",
        "--encoder-attention-heads": "2", "--decoder-attention-heads": "2"}
TABLE1 = {"baseline", "expand-kv 1", "expand-kv 2", "expand-kv 3", "expand-kv 4"}
TABLE2 = {"baseline", "prev-context", "prev-weight", "prev-accum-weight", "expand-kv 1",
          "continuous", "coverage"}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, scored_corpus):
    """The CPU config on a tiny word-level de-en corpus (no BPE), with one paper number planted."""
    root = tmp_path_factory.mktemp("reproduce-rosendahl")
    scored_corpus(root)
    paper = json.loads((DIR / "paper.json").read_text())
    paper["columns"][0]["values"]["baseline"] = PAPER_BASELINE
    (root / "paper.json").write_text(json.dumps(paper))
    out = helpers.short_reproduction(SCRIPT, DIR / "cpu.json", root, SYSTEMS,
                                     paper=str(root / "paper.json"), set_train_flags=TINY)
    return out, paper


def test_table_has_finite_rows_and_the_papers_columns(first_run):
    out, paper = first_run
    table = (out / "TABLE.md").read_text()
    # Table 1 is scored on the development set (§5.1), Table 2 on the test set: both decoded
    assert "## de-en (test)" in table and "## de-en (valid)" in table
    rows = helpers.table_rows(table)
    heads = list(next(iter(rows.values())))
    assert list(rows) == SYSTEMS
    for name, row in rows.items():
        for heading in ("tok BLEU", "sacreBLEU", "TER", "decode sent/s", "train words/s",
                        "train time ×baseline"):
            value = float(row[heading].replace(",", "").rstrip("†↓"))  # significance mark
            assert math.isfinite(value) and value >= 0, (name, heading, row[heading])
        assert float(row["decode sent/s"]) > 0
    assert float(rows["baseline"]["train time ×baseline"]) == 1.0
    # the config's speed_bench: the committed quiet bench runs of the same systems and flags
    quiet = rows["baseline"]["train time ×baseline, quiet cpu bench"]
    assert quiet == "1.00" and float(rows[SYSTEMS[1]]["train time ×baseline, quiet cpu bench"]) > 0
    assert [rows[s]["paper table"] for s in SYSTEMS] == ["1, 2", "2"]
    titles = [c["title"] for c in paper["columns"]]
    assert set(titles) <= set(heads)
    assert float(rows["baseline"][titles[0]]) == PAPER_BASELINE
    assert rows["coverage"][titles[0]] == ""
    # coverage (Eq. 10) adds no parameters
    assert rows["baseline"]["params"] == rows["coverage"]["params"]
    results = json.loads((out / "results.json").read_text())["results"]
    flags = {r["system"]: r["train_argv"] for r in results}
    assert "label_smoothed_cross_entropy_with_entropy" in flags["coverage"]
    for system, variant in (("coverage", "coverage"), ("baseline", "dot")):
        argv = flags[system]
        at = argv.index("--cross-attention")
        assert argv[at + 1] == variant and argv.count("--cross-attention") == 1, system


@pytest.fixture(scope="module")
def paper():
    """The script's paper, loaded without running it."""
    return paper_of(SCRIPT)


@pytest.mark.parametrize("name", [None, *FULL], ids=["bare", *FULL])
def test_full_settings_print_base_model_commands(paper, name, capsys):
    """--full NAME (a bare --full: the first, WMT'16 Ro-En) trains the base model on the GPU on
    that setting's data-bin and pair, with its dropout and the paper's batch, keeps the best
    checkpoint by validation BLEU, and decodes each subset the paper's tables use."""
    run_paper(paper, ["--full", *([name] if name else []), "--systems", "prev-weight", "--dry-run"])
    data, src, tgt, dropout, _, subsets = FULL[name or "wmt16-ro-en"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"# {src}-{tgt} prev-weight")
    train, *generates = lines[1:]
    # the checkout's files relative to it: the commands run from the checkout
    assert train.startswith(f"fairseq-train {data} ")
    assert "--arch recurrent_cross_transformer " in train
    assert f"--source-lang {src} --target-lang {tgt}" in train
    assert f"--dropout {dropout} " in train and "--cpu" not in train
    assert "--max-tokens 9600 --update-freq 1 " in train
    assert "--eval-bleu " in train and "--best-checkpoint-metric bleu" in train
    assert " --cross-attention prev-weight" in train
    assert len(generates) == len(subsets)
    for generate, subset in zip(generates, subsets):
        assert generate.startswith(f"fairseq-generate {data} ")
        assert f"--gen-subset {subset} " in generate
        assert "--beam 4" in generate and "--cpu" not in generate


def test_full_setting_names_are_listed_and_checked(paper, capsys):
    with pytest.raises(SystemExit):
        run_paper(paper, ["--help"])
    out = capsys.readouterr().out
    for name in FULL:
        assert re.search(rf"^  {name} +configs/recurrent_cross/full-{name}\.json: ", out, re.M)
    # each setting's help states the paper's settings that its config holds
    for setting in paper.full_settings:
        _, _, _, dropout, merges, _ = FULL[setting.name]
        full = json.loads(setting.config.read_text())
        flags = helpers.flag_pairs(full["train_flags"])
        assert f"dropout {dropout}," in setting.help and flags["--dropout"] == dropout
        assert f"{int(merges) // 1000}k BPE" in setting.help
        assert "9,600-token batches" in setting.help and flags["--max-tokens"] == "9600"
        assert "best dev BLEU" in setting.help and full["select"] == "bleu"
        assert f"{int(flags['--max-update']) // 1000}k updates (ours)" in setting.help
        assert "assumed" not in setting.help
    with pytest.raises(SystemExit) as exit_:
        run_paper(paper, ["--full", "wmt19-xx-en", "--dry-run"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --full: invalid choice: 'wmt19-xx-en'" in err
    assert all(repr(name) in err for name in FULL)


def test_configs_agree():
    systems = json.loads((DIR / "systems.json").read_text())["systems"]
    names = {s["name"] for s in systems}
    paper = json.loads((DIR / "paper.json").read_text())
    assert all(s["tables"] for s in systems)
    assert {s["name"] for s in systems if "1" in s["tables"]} == TABLE1
    # Table 2's expand-kv row is variant 1 (§5.1)
    assert {s["name"] for s in systems if "2" in s["tables"]} == TABLE2
    # paper.json: every column keyed by the systems' names, with a number exactly for the systems
    # of its table (Table 1: dev BLEU/TER; Table 2: BLEU/TER per task and the training time)
    for column in paper["columns"]:
        assert set(column["values"]) == names, column["title"]
        table = TABLE1 if column["title"].startswith("paper T1 ") else TABLE2
        assert column["title"].startswith(("paper T1 ", "paper T2 ")), column["title"]
        given = {n for n, v in column["values"].items() if v is not None}
        assert given == table, column["title"]
        assert all(isinstance(column["values"][n], float) for n in given), column["title"]
    assert [c["key"] for c in paper["columns"] if c["title"].startswith("paper T1 ")] == \
        ["ro_en_dev_bleu", "ro_en_dev_ter"]
    assert paper["columns"][-1]["values"]["baseline"] == 1.0  # relative training time
    keys = {c["key"] for c in paper["columns"]}
    reference = paper["reference_rows"]
    assert set(reference["columns"]) <= keys
    assert all(len(row["values"]) == len(reference["columns"]) for row in reference["rows"])
    # the benchmark file holds the same recurrent_cross_transformer_small systems
    bench = json.loads((CONFIGS / "bench" / "recurrent_cross.json").read_text())
    bench_flags = sorted(s["flags"] for s in bench["systems"]
                         if s["arch"] == "recurrent_cross_transformer_small")
    assert bench_flags == sorted(s["flags"] for s in systems)
    assert {s["arch"] for s in systems} == {"recurrent_cross_transformer_small"}
    # the CPU config trains as the benchmark does (criterion aside: the engine records entropies)
    cpu = json.loads((DIR / "cpu.json").read_text())
    cpu_flags = helpers.flag_pairs(cpu["train_flags"])
    for flag, value in helpers.flag_pairs(bench["common_flags"]).items():
        if flag != "--criterion":
            assert cpu_flags.get(flag, "missing") == value, flag
    # the full configs differ in scale only: same systems and paper file, base model, GPU
    fulls = {name: json.loads((DIR / f"full-{name}.json").read_text()) for name in FULL}
    for name, full in fulls.items():
        _, src, tgt, *_ = FULL[name]
        assert (full["systems"], full["paper"]) == (cpu["systems"], cpu["paper"])
        assert (full["arch"], full["device"], full["pairs"]) == \
            ("recurrent_cross_transformer", "cuda", [f"{src}-{tgt}"])
        assert set(helpers.flag_pairs(cpu["train_flags"])) <= \
            set(helpers.flag_pairs(full["train_flags"]))
    # ... and share one recipe: a flag differs from the Ro-En config's only where the config's
    # notes (its Markdown file) name it with its value
    ro_en = fulls["wmt16-ro-en"]
    recipe = helpers.flag_pairs(ro_en["train_flags"])
    for name, full in fulls.items():
        flags = helpers.flag_pairs(full["train_flags"])
        assert set(flags) == set(recipe), name
        for flag, value in flags.items():
            if value != recipe[flag]:
                notes = " ".join((DIR / full["notes"]).read_text().split()) + " "
                assert f"{flag} {value} " in notes, (name, flag, value)
        for key in ("generate_flags", "select"):
            assert full[key] == ro_en[key], (name, key)
    # the paper's stated settings (§4)
    for name, full in fulls.items():
        _, _, _, dropout, merges, subsets = FULL[name]
        flags = helpers.flag_pairs(full["train_flags"])
        assert (flags["--dropout"], flags["--max-tokens"], flags["--update-freq"]) == \
            (dropout, "9600", "1"), name
        assert full["select"] == "bleu", name
        assert str(full["prepare"]["bpe_merges"]) == merges, name
        decoded = full["gen_subset"]
        assert ([decoded] if isinstance(decoded, str) else decoded) == subsets, name
