"""The leaderboard's pieces that need no training: the plan's groups of runs, a system's interval
over seeds and sentences, ranks, where a validation curve stands, and the short form quoted in
README.md and docs/results.md."""
import math

import pytest

import helpers
from ran_lab.claims import bootstrap
from ran_lab.common import LabError
from ran_lab.leaderboard import quality
from ran_lab.leaderboard.board import Board
from ran_lab.leaderboard.page import fill_quotes, short_form


def plan(seeds_of=None):
    return Board(path="board.json", config="cpu.json", page="page",
                 seeds={"de-en": [1, 2, 3], "en-de": [1, 2]}, seeds_of=seeds_of or {},
                 cost={"pair": "de-en", "seed": 1, "train_updates": 60, "threads": [1, "all"]})


def test_groups_start_each_direction_with_the_common_seeds_then_a_systems_fewer():
    board = plan({"C": {"de-en": [1], "en-de": []}})
    groups = [(g.pair, g.seeds, g.systems) for g in board.groups(["A", "B", "C"])]
    assert groups == [("de-en", [1, 2, 3], ["A", "B"]), ("de-en", [1], ["C"]),
                      ("en-de", [1, 2], ["A", "B"])]
    assert ("en-de", "C", 1) not in board.planned(["A", "B", "C"])
    assert len(board.planned(["A", "B", "C"])) == 3 * 2 + 1 + 2 * 2


def test_an_interval_without_seed_variance_is_the_test_sets_alone():
    alone = quality.interval([30.0], test_var=0.25, sigma2=0.0, sigma_df=0, level=0.01)
    z = 2.5758293035489004  # the normal quantile at 99.5 %
    assert alone.low == pytest.approx(30.0 - z * 0.5) and alone.high == pytest.approx(30.0 + z * 0.5)
    assert math.isinf(alone.df)


def test_the_seeds_spread_widens_the_interval_and_more_seeds_narrow_it():
    test_only = quality.interval([30.0, 31.0], 0.25, 0.0, 0, 0.01)
    with_seeds = quality.interval([30.0, 31.0], 0.25, 1.0, 4, 0.01)
    more = quality.interval([30.0, 31.0, 30.5, 30.5], 0.25, 1.0, 4, 0.01)
    assert with_seeds.mean == test_only.mean == 30.5
    assert with_seeds.high - with_seeds.low > test_only.high - test_only.low
    assert more.high - more.low < with_seeds.high - with_seeds.low
    assert with_seeds.seed_var == pytest.approx(0.5)


def test_the_test_set_share_shrinks_with_more_seeds_of_independent_errors():
    import numpy as np
    rng = np.random.default_rng(0)
    refs = ["a b c d"] * 200
    hyps = [["a b c d" if rng.random() < 0.5 else "a x c y" for _ in refs] for _ in range(4)]
    stats = [bootstrap.sentence_stats(h, refs, "sacrebleu") for h in hyps]
    counts = quality.resample_counts(len(refs), samples=300)
    one = quality.test_set_variance(stats[:1], "sacrebleu", refs, counts)
    four = quality.test_set_variance(stats, "sacrebleu", refs, counts)
    assert 0 < four < one


def test_ranks_share_a_rank_on_equal_means():
    assert quality.ranks({"A": 30.0, "B": 31.0, "C": 30.0, "D": 29.0}) == \
        {"B": 1, "A": 2, "C": 2, "D": 4}


def test_a_curve_still_falling_stands_negative():
    result = {"valid_curve": [{"num_updates": 250, "loss": 6.0}, {"num_updates": 500, "loss": 5.0},
                              {"num_updates": 750, "loss": 4.5},
                              {"num_updates": 1000, "loss": 4.0}]}
    stand = quality.curve_stand(result)
    assert stand["loss"] == 4.0 and stand["change_pct"] == pytest.approx(-12.5)
    assert quality.curve_stand({"valid_curve": []}) is None


# en-de: B above A, the order not significant
TABLE = {"de-en": [{"system": "A", "rank": 1, "not_separated": [],
                    "sacrebleu": {"mean": 30.0, "interval": [29.0, 31.0]}},
                   {"system": "B"}],
         "en-de": [{"system": "B", "rank": 1, "not_separated": ["A"],
                    "sacrebleu": {"mean": 25.0, "interval": [24.5, 25.5]}},
                   {"system": "A", "rank": 2, "not_separated": ["B"],
                    "sacrebleu": {"mean": 24.0, "interval": [23.0, 25.0]}}]}


