"""The verdict rule, on plain numbers: one comparison, an order of several systems, a threshold.

Every verdict is one of three outcomes, *held*, *inconclusive* or *not held* (or *descriptive*: a
measure without an interval; or *not run*: a system without results); :func:`outcome` reads it
from a verdict's text.

A comparison holds the runs of two systems seed by seed (:class:`Seed`: each system's score on the
same seed, the two-sided percentile bootstrap's p between them and the difference's interval, from
the same resamples). Its difference is that of the table's scores: the mean over the seeds of one
system's score minus the mean of the other's; the verdict rests on that mean's interval and p from
:func:`.seeds.combined` (the test set's resampling and the between-seed variance together, at the
stated level; p < level exactly when the interval excludes 0), so that a verdict never
contradicts its interval. With the claim's margin δ (in the metric's units, the claims file's
value and nothing else; quality is read so that better is positive, TER's sign turned
round), the paper's relation gives the *direction*:

- ``>`` (better): held if the interval lies above 0; not held (worse) if below; inconclusive
  otherwise. ``<`` mirrors it.
- ``≈`` (on par): held if the interval lies inside ±δ; not held (better / worse) if it lies
  wholly outside; inconclusive otherwise.
- ``≥`` (on par or better): held if the interval's lower end (in quality) is above −δ; not
  held (worse) if its upper end is below −δ; inconclusive otherwise. ``≤`` mirrors it.
- one seed: a held direction is "held (one seed)"; no seed variance at all (none in the folder,
  none borrowed): "not judged (one seed, no seed variance)", whatever the interval says.
- near the level: a comparison whose verdict changes where its interval's half-width is 2.5 %
  wider or narrower (what another bootstrap seed may do to the test set's share) is
  ``fragile``, and the pages say so.
- power: each comparison carries its minimum detectable effect (:func:`.seeds.detectable`), and
  is *testable* where that is at most the difference it must find (set by the engine: the
  paper's stated difference for > and <, the margin for ≈, ≥ and ≤).
- a size (the paper's own difference, where it states one) is a second verdict: *consistent*
  where the paper's difference lies inside the interval (or as the size's test says), else ours is
  *smaller* or *larger*; *not comparable* where the direction is not held. It decides the claim
  only where the claims file marks the paper's setting ``comparable`` ("direction held; size not
  held (larger)").
- an order of several systems (groups of equals, best first): every pair the paper ranks apart is
  tested as a comparison, its p corrected by Holm over the claim's pairs. Held if every pair is
  significantly in the paper's order; reversed (not held) if a pair is significantly the other
  way; order not reproduced (within noise) if the observed order differs only by pairs that are
  not significant; inconclusive if the observed order matches but not every pair is significant.
- a threshold (analysis and speed claims): the measured value against the stated limit; only an
  exact count (parameters) is a verdict, every other measure is *descriptive* (no interval), left
  out of the tallies.
"""
from dataclasses import dataclass, field
from statistics import mean
from typing import Dict, List, Optional, Sequence, Tuple

from .seeds import Combined, holm

RELATIONS = (">", "<", "≈", "≥", "≤", "order", "threshold")
LEVEL = 0.01

HELD = "held"
NOT_RUN = "not run"
INCONCLUSIVE = "inconclusive"
NOT_HELD = "not held"
NOT_HELD_BETTER = "not held (better)"
NOT_HELD_WORSE = "not held (worse)"
ORDER_NOISE = "order not reproduced (within noise)"
REVERSED = "reversed"
SIZE_TESTS = ("inside", "at_least", "at_most")
DESCRIPTIVE = "descriptive"
ONE_SEED = "held (one seed)"
NOT_JUDGED = "not judged"
NOT_JUDGED_TEXT = "not judged (one seed, no seed variance)"
OUTCOMES = (HELD, INCONCLUSIVE, NOT_HELD, NOT_JUDGED)
CONSISTENT = "consistent"
NOT_COMPARABLE = "not comparable"
SIZES = (CONSISTENT, "smaller", "larger", NOT_COMPARABLE)


