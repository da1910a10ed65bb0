"""docs/adding-a-paper.md holds: a fifth paper is one folder of configs/ and one line of script. In a
temporary checkout (a copy of the package, setup.py and scripts/lib.sh, with none of the four papers'
folders) the test writes configs/toy/ from nothing (reproduce.json, NOTES.md, a scale config, a
systems file, the paper's numbers) and scripts/reproduce-toy.sh as the page says (a copy of
scripts/reproduce-ran.sh with the name replaced), then runs it end to end on a tiny corpus that
the engine prepares itself (ran-prepare custom), and reads the table."""
import json
import shutil
import subprocess
import sys

import helpers
from systems import TINY_RAN

SYSTEMS = ["baseline", "ran"]


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def toy_checkout(root):
    """A checkout holding the packages and the scripts' shared shell, no paper of its own."""
    for package in ("ran_fairseq", "ran_text", "ran_lab"):
        shutil.copytree(helpers.REPO / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(helpers.REPO / "setup.py", root / "setup.py")
    (root / "scripts").mkdir()
    shutil.copy(helpers.REPO / "scripts" / "lib.sh", root / "scripts" / "lib.sh")
    script = (helpers.REPO / "scripts" / "reproduce-ran.sh").read_text()
    (root / "scripts" / "reproduce-toy.sh").write_text(
        script.replace("reproduce ran", "reproduce toy").replace("ran-reproduce ran",
                                                               "ran-reproduce toy"))
    return root


def toy_paper(root, raw):
    """configs/toy: the five files of docs/adding-a-paper.md."""
    folder = root / "configs" / "toy"
    write_json(folder / "reproduce.json", {
        "title": "Toy et al. (2030), Table 1",
        "cpu_config": "cpu.json",
        "full": {"config": "cpu.json", "help": "the same (the toy has no full size)"},
        "notes": "NOTES.md",
        "columns": [{"title": "params again", "field": "params", "format": ",d"}],
    })
    (folder / "NOTES.md").write_text(
        "# Notes under the toy's table\n\n"
        "- **toy**: a note written over\n  two lines.\n- a second note.\n", encoding="utf-8")
    write_json(folder / "systems.json", {"baseline": "baseline", "systems": [
        {"name": "baseline", "arch": "ran_transformer", "tables": ["1"],
         "flags": [*TINY_RAN, "--encoder-self-attention", "dot",
                   "--decoder-self-attention", "dot"]},
        {"name": "ran", "arch": "ran_transformer", "tables": ["1"], "flags": list(TINY_RAN)},
    ]})
    write_json(folder / "paper.json", {
        "source": "Toy et al. (2030): a paper made up for a test. https://example.org/toy",
        "status": "Table 1 as printed.",
        "columns": [{"key": "bleu", "title": "paper BLEU (Table 1)",
                     "values": {"baseline": 12.5, "ran": 13.5}}]})
    write_json(folder / "cpu.json", {
        "systems": "configs/toy/systems.json", "paper": "configs/toy/paper.json",
        "pairs": ["de-en"], "data": "data-bin/toy.{src}-{tgt}",
        "prepare": {"corpus": "files", **{split: str(raw / split)
                                          for split in ("train", "valid", "test")},
                    "bpe_merges": 0, "out": "data-bin/toy.{src}-{tgt}"},
        "bpe": None, "test_set": "the toy's test set", "gen_subset": "test", "device": "cpu",
        "out": "results/toy", "checkpoints": "checkpoints/toy", "select": "last",
        "train_flags": ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500",
                        "--max-update", "2", "--no-epoch-checkpoints", "--num-workers", "0"],
        "generate_flags": ["--beam", "2", "--batch-size", "16", "--num-workers", "0"]})
    return folder


def test_a_fifth_paper_is_one_folder_and_runs_end_to_end(tmp_path):
    root = toy_checkout(tmp_path / "checkout")
    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=60, n_valid=8, n_test=8)
    toy_paper(root, raw)
    env = dict(helpers.fairseq_env(), PYTHON=sys.executable, PYTHONPATH=str(root))
    # the engine's fairseq commands forked from a server that imported the toy checkout's plugin
    launcher, server = helpers.module_server(dict(env))
    try:
        proc = subprocess.run(["bash", str(root / "scripts" / "reproduce-toy.sh"), "--threads",
                               "1"], cwd=root, capture_output=True, text=True, timeout=600,
                              env=dict(env, **{helpers.MODULE_LAUNCHER: launcher}))
    finally:
        helpers.stop_module_server(server)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # the engine prepared the data itself, in the toy checkout, and wrote where the config says
    assert (root / "data-bin" / "toy.de-en" / "test.de-en.de.bin").is_file()
    out = root / "results" / "toy"
    table = (out / "TABLE.md").read_text(encoding="utf-8")
    assert table.startswith("# Toy et al. (2030), Table 1"), table[:200]
    assert "- **toy**: a note written over two lines.\n- a second note." in table
    rows = helpers.table_rows(table)
    assert list(rows) == SYSTEMS, rows
    assert [rows[s]["paper BLEU (Table 1)"] for s in SYSTEMS] == ["12.5", "13.5"]
    results = {r["system"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    assert set(results) == set(SYSTEMS)
    assert [rows[s]["params again"] for s in SYSTEMS] == [f"{results[s]['params']:,d}"
                                                         for s in SYSTEMS]
    # the toy is the only paper of its checkout: ran-reproduce lists it, and none of the four
    listing = subprocess.run([sys.executable, "-m", "ran_lab.reproduce", "--help"],
                             cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert "toy" in listing.stdout and "recurrent_cross" not in listing.stdout, listing.stdout
