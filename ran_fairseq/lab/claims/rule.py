"""The verdict rule, on plain numbers: one comparison, an order of several systems, a threshold.

A comparison holds the runs of two systems seed by seed (:class:`Seed`: each system's score on the
same seed and the paired-bootstrap p-value between them). Its difference is that of the table's
scores: the mean over the seeds of one system's score minus the mean of the other's. A difference
is *significant* when p < ``level`` in every seed with the difference of that seed on the same
side; ``k of n`` counts the seeds where it is. The paper's relation then gives the verdict:

- ``>`` (better): held if significantly better; within noise if not significant; opposite if
  significantly worse. ``<`` mirrors it.
- ``≈`` (on par): held if not significant; not held (better / worse) if significant.
- ``≥`` (on par or better): held if not significantly worse; not held (worse) if it is. ``≤``
  mirrors it.
- an order of several systems (groups of equals, best first): held if the observed order matches
  and no pair the paper ranks apart is significantly reversed; order not reproduced (within noise)
  if it differs only by pairs that are not significant; reversed if a pair is significantly
  reversed.
- a threshold (analysis and speed claims): held where the measured value passes the stated limit.
- not run: a system without results.
"""
from dataclasses import dataclass, field
from statistics import mean
from typing import Dict, List, Optional, Sequence, Tuple

RELATIONS = (">", "<", "≈", "≥", "≤", "order", "threshold")
LEVEL = 0.01

HELD = "held"
NOT_RUN = "not run"
WITHIN_NOISE = "within noise"
OPPOSITE = "opposite"
NOT_HELD = "not held"
NOT_HELD_BETTER = "not held (better)"
NOT_HELD_WORSE = "not held (worse)"
ORDER_NOISE = "order not reproduced (within noise)"
REVERSED = "reversed"


@dataclass(frozen=True)
class Seed:
    """One seed of a comparison: the scores of the system and of the one it is compared with, and
    the paired bootstrap's p-value between the two runs (None: not tested)."""
    seed: int
    system: float
    against: float
    p: Optional[float]


@dataclass
class Comparison:
    """A comparison's verdict: ``difference`` is mean(system) - mean(against) in the metric's own
    units (for TER a positive difference is worse); ``k`` of ``n`` seeds are significant on the
    side of the difference (in quality: better or worse)."""
    verdict: str
    difference: Optional[float] = None
    k: int = 0
    n: int = 0
    seeds: Tuple[Seed, ...] = ()
    side: Optional[str] = None  # "better" / "worse" / None (no difference)
    significant: bool = False


def _quality(diff: float, higher_is_better: bool) -> float:
    return diff if higher_is_better else -diff


def _significant(seed: Seed, level: float, higher_is_better: bool) -> Optional[str]:
    """'better' / 'worse' where this seed's difference is significant, else None."""
    if seed.p is None or seed.p >= level:
        return None
    gain = _quality(seed.system - seed.against, higher_is_better)
    return "better" if gain > 0 else "worse" if gain < 0 else None


def compare(relation: str, seeds: Sequence[Seed], level: float = LEVEL,
            higher_is_better: bool = True) -> Comparison:
    """The verdict of one comparison of two systems by the paper's ``relation`` (>, <, ≈, ≥, ≤)."""
    if relation not in (">", "<", "≈", "≥", "≤"):
        raise ValueError(f"not a comparison's relation: {relation!r}")
    seeds = tuple(sorted(seeds, key=lambda s: s.seed))
    if not seeds:
        return Comparison(NOT_RUN)
    difference = mean(s.system for s in seeds) - mean(s.against for s in seeds)
    gain = _quality(difference, higher_is_better)
    side = "better" if gain > 0 else "worse" if gain < 0 else None
    marks = [_significant(s, level, higher_is_better) for s in seeds]
    k = sum(1 for m in marks if side is not None and m == side)
    significant = side is not None and k == len(seeds)
    better, worse = significant and side == "better", significant and side == "worse"
    verdict = {
        ">": HELD if better else OPPOSITE if worse else WITHIN_NOISE,
        "<": HELD if worse else OPPOSITE if better else WITHIN_NOISE,
        "≈": NOT_HELD_BETTER if better else NOT_HELD_WORSE if worse else HELD,
        "≥": NOT_HELD_WORSE if worse else HELD,
        "≤": NOT_HELD_BETTER if better else HELD,
    }[relation]
    return Comparison(verdict, difference, k, len(seeds), seeds, side, significant)


@dataclass
class Order:
    """An order's verdict: the observed mean scores, best first, and the pairs the paper ranks
    apart that the results put the other way round (``(higher, lower, comparison)``, where
    ``higher`` is the system the paper ranks higher)."""
    verdict: str
    observed: List[Tuple[str, float]] = field(default_factory=list)
    reversed_pairs: List[Tuple[str, str, Comparison]] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)


def order(groups: Sequence[Sequence[str]], pair_seeds: Dict[Tuple[str, str], Sequence[Seed]],
          level: float = LEVEL, higher_is_better: bool = True) -> Order:
    """The verdict of an order claim. ``groups``: the paper's order, best first, each group a list
    of systems the paper puts level; ``pair_seeds[(a, b)]``: the seeds of ``a`` against ``b`` for
    every pair of systems in different groups, ``a`` ranked higher by the paper (an empty list: a
    system has no results)."""
    means: Dict[str, float] = {}
    missing = []
    for i, upper in enumerate(groups):
        for lower in (s for g in groups[i + 1:] for s in g):
            for a in upper:
                seeds = pair_seeds.get((a, lower), ())
                if not seeds:
                    missing += [x for x in (a, lower) if x not in missing]
                    continue
                means.setdefault(a, mean(s.system for s in seeds))
                means.setdefault(lower, mean(s.against for s in seeds))
    if missing:
        return Order(NOT_RUN, missing=missing)
    reversed_pairs, significant = [], False
    for i, upper in enumerate(groups):
        for lower in (s for g in groups[i + 1:] for s in g):
            for a in upper:
                result = compare(">", pair_seeds[(a, lower)], level, higher_is_better)
                if result.side != "better":
                    reversed_pairs.append((a, lower, result))
                    significant |= result.verdict == OPPOSITE
    observed = sorted(means.items(), key=lambda kv: _quality(kv[1], higher_is_better),
                      reverse=True)
    verdict = REVERSED if significant else ORDER_NOISE if reversed_pairs else HELD
    return Order(verdict, observed, reversed_pairs)


OPS = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


@dataclass
class Test:
    """One threshold test: ``value op limit``; ``value`` None where the file lacks the measure."""
    label: str
    value: Optional[float]
    op: str
    limit: float
    passed: Optional[bool] = None

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"not a threshold's operator: {self.op!r} (one of {', '.join(OPS)})")
        if self.passed is None and self.value is not None:
            self.passed = OPS[self.op](self.value, self.limit)


def threshold(tests: Sequence[Test]) -> str:
    """held / not held over every test; 'held for A; not held for B' where they differ; not run
    when no test has a value."""
    run = [t for t in tests if t.value is not None]
    if not run:
        return NOT_RUN
    passed = [t.label for t in run if t.passed]
    failed = [t.label for t in run if not t.passed]
    unrun = [t.label for t in tests if t.value is None]
    if not failed and not unrun:
        return HELD
    if not passed and not unrun:
        return NOT_HELD
    parts = ([f"held for {', '.join(passed)}"] if passed else []) + \
        ([f"not held for {', '.join(failed)}"] if failed else []) + \
        ([f"not run for {', '.join(unrun)}"] if unrun else [])
    return "; ".join(parts)
