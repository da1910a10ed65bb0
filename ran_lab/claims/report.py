"""CLAIMS.md and CLAIMS.json of a results folder, and the quotes that README.md and docs/ take
from them.

A page quotes a verdict inside a marked span, ``<!-- claim FOLDER#ID -->…<!-- /claim -->`` (with
``@PAIR`` after the id for a comparison or order: ``results/ran/long#Z-T1-ran-all@de-en``), or a
whole summary table inside ``<!-- claims-table FOLDER -->…<!-- /claims-table -->``, or the tally
of the paper's claims over every direction run (:func:`held_count`), inside
``<!-- claims-count FOLDER -->…<!-- /claims-count -->`` (``pairs=A,B`` after the folder: those
directions only);
:func:`fill` writes what the engine computes into every span and table, and the documentation
test fails where a page differs from it.
"""
import re
from typing import Callable, Dict, List, Optional

from ..tables import markdown_table
from . import bootstrap
from .engine import WEAK_BASELINE, Verdict
from .rule import (DESCRIPTIVE, HELD, INCONCLUSIVE, NOT_HELD, NOT_JUDGED, NOT_RUN, ONE_SEED,
                   SIZES, Comparison, outcome)
from .numbers import MINUS, interval_text, num, pval  # noqa: F401  (report.num, ... for callers)

COMPARED = (">", "<", "≈", "≥", "≤")
OP_SIGN = {"<": "<", "<=": "≤", ">": ">", ">=": "≥"}

RULE = (
    "**The rule.** Every verdict is *held*, *inconclusive* or *not held* (or *not run*: a system "
    "without results; *descriptive*: a measure without an interval, left out of the tallies). A "
    "comparison claim compares two systems on one metric and subset. Its difference is that of "
    "the table's scores: the mean over the seeds both systems ran of one system's score minus the "
    "other's (sacreBLEU unless TER is named; for TER a positive difference is worse). The verdict "
    "rests on that mean's {confidence} interval and its two-sided p, from one procedure: the "
    "variance of the mean is the test set's (the paired bootstrap's resampled sentences, every "
    "seed scored on the same resample) plus the seeds' (2σ²/n, σ² the between-seed variance "
    "pooled over this folder's systems and directions on the same subset and metric, or that of "
    "the two compared systems' own seeds where theirs is larger; where no system of the folder "
    "has two seeds, the variance of the sibling folder the claims file names, of the same recipe "
    "and scale, and with none the comparison is \"not judged\"; where one system decodes the "
    "other's checkpoints, the variance of the seeds' own differences over n), the interval is "
    "d ± t·se with t on the seed variance's own degrees of freedom (Σ(seeds − 1) of the systems "
    "it pools; never more because σ̂ came out small), and p < {level} exactly when the "
    "interval excludes 0 (docs/scoring.md). Each seed's own test (the two-sided percentile "
    "bootstrap, p and interval from the same resamples: {samples} at least, more while p's "
    "Monte-Carlo interval holds {level}, up to {cap}) is shown beside it, \"k of n\" counting the "
    "seeds significant on the side of the difference. By the paper's relation, with the claim's "
    "margin δ (the claims file's, never widened by the noise): **>** (better) is held "
    "if the interval lies above 0, not held if below, inconclusive otherwise; **<** mirrors it; "
    "**≈** (on par) is held if the interval lies inside ±δ, not held if wholly outside, "
    "inconclusive otherwise; **≥** (on par or better) is held if the interval's lower end is above "
    "−δ, not held if its upper end is below −δ, inconclusive otherwise; **≤** mirrors it. "
    "**Power**: beside each comparison, the smallest true difference it finds with 80 % power "
    "(\"detects ±x\": (t at {level} two-sided + t at 80 %)·se); it is *testable* where that is at "
    "most the paper's stated difference (for > and <) or the margin (for ≈, ≥, ≤); an "
    "inconclusive verdict that is not testable says nothing about the paper's claim. With one "
    "seed a held claim is \"held (one seed)\". Where the paper states a size it is a second "
    "verdict, shown beside the direction: consistent (the paper's difference inside our "
    "interval), smaller or larger, or not comparable (the direction not held); it decides the "
    "claim only where the paper's setting is this one's. An **order** (groups of equals, best "
    "first) tests every pair the paper ranks apart, its p corrected by Holm over the claim's "
    "pairs: held if every pair is significantly in the paper's order, \"reversed\" (not held) if a "
    "pair is significantly the other way, \"order not reproduced (within noise)\" (inconclusive) "
    "if only pairs that are not significant differ, inconclusive if the order is observed but not "
    "every pair is significant. A **threshold** claim reads a measure from a committed file and "
    "states its limit: a parameter count is a verdict, unless the claims file marks it fixed by "
    "the sizes chosen; any other measure is descriptive. A held claim against a baseline that "
    "the claims file marks as below its paper's order says so.")


