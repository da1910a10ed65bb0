"""scripts/reproduce-dynmem.sh (Yang et al. 2017) end to end in a short setting: word-level data
prepared by the project's pipeline on a tiny corpus, window 11 (at width 32) trained for 3 updates
and decoded, and '+ UNK replace' decoding its checkpoint through ran_text.replace_unk; then the
--full commands and the agreement of configs/dynmem/* with each other and with paper-train.args."""
import functools
import gzip
import json
import math
import subprocess
import sys

import pytest

import helpers

SCRIPT = helpers.REPO / "scripts" / "reproduce-dynmem.sh"
CONFIGS = helpers.REPO / "configs" / "dynmem"
SYSTEMS = ["RNNSearch + window 11", "RNNSearch + window 11 + UNK replace"]

# the recipe's model (embeddings and LSTMs of 256, memory 128) at 32 and 16: the engine's path is
# the same
TINY = {"--encoder-embed-dim": "32", "--encoder-hidden-size": "32", "--decoder-embed-dim": "32",
        "--decoder-hidden-size": "32", "--decoder-out-embed-dim": "32",
        "--dynamic-memory-dim": "16"}


reproduce = functools.partial(helpers.run_reproduction, SCRIPT)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """A word-level de-en data-bin (small vocabularies, so that the test set has <unk>) and one
    short run of two systems on it."""
    # the UNK-replace system learns its dictionary with eflomal (the 'align' extra)
    pytest.importorskip("eflomal", reason="the 'align' extra (eflomal) is not installed")
    root = tmp_path_factory.mktemp("reproduce-dynmem")
    raw = helpers.make_synthetic_corpus(root / "raw")
    proc = subprocess.run(
        [sys.executable, "-m", "ran_text.prepare", "custom", "--src", "de", "--tgt", "en",
         "--out", str(root / "bin.de-en"), "--train-prefix", str(raw / "train"),
         "--valid-prefix", str(raw / "valid"), "--test-prefix", str(raw / "test"),
         "--bpe-merges", "0", "--nwords-src", "16", "--nwords-tgt", "16",
         "--no-joined-dictionary", "--workers", "1"],  # training text kept in bin.de-en/prep
        env=helpers.fairseq_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (root / "cpu.json").write_text(json.dumps({"base": "configs/dynmem/cpu.json",
                                               "set_train_flags": TINY}))
    out = root / "out"
    proc = reproduce("--config", root / "cpu.json", "--data", str(root / "bin.{src}-{tgt}"),
                     "--pairs", "de-en", "--systems", ",".join(SYSTEMS), "--max-update", "3",
                     "--out", out,
                     "--checkpoints", root / "ckpt", timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return root, out


def test_short_run_table_and_unk_replacement(first_run):
    root, out = first_run
    rows = helpers.table_rows((out / "TABLE.md").read_text())
    assert list(rows) == SYSTEMS
    paper = json.loads((CONFIGS / "paper.json").read_text())
    for name, row in rows.items():
        for heading in ("tok BLEU", "sacreBLEU", "chrF", "TER", "decode sent/s"):
            value = float(row[heading].replace(",", "").rstrip("†↓"))  # significance mark
            assert math.isfinite(value) and value >= 0, (name, heading, row[heading])
        for column in paper["columns"]:
            assert column["title"] in row  # the paper's columns appear (blank: unknown numbers)
    # UNK replace decodes window 11's checkpoint
    assert rows["RNNSearch + window 11 + UNK replace"]["params"] == \
        rows["RNNSearch + window 11"]["params"]
    unk_dir = out / "de-en" / "RNNSearch_-_window_11_-_UNK_replace" / "seed1"
    # what decoding printed is kept gzip'd (not git-ignored), so the postprocess can be redone
    assert not (unk_dir / "generate.txt").exists()
    before = gzip.decompress((unk_dir / "generate.txt.gz").read_bytes()).decode()
    after = (unk_dir / "generate.post.txt").read_text()
    assert "\nA-" in before  # --print-alignment reached fairseq-generate
    hyps = [line for line in after.splitlines() if line.startswith("H-")]
    assert hyps and all("<unk>" not in line for line in hyps)
    assert before.count("<unk>") > after.count("<unk>")  # 3 updates: <unk>s were generated
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index",
                              "results/dynmem/x/de-en/S/seed1/generate.txt.gz"],
                             cwd=helpers.REPO)
    assert ignored.returncode == 1
    # the result names the method and the dictionary learned in the data-bin
    result = json.loads((unk_dir / "result.json").read_text())
    record = result["subsets"]["test"]["postprocess_record"]
    assert record["method"] == "dictionary"
    assert record["unk"] == sum(line.split("\t")[2].split().count("<unk>")
                                for line in before.splitlines() if line.startswith("H-"))
    assert record["from_dictionary"] + record["copied"] == record["unk"]
    assert record["dictionary"].endswith("bin.de-en/unk-dict.de-en.intersection.txt")
    assert "--method" in result["postprocess"]
    assert result["postprocess"][result["postprocess"].index("--method") + 1] == "dictionary"


