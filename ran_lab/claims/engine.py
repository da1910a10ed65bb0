"""Every claim of a claims file against one results folder: one :class:`Verdict` per claim and
translation direction (threshold claims: one per claim)."""
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from . import analysis
from .results import Folder
from .rule import HELD, NOT_RUN, Comparison, Order, compare, descriptive, order, outcome, overall
from .spec import COMPARISONS, Claims, compared


@dataclass
class Verdict:
    """``claim`` (the claims file's entry), ``pair`` (None for a threshold claim), ``verdict``;
    ``comparisons``: (system, Comparison) for each system a comparison names; ``order`` or
    ``measured`` for the other relations."""
    claim: dict
    pair: Optional[str]
    verdict: str
    comparisons: List[Tuple[str, Comparison]] = field(default_factory=list)
    order: Optional[Order] = None
    measured: Optional[analysis.Measured] = None

    @property
    def key(self) -> str:
        return self.claim["id"] + (f"@{self.pair}" if self.pair else "")

    @property
    def outcome(self) -> str:
        """held / inconclusive / not held / not run."""
        return outcome(self.verdict)

    @property
    def higher_is_better(self) -> bool:
        return self.claim.get("metric", "sacrebleu") != "ter"


def combine(parts: List[Tuple[str, Comparison]]) -> str:
    """One verdict over several systems: the common verdict, else each verdict with its systems."""
    verdicts = list(dict.fromkeys(c.verdict for _, c in parts))
    if len(verdicts) == 1:
        return verdicts[0]
    each = "; ".join(f"{v} for {', '.join(s for s, c in parts if c.verdict == v)}"
                     for v in verdicts)
    return f"{overall([outcome(c.verdict) for _, c in parts])} ({each})"


def margin_of(claim: dict) -> Optional[float]:
    """The claim's margin δ (metric units), for ≈, ≥ and ≤: the claims file's value (its own or
    the defaults'), never widened by the noise of the results."""
    margin = claim.get("margin")
    return None if margin is None else margin["value"]


def stated_difference(claim: dict, system: str, pair: str) -> Optional[float]:
    """The difference a comparison must be able to find, in quality units (better positive): the
    margin for ≈, ≥ and ≤; for > and < the paper's size (the nearer end of a range), else the
    difference of the paper's first numbers that name both systems; None where the paper
    states none."""
    if claim["relation"] in ("≈", "≥", "≤"):
        return margin_of(claim)
    size = size_of(claim, system, pair)
    if size is not None:
        value = size["value"]
        return (min(abs(v) for v in value) if isinstance(value, (list, tuple))
                else abs(value))
    for entry in claim.get("paper", []):
        values = entry.get("values", {})
        if system in values and claim["against"] in values:
            return abs(values[system] - values[claim["against"]])
    return None


def with_power(c: Comparison, stated: Optional[float]) -> Comparison:
    """``c`` with what it can detect set against what it must (:class:`.rule.Comparison`)."""
    c.stated = stated
    c.testable = None if c.mde is None or stated is None else c.mde <= stated
    return c


def size_of(claim: dict, system: str, pair: str) -> Optional[dict]:
    """The paper's stated size for ``system`` on ``pair``: the claim's ``size`` with the value for
    that direction (``value``, or ``values`` by pair, or by system)."""
    size = claim.get("size")
    if not size:
        return None
    value = size.get("value")
    if value is None:
        by = size.get("values", {})
        value = by.get(pair, by.get(system))
    return None if value is None else {**size, "value": value}


WEAK_BASELINE = "against a baseline below its paper's order"


def _comparison(claim, folder: Folder, pair, weak: Optional[str] = None) -> Verdict:
    """``weak``: why ``against`` is a baseline below its paper's order in this folder, if it is
    (a held part then says so)."""
    subset, metric, against = claim["subset"], claim["metric"], claim["against"]
    parts = []
    for system in compared(claim):
        if not (folder.has(pair, system, subset) and folder.has(pair, against, subset)):
            parts.append((system, Comparison(NOT_RUN)))
            continue
        seeds = folder.comparison_seeds(pair, system, against, subset, metric)
        both = folder.combined(pair, system, against, [s.seed for s in seeds], subset, metric) \
            if seeds else None
        size = size_of(claim, system, pair)
        result = compare(claim["relation"], seeds, folder.level, metric != "ter",
                         margin_of(claim), both, size)
        if weak is not None and outcome(result.verdict) == HELD:
            result.verdict = (f"{HELD} ({'one seed; ' if result.one_seed else ''}"
                              f"{WEAK_BASELINE})")
        parts.append((system, with_power(result, stated_difference(claim, system, pair))))
    return Verdict(claim, pair, combine(parts), comparisons=parts)


def _order(claim, folder: Folder, pair) -> Verdict:
    subset, metric, groups = claim["subset"], claim["metric"], claim["groups"]
    pair_seeds, both = {}, {}
    for i, upper in enumerate(groups):
        for lower in (s for g in groups[i + 1:] for s in g):
            for a in upper:
                run = folder.has(pair, a, subset) and folder.has(pair, lower, subset)
                seeds = folder.comparison_seeds(pair, a, lower, subset, metric) if run else []
                pair_seeds[(a, lower)] = seeds
                if seeds:
                    both[(a, lower)] = folder.combined(pair, a, lower, [s.seed for s in seeds],
                                                       subset, metric)
    result = order(groups, pair_seeds, folder.level, metric != "ter", both)
    for higher, lower, c, _ in result.pairs:
        gaps = [abs(e["values"][higher] - e["values"][lower]) for e in claim.get("paper", [])
                if higher in e.get("values", {}) and lower in e.get("values", {})]
        with_power(c, gaps[0] if gaps else None)
    return Verdict(claim, pair, result.verdict, order=result)


EXACT = ("params",)  # threshold measures without sampling error: verdicts, not descriptions


def evaluate(claims: Claims, folder: Folder, repo: Path) -> List[Verdict]:
    """The verdicts of every claim on ``folder``, in the claims file's order."""
    verdicts = []
    for claim in claims.claims:
        relation = claim["relation"]
        if relation == "threshold":
            measured = analysis.measure(claim, folder.path, Path(repo), folder.report)
            if claim["measure"]["kind"] not in EXACT or claim.get("by_construction"):
                measured.verdict = descriptive(measured.verdict)
            verdicts.append(Verdict(claim, None, measured.verdict, measured=measured))
            continue
        for pair in claim["pairs"]:
            weak = claims.weak(getattr(folder, "key", ""), claim.get("against", ""))
            verdicts.append(_comparison(claim, folder, pair, weak) if relation in COMPARISONS
                            else _order(claim, folder, pair))
    return verdicts