def _seed_p(s) -> str:
    text = pval(s.p)
    if s.samples and s.samples > 1000:
        text += f" ({s.samples:,} resamples{'' if s.settled else ', unsettled'})"
    return text


def _seeds_text(c: Comparison, metric_suffix: str) -> str:
    """Each seed's own test (test set only), where there are several seeds."""
    if c.n == 1:
        return ""
    return "; ".join(f"seed {s.seed}: {num(s.system - s.against)}{metric_suffix}"
                     + (f" {interval_text(s.interval)}" if s.interval else "") + f", {_seed_p(s)}"
                     for s in c.seeds)


def combined_text(c: Comparison) -> str:
    """The interval and p the verdict rests on, and what their variance holds."""
    b = c.combined
    if b is None:
        return ""
    if not b.judged:
        return (f"test set only {interval_text(b.interval)}: no seed variance, in this folder or "
                f"named by its claims file")
    df = f"{b.df:g} df"
    if b.source == "shared":
        where = ("seeds and test set, one training run per seed: the seeds' differences vary "
                 f"by sd {b.sigma:.2f}, {df}")
    elif b.source == "pair":
        where = f"seeds and test set, seed sd {b.sigma:.2f} of these two systems' seeds, {df}"
    elif b.source.startswith("borrowed"):
        where = f"seeds and test set, seed sd {b.sigma:.2f} {b.source}, {df}"
    else:
        where = f"seeds and test set, seed sd {b.sigma:.2f}, {df}"
    text = f"interval {interval_text(b.interval)}, {pval(b.p)} ({where})"
    if c.mde is not None:
        text += f"; detects ±{c.mde:.2f}"
        if c.testable is not None:
            text += (f", testable (the paper's {c.stated:.2f})" if c.testable and
                     c.margin is None else
                     f", not testable (the paper's {c.stated:.2f})" if c.margin is None else
                     f", {'testable' if c.testable else 'not testable'} (margin {c.stated:g})")
    return text


def _pooled_text(c: Comparison) -> str:
    parts = []
    if c.combined is not None:
        parts.append(combined_text(c))
    if c.margin is not None:
        parts.append(f"margin ±{c.margin:.2f}".rstrip("0").rstrip("."))
    if c.fragile:
        parts.append("near the level: the verdict turns with a 2.5 % wider or narrower interval, "
                     "as another bootstrap seed may draw it")
    if c.size:
        value = c.size["value"]
        paper = (f"{num(value[0])} to {num(value[1])}" if isinstance(value, (list, tuple))
                 else num(value))
        parts.append(f"size {c.size['result']}: ours {num(c.difference)} beside the paper's "
                     f"{paper} (\"{c.size.get('text', '')}\")")
    return "; ".join(parts)


