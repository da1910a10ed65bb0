"""Seeds as the unit of replication (ran_lab.claims.seeds): the pooled between-seed variance and
the combined interval checked on simulated folders with a known answer; Student's t as the
interval uses it; the percentile bootstrap's p and interval from the same resamples agree."""
import math
import random

import numpy as np
import pytest

from ran_lab.claims import bootstrap, seeds


def test_student_t_quantiles_and_tails():
    # printed tables: t(0.995; 2) = 9.925, t(0.995; 6) = 3.707, t(0.975; 10) = 2.228
    assert seeds.t_quantile(0.01, 2) == pytest.approx(9.925, abs=1e-3)
    assert seeds.t_quantile(0.01, 6) == pytest.approx(3.707, abs=1e-3)
    assert seeds.t_quantile(0.05, 10) == pytest.approx(2.228, abs=1e-3)
    assert seeds.t_quantile(0.01, math.inf) == pytest.approx(2.5758, abs=1e-4)
    assert seeds.t_sf2(3.707, 6) == pytest.approx(0.01, abs=1e-4)
    assert seeds.t_sf2(0.0, 4) == pytest.approx(1.0)
    # the quantiles and tails the claims' intervals were drawn with (to 1e-9)
    for df, quantile, tail in ((2, 9.924843200918293, 0.12961172022151074),
                               (6, 3.7074280213247794, 0.0465282322841673),
                               (10, 3.169272672616952, 0.03144684423660886)):
        assert seeds.t_quantile(0.01, df) == pytest.approx(quantile, rel=1e-9, abs=0)
        assert seeds.t_sf2(2.5, df) == pytest.approx(tail, rel=1e-9, abs=0)


def test_the_pooled_seed_variance():
    var, df = seeds.seed_variance({"a": [1.0, 3.0], "b": [5.0], "c": [2.0, 2.0, 5.0]})
    # a: 2 on 1 df; b: one seed adds nothing; c: 6 on 2 df
    assert (var, df) == (pytest.approx(8 / 3), 3)
    assert seeds.seed_variance({"a": [1.0], "b": [2.0]}) == (0.0, 0)


def simulate(rng, sigma, tau, systems, n_seeds, effect):
    """One folder under the model: each run's score is mu + u (u ~ N(0, sigma²) per run); the
    test set adds to the mean difference a draw of variance tau² that the bootstrap measures."""
    mu = {s: 30.0 for s in systems}
    mu["b"] = 30.0 + effect
    scores = {s: [mu[s] + rng.gauss(0, sigma) for _ in range(n_seeds[s])] for s in systems}
    return scores


@pytest.mark.parametrize("sigma, seeds_each, others", [(0.4, 2, 2), (0.3, 3, 3), (0.5, 1, 3)])
def test_the_interval_covers_the_true_difference_at_its_level(sigma, seeds_each, others):
    """Simulated folders of six systems with a known difference between a and b (each with
    ``seeds_each`` seeds, the four others with ``others``): the 95 % and 99 % intervals cover it
    in at least about 95 % and 99 % of folders, one seed of a and b included (t on the seed
    variance's own degrees of freedom is conservative where the test set's share is large);
    without the seed variance they would not."""
    rng = random.Random(7)
    tau, effect, trials = 0.2, 0.5, 3000
    systems = ["a", "b", "c", "d", "e", "f"]
    n_seeds = {s: seeds_each if s in "ab" else others for s in systems}
    covered = {0.05: 0, 0.01: 0}
    naive = 0
    for _ in range(trials):
        scores = simulate(rng, sigma, tau, systems, n_seeds, effect)
        var, df = seeds.seed_variance(scores)
        diff = (sum(scores["b"]) - sum(scores["a"])) / seeds_each + rng.gauss(0, tau)
        for level in covered:
            lo, hi = seeds.combined(diff, tau ** 2, var, df, seeds_each, level).interval
            covered[level] += lo <= effect <= hi
        lo, hi = seeds.combined(diff, tau ** 2, 0.0, 0, seeds_each, 0.05).interval
        naive += lo <= effect <= hi
    assert 0.94 <= covered[0.05] / trials <= 0.995
    assert covered[0.01] / trials >= 0.985
    assert naive / trials < 0.85  # the test set alone is far too narrow


def test_the_seed_variance_is_unbiased():
    rng = random.Random(3)
    estimates = [seeds.seed_variance({s: [rng.gauss(0, 0.5) for _ in range(2)] for s in "abcd"})[0]
                 for _ in range(4000)]
    assert sum(estimates) / len(estimates) == pytest.approx(0.25, rel=0.05)


def test_p_and_interval_agree_and_p_is_below_the_level_exactly_when_0_is_outside():
    for shift in np.linspace(-0.02, 0.03, 26):
        values = np.random.default_rng(1).normal(shift, 0.01, size=10_000)
        p, _ = bootstrap.two_sided_p(values)
        lo, hi = bootstrap.order_interval(values, 0.01)
        assert (p < 0.01) == (lo > 0 or hi < 0), shift
    for diff in (-2.0, 0.3, 2.9):
        test = seeds.combined(diff, 1.0, 0.3, 4, 2, 0.01)
        lo, hi = test.interval
        assert (test.p < 0.01) == (lo > 0 or hi < 0)
        # the interval's end lies where p is the level
        assert seeds.t_sf2((diff - lo) / test.se, test.df) == pytest.approx(0.01, abs=1e-6)


def test_the_degrees_of_freedom_are_the_estimates_own_however_small_sigma_comes_out():
    for sigma2 in (1e-6, 0.01, 0.5):
        assert seeds.combined(0.5, 0.2, sigma2, 2, 2, 0.01).df == 2


def test_the_larger_variance_of_the_two_compared_systems_is_not_pooled_away():
    folder = seeds.combined(0.5, 0.01, 0.08, 6, 2, 0.01, own=(0.6, 2))
    assert (folder.source, folder.df, folder.seed_var) == ("pair", 2, pytest.approx(0.6))
    quiet = seeds.combined(0.5, 0.01, 0.08, 6, 2, 0.01, own=(0.02, 2))
    assert (quiet.source, quiet.df) == ("folder", 6)


def test_no_seed_variance_is_not_judged_and_has_no_detectable_effect():
    test = seeds.combined(2.0, 0.1, 0.0, 0, 1, 0.01)
    assert not test.judged and test.mde is None
    borrowed = seeds.combined(2.0, 0.1, 0.2, 4, 1, 0.01, source="borrowed from results/x")
    assert borrowed.judged and borrowed.source == "borrowed from results/x"
    # (t(0.995; 4) + t(0.8; 4))·se, se = sqrt(2·0.2 + 0.1)
    assert borrowed.mde == pytest.approx((4.604 + 0.941) * math.sqrt(0.5), abs=2e-3)


def test_shared_training_runs_take_the_seeds_own_differences():
    # one training run per seed, decoded twice: the differences +0.16 and +0.19 vary little
    test = seeds.combined(0.175, 0.0036, 0.09, 6, 2, 0.01, shared=[0.16, 0.19])
    assert test.shared and test.seed_var == pytest.approx(0.00045 / 2)
    assert test.df == 1  # one difference of two seeds' differences: 1 degree of freedom
    assert test.se < seeds.combined(0.175, 0.0036, 0.09, 6, 2, 0.01).se
    # one seed: no differences to vary, so the folder's 2·sigma² stands for their variance
    one = seeds.combined(0.175, 0.0036, 0.09, 6, 1, 0.01, shared=[0.175])
    assert one.seed_var == pytest.approx(0.18) and one.df == 6
