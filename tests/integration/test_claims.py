"""Claims as data (ran_lab.claims): the verdict rule on synthetic inputs, the claims
files, the analysis measures, and the committed CLAIMS.md files against what the engine computes
from the committed results."""
import json
import math
import re

import pytest

import corpora
import helpers
from ran_lab import claims as lab
from ran_lab.claims import analysis, report, rule, seeds, spec
from ran_lab.claims.results import Folder
from ran_lab.common import LabError

REPO = helpers.REPO
PAPERS = ["ran", "recurrent_cross", "dynmem", "pervasive"]
S = rule.Seed


# ---------------------------------------------------------------------------------------------
# the rule on synthetic inputs
# ---------------------------------------------------------------------------------------------

def one(diff, p, base=40.0):
    return [S(1, base + diff, base, p)]


def both(lo, hi, n=1, p=None):
    """A comparison's combined interval (seeds and test set) and a p that agrees with it."""
    inside = lo <= 0 <= hi
    return seeds.Combined((lo + hi) / 2, (lo, hi), p if p is not None else
                          (0.5 if inside else 0.001), (hi - lo) / 5, 0.0, 0.0, math.inf, n, None)


@pytest.mark.parametrize("relation, interval, verdict", [
    (">", (0.2, 1.8), rule.ONE_SEED), (">", (-0.2, 2.2), rule.INCONCLUSIVE),
    (">", (-2.2, 0.2), rule.INCONCLUSIVE), (">", (-1.8, -0.2), rule.NOT_HELD_WORSE),
    ("<", (-1.8, -0.2), rule.ONE_SEED), ("<", (-2.2, 0.2), rule.INCONCLUSIVE),
    ("<", (0.2, 1.8), rule.NOT_HELD_BETTER),
])
def test_better_and_worse_are_decided_by_the_interval(relation, interval, verdict):
    diff = sum(interval) / 2
    # the seed's own test (p = 0.001) plays no part: the combined interval decides
    result = rule.compare(relation, one(diff, 0.001), combined=both(*interval))
    assert result.verdict == verdict
    assert result.difference == pytest.approx(diff)
    assert result.n == 1
    assert rule.outcome(result.verdict) in (rule.HELD, rule.INCONCLUSIVE, rule.NOT_HELD)


def test_one_seed_is_at_most_held_one_seed_and_two_seeds_are_held():
    seeds_ = [S(1, 41, 40, 0.001), S(2, 41.5, 40, 0.002)]
    assert rule.compare(">", seeds_, combined=both(0.2, 2.3, n=2)).verdict == rule.HELD
    assert rule.compare(">", seeds_[:1], combined=both(0.2, 1.8)).verdict == rule.ONE_SEED
    assert rule.outcome(rule.ONE_SEED) == rule.HELD


@pytest.mark.parametrize("relation, interval, verdict", [
    # ≈: inside ±δ held, wholly outside not held, else inconclusive (δ = 1)
    ("≈", (-0.5, 0.8), rule.HELD), ("≈", (1.2, 2.0), rule.NOT_HELD_BETTER),
    ("≈", (-2.5, -1.1), rule.NOT_HELD_WORSE), ("≈", (-0.5, 1.5), rule.INCONCLUSIVE),
    ("≈", (-1.5, 1.5), rule.INCONCLUSIVE),
    # ≥: lower end above −δ held, upper end below −δ not held
    ("≥", (-0.9, 3.0), rule.HELD), ("≥", (-3.0, -1.2), rule.NOT_HELD_WORSE),
    ("≥", (-1.5, 0.5), rule.INCONCLUSIVE),
    # ≤ mirrors it
    ("≤", (-3.0, 0.9), rule.HELD), ("≤", (1.2, 3.0), rule.NOT_HELD_BETTER),
    ("≤", (-0.5, 1.5), rule.INCONCLUSIVE),
])
def test_parity_is_judged_on_the_interval_and_the_margin(relation, interval, verdict):
    # the p-value plays no part: "not significant" is not "on par"
    two = [S(1, 40 + sum(interval) / 2, 40, 0.5), S(2, 40 + sum(interval) / 2, 40, 0.5)]
    result = rule.compare(relation, two, margin=1.0, combined=both(*interval, n=2))
    assert result.verdict == verdict
    # for TER the interval is turned round: a lower TER is better
    ter = [S(1, 40 - sum(interval) / 2, 40, 0.5), S(2, 40 - sum(interval) / 2, 40, 0.5)]
    assert rule.compare(relation, ter, higher_is_better=False, margin=1.0,
                        combined=both(-interval[1], -interval[0], n=2)).verdict == verdict


def test_parity_without_a_margin_or_an_interval_is_refused():
    with pytest.raises(ValueError, match="margin"):
        rule.compare("≈", one(0.1, 0.5), combined=both(-0.5, 0.7))
    with pytest.raises(ValueError, match="combined"):
        rule.compare(">", one(0.1, 0.5))


def test_ter_is_better_when_lower():
    result = rule.compare("<", one(+0.9, 0.001), higher_is_better=False,
                          combined=both(0.2, 1.6))
    assert result.verdict == rule.ONE_SEED and result.side == "worse"
    assert rule.compare(">", one(-0.9, 0.001), higher_is_better=False,
                        combined=both(-1.6, -0.2)).verdict == rule.ONE_SEED


def test_k_of_n_counts_the_seeds_own_tests_and_the_difference_is_of_the_means():
    seeds_ = [S(1, 40.93, 40.24, 0.041), S(2, 41.30, 40.18, 0.003)]
    result = rule.compare("≥", seeds_, margin=1.0, combined=both(0.2, 1.6, n=2))
    assert result.verdict == rule.HELD
    assert (result.k, result.n) == (1, 2)
    assert result.difference == pytest.approx((40.93 + 41.30) / 2 - (40.24 + 40.18) / 2)
    # a seed significant on the other side does not count
    mixed = [S(1, 42, 40, 0.001), S(2, 39.5, 40, 0.001)]
    assert rule.compare(">", mixed, combined=both(-3, 4, n=2)).k == 1