def comparison_phrase(relation: str, c: Comparison) -> str:
    """The verdict with how many seeds are significant where that says more."""
    if c.verdict == NOT_RUN:
        return NOT_RUN
    phrase = c.verdict
    if c.k and c.n > 1:
        phrase += f", {c.side} in {c.k} of {c.n} seeds"
    elif c.significant and relation in ("≥", "≤", "≈") and outcome(c.verdict) != NOT_HELD:
        phrase += f", significantly {c.side}"
    return phrase


def comparison_text(v: Verdict, system: str, c: Comparison, with_system: bool) -> str:
    suffix = " TER" if not v.higher_is_better else ""
    name = f"{system} " if with_system else ""
    if c.verdict == NOT_RUN:
        return f"{name}not run".strip() if with_system else NOT_RUN
    parts = [t for t in (_seeds_text(c, suffix), _pooled_text(c)) if t]
    return f"{name}{num(c.difference)}{suffix} ({'; '.join(parts)})"


def measured_value(value: Optional[float], unit: str, digits: int = 2,
                   signed: bool = True) -> str:
    """A measured value in its unit; ``signed``: a difference, printed with its sign (a level, an
    entropy say, is not)."""
    if value is None:
        return "not measured"
    if unit == "%":
        return f"{value * 100:.{digits - 1}f} %"
    if unit == "×":
        return f"{value:.{digits}f}×"
    return f"{num(value, digits, sign=signed)} {unit}"


def threshold_text(label: str, value: Optional[float], op: str, limit: float, unit: str,
                   signed: bool = True) -> str:
    """A threshold test as a page prints it: the value and its limit with as many decimals (2 to
    4) as it takes to print them apart where they differ, so that a test never reads as a value
    compared with itself (0.0133 < 0.0141 is not "0.01 < 0.01")."""
    if value is None:
        return f"{label} not run"
    digits = 2
    while (digits < 4 and value != limit and measured_value(value, unit, digits, signed)
           == measured_value(limit, unit, digits, signed)):
        digits += 1
    return (f"{label} {measured_value(value, unit, digits, signed)} "
            f"(limit {OP_SIGN[op]} {measured_value(limit, unit, digits, signed)})")


def quote(v: Verdict, short: bool = True) -> str:
    """The sentence a page quotes: the verdict, then the numbers it rests on (``short``: of an
    order, the pairs significantly out of the paper's order only; else every pair out of it)."""
    claim = v.claim
    if v.comparisons:
        several = len(v.comparisons) > 1
        if v.verdict == NOT_RUN:
            return NOT_RUN
        if not several:
            system, c = v.comparisons[0]
            head = comparison_phrase(claim["relation"], c)
            if c.verdict == NOT_RUN:
                return head
            return f"{head}: {comparison_text(v, system, c, False)}"
        return f"{v.verdict}: " + "; ".join(comparison_text(v, s, c, True)
                                            for s, c in v.comparisons)
    if v.order is not None:
        o = v.order
        if o.verdict == NOT_RUN:
            return f"{NOT_RUN} ({', '.join(o.missing)} without results)"
        scores = ", ".join(f"{name} {s:.2f}" for name, s in o.observed)
        suffix = " TER" if not v.higher_is_better else ""
        holm_p = {(hi, lo): p for hi, lo, _, p in o.pairs}
        shown_pairs = [(hi, lo, c) for hi, lo, c in o.reversed_pairs
                       if not short or holm_p[(hi, lo)] < o_level(v)]
        flips = "; ".join(f"{hi} {num(c.difference)}{suffix} against {lo} "
                          f"({combined_text(c)}; Holm {pval(holm_p[(hi, lo)])})"
                          for hi, lo, c in shown_pairs)
        text = f"{o.verdict}: {scores}"
        if flips:
            text += f"; out of the paper's order: {flips}"
        if short and len(shown_pairs) < len(o.reversed_pairs):
            quiet = [(hi, lo) for hi, lo, _ in o.reversed_pairs if holm_p[(hi, lo)] >= o_level(v)]
            lowest = min(holm_p[k] for k in quiet)
            text += (f"; {len(quiet)} pair{'s' if len(quiet) > 1 else ''} out of the paper's "
                     f"order within noise (lowest Holm {pval(lowest)})")
        weak = [(hi, lo, p) for hi, lo, c, p in o.pairs
                if c.side == "better" and p >= o_level(v)]
        if weak and not o.reversed_pairs:
            text += ("; in the paper's order but not significant: " +
                     ", ".join(f"{hi} over {lo} (Holm {pval(p)})" for hi, lo, p in weak))
        return text
    m = v.measured
    if not m.tests or ("why" in m.details and all(t.value is None for t in m.tests)):
        return f"{m.verdict}: {m.details.get('why', 'nothing measured')}"
    tests = "; ".join(threshold_text(t.label, t.value, t.op, t.limit, m.unit, t.signed)
                      for t in m.tests)
    device = f"; {', '.join(m.devices)}" if m.devices else ""
    return f"{m.verdict}: {tests}{device}"


