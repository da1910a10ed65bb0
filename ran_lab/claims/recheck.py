"""The recheck of significance: every test whose p lies near the level (0.005 < p < 0.02) drawn
again under another bootstrap seed, and the verdicts of the claims compared.

A p-value is a Monte-Carlo estimate; :mod:`.bootstrap` already draws more resamples where p's
interval holds the level, so another seed should not change a verdict. :func:`recheck` shows it
does not: it keeps every other seed's test as the folder's CLAIMS.json holds it, tests the near
ones afresh under ``seed``, draws the test set's share of every comparison's variance (what the
verdicts' intervals rest on) again under ``seed``, and lists each near test and each claim whose
verdict changes. ``python scripts/claims.py --all --recheck SEED`` prints the result as Markdown.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from . import REPO, _cache, claims_file_of, load
from .engine import evaluate
from .results import Folder
from ..tables import markdown_table

NEAR = (0.005, 0.02)
OTHER_SEED = 54321


def near(p: Optional[float], bounds: Tuple[float, float] = NEAR) -> bool:
    return p is not None and bounds[0] < p < bounds[1]


@dataclass
class Recheck:
    """One folder's recheck: each near test as ``(entry, again)`` (CLAIMS.json's test and the same
    test under the other seed), and the verdicts that differ (key, first, again)."""
    folder: str
    seed: int
    tests: List[Tuple[dict, dict]] = field(default_factory=list)
    changed: List[Tuple[str, str, str]] = field(default_factory=list)


def _reseeded(entries: List[dict], seed: int, keep) -> List[dict]:
    return [{**e, "bootstrap_seed": seed} for e in entries if keep(e)]


def recheck(folder, seed: int = OTHER_SEED, refs: Optional[dict] = None,
            repo: Path = REPO) -> Recheck:
    folder = Path(folder)
    claims = load(claims_file_of(folder, repo), repo)
    shown = folder.resolve().relative_to(Path(repo).resolve()) if folder.is_absolute() else folder
    borrow = claims.borrow_for(str(shown))
    first = Folder(folder, repo, refs, _cache(folder), False, _cache(folder, "pooled"),
                   borrow=borrow)
    first.key = str(shown)
    verdicts = {v.key: v.verdict for v in evaluate(claims, first, repo)}
    tests = list(first.used.values())
    again = Folder(folder, repo, refs,
                   _reseeded(tests, seed, lambda e: not near(e["p"])), True,
                   [], seed, borrow)
    again.key = str(shown)
    second = {v.key: v.verdict for v in evaluate(claims, again, repo)}
    result = Recheck(str(shown), seed)
    for e in tests:
        if near(e["p"]):
            result.tests.append((e, again.test(e["pair"], e["system"], e["against"], e["seed"],
                                               e["subset"], e["metric"])))
    result.changed = [(k, verdicts[k], second[k]) for k in verdicts if verdicts[k] != second[k]]
    return result


HEADERS = ("pair", "subset", "metric", "seed", "system", "against", "first", "again")


def markdown(rechecks: List[Recheck]) -> str:
    """The rechecks as one Markdown page."""
    from .bootstrap import CAP, SEED
    from .report import pval
    lines = ["# Significance under another bootstrap seed",
             "",
             f"Every seed's paired-bootstrap test whose p lies between {NEAR[0]} and {NEAR[1]}, "
             f"drawn with seed {SEED} (CLAIMS.json) and again with another seed; each draws more "
             f"resamples while p's Monte-Carlo interval holds 0.01 (at most {CAP:,}). The test "
             f"set's share of every comparison's variance, which the verdicts' intervals rest on, "
             f"is drawn again under the other seed too, and each verdict that changes is listed. "
             f"Written by `python scripts/claims.py --all --recheck SEED`.", ""]
    for r in rechecks:
        lines += [f"## {r.folder} (seed {r.seed})", ""]
        if not r.tests:
            lines += ["No test near the level.", ""]
            continue
        def cell(t):
            return (f"{pval(t['p'])}, {t['samples']:,} resamples"
                    f"{'' if t['settled'] else ', unsettled'}")
        lines += markdown_table(HEADERS, [[e[k] for k in HEADERS[:6]] + [cell(e), cell(a)]
                                          for e, a in r.tests], text_columns=len(HEADERS))
        lines.append("")
        lines += ([f"- **{k}**: {a} → {b}" for k, a, b in r.changed] or
                  ["Every verdict is the same."])
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