@pytest.mark.parametrize("size, interval, found", [
    ({"value": 0.5}, (8.0, 10.0), "larger"),
    ({"value": 2.13}, (1.0, 3.0), rule.CONSISTENT),
    ({"value": -14.0, "test": "at_least"}, (-8.5, -5.5), "smaller"),
    ({"value": -14.0, "test": "at_least"}, (-16.0, -15.0), rule.CONSISTENT),
    ({"value": [0.5, 0.7]}, (2.0, 3.8), "larger"),
    ({"value": [0.5, 0.7]}, (0.6, 3.8), rule.CONSISTENT),
])
def test_a_stated_size_is_a_second_verdict(size, interval, found):
    diff = sum(interval) / 2
    two = [S(1, 40 + diff, 40, 0.001), S(2, 40 + diff, 40, 0.001)]
    relation = ">" if diff > 0 else "<"
    result = rule.compare(relation, two, combined=both(*interval, n=2), size=size)
    # the direction is the verdict; the size is shown beside it, never a failure
    assert result.verdict == rule.HELD and result.direction == rule.HELD
    assert result.size["result"] == found
    # where the paper's setting is this one's, the size decides
    decided = rule.compare(relation, two, combined=both(*interval, n=2),
                           size={**size, "comparable": True})
    assert rule.outcome(decided.verdict) == (rule.HELD if found == rule.CONSISTENT
                                             else rule.NOT_HELD)
    # a direction that does not hold has no size to compare
    weak = rule.compare(">", two, combined=both(-1.0, abs(diff) + 1, n=2), size=size)
    assert weak.verdict == rule.INCONCLUSIVE and weak.size["result"] == rule.NOT_COMPARABLE


@pytest.mark.parametrize("verdict, outcome", [
    ("held", rule.HELD), ("inconclusive", rule.INCONCLUSIVE), ("not held (worse)", rule.NOT_HELD),
    (rule.ORDER_NOISE, rule.INCONCLUSIVE), (rule.REVERSED, rule.NOT_HELD),
    ("not run", rule.NOT_RUN), ("not held (held for a; not held for b)", rule.NOT_HELD),
    ("inconclusive (held for a; inconclusive for b)", rule.INCONCLUSIVE),
    ("direction held; size held", rule.HELD),
    ("direction held; size not held (larger)", rule.NOT_HELD),
    (rule.ONE_SEED, rule.HELD), ("descriptive (limit met)", rule.DESCRIPTIVE),
    ("inconclusive (order observed; 2 of 3 pairs significant after Holm)", rule.INCONCLUSIVE),
])
def test_every_verdict_has_one_outcome(verdict, outcome):
    assert rule.outcome(verdict) == outcome


def test_not_run_without_seeds_and_where_a_part_did_not_run():
    assert rule.compare(">", []).verdict == rule.NOT_RUN
    with pytest.raises(ValueError):
        rule.compare("order", one(1, 0.001))
    # a claim is not held on the strength of the part that ran
    assert rule.overall([rule.HELD, rule.NOT_RUN]) == rule.NOT_RUN
    assert rule.overall([rule.INCONCLUSIVE, rule.NOT_RUN]) == rule.INCONCLUSIVE


def pairs_for(groups, scores, p, n=2):
    """Every cross-group pair's seeds and combined test, with p-value ``p(a, b)``."""
    out, tests = {}, {}
    for i, upper in enumerate(groups):
        for lower in (s for g in groups[i + 1:] for s in g):
            for a in upper:
                out[(a, lower)] = [S(k, scores[a], scores[lower], 0.5) for k in range(1, n + 1)]
                d = scores[a] - scores[lower]
                tests[(a, lower)] = seeds.Combined(d, (d - 1, d + 1), p(a, lower), 0.4, 0, 0,
                                                   math.inf, n, None)
    return out, tests


def order_of(groups, scores, p, n=2):
    pair_seeds, tests = pairs_for(groups, scores, p, n)
    return rule.order(groups, pair_seeds, combined=tests)


def test_order_needs_every_pair_significant_after_holm():
    groups = [["a", "b"], ["c"], ["d"]]  # four pairs ranked apart
    good = {"a": 40, "b": 39.5, "c": 38, "d": 36}
    assert order_of(groups, good, lambda a, b: 0.001).verdict == rule.HELD
    assert order_of(groups, good, lambda a, b: 0.001, n=1).verdict == rule.ONE_SEED
    # in order but not significant: inconclusive, however the order looks
    result = order_of(groups, good, lambda a, b: 0.3)
    assert rule.outcome(result.verdict) == rule.INCONCLUSIVE
    # Holm over the five pairs: 0.003 each is significant alone, not after the correction
    assert rule.outcome(order_of(groups, good, lambda a, b: 0.003).verdict) == rule.INCONCLUSIVE
    result = order_of(groups, good, lambda a, b: 0.001)
    assert [round(x, 4) for *_, x in result.pairs] == [0.005] * 5
    # b and a swapped inside their group: a group is a tie
    swapped = {**good, "a": 39.4}
    assert order_of(groups, swapped, lambda a, b: 0.001).verdict == rule.HELD
    # c above b, not significant: not reproduced within noise; significant: reversed
    flip = {**good, "c": 39.8}
    result = order_of(groups, flip, lambda a, b: 0.3)
    assert result.verdict == rule.ORDER_NOISE
    assert [(hi, lo) for hi, lo, _ in result.reversed_pairs] == [("b", "c")]
    assert result.observed[0] == ("a", 40)
    assert order_of(groups, flip, lambda a, b: 0.001).verdict == rule.REVERSED
    pair_seeds, tests = pairs_for(groups, good, lambda a, b: 0.3)
    pair_seeds[("a", "d")] = []
    assert rule.order(groups, pair_seeds, combined=tests).verdict == rule.NOT_RUN