def o_level(v: Verdict) -> float:
    """The level a verdict's tests use (every results.json states 0.01)."""
    return v.claim.get("level", 0.01)


def paper_value(value) -> str:
    return str(value) if isinstance(value, int) else f"{value:.2f}"


def paper_text(claim: dict, short: bool = False) -> str:
    """The paper's numbers as the claim records them: for a comparison, each system's difference
    to the one it is compared with; ``short``: the first table only, differences only."""
    parts = []
    entries = claim.get("paper", [])
    several = bool(claim.get("systems"))
    for entry in entries[:1] if short and several else entries:
        values = entry["values"]
        against = claim.get("against")
        if "text" in entry:
            parts.append(f"{entry['label']}: {entry['text']}")
        elif claim["relation"] in COMPARED and against in values and len(values) >= 2:
            if several or short:
                diffs = [f"{name} {num(v - values[against])}" if several else
                         f"{num(v - values[against])}"
                         for name, v in values.items() if name != against]
                parts.append(f"{entry['label']}: {', '.join(diffs)}")
            else:
                system = next(n for n in values if n != against)
                parts.append(f"{entry['label']}: {paper_value(values[system])} against "
                             f"{paper_value(values[against])} "
                             f"({num(values[system] - values[against])})")
        elif values:
            parts.append(f"{entry['label']}: " +
                         ", ".join(f"{k} {paper_value(v)}" for k, v in values.items()))
    return "; ".join(parts)


def compares_text(claim: dict) -> str:
    relation = claim["relation"]
    if relation == "threshold":
        return "threshold"
    what = f"{'TER' if claim['metric'] == 'ter' else 'sacreBLEU'}, {claim['subset']}"
    if relation == "order":
        groups = " > ".join(" = ".join(g) for g in claim["groups"])
        return f"order: {groups} ({what})"
    systems = ", ".join(claim.get("systems") or [claim["system"]])
    return f"{systems} {relation} {claim['against']} ({what})"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def claims_table(verdicts: List[Verdict], pairs: Optional[List[str]] = None) -> str:
    """The summary table a README quotes: one row per claim (and direction in ``pairs``)."""
    rows = []
    for v in verdicts:
        if v.pair is not None and pairs is not None and v.pair not in pairs:
            continue
        claim = v.claim
        where = f"{claim['where']}" + (f", {v.pair}" if v.pair and len(pairs or []) > 1 else "")
        here = quote(v)
        verdict, _, rest = here.partition(": ")
        paper = paper_text(claim, short=True) or ("not the paper's: this project's own"
                                                  if claim.get("own") else "")
        rows.append([f"{_sentence(claim['claim'])} ({where})", paper, rest or "—",
                     f"**{verdict}**"])
    return "\n".join(markdown_table(["claim", "paper", "here", "verdict"], rows, text_columns=4))


