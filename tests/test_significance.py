"""Significance that one Monte-Carlo draw does not decide (ran_lab.claims.bootstrap): the
paired bootstrap is sacreBLEU's own at 1,000 resamples, draws more where p's interval holds the
level, and decides the same under another seed; and the recheck that redraws every test near the
level (``scripts/claims.py --recheck``)."""
import json

import pytest

import helpers
from ran_lab.claims import bootstrap
from ran_lab.claims.recheck import NEAR, OTHER_SEED, near, recheck
from ran_lab.claims.results import Folder

REPO = helpers.REPO
LONG = REPO / "results" / "ran" / "long"
METRIC = {"p_value": "sacrebleu", "ter_p_value": "ter"}


def refs_here():
    return (REPO / "data-bin" / "multi30k.de-en" / "test.raw.en").is_file()


needs_refs = pytest.mark.skipif(not refs_here(),
                                reason="no Multi30k data-bin here (scripts/prepare-multi30k.sh)")


def stored_near(folder):
    """results.json's p-values (each run against the baseline) with 0.005 < p < 0.02."""
    report = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    found = []
    for r in report["results"]:
        for subset, scores in r["subsets"].items():
            for key, metric in METRIC.items():
                if near(scores.get(key)):
                    found.append((r["pair"], r["system"], r["seed"], subset, metric, scores[key]))
    return found


def test_the_monte_carlo_interval_of_p():
    lo, hi = bootstrap.wilson(11, 1001)
    assert lo < 11 / 1001 < hi and lo < 0.01 < hi  # 1,000 resamples cannot place p = 0.011
    lo, hi = bootstrap.wilson(1101, 100_001)
    assert 0.01 < lo  # 100,000 can
    assert bootstrap.wilson(1, 1001)[1] < 0.01  # nor is p = 0.001 in doubt at 1,000


@needs_refs
def test_near_the_level_the_verdict_is_the_same_under_another_seed():
    found = stored_near(LONG)
    assert found, "results/ran/long has p-values near 0.01"
    first = Folder(LONG, REPO, cache=[], compute=True)
    again = Folder(LONG, REPO, cache=[], compute=True, seed=OTHER_SEED)
    baseline = first.baseline
    for pair, system, seed, subset, metric, stored in found:
        a = first.test(pair, system, baseline, seed, subset, metric)
        b = again.test(pair, system, baseline, seed, subset, metric)
        where = f"{system} seed {seed} {metric}: {a['p']} / {b['p']}"
        # results.json holds the engine's settled p: the same draw, the same resamples
        assert a["p"] == stored, where
        # where the first block's interval of p (results.json's draw) holds the level, more are
        # drawn
        lo, hi = bootstrap.wilson(round(stored * 1001), 1001)
        if lo <= first.level <= hi:
            assert a["samples"] > 1000, where
        significant = [t["settled"] and t["p"] < first.level for t in (a, b)]
        unsettled = [not t["settled"] for t in (a, b)]
        assert significant[0] == significant[1] or any(unsettled), where
        assert all(t["settled"] or t["samples"] >= bootstrap.CAP for t in (a, b)), where


def claims_cache_is_current(folder):
    path = folder / "CLAIMS.json"
    if not path.is_file():
        return False
    entries = json.loads(path.read_text(encoding="utf-8")).get("pvalues", [])
    return bool(entries) and all("bootstrap_seed" in e for e in entries)


@needs_refs
def test_the_recheck_finds_no_verdict_that_another_seed_changes():
    if not claims_cache_is_current(LONG):
        pytest.fail("results/ran/long/CLAIMS.json holds no settled tests: remake it with "
                    "`python scripts/claims.py --all`")
    result = recheck(LONG, OTHER_SEED, repo=REPO)
    assert all(NEAR[0] < e["p"] < NEAR[1] for e, _ in result.tests)
    assert result.changed == []