def test_the_short_form_fills_the_quoting_files_between_their_markers(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("top\n<!-- leaderboard -->\nold\n<!-- /leaderboard -->\nend\n")
    (tmp_path / "docs" / "results.md").write_text("no markers here\n")
    changed = fill_quotes(TABLE, tmp_path / "results" / "leaderboard", tmp_path)
    assert changed == ["README.md"]
    text = (tmp_path / "README.md").read_text()
    assert "old" not in text and text.startswith("top\n<!-- leaderboard -->\n| system ")
    assert "](results/leaderboard/TABLE.md)" in text and text.endswith("<!-- /leaderboard -->\nend\n")
    rows = helpers.table_rows(text.split("<!-- leaderboard -->\n")[1])
    assert rows["A"] == {"system": "A", "de-en sacreBLEU": "30.00 [29.00, 31.00] (#1)",
                         "en-de sacreBLEU": "24.00 [23.00, 25.00] (#2 ≈ 1)"}
    assert rows["B"] == {"system": "B", "de-en sacreBLEU": "—",
                         "en-de sacreBLEU": "25.00 [24.50, 25.50] (#1 ≈ 2)"}
    (tmp_path / "docs" / "results.md").write_text("<!-- leaderboard -->\n<!-- /leaderboard -->\n")
    assert fill_quotes(TABLE, tmp_path / "results" / "leaderboard", tmp_path) == \
        ["docs/results.md"]  # README.md already holds it
    assert "](../results/leaderboard/TABLE.md)" in (tmp_path / "docs" / "results.md").read_text()
    assert "](TABLE.md)" in short_form(TABLE) and "runs made" not in short_form(TABLE, runs=(5, 5))
    assert short_form(TABLE, runs=(1, 5)).endswith("; 1 of 5 runs made.\n")  # an incomplete board


def fake_cost(monkeypatch, tmp_path, systems):
    """A board whose runs exist for ``systems`` (result.json only) and cost functions that time
    nothing: the measurement's bookkeeping without a training."""
    import json

    from ran_lab.leaderboard import cost

    config = {"systems": ["A", "B", "C"], "out": str(tmp_path / "runs")}
    monkeypatch.setattr(cost, "load_config", lambda path: config)
    for name in systems:
        run = tmp_path / "runs" / "de-en" / name / "seed1"
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps({"params": len(name)}))
    monkeypatch.setattr(cost, "train_cost", lambda result, updates, threads, work: {
        "train_tokens_per_s": 100.0 * result["params"], "train_peak_rss_mib": 1.0})
    monkeypatch.setattr(cost, "decode_cost", lambda result, beam, threads, work: {
        "sentences": 3, "sentences_per_s": float(beam), "peak_rss_mib": 2.0})
    monkeypatch.setattr(cost, "peer_rows", lambda: [])
    board = Board(path="board.json", config="cpu.json", page=str(tmp_path / "page"),
                  seeds={"de-en": [1]}, seeds_of={},
                  cost={"pair": "de-en", "seed": 1, "train_updates": 20, "threads": [1]})
    return cost, board


def test_cost_keeps_the_rows_it_does_not_measure_again(monkeypatch, tmp_path):
    import json

    cost, board = fake_cost(monkeypatch, tmp_path, ["A", "C"])
    path = cost.measure(board, max_load=1e9)  # B has no run yet: skipped
    first = json.loads(path.read_text())
    assert [r["system"] for r in first["systems"]] == ["A", "C"]
    (tmp_path / "runs" / "de-en" / "B" / "seed1").mkdir(parents=True)
    (tmp_path / "runs" / "de-en" / "B" / "seed1" / "result.json").write_text('{"params": 7}')
    monkeypatch.setattr(cost, "train_cost", lambda result, updates, threads, work: {
        "train_tokens_per_s": 1000.0 * result["params"], "train_peak_rss_mib": 1.0})
    cost.measure(board, ["B"], max_load=1e9)  # A and C are not timed again
    second = json.loads(path.read_text())
    assert [r["system"] for r in second["systems"]] == ["A", "B", "C"]  # the config's order
    assert second["systems"][0] == first["systems"][0] and second["systems"][2] == first["systems"][1]
    assert second["systems"][1]["train_tokens_per_s"] == 7000.0
    assert set(second["systems"][1]["measured"]) == {"date", "load_average_before",
                                                     "load_average_after"}
    # another recipe: nothing is mixed into the table
    board.cost["train_updates"] = 40
    with pytest.raises(LabError, match="leave out --systems"):
        cost.measure(board, ["B"], max_load=1e9)
    assert json.loads(path.read_text()) == second


def test_the_cost_table_marks_the_systems_measured_beside_other_work():
    from ran_lab.leaderboard.page import cost_table

    def row(name, load):
        return {"system": name, "params": 1000, "train_tokens_per_s": 10.0,
                "train_peak_rss_mib": 5.0, "decode": {"1": {
                    "greedy": {"sentences_per_s": 1.0, "peak_rss_mib": 3.0},
                    "beam5": {"sentences_per_s": 0.5, "peak_rss_mib": 4.0}}},
                "measured": {"date": "2026-01-02", "load_average_before": load,
                             "load_average_after": 0.1}}

    cost = {"pair": "de-en", "seed": 1, "train_updates": 20, "warmup_updates": 10,
            "threads": ["1"], "sentences": 3, "machine": {"cpu": "X", "cores": 2},
            "systems": [row("A", 0.02), row("B", 0.3)]}
    text = "\n".join(cost_table(plan(), cost, ["A", "B"]))
    assert "load average 0.02–0.3 before and 0.1 after" in text and "Measured beside" not in text
    cost["systems"][1]["measured"]["load_average_before"] = 3.5
    text = "\n".join(cost_table(plan(), cost, ["A", "B"]))
    assert text.startswith("**Measured beside other work** (B: load average above")