def outcome(verdict: str) -> str:
    """held / inconclusive / not held / not run of a verdict's text: its head, before any
    parenthesis (a verdict over several systems or tests opens with the outcome over all of them,
    then lists each part's in parentheses)."""
    if verdict.startswith("direction held; size"):
        return HELD if verdict.endswith("size held") else NOT_HELD
    head = verdict.split(" (")[0]
    if head in (NOT_RUN, HELD, INCONCLUSIVE, DESCRIPTIVE, NOT_JUDGED):
        return head
    if head == ORDER_NOISE.split(" (")[0]:
        return INCONCLUSIVE
    return NOT_HELD


def overall(outcomes: Sequence[str]) -> str:
    """The outcome over several parts: not held if any part is, else inconclusive if any is, else
    not judged if any is, else held; not run where no part ran, or where every part that ran is
    held and another did not run (a claim is not held on the strength of the part that ran)."""
    ran = [o for o in outcomes if o != NOT_RUN]
    if not ran:
        return NOT_RUN
    if NOT_HELD in ran:
        return NOT_HELD
    if INCONCLUSIVE in ran:
        return INCONCLUSIVE
    if NOT_JUDGED in ran:
        return NOT_JUDGED
    return NOT_RUN if len(ran) < len(outcomes) else HELD


@dataclass(frozen=True)
class Seed:
    """One seed of a comparison: the scores of the system and of the one it is compared with, and
    the paired bootstrap's p-value between the two runs (None: not tested)."""
    seed: int
    system: float
    against: float
    p: Optional[float]
    interval: Optional[Tuple[float, float]] = None
    settled: bool = True
    samples: Optional[int] = None


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
    pooled: Optional[Tuple[float, float]] = None
    margin: Optional[float] = None
    size: Optional[dict] = None  # the claim's size, and "result": one of SIZES
    direction: Optional[str] = None  # the verdict on the direction, where a size was checked
    combined: Optional[Combined] = None  # the interval and p the verdict rests on
    mde: Optional[float] = None  # the difference found with 80 % power (seeds.detectable)
    stated: Optional[float] = None  # what the power is judged against: the paper's difference
    testable: Optional[bool] = None  # mde <= stated (None: nothing to judge it against)
    fragile: bool = False  # the verdict changes with the interval's half-width FRAGILE wider

    @property
    def one_seed(self) -> bool:
        return self.n == 1


def _quality(diff: float, higher_is_better: bool) -> float:
    return diff if higher_is_better else -diff


def _significant(seed: Seed, level: float, higher_is_better: bool) -> Optional[str]:
    """'better' / 'worse' where this seed's difference is significant, else None."""
    if seed.p is None or seed.p >= level or not seed.settled:
        return None
    gain = _quality(seed.system - seed.against, higher_is_better)
    return "better" if gain > 0 else "worse" if gain < 0 else None


def _quality_interval(interval, higher_is_better):
    lo, hi = interval
    return (lo, hi) if higher_is_better else (-hi, -lo)


def _by_margin(relation: str, interval, margin: float) -> str:
    """≈, ≥, ≤ on the pooled interval (in quality units) and the margin δ."""
    lo, hi = interval
    if relation == "≈":
        if -margin < lo and hi < margin:
            return HELD
        return NOT_HELD_BETTER if lo > margin else NOT_HELD_WORSE if hi < -margin else INCONCLUSIVE
    if relation == "≥":
        return HELD if lo > -margin else NOT_HELD_WORSE if hi < -margin else INCONCLUSIVE
    return HELD if hi < margin else NOT_HELD_BETTER if lo > margin else INCONCLUSIVE


def _direction(relation: str, interval, margin: Optional[float]) -> str:
    """The verdict of a comparison's interval (quality units) by the paper's relation."""
    lo, hi = interval
    if relation == ">":
        return HELD if lo > 0 else NOT_HELD_WORSE if hi < 0 else INCONCLUSIVE
    if relation == "<":
        return HELD if hi < 0 else NOT_HELD_BETTER if lo > 0 else INCONCLUSIVE
    return _by_margin(relation, interval, margin)