def test_redo_postprocess_from_the_kept_decoding(first_run):
    """--redo-postprocess makes the UNK row again with the copy method (configs/dynmem/
    systems-copy.json) from the generate.txt.gz it keeps, with no checkpoint left; the trained
    row is untouched."""
    root, out = first_run
    unk_dir = out / "de-en" / "RNNSearch_-_window_11_-_UNK_replace" / "seed1"
    before = json.loads((unk_dir / "result.json").read_text())
    trained = (out / "de-en" / "RNNSearch_-_window_11" / "seed1" / "result.json").read_text()
    checkpoint = root / "ckpt" / "de-en" / "RNNSearch_-_window_11" / "seed1" / "checkpoint_best.pt"
    assert checkpoint.is_file()
    moved = checkpoint.rename(root / "away.pt")
    config = root / "copy.json"
    config.write_text(json.dumps({"base": str(root / "cpu.json"),
                                  "systems": "configs/dynmem/systems-copy.json"}))
    args = ("--config", config, "--data", str(root / "bin.{src}-{tgt}"), "--pairs", "de-en",
            "--systems", ",".join(SYSTEMS), "--max-update", "3", "--out", out,
            "--checkpoints", root / "ckpt", "--resume")
    try:
        proc = reproduce(*args, "--force", "--redo-postprocess", timeout=600)
    finally:
        moved.rename(checkpoint)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "postprocessed again from its kept decoding" in proc.stderr
    after = json.loads((unk_dir / "result.json").read_text())
    record = after["subsets"]["test"]["postprocess_record"]
    assert record["method"] == "copy" and record["copied"] == record["unk"] > 0
    assert record["unk"] == before["subsets"]["test"]["postprocess_record"]["unk"]
    assert "--method" not in after["postprocess"]
    assert after["subsets"]["test"]["decode"] == before["subsets"]["test"]["decode"]
    assert after["train_seconds"] == before["train_seconds"]
    assert (out / "de-en" / "RNNSearch_-_window_11" / "seed1" / "result.json").read_text() == \
        trained


def test_redo_postprocess_needs_resume_and_force(capsys):
    from ran_lab.reproduce.cli import parse_cli
    from ran_lab.reproduce.papers import PAPERS

    DYNMEM = PAPERS["dynmem"]
    for extra in ([], ["--resume"], ["--force"]):
        with pytest.raises(SystemExit):
            parse_cli(DYNMEM, ["--redo-postprocess", *extra])
        assert "give it with --resume --force" in capsys.readouterr().err
    assert parse_cli(DYNMEM, ["--redo-postprocess", "--resume", "--force"]).redo_postprocess


