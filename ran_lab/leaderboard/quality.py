"""The board's quality columns: each system's score with its interval over seeds and sentences,
its rank, and the pairwise verdicts in the claims format.

**A system's interval** (sacreBLEU and chrF, as the engine scores them): the lab's model of a run's
score (docs/scoring.md, "the verdict's interval"), for one system's mean rather than a
difference. A run's score is the system's mean plus a seed effect of variance σ², one σ² for the
board (each metric): the seeds' variance pooled over every system and direction of the runs'
folder (:func:`ran_lab.claims.seeds.seed_variance`). The mean over a system's n seeds has the
variance σ²/n from the seeds plus the test set's share: the variance, over resamples of the test
set's sentences (with replacement, one draw shared by the seeds), of the mean over seeds of the
corpus score. The interval is the mean ± t·se on Welch-Satterthwaite's degrees of freedom, at the
level of the folder's significance (99 % for 0.01); with no σ² (no system with two seeds) the test
set's share alone, with the normal quantile.

**Pairwise verdicts**: for each direction, every pair of systems as a claim "A > B" (A the higher
mean sacreBLEU), judged by :mod:`ran_lab.claims` exactly as a paper's claims are (each seed's
paired bootstrap, the seeds' spread pooled into the interval of the mean difference): *held*
where the interval of A − B lies above 0 (the order is significant), *inconclusive* where it holds
0 (the pair's order is not significant: the page marks it). The claims are made from the runs, so
no verdict is *not held*.
"""
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy.stats import rankdata

from ran_text import textio
from ..analysis.results import hyp_path
from ..claims import bootstrap
from ..claims import seeds as seeds_mod
from ..claims.engine import evaluate
from ..claims.results import Folder
from ..claims.spec import Claims, validate
from ..common.paths import slug
from ..common import paths

METRICS = ("sacrebleu", "chrf")
RESAMPLES = 2000
SEED = bootstrap.SEED


