"""The leaderboard's path end to end (scripts/reproduce-leaderboard.sh): a board of two tiny
systems on a tiny word-level de-en corpus, two seeds for one system and one for the other, through the engine,
the page (intervals, ranks, pairwise verdicts in the claims format, JSON, plot), the cost
measurement on the board's checkpoints and the page again with the cost columns; and the
committed board's plan against its config."""
import json
import subprocess
import sys

import pytest

import helpers
from ran_lab.common import LabError
from ran_lab.leaderboard.board import load_board
from ran_lab.reproduce.config import load_config

SCRIPT = helpers.REPO / "scripts" / "reproduce-leaderboard.sh"
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--share-all-embeddings", "--dropout", "0.1"]
RNN = ["--no-dynamic-memory", "--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
       "--decoder-embed-dim", "16", "--decoder-hidden-size", "16",
       "--decoder-out-embed-dim", "16", "--share-all-embeddings", "--dropout", "0.1"]


def leaderboard(*args, timeout=600):
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)],
                          env=dict(helpers.fairseq_env(), PYTHON=sys.executable),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def board(tmp_path_factory, scored_corpus):
    root = tmp_path_factory.mktemp("leaderboard")
    scored_corpus(root)
    systems = {"baseline": "Tiny transformer", "common_flags": [], "systems": [
        {"name": "Tiny transformer", "arch": "transformer", "tables": ["board"], "flags": TINY},
        {"name": "Tiny RNNSearch", "arch": "rnnsearch_dynmem_small", "tables": ["board"],
         "flags": RNN}]}
    (root / "systems.json").write_text(json.dumps(systems))
    config = json.loads((helpers.REPO / "configs/leaderboard/cpu.json").read_text())
    config.pop("notes")
    config.update(systems=str(root / "systems.json"), pairs=["de-en"], bpe=None,
                  out=str(root / "page" / "cpu"), checkpoints=str(root / "ckpt"),
                  set_train_flags={"--max-update": "4", "--validate-interval-updates": "2"},
                  significance={"samples": 100, "level": 0.01})
    (root / "cpu.json").write_text(json.dumps(config))
    plan = json.loads((helpers.REPO / "configs/leaderboard/board.json").read_text())
    plan.update(config=str(root / "cpu.json"), page=str(root / "page"),
                seeds={"de-en": [1, 2]}, seeds_of={"Tiny RNNSearch": {"de-en": [1]}},
                cost={"pair": "de-en", "seed": 1, "train_updates": 20, "threads": [1]})
    (root / "board.json").write_text(json.dumps(plan))
    data = str(root / "bin.{src}-{tgt}")
    made = leaderboard("--board", root / "board.json", "--data", data, "--threads", "1")
    assert made.returncode == 0, made.stderr[-5000:]
    return root, made


def test_every_planned_run_is_made_and_the_page_written(board):
    root, made = board
    page = root / "page"
    for name in ("TABLE.md", "leaderboard.json", "leaderboard.png", "CLAIMS.md", "CLAIMS.json",
                 "pairs.claims.json", "SHORT.md", "cpu/results.json", "cpu/TABLE.md"):
        assert (page / name).is_file(), name
    data = json.loads((page / "leaderboard.json").read_text())
    assert (data["runs_finished"], data["runs_planned"]) == (3, 3)
    rows = {r["system"]: r for r in data["directions"]["de-en"]}
    assert rows["Tiny transformer"]["seeds"] == [1, 2]
    assert rows["Tiny RNNSearch"]["seeds"] == [1]
    for row in rows.values():
        for metric in ("sacrebleu", "chrf"):
            entry = row[metric]
            lo, hi = entry["interval"]
            assert lo <= entry["mean"] <= hi and hi > lo, (row["system"], metric, entry)
            assert entry["test_var"] > 0
        assert row["params"] > 0 and row["valid_loss"] > 0
    # the seeds' variance comes from the system with two seeds and widens the intervals
    assert rows["Tiny transformer"]["sacrebleu"]["seeds"] == 2
    assert sorted(r["rank"] for r in rows.values()) == [1, 2]
    # the page says the cost is pending: nothing measured yet
    table = (page / "TABLE.md").read_text()
    assert "Cost columns: pending" in table
    assert "**Runs: 3 of 3 finished.**" in table
    assert "No seed variance yet" not in table  # one system's two seeds give the board's


