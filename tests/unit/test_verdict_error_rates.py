"""The verdict rule's error rates on simulated folders with a known truth.

Each replicate draws a folder under the model of :mod:`ran_lab.claims.seeds`: every run's score is
its system's true mean plus a seed effect (sd ``sds[i]`` for system ``i``), and the mean
difference over the compared seeds gets the test set's error drawn directly (variance
``TEST_VAR / n``, passed to :func:`seeds.combined` as known, as the pooled bootstrap would give
it). The project's own functions then judge it: :func:`seeds.seed_variance` over the folder's
systems (or over a sibling folder's, borrowed), :func:`seeds.combined` and :func:`rule.compare`.
System 0 is compared with system 1.
"""
import random
from statistics import fmean

import pytest

from ran_lab.claims import rule, seeds

LEVEL = 0.01
TEST_VAR = 0.35  # one seed's test-set variance of a BLEU difference on Multi30k (1,000 sentences)
REPLICATES = 2000
MARGIN = 1.0
# a folder: the seed sd of each system, the seeds each ran, a borrowed sibling's (sds, seeds)
CASES = {
    "one seed, nothing to borrow": ([0.5, 0.5, 0.5], 1, None),
    "one seed, a sibling's variance": ([0.5, 0.5, 0.5], 1, ([0.5] * 4, 2)),
    "two seeds, equal sds": ([0.5] * 4, 2, None),
    "two seeds, unequal sds": ([1.11, 0.28, 0.42], 2, None),
    "two seeds, one noisy system among quiet ones": ([1.11] + [0.28] * 6, 2, None),
    "three seeds": ([0.5] * 3, 3, None),
    "five seeds": ([0.8] * 3, 5, None),
}


def folder(rng, sds, n):
    return {i: [rng.gauss(0, sd) for _ in range(n)] for i, sd in enumerate(sds)}


def verdicts(case, relation, truth, replicates=REPLICATES, seed=20240):
    """The verdict texts of ``replicates`` simulated folders of ``case`` whose true difference
    (system 0 minus system 1) is ``truth``."""
    sds, n, sibling = CASES[case]
    rng = random.Random(seed)
    out = []
    for _ in range(replicates):
        scores = folder(rng, sds, n)
        var, df = seeds.seed_variance(scores)
        if not df and sibling is not None:
            var, df = seeds.seed_variance(folder(rng, *sibling))
        own = seeds.seed_variance({0: scores[0], 1: scores[1]})
        test_var = TEST_VAR / n
        difference = truth + fmean(scores[0]) - fmean(scores[1]) + rng.gauss(0, test_var ** 0.5)
        both = seeds.combined(difference, test_var, var, df, n, LEVEL, own=own)
        runs = [rule.Seed(i + 1, difference, 0.0, None) for i in range(n)]
        out.append(rule.compare(relation, runs, LEVEL, margin=MARGIN, combined=both).verdict)
    return out


def held_rate(found):
    return sum(rule.outcome(v) == rule.HELD for v in found) / len(found)


@pytest.mark.parametrize("case", CASES)
def test_no_difference_is_held_better_at_most_as_often_as_the_level_says(case):
    assert held_rate(verdicts(case, ">", 0.0)) <= 0.015


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("relation, truth", [("≥", -1.2), ("≈", 1.2),
                                              ("≤", 1.2)])
def test_parity_outside_the_margin_is_held_at_most_as_often_as_the_level_says(case, relation,
                                                                              truth):
    assert held_rate(verdicts(case, relation, truth)) <= 0.015


def test_one_seed_without_a_variance_is_not_judged():
    found = verdicts("one seed, nothing to borrow", ">", 3.0, replicates=50)
    assert set(found) == {rule.NOT_JUDGED_TEXT}
    assert rule.outcome(rule.NOT_JUDGED_TEXT) == rule.NOT_JUDGED


@pytest.mark.parametrize("case", ["one seed, a sibling's variance", "three seeds", "five seeds"])
def test_a_large_true_difference_is_found(case):
    """The rates above are not bought by a rule that never holds anything."""
    assert held_rate(verdicts(case, ">", 5.0, replicates=400)) >= 0.5


def test_the_minimum_detectable_effect_is_found_about_four_times_in_five():
    """At a true difference equal to the detectable effect of the expected standard error, the
    rule holds ">" about 80 % of the time (the t approximation, with σ̂ drawn, is rough)."""
    sds, n, _ = CASES["five seeds"]
    df = sum(n - 1 for _ in sds)
    se = (2 * sds[0] ** 2 / n + TEST_VAR / n) ** 0.5
    rate = held_rate(verdicts("five seeds", ">", seeds.detectable(se, df, LEVEL), 1000))
    assert 0.65 <= rate <= 0.9
