"""Significance that one Monte-Carlo draw does not decide (ran_lab.claims.bootstrap): each
seed's percentile test draws more where p's interval holds the level, its p and interval agree,
and it decides the same under another seed; and the recheck that redraws every test near the
level (``scripts/claims.py --recheck``)."""
import json

import numpy as np
import pytest

import corpora
import helpers
from ran_lab.claims import bootstrap
from ran_lab.claims.recheck import NEAR, OTHER_SEED, near, recheck
from ran_lab.claims.results import Folder

REPO = helpers.REPO
LONG = REPO / "results" / "ran" / "long"


@pytest.fixture(scope="module")
def long_refs(multi30k_references):
    """The references of results/ran/long's pairs (de-en, en-de), made from the raw corpus."""
    refs = corpora.references_of(LONG, multi30k_references)
    assert refs and {pair for pair, _ in refs} == {"de-en", "en-de"}, refs
    return refs


def stored_near(folder):
    """CLAIMS.json's seed tests with 0.005 < p < 0.02."""
    data = json.loads((folder / "CLAIMS.json").read_text(encoding="utf-8"))
    return [(e["pair"], e["system"], e["against"], e["seed"], e["subset"], e["metric"], e["p"])
            for e in data["pvalues"] if near(e["p"])]


def test_the_monte_carlo_interval_of_p():
    lo, hi = bootstrap.wilson(11, 1001)
    assert lo < 11 / 1001 < hi and lo < 0.01 < hi  # 1,000 resamples cannot place p = 0.011
    lo, hi = bootstrap.wilson(1101, 100_001)
    assert 0.01 < lo  # 100,000 can
    assert bootstrap.wilson(1, 1001)[1] < 0.01  # nor is p = 0.001 in doubt at 1,000


class TerOfSums:
    """TER from summed (edits, length) statistics, as bootstrap.Scorer computes it."""

    def score(self, sums):
        return 100 * sums[0] / sums[1]

    def resampled(self, stats, counts):
        sums = counts @ stats
        return 100 * sums[:, 0] / sums[:, 1]


def test_the_seed_test_draws_until_the_doubled_wilson_interval_leaves_the_level():
    """bootstrap.test on synthetic statistics (TER: edits and length per sentence): p = 2c/N and
    its interval agree, and an unsettled p draws more blocks."""
    rng = np.random.default_rng(0)
    length = np.full(400, 20.0)
    base = np.stack([rng.poisson(6, 400).astype(float), length], axis=1)
    for shift, settled_at_first in ((1.5, True), (0.0, True)):
        system = np.stack([np.maximum(0, base[:, 0] - rng.binomial(1, 0.3, 400) * shift),
                           length], axis=1)
        scorer = TerOfSums()
        t = bootstrap.test(base, system, scorer, samples=2000, cap=20_000)
        lo, hi = t.interval
        assert t.p == pytest.approx(min(1.0, 2 * t.count / t.samples))
        assert (t.p < 0.01) == (lo > 0 or hi < 0)
        mc = bootstrap.wilson(t.count, t.samples)
        assert t.mc == pytest.approx((min(1, 2 * mc[0]), min(1, 2 * mc[1])))
        assert t.settled == (not t.mc[0] <= 0.01 <= t.mc[1])
        assert t.settled or t.samples == 20_000


def test_near_the_level_the_verdict_is_the_same_under_another_seed(long_refs):
    found = stored_near(LONG)
    assert found, "results/ran/long has p-values near 0.01"
    first = Folder(LONG, REPO, long_refs, cache=[], compute=True)
    again = Folder(LONG, REPO, long_refs, cache=[], compute=True, seed=OTHER_SEED)
    for pair, system, against, seed, subset, metric, stored in found:
        a = first.test(pair, system, against, seed, subset, metric)
        b = again.test(pair, system, against, seed, subset, metric)
        where = f"{system} seed {seed} {metric}: {a['p']} / {b['p']}"
        # CLAIMS.json holds this draw: the same seed, the same resamples
        assert a["p"] == stored, where
        # where the first draw's interval of p holds the level, more are drawn
        lo, hi = bootstrap.wilson(a["count"], a["samples"])
        if a["samples"] == bootstrap.INTERVAL_SAMPLES:
            assert not 2 * lo <= first.level <= 2 * hi, where
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


def test_the_recheck_finds_no_verdict_that_another_seed_changes(long_refs):
    if not claims_cache_is_current(LONG):
        pytest.fail("results/ran/long/CLAIMS.json holds no settled tests: remake it with "
                    "`python scripts/claims.py --all`")
    result = recheck(LONG, OTHER_SEED, refs=long_refs, repo=REPO)
    assert all(NEAR[0] < e["p"] < NEAR[1] for e, _ in result.tests)
    assert result.changed == []


def test_the_engine_test_stops_on_the_wilson_interval_docs_scoring_states():
    """results.json's test (bootstrap.paired): p = (c + 1) / (N + 1) and its Monte-Carlo
    interval is the Wilson interval of that proportion with n = N + 1."""
    rng = np.random.default_rng(2)
    length = np.full(300, 20.0)
    base = np.stack([rng.poisson(6, 300).astype(float), length], axis=1)
    system = np.stack([np.maximum(0, base[:, 0] - rng.binomial(1, 0.2, 300)), length], axis=1)
    result = bootstrap.paired(base, system, TerOfSums(), samples=1000, interval_samples=0)
    assert result.p == pytest.approx((result.count + 1) / (result.samples + 1))
    assert result.mc == pytest.approx(bootstrap.wilson(result.count + 1, result.samples + 1))
    assert result.settled == (not result.mc[0] <= 0.01 <= result.mc[1])