# How far the interval's half-width may move under another bootstrap seed: the test set's share
# of the variance is a Monte-Carlo estimate from 10,000 resamples (relative sd of a variance
# sqrt(2/10,000) = 1.4 %, of se half that); three such standard errors of se, rounded up.
FRAGILE = 0.025


def size_result(size: dict, interval) -> str:
    """consistent / larger / smaller: the paper's difference ``size["value"]`` (metric units)
    against our interval, by ``size["test"]`` (inside, the default; at_least; at_most)."""
    value, (lo, hi) = size["value"], interval
    low, high = value if isinstance(value, (list, tuple)) else (value, value)
    if low <= hi and lo <= high:
        found = CONSISTENT
    else:
        # ours is smaller where the whole interval lies nearer zero than the paper's difference
        nearer = (low > hi) if low > 0 else (high < lo)
        found = "smaller" if nearer else "larger"
    test = size.get("test", "inside")
    if test == "at_least" and found == "larger" or test == "at_most" and found == "smaller":
        return CONSISTENT
    return found


def compare(relation: str, seeds: Sequence[Seed], level: float = LEVEL,
            higher_is_better: bool = True, margin: Optional[float] = None,
            combined: Optional[Combined] = None, size: Optional[dict] = None) -> Comparison:
    """The verdict of one comparison of two systems by the paper's ``relation`` (>, <, ≈, ≥, ≤),
    from ``combined`` (the mean difference's interval and p, metric units); ``margin`` (δ, the
    claims file's) is needed for ≈, ≥ and ≤; ``size`` ({"value", "test",
    "comparable"}) is the paper's difference, a second verdict."""
    if relation not in (">", "<", "≈", "≥", "≤"):
        raise ValueError(f"not a comparison's relation: {relation!r}")
    seeds = tuple(sorted(seeds, key=lambda s: s.seed))
    if not seeds:
        return Comparison(NOT_RUN)
    if combined is None:
        raise ValueError("a comparison needs its combined interval (seeds.combined)")
    difference = mean(s.system for s in seeds) - mean(s.against for s in seeds)
    gain = _quality(difference, higher_is_better)
    side = "better" if gain > 0 else "worse" if gain < 0 else None
    marks = [_significant(s, level, higher_is_better) for s in seeds]
    k = sum(1 for m in marks if side is not None and m == side)
    lo, hi = _quality_interval(combined.interval, higher_is_better)
    better, worse = lo > 0, hi < 0
    significant = better or worse
    if relation in ("≈", "≥", "≤") and margin is None:
        raise ValueError(f"a {relation} comparison needs a margin")
    verdict = (_direction(relation, (lo, hi), margin) if combined.judged
               else NOT_JUDGED_TEXT)
    if not combined.judged:
        significant = False
    by_margin = relation in ("≈", "≥", "≤")
    result = Comparison(verdict, difference, k, len(seeds), seeds, side, significant,
                        combined.interval, margin if by_margin else None, combined=combined)
    result.mde = combined.mde
    if combined.judged:
        centre, half = _quality(difference, higher_is_better), (hi - lo) / 2
        result.fragile = any(
            _direction(relation, (centre - half * f, centre + half * f), margin) != verdict
            for f in (1 - FRAGILE, 1 + FRAGILE))
    if size is not None:
        found = size_result(size, combined.interval) if verdict == HELD else NOT_COMPARABLE
        result.size = {**size, "result": found}
        result.direction = verdict
        if size.get("comparable") and verdict == HELD:
            result.verdict = ("direction held; size held" if found == CONSISTENT else
                              f"direction held; size not held ({found})")
    if result.verdict == HELD and result.one_seed:
        result.verdict = ONE_SEED
    return result