def test_holm_adjusts_step_down():
    assert seeds.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert seeds.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert seeds.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_threshold_tests():
    held = rule.Test("x", 0.2, "<=", 0.5)
    failed = rule.Test("y", 0.7, "<=", 0.5)
    unrun = rule.Test("z", None, ">=", 1.0)
    assert rule.threshold([held]) == rule.HELD
    assert rule.threshold([failed]) == rule.NOT_HELD
    assert rule.threshold([held, failed]) == "not held (held for x; not held for y)"
    # a claim about something not run is not run, not held on the part that ran
    assert rule.threshold([held, unrun]) == "not run (held for x; not run for z)"
    assert rule.outcome(rule.threshold([held, unrun])) == rule.NOT_RUN
    assert rule.threshold([unrun]) == rule.NOT_RUN
    with pytest.raises(ValueError):
        rule.Test("w", 1, "=>", 1)
    # a measure without an interval is described, not judged
    assert rule.descriptive(rule.HELD) == "descriptive (limit met)"
    assert rule.descriptive("not held (held for x; not held for y)") == \
        "descriptive (met for x; not met for y)"
    assert rule.outcome(rule.descriptive(rule.NOT_HELD)) == rule.DESCRIPTIVE


# ---------------------------------------------------------------------------------------------
# the claims files
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("paper", PAPERS)
def test_the_claims_files_load_and_match_the_papers_numbers(paper):
    loaded = spec.load(REPO / "configs" / paper / "claims.json", REPO)
    assert loaded.claims
    systems = json.loads((REPO / "configs" / paper / "systems.json").read_text())["systems"]
    names = {s["name"] for s in systems}
    for claim in loaded.claims:
        for name in spec.systems_of(claim):
            assert name in names, f"{claim['id']}: {name!r} is not a system of {paper}"


def write_claims_file(tmp_path, claims, paper=None):
    data = {"paper": "P", "claims": claims,
            "defaults": {"against": "base", "metric": "sacrebleu", "subset": "test",
                         "pairs": ["de-en"], "margin": {"value": 1.0, "why": "a test's"}}}
    if paper is not None:
        (tmp_path / "paper.json").write_text(json.dumps(paper))
        data["paper_file"] = "paper.json"
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(data, ensure_ascii=False))
    return path


def claim(**kw):
    return {"id": "c1", "where": "Table 1", "claim": "a beats base", "relation": ">",
            "system": "a", **kw}


@pytest.mark.parametrize("bad, message", [
    ({"relation": "=="}, '"claims\[0\].relation": expected one of ">", "<", "≈"'),
    ({"metric": "chrf"}, '"claims\[0\].metric": expected one of "sacrebleu", "ter"'),
    ({"surprise": 1}, '"claims\[0\].surprise": expected no such key'),
    ({"relation": "order", "groups": [["a"]]}, "two or more"),
    ({"relation": "threshold", "measure": {"kind": "bench", "metric": "x", "files": []}},
     '"measure.metric": expected one of "decode_tokens_per_s", "train_time"'),
    ({"relation": "threshold", "measure": {"kind": "params"},
      "tests": [{"label": "a", "system": "a", "op": "<", "limit": 1}]}, "compares 'system'"),

    ({"relation": "threshold", "measure": {"kind": "entropy", "file": "e.csv", "side": "top"},
      "tests": [{"label": "a", "system": "a", "op": "<", "limit": 1}]}, '"measure.side": expected one of "enc", "dec"'),
    ({"relation": "threshold", "measure": {"kind": "entropy", "file": "e.csv", "side": "enc",
                                           "stat": "median"},
      "tests": [{"label": "a", "system": "a", "op": "<", "limit": 1}]}, '"measure.stat": expected one of "mean", "last_minus_first"'),
    ({"relation": "threshold", "measure": {"kind": "js", "file": "j.csv", "side": "dec"},
      "tests": [{"label": "a", "system": "a", "op": "<", "limit": 1, "stat": "mean"}]},
     "read only by entropy measures"),
    ({"relation": "threshold", "measure": {"kind": "params"},
      "tests": [{"label": "a", "system": "a", "of": "b", "op": "<", "limit": 1, "side": "dec"}]},
     "read only by entropy and js measures"),
])
def test_a_faulty_claim_is_refused(tmp_path, bad, message):
    path = write_claims_file(tmp_path, [claim(**bad)])
    with pytest.raises(LabError, match=message):
        spec.load(path, tmp_path)


def test_the_claims_schema_offers_what_the_rule_judges():
    from ran_lab.common import schema

    claim = schema.CLAIM.optional
    assert schema.CLAIM.required["relation"].choices == rule.RELATIONS
    assert set(claim["tests"].item.required["op"].choices) == set(rule.OPS)
    assert claim["size"].optional["test"].choices == rule.SIZE_TESTS
    assert set(schema.MEASURES) == set(analysis.READERS) | {"none"}


def test_duplicate_ids_and_wrong_paper_numbers_are_refused(tmp_path):
    with pytest.raises(LabError, match="used twice"):
        spec.load(write_claims_file(tmp_path, [claim(), claim()]), tmp_path)
    paper = {"columns": [{"key": "t1", "values": {"a": 30.1, "base": 30.0}}]}
    wrong = claim(paper=[{"label": "T1", "column": "t1", "values": {"a": 31.0, "base": 30.0}}])
    with pytest.raises(LabError, match="has 30.1 for 'a'"):
        spec.load(write_claims_file(tmp_path, [wrong], paper), tmp_path)
    right = claim(paper=[{"label": "T1", "column": "t1", "values": {"a": 30.1, "base": 30.0}}])
    assert spec.load(write_claims_file(tmp_path, [right], paper), tmp_path).claims


# ---------------------------------------------------------------------------------------------
# the engine on a synthetic results folder
# ---------------------------------------------------------------------------------------------

REFS = ["a small dog runs on the grass .", "two men play football .", "a woman reads a book ."]
HYPS = {"base": ["a dog runs on grass .", "two men are playing soccer .", "a woman reads ."],
        "a": ["a small dog runs on the grass .", "two men play football .", "a woman reads ."],
        "b": ["a dog runs .", "men play .", "a woman reads a book ."]}


