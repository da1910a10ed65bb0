"""Seeds as the unit of replication: the interval and p of a comparison's mean difference, with
the between-seed variance in it; Holm's correction for a claim made of several comparisons.

**The model.** A run's score on the test set is ``y = mu_system + u``: ``u``, what training with
another seed changes, has mean 0 and one variance ``sigma²`` common to every system of a results
folder (every translation direction, one subset and metric), independent between runs. ``sigma²`` is estimated by
pooling each system's sample variance over its seeds (:func:`seed_variance`: the sum of squared
deviations from each system's own mean over the sum of ``seeds - 1``, its degrees of freedom);
a system with one seed adds nothing, and a folder where no system has two seeds has no estimate
(``df = 0``): it borrows the estimate of a sibling folder of the same recipe and scale that its
claims file names (:class:`.results.Folder`), or its comparisons are not judged.

**Unequal variances.** The two compared systems' own seeds give a second estimate (pooled over
those two only); where it is larger than the folder's, it is used, with its own (fewer) degrees
of freedom: a noisy system is not judged by the quieter systems' variance.

**The interval.** A comparison's difference is the mean over its ``n`` seeds of ``system -
against``, each seed a pair of independent runs: its variance is ``2·sigma²/n`` from the seeds
plus the test set's share, the variance of the same mean over the pooled bootstrap's resampled
sentences (:func:`.bootstrap.pooled`). The interval is ``d ± t·se`` with ``se`` the square root
of the sum and ``t`` Student's quantile at ``1 - level/2`` on the seed variance's own degrees of
freedom, ``Σ(seeds - 1)`` (not Welch-Satterthwaite's, which grow without bound when ``sigma²``
comes out small and then let through several times the level's false positives; with the test
set's share taken as known this is conservative). p is two-sided from the same ``t``: p < level
exactly when the interval excludes 0 (:func:`combined`).

**Power.** :func:`detectable`: the true difference found with 80 % power at the level.

**Shared training runs.** A system that decodes another's checkpoints (``checkpoint_of``: unknown
words replaced after decoding) shares its seed effect: the two runs of a seed are not
independent, and their difference's seed share is estimated from the seeds' own differences
instead, ``var(d_i)/n`` on ``n - 1`` degrees of freedom (with one seed, the folder's
``2·sigma²`` stands for it). Such a system adds
nothing to ``sigma²``: its runs repeat its owner's seeds.
"""
import math
from functools import lru_cache
from dataclasses import dataclass
from statistics import fmean
from typing import Dict, Optional, Sequence, Tuple

from scipy.stats import t as student_t


def seed_variance(scores: Dict[str, Sequence[float]]) -> Tuple[float, int]:
    """The pooled between-seed variance of ``scores`` (system -> its seeds' scores) and its
    degrees of freedom; (0.0, 0) where no system has two seeds."""
    squares, df = 0.0, 0
    for values in scores.values():
        if len(values) < 2:
            continue
        centre = fmean(values)
        squares += sum((v - centre) ** 2 for v in values)
        df += len(values) - 1
    return (squares / df if df else 0.0), df


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail of Student's t: P(|T| >= |t|); the normal's where ``df`` is infinite."""
    return float(2 * student_t.sf(abs(t), df))


@lru_cache(maxsize=None)
def t_quantile(level: float, df: float) -> float:
    """The t with P(|T| >= t) = ``level``."""
    return float(student_t.isf(level / 2, df))


@dataclass(frozen=True)
class Combined:
    """A comparison's mean ``difference`` with its interval and two-sided ``p``; ``se`` and its
    shares (``seed_var``: ``2·sigma²/n``; ``test_var``: the test set's), the degrees of freedom
    ``df`` (those of the seed variance's estimate; infinite: the normal), ``seeds`` (n),
    ``sigma`` (the between-seed standard deviation used; None where there is none),
    ``source`` (where that came from: "folder", "pair" (the two systems' own seeds, larger
    than the folder's), "shared" (the seeds' own differences) or "borrowed from FOLDER") and
    ``judged`` (False: no seed variance at all, so no verdict; the interval is the test set's
    alone, shown for what it is)."""
    difference: float
    interval: Tuple[float, float]
    p: float
    se: float
    seed_var: float
    test_var: float
    df: float
    seeds: int
    sigma: Optional[float]
    shared: bool = False
    source: str = "folder"
    judged: bool = True
    level: float = 0.01

    @property
    def one_seed(self) -> bool:
        return self.seeds == 1

    @property
    def mde(self) -> Optional[float]:
        """The minimum detectable effect (:func:`detectable`); None where not judged."""
        return detectable(self.se, self.df, self.level) if self.judged else None


POWER = 0.8


@lru_cache(maxsize=None)
def _power_factor(level: float, df: float) -> float:
    return t_quantile(level, df) + t_quantile(2 * (1 - POWER), df)


def detectable(se: float, df: float, level: float) -> float:
    """The true difference (from 0 for > and <, from the margin's edge for ≈, ≥, ≤) that the
    rule finds with 80 % power at ``level``: ``(t(1 - level/2) + t(0.8))·se`` on ``df`` degrees of
    freedom (the usual approximation of the non-central t)."""
    return _power_factor(level, df) * se


def combined(difference: float, test_var: float, sigma2: float, sigma_df: int, n: int,
             level: float, shared: Optional[Sequence[float]] = None,
             own: Optional[Tuple[float, int]] = None, source: str = "folder") -> Combined:
    """The interval and p of a mean difference over ``n`` seeds (see the module's text).

    ``sigma2`` on ``sigma_df`` degrees of freedom: the seed variance pooled over the folder (or
    borrowed, ``source`` saying from where). ``own``: the variance pooled over the two compared
    systems' own seeds and its degrees of freedom; where it is larger than ``sigma2`` it is used
    instead (a folder's variance is not pooled over systems whose seeds vary more). ``shared``:
    the seeds' differences, where the two systems share their training runs (their variance over
    ``n - 1`` replaces ``2·sigma²``; with one seed, ``2·sigma²`` stands for it). The t quantile
    is taken on the estimate's own degrees of freedom, never more; with none the comparison is
    not judged (``judged`` False)."""
    if own is not None and own[1] and sigma_df and own[0] > sigma2:
        sigma2, sigma_df, source = own[0], own[1], "pair"
    elif own is not None and own[1] and not sigma_df:
        sigma2, sigma_df, source = own[0], own[1], "pair"
    if shared is not None and n > 1:
        sigma2 = sum((d - fmean(shared)) ** 2 for d in shared) / (n - 1)
        sigma_df, source = n - 1, "shared"
        seed_var = sigma2 / n
    else:
        seed_var = 2 * sigma2 / n if sigma_df else 0.0
    total = seed_var + test_var
    df = float(sigma_df) if sigma_df else math.inf
    se = math.sqrt(total)
    q = t_quantile(level, df)
    p = t_sf2(difference / se, df) if se > 0 else (0.0 if difference else 1.0)
    if source == "shared":
        sigma = math.sqrt(sigma2)
    else:
        sigma = math.sqrt(sigma2) if sigma_df else None
    return Combined(difference, (difference - q * se, difference + q * se), p, se, seed_var,
                    test_var, df, n, sigma, shared is not None, source, bool(sigma_df), level)


def holm(ps: Sequence[float]) -> list:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times
    ``m - i + 1`` (i from 1), made non-decreasing, at most 1."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adjusted, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted
