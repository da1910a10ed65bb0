"""Every claim of a claims file against one results folder: one :class:`Verdict` per claim and
translation direction (threshold claims: one per claim)."""
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from . import analysis
from .results import Folder
from .rule import NOT_RUN, Comparison, Order, compare, descriptive, order, outcome, overall
from .seeds import margin_for
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


def margin_of(claim: dict, sigma: Optional[float] = None) -> Optional[float]:
    """The claim's margin δ (metric units), for ≈, ≥ and ≤, widened to the seed spread of the
    folder's between-seed standard deviation ``sigma`` (:func:`.seeds.margin_for`)."""
    margin = claim.get("margin")
    return None if margin is None else margin_for(margin["value"], sigma)


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


def _comparison(claim, folder: Folder, pair) -> Verdict:
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
        margin = margin_of(claim, both.sigma if both else None)
        parts.append((system, compare(claim["relation"], seeds, folder.level, metric != "ter",
                                      margin, both, size)))
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
    return Verdict(claim, pair, result.verdict, order=result)


EXACT = ("params",)  # threshold measures without sampling error: verdicts, not descriptions


def evaluate(claims: Claims, folder: Folder, repo: Path) -> List[Verdict]:
    """The verdicts of every claim on ``folder``, in the claims file's order."""
    verdicts = []
    for claim in claims.claims:
        relation = claim["relation"]
        if relation == "threshold":
            measured = analysis.measure(claim, folder.path, Path(repo), folder.report)
            if claim["measure"]["kind"] not in EXACT:
                measured.verdict = descriptive(measured.verdict)
            verdicts.append(Verdict(claim, None, measured.verdict, measured=measured))
            continue
        for pair in claim["pairs"]:
            verdicts.append(_comparison(claim, folder, pair) if relation in COMPARISONS
                            else _order(claim, folder, pair))
    return verdicts