def results_folder(tmp_path, p_values=None):
    """A results folder with three systems of one seed on de-en, the baseline's p-values
    stored, and their hypotheses."""
    folder = tmp_path / "res"
    ref = tmp_path / "test.raw.en"
    ref.write_text("\n".join(REFS) + "\n")
    results = []
    for i, (name, hyps) in enumerate(HYPS.items()):
        seed_dir = folder / "de-en" / name / "seed1"
        seed_dir.mkdir(parents=True)
        (seed_dir / "hyp.detok.txt").write_text("\n".join(hyps) + "\n")
        results.append({"pair": "de-en", "system": name, "seed": 1, "params": 100 + i,
                        "subsets": {"test": {
                            "sacrebleu": {"base": 30.0, "a": 33.0, "b": 29.5}[name],
                            "ter": {"base": 50.0, "a": 48.0, "b": 51.0}[name],
                            "hyp_file": "hyp.detok.txt", "raw_ref": str(ref),
                            "p_value": (p_values or {}).get(name),
                            "ter_p_value": None}}})
    report_ = {"settings": {"baseline": "base", "significance": {"samples": 100, "level": 0.01},
                            "config": "c.json", "max_update": "10", "seeds": [1],
                            "paper_file": "paper.json"},
               "results": results}
    (folder / "results.json").write_text(json.dumps(report_))
    return folder


def test_engine_tests_every_pair_on_the_hypotheses_and_keeps_the_tests(tmp_path):
    folder = results_folder(tmp_path, {"a": 0.001, "b": 0.4})
    path = write_claims_file(tmp_path, [
        claim(),
        {"id": "c2", "where": "T1", "claim": "b is level with base", "relation": "≈",
         "system": "b"},
        {"id": "c3", "where": "T1", "claim": "a beats b", "relation": ">", "system": "a",
         "against": "b"},
        {"id": "c4", "where": "T1", "claim": "x beats base", "relation": ">", "system": "x"},
        {"id": "c5", "where": "T1", "claim": "order", "relation": "order",
         "groups": [["a"], ["base"], ["b"]]},
    ])
    claims_, results, verdicts = lab.compute(folder, path, repo=tmp_path)
    by = {v.key: v for v in verdicts}
    assert by["c1@de-en"].comparisons[0][1].difference == pytest.approx(3.0)
    assert by["c4@de-en"].verdict == rule.NOT_RUN
    # a against b is tested on the hypotheses: p and interval from the same resamples agree
    seed = by["c3@de-en"].comparisons[0][1].seeds[0]
    lo, hi = seed.interval
    assert lo <= hi and (seed.p < 0.01) == (lo > 0 or hi < 0)
    # ≈ takes the margin of the defaults; one seed and no seed variance to borrow: not judged
    parity = by["c2@de-en"].comparisons[0][1]
    assert parity.margin == 1.0 and parity.pooled is not None
    assert parity.combined.sigma is None and parity.verdict == rule.NOT_JUDGED_TEXT
    assert by["c5@de-en"].outcome in rule.OUTCOMES
    # written, the tests are kept, and a second run needs no references
    lab.write_claims(path, folder, repo=tmp_path)
    data = json.loads((folder / "CLAIMS.json").read_text())
    assert {tuple(sorted((e["system"], e["against"]))) for e in data["pvalues"]} == {
        ("a", "b"), ("a", "base"), ("b", "base")}
    assert {tuple(sorted((e["system"], e["against"]))) for e in data["pooled"]} == {
        ("a", "b"), ("a", "base"), ("b", "base")}
    (tmp_path / "test.raw.en").unlink()
    _, _, again = lab.compute(folder, path, repo=tmp_path, compute_missing=False)
    for key in by:
        assert report.quote({v.key: v for v in again}[key]) == report.quote(by[key])
    # a changed hypothesis file is tested again, which needs the references
    (folder / "de-en" / "b" / "seed1" / "hyp.detok.txt").write_text("x\ny\nz\n")
    with pytest.raises(LabError):
        lab.compute(folder, path, repo=tmp_path, compute_missing=False)


def test_quotes_name_the_verdict_the_difference_each_seed_and_the_intervals():
    seeds_ = [S(1, 40.93, 40.24, 0.041, (-0.38, 1.76)),
              S(2, 41.30, 40.18, 0.00999, (0.02, 2.24), True, 12_000)]
    test = seeds.combined(0.905, 0.04, 0.09, 6, 2, 0.01)
    v = lab.Verdict({"id": "x", "relation": "≥", "metric": "sacrebleu", "against": "T"}, "de-en",
                    rule.HELD, comparisons=[("R", rule.compare("≥", seeds_, margin=1.0,
                                                               combined=test))])
    lo, hi = test.interval
    assert report.quote(v) == (
        "held, better in 1 of 2 seeds: +0.90 (seed 1: +0.69 [−0.38, +1.76], p = 0.041; "
        "seed 2: +1.12 [+0.02, +2.24], p = 0.00999 (12,000 resamples); "
        f"interval {report.interval_text(test.interval)}, {report.pval(test.p)} (seeds and test "
        f"set, seed sd 0.30, 6 df); detects ±{test.mde:.2f}; margin ±1)")
    assert lo < 0 < hi and test.p > 0.01
    single = lab.Verdict({"id": "y", "relation": "<", "metric": "ter", "against": "T"}, "de-en",
                         rule.NOT_JUDGED_TEXT,
                         comparisons=[("R", rule.compare(
                             "<", [S(1, 42.16, 41.6, 0.0809, (-0.4, 1.5))],
                             higher_is_better=False,
                             combined=seeds.combined(0.56, 0.135, 0.0, 0, 1, 0.01)))])
    assert report.quote(single) == (
        "not judged (one seed, no seed variance): +0.56 TER (test set only [−0.39, +1.51]: no "
        "seed variance, in this folder or named by its claims file)")


@pytest.mark.parametrize("p, text", [
    (0.139, "p = 0.14"), (0.000999, "p < 0.001"), (0.041, "p = 0.041"),
    (0.00999, "p = 0.00999"), (0.0099999, "p = 0.0099999"), (0.0100, "p = 0.010"),
    (0.01049, "p = 0.010"), (0.0095, "p = 0.009"), (None, "p not tested"),
])
def test_a_significant_p_never_prints_as_the_level(p, text):
    assert report.pval(p) == text
    if p is not None and 0.001 <= p < 0.1:
        assert (float(text.split("= ")[1]) < 0.01) == (p < 0.01)