@dataclass
class Order:
    """An order's verdict: the observed mean scores, best first; every pair the paper ranks apart
    as ``(higher, lower, comparison, holm_p)`` (``higher``: the system the paper ranks higher;
    ``holm_p``: the pair's p corrected by Holm over the claim's pairs); the pairs the results put
    the other way round."""
    verdict: str
    observed: List[Tuple[str, float]] = field(default_factory=list)
    reversed_pairs: List[Tuple[str, str, Comparison]] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    pairs: List[Tuple[str, str, Comparison, float]] = field(default_factory=list)

    @property
    def one_seed(self) -> bool:
        return any(c.one_seed for _, _, c, _ in self.pairs)


def order(groups: Sequence[Sequence[str]], pair_seeds: Dict[Tuple[str, str], Sequence[Seed]],
          level: float = LEVEL, higher_is_better: bool = True,
          combined: Optional[Dict[Tuple[str, str], Combined]] = None) -> Order:
    """The verdict of an order claim. ``groups``: the paper's order, best first, each group a list
    of systems the paper puts level; ``pair_seeds[(a, b)]``: the seeds of ``a`` against ``b`` for
    every pair of systems in different groups, ``a`` ranked higher by the paper (an empty list: a
    system has no results); ``combined[(a, b)]``: that pair's interval and p."""
    means: Dict[str, float] = {}
    missing = []
    keys = []
    for i, upper in enumerate(groups):
        for lower in (s for g in groups[i + 1:] for s in g):
            for a in upper:
                keys.append((a, lower))
                seeds = pair_seeds.get((a, lower), ())
                if not seeds:
                    missing += [x for x in (a, lower) if x not in missing]
                    continue
                means.setdefault(a, mean(s.system for s in seeds))
                means.setdefault(lower, mean(s.against for s in seeds))
    if missing:
        return Order(NOT_RUN, missing=missing)
    adjusted = holm([combined[key].p for key in keys])
    pairs, reversed_pairs = [], []
    significant_right = significant_wrong = 0
    for (a, lower), p in zip(keys, adjusted):
        result = compare(">", pair_seeds[(a, lower)], level, higher_is_better,
                         combined=combined[(a, lower)])
        pairs.append((a, lower, result, p))
        if result.side != "better":
            reversed_pairs.append((a, lower, result))
        if p < level:
            significant_right += result.side == "better"
            significant_wrong += result.side == "worse"
    observed = sorted(means.items(), key=lambda kv: _quality(kv[1], higher_is_better),
                      reverse=True)
    if any(not c.combined.judged for _, _, c, _ in pairs):
        verdict = NOT_JUDGED_TEXT
    elif significant_wrong:
        verdict = REVERSED
    elif reversed_pairs:
        verdict = ORDER_NOISE
    elif significant_right == len(keys):
        verdict = ONE_SEED if any(c.one_seed for _, _, c, _ in pairs) else HELD
    else:
        verdict = (f"{INCONCLUSIVE} (order observed; {significant_right} of {len(keys)} pairs "
                   f"significant after Holm)")
    return Order(verdict, observed, reversed_pairs, pairs=pairs)


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
    signed: bool = False  # the value is a difference (printed with its sign), not a level

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"not a threshold's operator: {self.op!r} (one of {', '.join(OPS)})")
        if self.passed is None and self.value is not None:
            self.passed = OPS[self.op](self.value, self.limit)


def threshold(tests: Sequence[Test]) -> str:
    """held / not held over every test; 'not held (held for A; not held for B)' where they
    differ (not held where any test fails); not run when no test has a value."""
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
    return f"{NOT_HELD if failed else NOT_RUN} ({'; '.join(parts)})"


def descriptive(verdict: str) -> str:
    """A threshold verdict of a measure without an interval, as a description: "descriptive
    (limit met)", "descriptive (limit not met)", or each part's ("met for A; not met for B")."""
    if verdict == NOT_RUN or verdict.startswith(NOT_RUN + " (") and "held for" not in verdict:
        return verdict
    if verdict == HELD:
        return f"{DESCRIPTIVE} (limit met)"
    if verdict == NOT_HELD:
        return f"{DESCRIPTIVE} (limit not met)"
    inner = verdict.split(" (", 1)[1].rstrip(")")
    inner = inner.replace("not held for", "not met for").replace("held for", "met for")
    return f"{DESCRIPTIVE} ({inner})"
