"""The paired bootstraps: each seed's test of the verdicts (:func:`test`), the reproduction
engine's sacreBLEU test (:func:`paired`), and the test set's share of a mean difference over seeds
(:func:`pooled`).

**The verdicts' test** (:func:`test`): the two-sided percentile bootstrap. The test set's
sentences are resampled with replacement, both systems are scored on each resample from their
per-sentence statistics, and the differences kept; p = 2c / N (c: the differences on the far side
of 0) and the interval (the k-th smallest and largest difference, k = N·level/2) come from the
same resamples, so that p < level exactly when the interval excludes 0. At least
:data:`INTERVAL_SAMPLES` are drawn, then blocks of :data:`BLOCK` while the Wilson score interval of
``c / N`` at :data:`MC_LEVEL`, doubled, holds the level, up to :data:`CAP`.

**The engine's test** (:func:`paired`, results.json's ``p_value``): sacreBLEU's paired bootstrap
(``sacrebleu.significance``, after Koehn 2004): p is the share of resamples whose absolute
difference, less the mean absolute difference, exceeds the observed one, ``(c + 1) / (N + 1)``.
The first block is sacreBLEU's own draw (seed 12345), so that with 1,000 resamples p is exactly
what ``PairedTest`` reports; while the Wilson score interval of ``(c + 1) / (N + 1)`` with
``n = N + 1`` at :data:`MC_LEVEL` holds the level, another block is drawn, up to :data:`CAP`
resamples; ``Paired.settled`` is False where it still straddles the level.

**The test set's share** (:func:`pooled`): every seed's pair of runs is scored on the same
resampled sentences (the seeds share the test set) and the seeds' differences averaged; the
variance of that mean over the resamples is what the test set adds to the verdict's interval
(:mod:`.seeds` adds the seeds').
"""
import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

SEED = 12345
BLOCK = 1000
CAP = 100_000
INTERVAL_SAMPLES = 10_000
MC_LEVEL = 0.99
METRICS = ("BLEU", "TER", "chrF")
KEYS = {"sacrebleu": "BLEU", "ter": "TER", "chrf": "chrF"}  # results.json's names of them


def metric_of(name: str, refs: Sequence[str]):
    """sacreBLEU's metric ``name`` (or results.json's name of it) with its default settings."""
    from sacrebleu.metrics import BLEU, CHRF, TER
    name = KEYS.get(name, name)
    if name not in METRICS:
        raise ValueError(f"no paired bootstrap for {name!r}: one of {', '.join(METRICS)}")
    return {"BLEU": BLEU, "TER": TER, "chrF": CHRF}[name](references=[list(refs)])


def sentence_stats(hyps: Sequence[str], refs: Sequence[str], metric: str) -> np.ndarray:
    """Per-sentence sufficient statistics of ``hyps`` (sacreBLEU's, as its paired test takes them;
    ``<unk>`` counted as one word, as :mod:`ran_text.evaluate` scores it); ``metric`` as
    :func:`metric_of` takes it."""
    from ran_text.evaluate import unk_as_one_word
    scorer = metric_of(metric, refs)
    return np.array(scorer._extract_corpus_statistics(unk_as_one_word(list(hyps)), None),
                    dtype="float32")