def test_threshold_test_text_prints_value_and_limit_apart():
    # a value and a limit that differ never print alike (the en→de JS test: 0.0133 < 0.0141)
    assert report.threshold_text("dec below enc", 0.013307, "<", 0.0141, "nats") == \
        "dec below enc +0.013 nats (limit < +0.014 nats)"
    assert report.threshold_text("a", 0.4, "<=", 0.2, "nats") == "a +0.40 nats (limit ≤ +0.20 nats)"
    assert report.threshold_text("a", 0.2, "<=", 0.2, "nats") == "a +0.20 nats (limit ≤ +0.20 nats)"
    assert report.threshold_text("s", 1.1241, ">=", 1.1239, "×") == "s 1.1241× (limit ≥ 1.1239×)"
    assert report.threshold_text("p", 0.3031, "<=", 0.3034, "%") == "p 30.31 % (limit ≤ 30.34 %)"
    assert report.threshold_text("n", None, "<", 1.0, "×") == "n not run"


# ---------------------------------------------------------------------------------------------
# analysis measures
# ---------------------------------------------------------------------------------------------

def threshold_claim(measure, tests):
    return {"id": "t", "where": "Fig. 1", "claim": "c", "relation": "threshold",
            "measure": measure, "tests": tests}


def test_histogram_share_pools_the_layers(tmp_path):
    rows = ["system,side,layer,bin,lo,hi,count,fraction"]
    for system, counts in {"T": [(30, 70), (40, 60)], "S": [(0, 100), (0, 100)],
                           "R": [(25, 75), (35, 65)]}.items():
        for layer, (low, high) in enumerate(counts, 1):
            rows += [f"{system},enc,{layer},0,0.0,0.02,{low},0",
                     f"{system},enc,{layer},1,0.02,0.04,{high},0",
                     f"{system},dec,{layer},0,0.0,0.02,1,0"]
    (tmp_path / "h.csv").write_text("\n".join(rows) + "\n")
    measured = analysis.measure(threshold_claim(
        {"kind": "histogram_share", "file": "h.csv", "side": "enc", "below": 0.02},
        [{"label": "S", "system": "S", "op": "<=", "times": 0.5, "of": "T"},
         {"label": "R", "system": "R", "op": "<=", "times": 0.5, "of": "T"}]), tmp_path, tmp_path)
    assert [t.value for t in measured.tests] == [0.0, pytest.approx(0.3)]
    assert measured.tests[0].limit == pytest.approx(0.175)
    assert measured.verdict == "not held (held for S; not held for R)"


def test_length_bins_take_the_smallest_difference(tmp_path):
    (tmp_path / "fig5.csv").write_text(
        "system,bin,lo,hi,sentences,seeds,bleu,bleu_std\n"
        "A,0-9,0,10,400,1,40,0\nA,10-14,10,15,300,1,35,0\nA,20+,20,,30,1,10,0\n"
        "B,0-9,0,10,400,1,38,0\nB,10-14,10,15,300,1,36,0\nB,20+,20,,30,1,30,0\n")
    tests = [{"label": "B", "system": "A", "of": "B", "op": ">=", "limit": 0.0}]
    m = analysis.measure(threshold_claim({"kind": "length_bins", "file": "fig5.csv",
                                          "skip_last": True}, tests), tmp_path, tmp_path)
    assert m.tests[0].value == pytest.approx(-1.0) and m.verdict == rule.NOT_HELD
    m = analysis.measure(threshold_claim({"kind": "length_bins", "file": "fig5.csv",
                                          "min_sentences": 350}, tests), tmp_path, tmp_path)
    assert m.tests[0].value == pytest.approx(2.0) and m.verdict == rule.HELD
    missing = analysis.measure(threshold_claim({"kind": "length_bins", "file": "none.csv"},
                                               tests), tmp_path, tmp_path)
    assert missing.verdict == rule.NOT_RUN


def bench_file(path, base_tps, sys_tps, device="Intel(R) Xeon(R) Processor"):
    systems = [{"name": n, "metrics": {"train_tokens_per_s": t, "decode_tokens_per_s": t},
                "decode": {"generated_tokens": 100, "pass_seconds": [100 / t, 100 / t]}}
               for n, t in (("base", base_tps), ("sys", sys_tps))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": {"device": "cpu", "device_name": device, "threads": 2},
                                "settings": {"baseline": "base"}, "systems": systems}))


def test_bench_ratios_name_the_device(tmp_path):
    for i, (b, s) in enumerate([(1000, 200), (1000, 250), (900, 100)]):
        bench_file(tmp_path / f"run{i}" / "bench.json", b, s)
    m = analysis.measure(threshold_claim(
        {"kind": "bench", "metric": "train_time", "files": ["run*/bench.json"]},
        [{"label": "sys", "system": "sys", "op": ">=", "limit": 5.0}]), tmp_path, tmp_path)
    assert m.tests[0].value == pytest.approx(5.0)  # median of 5, 4, 9
    assert m.verdict == rule.HELD
    assert m.devices == ["Intel(R) Xeon(R) Processor (CPU, 2 threads)"]
    m = analysis.measure(threshold_claim(
        {"kind": "bench", "metric": "decode_tokens_per_s", "files": ["run0/bench.json"],
         "passes": "mean"},
        [{"label": "sys", "system": "sys", "op": ">=", "limit": 1.1}]), tmp_path, tmp_path)
    assert m.tests[0].value == pytest.approx(0.2) and m.verdict == rule.NOT_HELD