def markdown(paper: str, claims_path: str, folder_path: str, settings: dict,
             verdicts: List[Verdict], folder_pairs: List[str], holds: List[str]) -> str:
    """CLAIMS.md: the rule, then every claim with its verdict, direction by direction."""
    level = settings["significance"]["level"]
    samples = settings["significance"]["samples"]
    lines = [
        f"# {paper}: each claim against `{folder_path}`",
        "",
        f"Claims: `{claims_path}`. Results: `{folder_path}/results.json` (config "
        f"`{settings['config']}`, baseline {settings['baseline']}; the table: TABLE.md). Written "
        f"by `ran_lab.claims` (`python scripts/claims.py --results {folder_path}`; the "
        f"reproduction scripts write it beside TABLE.md); README.md and docs/results.md quote it.",
        "",
        "**What the folder holds** (from results.json: each run's machine, budget and start):",
        "",
        *holds,
        "",
        RULE.format(level=level, samples=f"{samples:,}", cap=f"{bootstrap.CAP:,}",
                    confidence=f"{100 * (1 - level):g} %"),
        "",
    ]
    pairs = list(dict.fromkeys(v.pair for v in verdicts if v.pair))
    absent = [p for p in pairs if p not in folder_pairs]
    for pair in (p for p in pairs if p in folder_pairs):
        rows = [v for v in verdicts if v.pair == pair]
        cells = []
        for v in rows:
            verdict, _, rest = quote(v, short=False).partition(": ")
            cells.append([v.claim["id"], v.claim["where"], _sentence(v.claim["claim"]),
                          compares_text(v.claim), paper_text(v.claim), rest or "—",
                          f"**{verdict}**"])
        lines += [f"## {pair}", "", *markdown_table(
            ["id", "where", "the paper says", "compares", "paper", "here", "verdict"], cells,
            text_columns=7), ""] + _notes(rows)
    for pair in absent:
        ids = ", ".join(v.claim["id"] for v in verdicts if v.pair == pair)
        lines += [f"## {pair}", "", f"Not run: this folder has no {pair} results ({ids}).", ""]
    thresholds = [v for v in verdicts if v.pair is None]
    if thresholds:
        cells = []
        for v in thresholds:
            m = v.measured
            verdict, _, rest = quote(v, short=False).partition(": ")
            detail = "; ".join(f"{k}: {d}" for k, d in m.details.items() if k != "why")
            cells.append([v.claim["id"], v.claim["where"], _sentence(v.claim["claim"]),
                          rest + (f" ({detail})" if detail else ""),
                          ", ".join(f"`{f}`" for f in m.files), paper_text(v.claim),
                          f"**{verdict}**"])
        lines += ["## Analysis and speed", "", *markdown_table(
            ["id", "where", "the paper says", "measured (limit)", "read from", "paper",
             "verdict"], cells, text_columns=7), ""] + _notes(thresholds)
    return "\n".join(lines).rstrip("\n") + "\n"


def _notes(verdicts: List[Verdict]) -> List[str]:
    notes = list(dict.fromkeys((v.claim["id"], v.claim["note"]) for v in verdicts
                               if v.claim.get("note")))
    return [f"- **{cid}**: {note}" for cid, note in notes] + ([""] if notes else [])