def test_pairwise_verdicts_are_in_the_claims_format(board):
    root, _ = board
    page = root / "page"
    verdicts = json.loads((page / "CLAIMS.json").read_text())["verdicts"]
    assert len(verdicts) == 1
    v = verdicts[0]
    assert v["outcome"] in ("held", "inconclusive") and v["pair"] == "de-en"
    [entry] = v["systems"]
    lo, hi = entry["interval"]
    assert lo <= entry["difference"] <= hi
    assert entry["difference"] >= 0  # the higher-ranked system first
    # a pair whose order is not significant is marked beside its rank
    rows = json.loads((page / "leaderboard.json").read_text())["directions"]["de-en"]
    marked = any(r["not_separated"] for r in rows)
    assert marked == (v["outcome"] != "held")
    from ran_lab.claims.spec import load
    claims = load(page / "pairs.claims.json", helpers.REPO)
    assert [c["relation"] for c in claims.claims] == [">"]


def test_page_is_remade_byte_for_byte_and_cost_is_measured(board):
    root, _ = board
    page = root / "page"
    files = ("TABLE.md", "leaderboard.json", "leaderboard.png", "CLAIMS.md", "CLAIMS.json")
    before = {name: (page / name).read_bytes() for name in files}
    again = leaderboard("page", "--board", root / "board.json", "--data",
                        str(root / "bin.{src}-{tgt}"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "fairseq-train" not in again.stderr
    for name in files:
        assert (page / name).read_bytes() == before[name], name
    busy = leaderboard("cost", "--board", root / "board.json", "--max-load", "-1")
    assert busy.returncode != 0 and "load average" in busy.stderr
    assert not (page / "cost.json").exists()
    # the test measures on a machine that may be busy: the path, not the numbers
    cost = leaderboard("cost", "--board", root / "board.json", "--systems", "Tiny transformer",
                       "--max-load", "1e9")
    assert cost.returncode == 0, cost.stderr[-3000:]
    data = json.loads((page / "cost.json").read_text())
    [row] = data["systems"]
    assert row["params"] > 0 and row["train_tokens_per_s"] > 0 and row["train_peak_rss_mib"] > 0
    for kind in ("greedy", "beam5"):
        measured = row["decode"]["1"][kind]
        assert measured["sentences_per_s"] > 0 and measured["peak_rss_mib"] > 0
        assert measured["sentences"] == 24
    table = (page / "TABLE.md").read_text()
    assert "Cost columns: pending" not in table and "beam 5 sent/s (1 thr)" in table
    busy_machine = row["measured"]["load_average_before"] > 1.0
    assert ("**Measured beside other work**" in table) == busy_machine
    peers = table.split("**The authors' code**")[1]  # the peer benchmark's rows
    assert {"thseq", "attn2d"} <= {row["authors' code"] for row in
                                   helpers.table_rows(peers.split("\n\n", 1)[1]).values()}


def test_committed_board_plan_matches_its_config():
    board = load_board()
    config = load_config(helpers.REPO / board.config)
    assert set(board.pairs) == set(config["pairs"])
    for system in board.seeds_of:
        assert system in config["systems"], system
    planned = board.planned(list(config["systems"]))
    assert len(planned) == len(set(planned))
    # every system in both directions
    for pair in board.pairs:
        assert {s for p, s, _ in planned if p == pair} == set(config["systems"])


def test_a_board_with_an_unknown_direction_in_seeds_of_is_refused(tmp_path):
    plan = json.loads((helpers.REPO / "configs/leaderboard/board.json").read_text())
    plan["seeds_of"] = {"Transformer": {"fr-en": [1]}}
    (tmp_path / "board.json").write_text(json.dumps(plan))
    with pytest.raises(LabError, match="seeds_of"):
        load_board(tmp_path / "board.json")