def test_entropy_means_layers_and_compares_last_with_first(tmp_path):
    rows = ["system,side,layer,entropy,queries"]
    for system, enc in {"T": [1.0, 2.0, 1.5], "S": [3.0, 3.1, 3.2], "R": [3.0, 2.4, 1.8]}.items():
        rows += [f"{system},enc,{i},{e},10" for i, e in enumerate(enc, 1)]
        rows += [f"{system},dec,{i},0.5,10" for i in (1, 2, 3)]
    (tmp_path / "entropy.csv").write_text("\n".join(rows) + "\n")
    tests = [{"label": "S above R", "system": "S", "op": ">", "times": 1.0, "of": "R"},
             {"label": "R above T", "system": "R", "op": ">", "times": 1.0, "of": "T"},
             {"label": "R falls", "system": "R", "stat": "last_minus_first", "op": "<",
              "limit": 0.0},
             {"label": "T falls", "system": "T", "stat": "last_minus_first", "op": "<",
              "limit": 0.0},
             {"label": "dec", "system": "R", "side": "dec", "op": "<", "limit": 0.6}]
    m = analysis.measure(threshold_claim({"kind": "entropy", "file": "entropy.csv",
                                          "side": "enc"}, tests), tmp_path, tmp_path)
    values = [t.value for t in m.tests]
    assert values == [pytest.approx(3.1), pytest.approx(2.4), pytest.approx(-1.2),
                      pytest.approx(0.5), pytest.approx(0.5)]
    assert m.tests[1].limit == pytest.approx(1.5)
    assert m.verdict == ("not held (held for S above R, R above T, R falls, dec; "
                         "not held for T falls)")
    missing = analysis.measure(threshold_claim({"kind": "entropy", "file": "no.csv",
                                                "side": "enc"}, tests), tmp_path, tmp_path)
    assert missing.verdict == rule.NOT_RUN and missing.details["why"] == "no committed `no.csv`"


def test_js_reads_adjacent_pairs_and_compares_sides(tmp_path):
    def matrix(system, side, js):  # js[(a, b)] for a < b, written both ways as the analysis does
        out = []
        for a in (1, 2, 3):
            for b in (1, 2, 3):
                v = 0.0 if a == b else js[(min(a, b), max(a, b))]
                out.append(f"{system},{side},{a},{b},{v},10")
        return out
    rows = ["system,side,layer_a,layer_b,js,queries"]
    rows += matrix("R", "dec", {(1, 2): 0.1, (2, 3): 0.2, (1, 3): 0.6})
    rows += matrix("R", "enc", {(1, 2): 0.3, (2, 3): 0.3, (1, 3): 0.3})
    rows += matrix("T", "dec", {(1, 2): 0.1, (2, 3): 0.1, (1, 3): 0.1})
    (tmp_path / "js.csv").write_text("\n".join(rows) + "\n")
    tests = [{"label": "small", "system": "R", "op": "<=", "limit": 0.2},
             {"label": "dec below enc", "system": "R", "op": "<", "times": 1.0, "of": "R",
              "of_side": "enc"},
             {"label": "below T", "system": "R", "op": "<", "times": 1.0, "of": "T"}]
    m = analysis.measure(threshold_claim({"kind": "js", "file": "js.csv", "side": "dec"}, tests),
                         tmp_path, tmp_path)
    assert [t.value for t in m.tests] == [pytest.approx(0.15)] * 3
    assert [t.limit for t in m.tests] == [0.2, pytest.approx(0.3), pytest.approx(0.1)]
    assert m.verdict == "not held (held for small, dec below enc; not held for below T)"
    every = analysis.measure(threshold_claim({"kind": "js", "file": "js.csv", "side": "dec",
                                              "pairs": "all"}, tests[:1]), tmp_path, tmp_path)
    assert every.tests[0].value == pytest.approx(0.3) and every.verdict == rule.NOT_HELD


def test_a_claim_without_a_measure_is_not_run(tmp_path):
    m = analysis.measure({"id": "n", "measure": {"kind": "none", "why": "not reproduced"}},
                         tmp_path, tmp_path)
    assert m.verdict == rule.NOT_RUN and m.details["why"] == "not reproduced"


# ---------------------------------------------------------------------------------------------
# the committed CLAIMS.md files and the pages that quote them
# ---------------------------------------------------------------------------------------------

# the papers' folders; the leaderboard's runs are judged pairwise on its page (results/leaderboard)
FOLDERS = [p.parent for p in sorted((REPO / "results").rglob("results.json"))
           if not p.is_relative_to(REPO / "results" / "leaderboard")]


def test_every_results_folder_has_a_claims_report():
    from ran_lab.claims.cli import folders_with_claims
    assert folders_with_claims(REPO) == FOLDERS
    assert len(FOLDERS) >= 9


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_claims_md_is_what_the_engine_computes(folder):
    claims_, results, verdicts = lab.compute(folder, repo=REPO, compute_missing=False)
    text, data = lab.render(claims_, results, verdicts, REPO)
    assert (folder / "CLAIMS.md").read_text(encoding="utf-8") == text, \
        f"rerun: python scripts/claims.py --results {folder.relative_to(REPO)}"
    committed = json.loads((folder / "CLAIMS.json").read_text(encoding="utf-8"))
    assert committed["verdicts"] == json.loads(json.dumps(data["verdicts"], ensure_ascii=False))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_stored_pairwise_p_value_recomputes_from_the_hypotheses(folder, multi30k_references):
    cached = json.loads((folder / "CLAIMS.json").read_text(encoding="utf-8"))["pvalues"]
    if not cached:
        pytest.skip("no p-value beyond results.json's")
    refs = corpora.references_of(folder, multi30k_references)
    if refs is None:
        pytest.skip(f"{folder.relative_to(REPO)} scores references other than Multi30k's")
    entry = cached[0]
    fresh = Folder(folder, REPO, refs, cache=[], compute=True)
    p = fresh.test(entry["pair"], entry["system"], entry["against"], entry["seed"],
                   entry["subset"], entry["metric"])["p"]
    assert math.isclose(p, entry["p"])


PAGES = [REPO / "README.md", REPO / "docs" / "results.md"]
FOLDER_PAGES = [folder / "README.md" for folder in FOLDERS]


_VERDICTS = {}  # a folder's verdicts, computed once for the tests that read them


def verdicts_of():
    def get(name):
        if name not in _VERDICTS:
            _VERDICTS[name] = lab.verdicts_by_key(name, REPO)
        return _VERDICTS[name]
    return get


def holds_of(name):
    return lab.holds_of(name, REPO)