def resample_counts(sentences: int, samples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """How often each sentence is drawn in each resample (``samples`` × ``sentences``)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(sentences, np.full(sentences, 1.0 / sentences), size=samples)


@dataclass(frozen=True)
class Interval:
    """A system's mean over its ``seeds`` with the interval around it."""
    mean: float
    low: float
    high: float
    se: float
    seed_var: float
    test_var: float
    df: float
    seeds: int

    def as_json(self) -> dict:
        return {"mean": self.mean, "interval": [self.low, self.high], "se": self.se,
                "seed_var": self.seed_var, "test_var": self.test_var,
                "df": None if math.isinf(self.df) else self.df, "seeds": self.seeds}


def interval(scores: Sequence[float], test_var: float, sigma2: float, sigma_df: int,
             level: float) -> Interval:
    """The interval of the mean of ``scores`` (one per seed): σ²/n from the seeds (the board's
    pooled ``sigma2`` on ``sigma_df`` degrees of freedom) plus ``test_var``, the test set's."""
    n = len(scores)
    mean = float(np.mean(scores))
    seed_var = sigma2 / n if sigma_df else 0.0
    total = seed_var + test_var
    df = math.inf if not sigma_df or seed_var == 0 else total ** 2 / (seed_var ** 2 / sigma_df)
    se = math.sqrt(total)
    q = seeds_mod.t_quantile(level, df)
    return Interval(mean, mean - q * se, mean + q * se, se, seed_var, test_var, df, n)


def test_set_variance(stats_by_seed: Sequence[np.ndarray], metric: str, refs: Sequence[str],
                      counts: np.ndarray) -> float:
    """The variance over resamples of the mean over seeds of the corpus score."""
    scorer = bootstrap.Scorer(metric, refs)
    means = np.mean([scorer.many(counts @ stats) for stats in stats_by_seed], axis=0)
    return float(np.var(means, ddof=1))


def system_intervals(runs: Path, results: List[dict], level: float,
                     refs_of: Dict[str, Path]) -> Dict[Tuple[str, str], Dict[str, Interval]]:
    """(pair, system) -> metric -> :class:`Interval`, from the runs' results and hypotheses."""
    by = {}
    for r in results:
        by.setdefault((r["pair"], r["system"]), []).append(r)
    out = {}
    for metric in METRICS:
        sigma2, sigma_df = seeds_mod.seed_variance(
            {key: [r["subsets"]["test"][metric] for r in rs] for key, rs in by.items()})
        for (pair, system), rs in by.items():
            rs = sorted(rs, key=lambda r: r["seed"])
            refs = textio.read_lines(refs_of[pair])
            counts = resample_counts(len(refs))
            stats = [bootstrap.sentence_stats(textio.read_lines(hyp_path(runs, r, "test")), refs, metric)
                     for r in rs]
            scores = [r["subsets"]["test"][metric] for r in rs]
            out.setdefault((pair, system), {})[metric] = interval(
                scores, test_set_variance(stats, metric, refs, counts), sigma2, sigma_df, level)
    return out


def refs_of(results: List[dict], repo: Path) -> Dict[str, Path]:
    """Each direction's raw test references, from the runs' records."""
    out = {}
    for r in results:
        out.setdefault(r["pair"], Path(repo) / r["subsets"]["test"]["raw_ref"])
    return out


def pairwise_claims(ranked: Dict[str, List[str]], paper_file: str) -> dict:
    """The claims file of the board's pairwise comparisons: per direction, every pair of systems
    as "the higher-ranked scores above the lower" (``ranked``: pair -> systems best first)."""
    claims = []
    for pair, names in ranked.items():
        for i, upper in enumerate(names):
            for lower in names[i + 1:]:
                claims.append({
                    "id": f"{pair}:{slug(upper)}>{slug(lower)}", "where": "the board",
                    "relation": ">", "system": upper, "against": lower, "pairs": [pair],
                    "claim": f"{upper} scores above {lower} ({pair})"})
    return {"paper": "The leaderboard's pairwise comparisons (made from its runs)",
            "paper_file": paper_file,
            "defaults": {"metric": "sacrebleu", "subset": "test"}, "claims": claims}


def verdicts(runs: Path, data: dict, where: Path, repo: Path = paths.REPO):
    """``(claims, folder, verdicts)`` of the pairwise claims ``data`` on the runs' folder."""
    claims = Claims(where, {**data, "claims": validate(data, str(where))})
    folder = Folder(runs, repo)
    return claims, folder, evaluate(claims, folder, repo)


def not_separated(verdict_list) -> Dict[Tuple[str, str], List[str]]:
    """(pair, system) -> the systems whose order with it is not significant."""
    out: Dict[Tuple[str, str], List[str]] = {}
    for v in verdict_list:
        if v.outcome != "held":
            a, b = v.claim["system"], v.claim["against"]
            out.setdefault((v.pair, a), []).append(b)
            out.setdefault((v.pair, b), []).append(a)
    return out


def ranks(means: Dict[str, float]) -> Dict[str, int]:
    """Competition ranks (1, 2, 2, 4) by mean, higher first."""
    return dict(zip(means, rankdata([-m for m in means.values()], method="min").tolist()))


def curve_stand(result: dict, last: int = 250) -> Optional[dict]:
    """Where a run's validation curve stands at its last validation: its loss and its change
    over the last ``last`` updates, in percent of the last loss (negative: still falling)."""
    points = [(c["num_updates"], c["loss"]) for c in result.get("valid_curve") or []
              if c.get("num_updates") is not None and c.get("loss") is not None]
    if not points:
        return None
    end_updates, end_loss = points[-1]
    before = [p for p in points if p[0] <= end_updates - last]
    change = None
    if before:
        u, loss = before[-1]
        change = 100.0 * (end_loss - loss) / end_loss * (last / (end_updates - u))
    return {"updates": end_updates, "loss": end_loss, "change_pct": change}