def test_unk_method_column_marks_the_gpu_rows_as_copied():
    """The table's 'UNK replace method' column: the committed GPU UNK rows were made with the
    copy method (their command has no --method), the other rows have none; a record's method
    wins over the command."""
    from ran_lab.reproduce.measures import unk_method
    from ran_lab.reproduce.papers import PAPERS

    DYNMEM = PAPERS["dynmem"]

    assert [c.title for c in DYNMEM.columns] == ["UNK replace method"]
    results = json.loads((helpers.REPO / "results/dynmem/gpu/results.json").read_text())
    methods = {(r["pair"], r["system"]): unk_method(r) for r in results["results"]}
    assert methods[("en-de", "RNNSearch + UNK replace")] == "copy"
    assert methods[("en-de", "RNNSearch + window 11 + UNK replace")] == "copy"
    assert {m for (_, name), m in methods.items() if "UNK" not in name} == {""}
    post = ["ran_text.replace_unk", "--method", "dictionary", "--output", "x"]
    assert unk_method({"postprocess": post}) == "dictionary"
    assert unk_method({"postprocess": post[:1] + ["--dictionary", "lex"]}) == "dictionary"
    assert unk_method({"postprocess": post, "subsets": {
        "test": {"postprocess_record": {"method": "copy"}}}}) == "copy"


def test_full_settings_print_paper_size_commands_on_word_level_wmt14():
    proc = reproduce("--full", "--pairs", "en-de", "--systems",
                     "RNNSearch + window 11 + UNK replace", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    # the window-11 system that trains the checkpoint comes first; both systems decode both test
    # sets of section 3.1 (newstest2014: test, newstest2015: test1)
    train, _, _, generate, post, generate1, post1 = [line for line in proc.stdout.splitlines()
                                                     if not line.startswith("#")]
    assert "--arch rnnsearch_dynmem " in train and "data-bin/wmt14-word.en-de" in train
    assert "--cpu" not in train and "--dynamic-memory-window 5" in train
    assert "--print-alignment" in generate and "--post-process" not in generate
    assert "--gen-subset test " in generate and "--gen-subset test1 " in generate1
    assert post.startswith("python -m ran_text.replace_unk ")
    assert "data-bin/wmt14-word.en-de/test.tok.en" in post
    assert "data-bin/wmt14-word.en-de/test1.tok.en" in post1


def paper_recipe():
    """configs/dynmem/paper-train.args as {flag: value}."""
    flags = []
    for line in (CONFIGS / "paper-train.args").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        flags += line.split(None, 1) if line else []
    return helpers.flag_pairs(flags)


def test_configs_agree():
    systems = json.loads((CONFIGS / "systems.json").read_text())["systems"]
    paper = json.loads((CONFIGS / "paper.json").read_text())
    for column in paper["columns"]:
        assert set(column["values"]) == {s["name"] for s in systems}, column["title"]
    recipe = paper_recipe()
    full = json.loads((CONFIGS / "full.json").read_text())
    cpu = json.loads((CONFIGS / "cpu.json").read_text())
    # full.json trains with paper-train.args flag for flag (the arch comes from its 'arch')
    assert full["arch"] == recipe.pop("--arch")
    full_flags = helpers.flag_pairs(full["train_flags"])
    for flag, value in recipe.items():
        assert full_flags.get(flag, "missing") == value, flag
    # cpu.json: the same recipe, shortened (fewer epochs, earlier annealing)
    cpu_flags = helpers.flag_pairs(cpu["train_flags"])
    shortened = {"--max-epoch", "--force-anneal"}
    for flag, value in recipe.items():
        if flag not in shortened:
            assert cpu_flags.get(flag, "missing") == value, flag
    assert int(cpu_flags["--max-epoch"]) <= int(recipe["--max-epoch"])
    # section 3.1: pairs not in German/English removed (after Jean et al. 2014); two test sets
    assert full["prepare"]["lang_filter"] is True and full["gen_subset"] == ["test", "test1"]
    for config in (cpu, full):
        assert config["bpe"] is None and config["prepare"]["bpe_merges"] == 0
    # the benchmark's training flags are the recipe's
    bench = json.loads((helpers.REPO / "configs" / "bench" / "dynmem.json").read_text())
    for flag, value in helpers.flag_pairs(bench["common_flags"]).items():
        if flag != "--dropout":
            assert recipe.get(flag, "missing") == value, flag