@pytest.mark.parametrize("page", PAGES + FOLDER_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_pages_quote_the_computed_verdicts(page):
    text = page.read_text(encoding="utf-8")
    assert report.quoted_folders(text), f"{page.name} quotes no CLAIMS.md"
    assert report.fill(text, verdicts_of(), holds_of) == text, \
        ("rerun: python scripts/claims.py --all --fill README.md docs/results.md "
         "results/*/README.md results/*/*/README.md")


def outside_quotes(text):
    for pattern in (report.SPAN, report.TABLE, report.HOLDS, report.COUNT, report.FIGURE):
        text = pattern.sub("", text)
    return re.sub(r"(?<![*\w])\*[^*\n]+\*(?![*\w])", "", text)  # *italic*: the rule's own words


def numbers_in_files():
    """Every p-value and interval the committed files hold: results.json's (the engine's tests)
    and CLAIMS.json's (each seed's test, each comparison's and each order pair's)."""
    ps, intervals = set(), set()
    for path in (REPO / "results").rglob("CLAIMS.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        for e in data["pvalues"]:
            ps.add(e["p"])
            intervals.add(tuple(e["interval"]))
            intervals.add((-e["interval"][1], -e["interval"][0]))
        for v in data["verdicts"]:
            for part in v.get("systems", []) + v.get("pairs", []):
                for key in ("p", "holm_p"):
                    if part.get(key) is not None:
                        ps.add(part[key])
                if part.get("interval"):
                    intervals.add(tuple(part["interval"]))
    for path in (REPO / "results").rglob("results.json"):
        for r in json.loads(path.read_text(encoding="utf-8")).get("results", []):
            for scores in r.get("subsets", {}).values():
                ps.update(scores[k] for k in ("p_value", "ter_p_value")
                          if isinstance(scores.get(k), float))
    return ps, intervals


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_p_and_interval_written_by_hand_is_in_the_files(page):
    """Outside the quoted spans, a p-value ("p = 0.024", "p < 0.001") or an interval ("[−0.65,
    +1.97]") that a page writes is one that results.json or CLAIMS.json holds, as printed there
    (the level itself, "p < 0.01", is the rule's)."""
    ps, intervals = numbers_in_files()
    text = outside_quotes(page.read_text(encoding="utf-8"))
    printed_p = {report.pval(p) for p in ps}
    printed_i = {report.interval_text(i) for i in intervals}
    wrong = []
    for m in re.finditer(r"p (=|<) (\d\.\d+)", text):
        if m.group(0) == "p < 0.01":
            continue
        digits = len(m.group(2).split(".")[1])
        if m.group(0) not in printed_p and not any(
                f"{p:.{digits}f}" == m.group(2) for p in ps) or m.group(1) == "<" and \
                not any(p < float(m.group(2)) for p in ps):
            wrong.append(m.group(0))
    for m in re.finditer(r"\[[−+]\d+\.\d\d, [−+]\d+\.\d\d\]", text):
        if m.group(0) not in printed_i:
            wrong.append(m.group(0))
    assert not wrong, f"{page.name} writes numbers no committed file holds: {wrong}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_verdict_is_written_by_hand(page):
    """Outside the quoted spans and tables, the results pages name no verdict: a verdict word in
    the prose would be one the engine does not check."""
    text = page.read_text(encoding="utf-8")
    if page.name == "README.md":
        text = text[text.index("## Results"):text.index("## Documentation")]
    found = [m.group(0) for m in re.finditer(r"\b(?:not held|held|inconclusive|within noise|opposite)\b",
                                              outside_quotes(text))]
    assert not found, f"verdicts written by hand in {page.name}: {found}"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(REPO)))
def test_each_results_folder_says_what_it_holds_first(folder):
    """A folder's README opens (before its first list or section after the title) with the
    machines, budgets, seeds and starts of its runs, computed from its results.json."""
    lines = (folder / "README.md").read_text(encoding="utf-8").splitlines()
    marker = f"<!-- holds {folder.relative_to(REPO)} -->"
    assert marker in lines[:8], f"{folder}/README.md does not open with {marker}"
    claims_md = (folder / "CLAIMS.md").read_text(encoding="utf-8")
    assert claims_md.count("**What the folder holds**") == 1


def test_fill_rewrites_a_stale_quote():
    text = ("x <!-- claim results/ran/long#Z-T1-ran-all@de-en -->not held: better"
            "<!-- /claim --> y")
    filled = report.fill(text, verdicts_of())
    fresh = report.quote(verdicts_of()("results/ran/long")["Z-T1-ran-all@de-en"])
    assert fresh.startswith("held") and "not held: better" not in filled
    assert filled == f"x <!-- claim results/ran/long#Z-T1-ran-all@de-en -->{fresh}<!-- /claim --> y"
    with pytest.raises(KeyError):
        report.fill("<!-- claim results/ran/long#nope -->x<!-- /claim -->", verdicts_of())
    # an unclosed span is left alone rather than merged with the next one
    broken = ("<!-- claim results/ran/long#Z-T1-ran-e@de-en -->x\n\n"
              "<!-- claim results/ran/long#Z-T1-ran-d@de-en -->y<!-- /claim -->")
    assert report.fill(broken, verdicts_of()).startswith(
        "<!-- claim results/ran/long#Z-T1-ran-e@de-en -->x\n\n"
        "<!-- claim results/ran/long#Z-T1-ran-d")
    table = "<!-- claims-table results/ran/gpu pairs=de-en -->\n<!-- /claims-table -->"
    head = report.fill(table, verdicts_of()).splitlines()[1]
    assert [c.strip() for c in head.strip("|").split("|")] == ["claim", "paper", "here", "verdict"]


def test_holds_names_every_run_of_the_grid_that_was_not_made():
    from ran_lab.claims import provenance
    run = {"machine": {"device": "cpu", "device_name": "x", "threads": 1}, "train_argv": []}
    report_ = {"settings": {"pairs": ["en-de", "de-en"], "systems": ["A", "B"], "seeds": [1, 2],
                            "not_run": []},
               "results": [{"pair": p, "system": s, "seed": k, **run}
                           for p in ("en-de", "de-en") for s in ("A", "B") for k in (1, 2)
                           if (p, s, k) != ("en-de", "B", 2)]}
    assert provenance.not_run(report_) == ["en-de: B (seed 2)"]
    assert provenance.holds(report_)[-1].endswith("en-de: B (seed 2).")
    report_["results"] = [r for r in report_["results"] if r["pair"] != "de-en"]
    assert provenance.not_run(report_) == ["en-de: B (seed 2)", "de-en: A (seeds 1, 2), "
                                           "B (seeds 1, 2)"]