def as_json(verdicts: List[Verdict]) -> List[dict]:
    """The verdicts as CLAIMS.json records them."""
    out = []
    for v in verdicts:
        entry = {"id": v.claim["id"], "pair": v.pair, "verdict": v.verdict,
                 "outcome": v.outcome, "quote": quote(v)}
        if v.comparisons:
            entry["systems"] = [
                {"system": s, "against": v.claim["against"], "verdict": c.verdict,
                 "difference": c.difference, "k": c.k, "n": c.n,
                 "interval": list(c.pooled) if c.pooled else None, "margin": c.margin,
                 "p": c.combined.p if c.combined else None,
                 "se": c.combined.se if c.combined else None,
                 "seed_sd": c.combined.sigma if c.combined else None,
                 "df": (None if c.combined is None or c.combined.df == float("inf")
                        else c.combined.df),
                 "direction": c.direction, "size": c.size,
                 "seed_source": c.combined.source if c.combined else None,
                 "judged": c.combined.judged if c.combined else None,
                 "mde": c.mde, "stated": c.stated, "testable": c.testable,
                 "fragile": c.fragile,
                 "seeds": [{"seed": x.seed, "system": x.system, "against": x.against, "p": x.p,
                            "settled": x.settled, "samples": x.samples,
                            "interval": list(x.interval) if x.interval else None}
                           for x in c.seeds]}
                for s, c in v.comparisons]
        if v.order is not None:
            entry["observed"] = v.order.observed
            entry["pairs"] = [{"higher": hi, "lower": lo, "difference": c.difference,
                               "interval": list(c.pooled), "p": c.combined.p, "holm_p": p,
                               "mde": c.mde, "stated": c.stated, "testable": c.testable}
                              for hi, lo, c, p in v.order.pairs]
        if v.measured is not None:
            entry["tests"] = [{"label": t.label, "value": t.value, "op": t.op, "limit": t.limit,
                               "passed": t.passed} for t in v.measured.tests]
            entry["files"], entry["devices"] = v.measured.files, v.measured.devices
        out.append(entry)
    return out


# a body never holds another marker: an unclosed span or table is left alone, not merged with
# the next one
_BODY = r"((?:(?!<!-- /?(?:claim|claims-table|claims-count|holds|figure)\b).)*?)"
FIGURE = re.compile(r"(<!-- figure (\S+?)#([^>]+?) -->)" + _BODY + r"(<!-- /figure -->)", re.S)
HOLDS = re.compile(r"(<!-- holds (\S+?) -->\n)" + _BODY + r"(<!-- /holds -->)", re.S)
SPAN = re.compile(r"(<!-- claim (\S+?)#(\S+?) -->)" + _BODY + r"(<!-- /claim -->)", re.S)
TABLE = re.compile(r"(<!-- claims-table (\S+?)(?: pairs=(\S+))? -->\n)" + _BODY +
                   r"(<!-- /claims-table -->)", re.S)
COUNT = re.compile(r"(<!-- claims-count (\S+?)(?: pairs=(\S+))? -->)" + _BODY +
                   r"(<!-- /claims-count -->)", re.S)


def counted(verdicts: List[Verdict], pairs: Optional[List[str]], folder: Optional[str] = None
            ) -> List[Verdict]:
    """The paper's claims a tally counts: those with a result in ``pairs`` (None: every direction
    run) or in none (analysis
    and speed claims), each once: not the project's ``own``, not descriptive, not a claim measured
    again on another device (``same_as``: counted under that id), not a measure of another
    folder's checkpoints (``checkpoints``: counted only there)."""
    return [v for v in verdicts if (v.pair is None or pairs is None or v.pair in pairs)
            and v.outcome not in (NOT_RUN, DESCRIPTIVE) and not v.claim.get("own")
            and not v.claim.get("same_as")
            and (folder is None or v.claim.get("checkpoints") in (None, folder))]


def one_seed(v: Verdict) -> bool:
    """Whether a held verdict rests on one seed (in any of its parts)."""
    return ONE_SEED.rstrip(")") in v.verdict


def weak(v: Verdict) -> bool:
    """Whether a held verdict is against a baseline below its paper's order."""
    return WEAK_BASELINE in v.verdict


def parts(v: Verdict) -> List[Comparison]:
    """A verdict's comparisons (an order's pairs)."""
    if v.order is not None:
        return [c for _, _, c, _ in v.order.pairs]
    return [c for _, c in v.comparisons]


def testable(v: Verdict) -> bool:
    """Whether every comparison of a verdict can find what it must (80 % power)."""
    found = parts(v)
    return bool(found) and all(c.testable for c in found)