class Scorer:
    """Corpus scores of resamples from per-sentence statistics: sacreBLEU's own score of one set
    of statistics, and the same formula on many at once (BLEU with sacreBLEU's default settings,
    TER), checked against sacreBLEU's where a corpus falls outside the vectorised case."""

    def __init__(self, metric: str, refs: Sequence[str]):
        self.name = KEYS.get(metric, metric)
        self.metric = metric_of(metric, refs)

    def score(self, stats: np.ndarray) -> float:
        return self.metric._compute_score_from_stats(stats).score

    def many(self, sums: np.ndarray) -> np.ndarray:
        """Scores of each row of ``sums`` (summed statistics)."""
        sums = sums.astype("float64")
        if self.name == "chrF":
            return np.array([self.score(s) for s in sums])
        if self.name == "TER":
            edits, length = sums[:, 0], sums[:, 1]
            if np.any(length <= 0):
                return np.array([self.score(s) for s in sums])
            return 100 * edits / length
        if self.metric.smooth_method not in ("exp", "none") or self.metric.effective_order:
            return np.array([self.score(s) for s in sums])
        return _bleu(sums, self.metric.max_ngram_order, self.metric.smooth_method == "exp")

    def resampled(self, stats: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Scores of the resamples ``counts`` (how often each sentence is drawn, one row per
        resample)."""
        return self.many(counts @ stats.astype("float64"))


def _bleu(sums: np.ndarray, order: int, exp_smoothing: bool) -> np.ndarray:
    """sacreBLEU's ``BLEU.compute_bleu`` on each row of summed statistics (sys_len, ref_len,
    correct n-grams, total n-grams), its "exp" smoothing included: a zero count of order n
    halves the smoothing term and takes 100 / (term · total); an order with no n-gram ends the
    product with log(0) floored (sacrebleu.utils.my_log)."""
    sys_len, ref_len = sums[:, 0], sums[:, 1]
    correct, total = sums[:, 2:2 + order], sums[:, 2 + order:]
    floor = -9999999999.0
    smooth = np.ones(len(sums))
    alive = np.ones(len(sums), dtype=bool)
    logs = np.zeros(len(sums))
    with np.errstate(divide="ignore", invalid="ignore"):
        for n in range(order):
            alive &= total[:, n] > 0
            zero = correct[:, n] == 0
            if exp_smoothing:
                smooth = np.where(alive & zero, smooth * 2, smooth)
                precision = np.where(zero, 100.0 / (smooth * total[:, n]),
                                     100.0 * correct[:, n] / total[:, n])
            else:
                precision = 100.0 * correct[:, n] / total[:, n]
            usable = alive & (precision > 0)
            logs += np.where(usable, np.log(np.where(usable, precision, 1.0)), floor)
        bp = np.where(sys_len < ref_len,
                      np.where(sys_len > 0, np.exp(1 - ref_len / np.maximum(sys_len, 1)), 0.0),
                      1.0)
    scores = bp * np.exp(logs / order)
    return np.where(np.any(correct > 0, axis=1), scores, 0.0)


def draw(rng, n: int, size: int) -> np.ndarray:
    """``size`` resamples of ``n`` sentences, as sacreBLEU draws them, as counts per sentence."""
    idxs = rng.choice(n, size=(size, n), replace=True)
    flat = (idxs + n * np.arange(size)[:, None]).ravel()
    return np.bincount(flat, minlength=size * n).reshape(size, n).astype("float64")


def wilson(c: int, n: int, level: float = MC_LEVEL) -> Tuple[float, float]:
    """The Wilson score interval of a proportion ``c / n`` at ``level``."""
    z = _z(level)
    phat = c / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _z(level: float) -> float:
    from statistics import NormalDist
    return NormalDist().inv_cdf(0.5 + level / 2)


def percentile_interval(values: np.ndarray, level: float) -> Tuple[float, float]:
    """The ``1 - level`` percentile interval (level 0.01: the 0.5th to the 99.5th percentile)."""
    lo, hi = np.percentile(values, [100 * level / 2, 100 * (1 - level / 2)])
    return float(lo), float(hi)


@dataclass
class Paired:
    """One seed's test: p over ``samples`` resamples (``count`` of them above the observed
    difference), whether its Monte-Carlo interval ``mc`` lies on one side of the level
    (``settled``), the observed ``difference`` and its ``interval``."""
    p: float
    count: int
    samples: int
    mc: Tuple[float, float]
    settled: bool
    difference: float
    interval: Tuple[float, float]


def paired(base: np.ndarray, system: np.ndarray, scorer: Scorer, level: float = 0.01,
           samples: int = BLOCK, seed: int = SEED, cap: int = CAP,
           interval_samples: int = INTERVAL_SAMPLES) -> Paired:
    """The paired bootstrap of ``system`` against ``base`` (per-sentence statistics of the same
    sentences), drawn block by block until p is settled (see the module's text)."""
    rng = np.random.default_rng(seed)
    n = len(base)
    observed = scorer.score(system.sum(0)) - scorer.score(base.sum(0))
    deltas: List[np.ndarray] = []
    drawn, decided = 0, None
    while decided is None or drawn < interval_samples:
        size = samples if drawn == 0 else BLOCK
        counts = draw(rng, n, size)
        deltas.append(scorer.resampled(system, counts) - scorer.resampled(base, counts))
        drawn += size
        if decided is not None:
            continue
        absolute = np.abs(np.concatenate(deltas))
        count = int(np.sum(absolute - absolute.mean() > abs(observed)))
        mc = wilson(count + 1, drawn + 1)
        settled = not (mc[0] <= level <= mc[1])
        if settled or drawn >= cap:
            decided = ((count + 1) / (drawn + 1), count, drawn, mc, settled)
    signed = np.concatenate(deltas)
    p, count, drawn, mc, settled = decided
    return Paired(p, count, drawn, mc, settled, observed, percentile_interval(signed, level))


def pooled(pairs: Sequence[Tuple[np.ndarray, np.ndarray]], scorer: Scorer, level: float = 0.01,
           samples: int = INTERVAL_SAMPLES, seed: int = SEED, spread: bool = False):
    """The mean over seeds of the difference ``system - base`` (``pairs``: each seed's base and
    system statistics, on the same sentences) and its interval, every seed scored on the same
    resampled sentences."""
    rng = np.random.default_rng(seed)
    n = len(pairs[0][0])
    observed = float(np.mean([scorer.score(s.sum(0)) - scorer.score(b.sum(0)) for b, s in pairs]))
    means = []
    for start in range(0, samples, BLOCK):
        counts = draw(rng, n, min(BLOCK, samples - start))
        means.append(np.mean([scorer.resampled(s, counts) - scorer.resampled(b, counts)
                              for b, s in pairs], axis=0))
    means = np.concatenate(means)
    if spread:  # the test set's share of the mean difference's variance (:mod:`.seeds`)
        return observed, percentile_interval(means, level), float(np.var(means, ddof=1))
    return observed, percentile_interval(means, level)


@dataclass
class Tested(Paired):
    """One seed's two-sided percentile test (:func:`test`): ``p`` over ``samples`` resamples,
    ``count`` of them on the far side of 0, the Monte-Carlo interval ``mc`` of p, whether it lies
    on one side of the level (``settled``), the observed ``difference`` and its ``interval``;
    p < level exactly when the interval excludes 0. (The fields of :class:`Paired`.)"""


def order_interval(values: np.ndarray, level: float) -> Tuple[float, float]:
    """The ``1 - level`` interval of the resampled differences as order statistics: with
    ``k = N·level/2`` (N a multiple of 200 at level 0.01), the k-th smallest and the k-th
    largest value. It excludes 0 exactly when :func:`two_sided_p` is below ``level``."""
    ordered = np.sort(values)
    k = max(1, int(round(len(ordered) * level / 2)))
    return float(ordered[k - 1]), float(ordered[len(ordered) - k])


def two_sided_p(values: np.ndarray) -> Tuple[float, int]:
    """The percentile bootstrap's two-sided p of "the difference is 0": twice the share of
    resampled differences on the far side of 0 (``count`` of them: at or below 0, or at or
    above 0, whichever is fewer), at most 1; and that count."""
    count = int(min(np.sum(values <= 0), np.sum(values >= 0)))
    return min(1.0, 2 * count / len(values)), count


def test(base: np.ndarray, system: np.ndarray, scorer: Scorer, level: float = 0.01,
         seed: int = SEED, cap: int = CAP, samples: int = INTERVAL_SAMPLES) -> Tested:
    """The two-sided paired percentile bootstrap of ``system`` against ``base`` (the verdicts'
    test): ``samples`` resamples first, then blocks of :data:`BLOCK` while the Wilson interval
    of ``count / N`` at :data:`MC_LEVEL`, doubled, holds ``level``, up to ``cap``. The
    interval and p come from the same resampled differences (:func:`order_interval`,
    :func:`two_sided_p`)."""
    rng = np.random.default_rng(seed)
    n = len(base)
    observed = scorer.score(system.sum(0)) - scorer.score(base.sum(0))
    deltas: List[np.ndarray] = []
    drawn = 0
    while True:
        size = samples if drawn == 0 else BLOCK
        for start in range(0, size, BLOCK):
            counts = draw(rng, n, min(BLOCK, size - start))
            deltas.append(scorer.resampled(system, counts) - scorer.resampled(base, counts))
        drawn += size
        signed = np.concatenate(deltas)
        p, count = two_sided_p(signed)
        lo, hi = wilson(count, drawn)
        mc = (min(1.0, 2 * lo), min(1.0, 2 * hi))
        settled = not (mc[0] <= level <= mc[1])
        if settled or drawn >= cap:
            return Tested(p, count, drawn, mc, settled, observed, order_interval(signed, level))
