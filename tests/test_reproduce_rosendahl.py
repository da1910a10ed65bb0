"""scripts/reproduce-rosendahl.py (Rosendahl et al. 2021) end to end in a short setting (the baseline
of Tables 1 and 2 and a Table 2 system, 1 pair, 2 updates) on a tiny word-level corpus; the commands
of its named full-size settings (--full NAME); and the agreement of configs/recurrent_cross/*.json
with each other and with configs/bench/recurrent_cross.json."""
import json
import math
import re
import runpy

import pytest

import helpers
from ran_fairseq.reproduce import main

SCRIPT = helpers.REPO / "scripts" / "reproduce-rosendahl.py"
CONFIGS = helpers.REPO / "configs"
DIR = CONFIGS / "recurrent_cross"
SYSTEMS = ["baseline", "coverage"]
PAPER_BASELINE = 23.45  # a paper number planted in a copy of paper.json
# --full NAME -> (data-bin, source, target, dropout); configs/recurrent_cross/full-NAME.json
FULL = {"wmt16-ro-en": ("data-bin/wmt16.ro-en", "ro", "en", "0.1"),
        "wmt18-tr-en": ("data-bin/wmt18.tr-en", "tr", "en", "0.3"),
        "iwslt17-en-it": ("data-bin/iwslt17.en-it", "en", "it", "0.3")}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The CPU config on a tiny word-level de-en corpus (no BPE), with one paper number planted."""
    root = tmp_path_factory.mktemp("reproduce-rosendahl")
    helpers.scored_corpus(root)
    paper = json.loads((DIR / "paper.json").read_text())
    paper["columns"][0]["values"]["baseline"] = PAPER_BASELINE
    (root / "paper.json").write_text(json.dumps(paper))
    out = helpers.short_reproduction(SCRIPT, DIR / "cpu.json", root, SYSTEMS,
                                     paper=str(root / "paper.json"))
    return out, paper


def test_table_has_finite_rows_and_the_papers_columns(first_run):
    out, paper = first_run
    rows = helpers.table_rows((out / "TABLE.md").read_text())
    heads = list(next(iter(rows.values())))
    assert list(rows) == SYSTEMS
    for name, row in rows.items():
        for heading in ("tok BLEU", "sacreBLEU", "TER", "decode sent/s", "train words/s",
                        "train time ×baseline"):
            value = float(row[heading].replace(",", ""))
            assert math.isfinite(value) and value >= 0, (name, heading, row[heading])
        assert float(row["decode sent/s"]) > 0
    assert float(rows["baseline"]["train time ×baseline"]) == 1.0
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
    assert flags["coverage"][-2:] == ["--cross-attention", "coverage"]
    assert flags["baseline"][-2:] == ["--cross-attention", "dot"]


@pytest.fixture(scope="module")
def paper():
    """The script's Paper, loaded without running it."""
    return runpy.run_path(str(SCRIPT))["PAPER"]


@pytest.mark.parametrize("name", [None, *FULL], ids=["bare", *FULL])
def test_full_settings_print_base_model_commands(paper, name, capsys):
    """--full NAME (a bare --full: the first, WMT'16 Ro-En) trains the base model on the GPU on
    that setting's data-bin and pair, with its dropout."""
    main(paper, ["--full", *([name] if name else []), "--systems", "prev-weight", "--dry-run"])
    data, src, tgt, dropout = FULL[name or "wmt16-ro-en"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"# {src}-{tgt} prev-weight"
    train, generate = lines[1:]
    assert train.startswith(f"fairseq-train {helpers.REPO / data} ")
    assert generate.startswith(f"fairseq-generate {helpers.REPO / data} ")
    assert "--arch recurrent_cross_transformer " in train
    assert f"--source-lang {src} --target-lang {tgt}" in train
    assert f"--dropout {dropout} " in train and "--cpu" not in train
    assert train.endswith("--cross-attention prev-weight")
    assert "--beam 4" in generate and "--cpu" not in generate


def test_full_setting_names_are_listed_and_checked(paper, capsys):
    with pytest.raises(SystemExit):
        main(paper, ["--help"])
    out = capsys.readouterr().out
    for name in FULL:
        assert re.search(rf"^  {name} +configs/recurrent_cross/full-{name}\.json: ", out, re.M)
    with pytest.raises(SystemExit) as exit_:
        main(paper, ["--full", "wmt19-xx-en", "--dry-run"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --full: invalid choice: 'wmt19-xx-en'" in err
    assert all(repr(name) in err for name in FULL)


def test_configs_agree():
    systems = json.loads((DIR / "systems.json").read_text())["systems"]
    names = {s["name"] for s in systems}
    paper = json.loads((DIR / "paper.json").read_text())
    for column in paper["columns"]:
        assert set(column["values"]) == names, column["title"]
    assert all(s["tables"] for s in systems)
    assert {s["name"] for s in systems if "1" in s["tables"]} == \
        {"baseline"} | {f"expand-kv {v}" for v in range(1, 5)}
    assert sum("2" in s["tables"] for s in systems) == 6  # Table 2 less its unknown expand-kv row
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
        _, src, tgt, _ = FULL[name]
        assert (full["systems"], full["paper"]) == (cpu["systems"], cpu["paper"])
        assert (full["arch"], full["device"], full["pairs"]) == \
            ("recurrent_cross_transformer", "cuda", [f"{src}-{tgt}"])
        assert set(helpers.flag_pairs(cpu["train_flags"])) <= \
            set(helpers.flag_pairs(full["train_flags"]))
    # ... and share one recipe: a flag differs from the Ro-En config's only where the config's
    # notes name it with its value
    ro_en = fulls["wmt16-ro-en"]
    recipe = helpers.flag_pairs(ro_en["train_flags"])
    for name, full in fulls.items():
        flags = helpers.flag_pairs(full["train_flags"])
        assert set(flags) == set(recipe), name
        for flag, value in flags.items():
            if value != recipe[flag]:
                assert f"{flag} {value} " in full["notes"], (name, flag, value)
        for key in ("generate_flags", "checkpoint", "gen_subset"):
            assert full[key] == ro_en[key], (name, key)