def sizes_of(verdicts: List[Verdict]) -> List[str]:
    """The size verdicts of the counted claims, one per system compared."""
    return [c.size["result"] for v in verdicts for _, c in v.comparisons if c.size]


def held_count(verdicts: List[Verdict], pairs: Optional[List[str]] = None,
               folder: Optional[str] = None) -> str:
    """"k held (j on one seed, w against a weak baseline), m inconclusive, n not held, u not
    judged of N (t testable)" (the directions of :func:`counted`; the parts in parentheses and
    "not judged" where they occur; t: the comparisons and orders whose every comparison detects
    the paper's difference with 80 % power, of those judged), then the sizes apart, each that
    occurs: "; sizes: a consistent, b smaller, c larger, d not comparable"."""
    ran = counted(verdicts, pairs, folder)
    k, m, n, u = (sum(v.outcome == o for v in ran)
                  for o in (HELD, INCONCLUSIVE, NOT_HELD, NOT_JUDGED))
    j = sum(1 for v in ran if v.outcome == HELD and one_seed(v))
    w = sum(1 for v in ran if v.outcome == HELD and weak(v))
    held = f"{j} on one seed" + (f", {w} against a baseline below its paper's order" if w else "")
    text = (f"{k} held ({held}), {m} inconclusive, {n} not held"
            + (f", {u} not judged" if u else "") + f" of {len(ran)}")
    compared = [v for v in ran if parts(v) and v.outcome != NOT_JUDGED]
    if compared:
        text += (f" ({sum(testable(v) for v in compared)} of the {len(compared)} comparisons "
                 f"testable)")
    sizes = sizes_of(ran)
    if sizes:
        text += "; sizes: " + ", ".join(f"{sizes.count(s)} {s}" for s in SIZES if s in sizes)
    return text


def fill(text: str, verdicts_of: Callable[[str], Dict[str, Verdict]],
         holds_of: Optional[Callable[[str], List[str]]] = None, repo=None) -> str:
    """``text`` with every claim span, claims table, claims count, figure and holds block
    rewritten from the engine's verdicts and the results' files; ``verdicts_of(folder)`` gives a
    folder's verdicts by key (``ID`` or ``ID@PAIR``), ``holds_of(folder)`` the lines of
    :func:`.provenance.holds`; ``repo``: where the figures' folders are (this checkout)."""
    from ran_lab.common.paths import REPO
    from .figures import figure

    def number(m):
        return f"{m[1]}{figure(m[2], m[3], repo or REPO, verdicts_of)}{m[5]}"

    def span(m):
        found = verdicts_of(m[2])
        if m[3] not in found:
            raise KeyError(f"{m[2]} has no claim {m[3]!r} (known: {', '.join(found)})")
        return f"{m[1]}{quote(found[m[3]])}{m[5]}"

    def table(m):
        pairs = m[3].split(",") if m[3] else None
        verdicts = list(verdicts_of(m[2]).values())
        return f"{m[1]}{claims_table(verdicts, pairs)}\n{m[5]}"

    def count(m):
        tally = held_count(list(verdicts_of(m[2]).values()),
                           m[3].split(",") if m[3] else None, m[2])
        return f"{m[1]}{tally}{m[5]}"

    def block(m):
        if holds_of is None:
            raise KeyError(f"no holds_of to fill the holds block of {m[2]}")
        return f"{m[1]}{chr(10).join(holds_of(m[2]))}\n{m[4]}"

    return FIGURE.sub(number, HOLDS.sub(block, COUNT.sub(count, TABLE.sub(table,
                                                                          SPAN.sub(span, text)))))


def quoted_folders(text: str) -> List[str]:
    return list(dict.fromkeys([m[2] for m in SPAN.finditer(text)] +
                              [m[2] for m in TABLE.finditer(text)] +
                              [m[2] for m in COUNT.finditer(text)] +
                              [m[2] for m in FIGURE.finditer(text)] +
                              [m[2] for m in HOLDS.finditer(text)]))