def test_a_level_prints_without_a_sign_a_difference_with_one():
    assert report.threshold_text("Syn-R above RAN-ALL", 2.68, ">", 2.12, "nats", signed=False) \
        == "Syn-R above RAN-ALL 2.68 nats (limit > 2.12 nats)"
    assert report.threshold_text("last below first", -0.54, "<", 0.0, "nats", signed=True) \
        == "last below first −0.54 nats (limit < +0.00 nats)"


def pooled_variance(by_system):
    squares = sum(sum((x - sum(xs) / len(xs)) ** 2 for x in xs)
                  for xs in by_system.values() if len(xs) > 1)
    df = sum(len(xs) - 1 for xs in by_system.values())
    return (squares / df if df else 0.0), df


def borrowed_variance(borrowed, subset, metric):
    """The seed variance of the folder a claims file names for one that has none."""
    other = json.loads((REPO / borrowed["from"] / "results.json").read_text(encoding="utf-8"))
    by_system = {}
    for r in other["results"]:
        scores = r["subsets"].get(subset)
        if scores and scores.get(metric) is not None and not r.get("checkpoint_of"):
            by_system.setdefault((r["pair"], r["system"]), []).append(scores[metric])
    return pooled_variance(by_system)


def quality(interval, metric):
    lo, hi = interval
    return (lo, hi) if metric != "ter" else (-hi, -lo)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_verdict_contradicts_its_interval_and_each_recomputes_from_the_files(folder):
    """Read from the committed files alone: every seed's p is below 0.01 exactly when its
    interval excludes 0; every comparison's interval is d ± t·se with the folder's pooled seed
    variance (from results.json) and the test set's share (CLAIMS.json's ``pooled``), its p below
    0.01 exactly when the interval excludes 0, and its direction the one the interval gives."""
    if not (folder / "CLAIMS.json").is_file():
        pytest.skip("no claims for this folder")
    data = json.loads((folder / "CLAIMS.json").read_text(encoding="utf-8"))
    report_ = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    for e in data["pvalues"]:
        lo, hi = e["interval"]
        assert (e["p"] < 0.01) == (lo > 0 or hi < 0), e
    runs = {(r["pair"], r["system"], r["seed"]): r for r in report_["results"]}
    test_var = {(e["pair"], e["subset"], e["metric"], e["system"], e["against"],
                 tuple(e["seeds"])): e["test_var"] for e in data["pooled"]}
    loaded = spec.load(lab.claims_file_of(folder, REPO), REPO)
    claims_ = {c["id"]: c for c in loaded.claims}
    borrowed = loaded.borrow_for(str(folder.relative_to(REPO)))
    checked = 0
    for v in data["verdicts"]:
        claim = claims_[v["id"]]
        for part in v.get("systems", []):
            if part["verdict"] == rule.NOT_RUN:
                continue
            metric, subset = claim["metric"], claim["subset"]
            seeds_ = [s["seed"] for s in part["seeds"]]
            by_system = {}
            for (p, system, seed), r in runs.items():
                scores = r["subsets"].get(subset)
                if scores and scores.get(metric) is not None and not r.get("checkpoint_of"):
                    by_system.setdefault((p, system), []).append(scores[metric])
            var, df = pooled_variance(by_system)
            if not df and borrowed:
                var, df = borrowed_variance(borrowed, subset, metric)
            own_var, own_df = pooled_variance({k: xs for k, xs in by_system.items()
                                               if k in {(v["pair"], part["system"]),
                                                        (v["pair"], part["against"])}})
            if own_df and own_var > var:
                var, df = own_var, own_df
            n = len(seeds_)
            diffs = [s["system"] - s["against"] for s in part["seeds"]]
            shared = (runs[(v["pair"], part["system"], seeds_[0])].get("checkpoint_of") or
                      part["system"]) == (runs[(v["pair"], part["against"], seeds_[0])]
                                          .get("checkpoint_of") or part["against"])
            if shared and n > 1:
                mean_d = sum(diffs) / n
                a = sum((d - mean_d) ** 2 for d in diffs) / (n - 1) / n
                df = n - 1
            else:
                a = 2 * var / n if df else 0.0
            b = test_var[(v["pair"], subset, metric, part["system"], part["against"],
                          tuple(seeds_))]
            # t on the seed variance's own degrees of freedom; none: not judged
            dof = df if df else math.inf
            assert part["judged"] == bool(df)
            t = seeds.t_quantile(0.01, dof)
            d = part["difference"]
            se = math.sqrt(a + b)
            assert part["interval"] == pytest.approx([d - t * se, d + t * se], abs=1e-9)
            lo, hi = quality(part["interval"], metric)
            assert (part["p"] < 0.01) == (lo > 0 or hi < 0)
            direction = part["direction"] or part["verdict"]
            outcome = rule.outcome(direction)
            if claim["relation"] in (">", "<") and df:
                better = claim["relation"] == ">"
                want = (rule.HELD if (lo > 0 if better else hi < 0) else
                        rule.NOT_HELD if (hi < 0 if better else lo > 0) else rule.INCONCLUSIVE)
                assert outcome == want, (v["id"], part["system"])
            if not df:
                assert part["verdict"] == rule.NOT_JUDGED_TEXT and part["mde"] is None
            else:
                # the minimum detectable effect: (t(0.995) + t(0.8))·se on the same df
                assert part["mde"] == pytest.approx(
                    (t + seeds.t_quantile(0.4, dof)) * se, rel=1e-9)
            if outcome == rule.HELD and n == 1:
                assert part["verdict"].startswith(rule.ONE_SEED.rstrip(")"))
            checked += 1
    assert checked or not data["pooled"]
