"""Single figures that a page's prose quotes from a results folder, filled like the claim spans:
``<!-- figure FOLDER#SPEC -->…<!-- /figure -->`` (:func:`.report.fill`), so that no number in the
prose is typed by hand.

``SPEC`` is one of

- ``PAIR/SYSTEM/SEED[/FIELD]``: a run's test-set ``FIELD`` from results.json (``sacrebleu`` by
  default; ``p``, ``ter_p``: the reproduction engine's ``p_value``, ``ter_p_value`` against the
  table's baseline; ``valid:FIELD``: on the validation set);
- ``PAIR/SYSTEM/mean|sd|spread[/FIELD]``: over the system's seeds (``spread``: 1.96·√2·sd, how
  far two seeds lie apart in 95 % of retrainings);
- ``PAIR/SYSTEM/apart/A,B[/FIELD]``: how far seeds A and B end apart;
- ``samples``: the reproduction engine's bootstrap samples (results.json's settings);
- ``paper:CLAIM/SYSTEM``: the paper's number for ``SYSTEM`` in the claim's first entry that has
  one (the claims file, checked against the paper file);
- ``replaced/PAIR/SYSTEM/SEED``: the score of the run that ``replaced.json`` says was replaced;
- ``CLAIM@PAIR[/SYSTEM]/interval|p|mde|difference``: a comparison's numbers from its verdict
  (``SYSTEM``: which, where the claim compares several);
- ``CLAIM@PAIR/verdict``: the verdict's outcome (held, inconclusive, not held, ...), for a short
  cell beside its interval;
- ``FILE.json:KEY.KEY...[|FORMAT]``: a value of a measurement record under the folder (a list's
  item by its index, or ``FIELD=VALUE[&FIELD=VALUE...]``: the item whose ``FIELD`` is ``VALUE``,
  as in ``systems.name=RAN-ALL`` or ``results.system=max&seed=1``), written with Python's
  ``FORMAT`` (``,.1f``); without one, a number with its thousands separated (``1,173``,
  ``19.6``), any other value as it is;
- ``[AGGREGATE ]TERM[ OP TERM...][|FORMAT]``: each ``TERM`` such a ``FILE.json:KEY.KEY...``, a
  number, or ``min(TERM)``, ``max(TERM)``, ``median(TERM)`` (over its wildcards' values); each
  ``OP`` one of `` ÷ ``, `` × ``, `` − `` (spaced), applied left to right (``A − B ÷ A × 100``: B's
  percentage below A). ``FILE``, the keys and a ``FIELD=VALUE``'s value may hold shell wildcards
  (``cpu-run[12]/peers.json``, ``results.pa-*``, ``systems.name=*``; a wildcard's null values left
  out): the terms' wildcards match the same names, a term with fewer of them going with each value
  whose names begin with its own, and ``AGGREGATE`` (``min``, ``max``, ``median``, ``count``) makes
  the values one; ``min A, B`` (``, ``-separated expressions): over all of theirs. Examples:
  ``cpu-run1/peers.json:results.pa-cpu.train.ratio_of_medians|.2f``,
  ``max cpu-run[12]/peers.json:results.pa-*.memory.ratio|.2f``,
  ``min(ran-base/bench.json:systems.name=transformer.decode.pass_seconds.*) ÷
  min(ran-base/bench.json:systems.name=RAN-ALL.decode.pass_seconds.*)|.2f`` (the fastest passes).

In a table's cell a figure's ``|FORMAT`` is written ``\\|FORMAT``, so that the row keeps its cells.
"""
import fnmatch
import glob
import json
import math
import re
from pathlib import Path
from statistics import fmean, median, stdev
from typing import Callable, Dict, Optional

from .numbers import interval_text, num, pval
from .results import table_data


FIELDS = {"p": "p_value", "ter_p": "ter_p_value"}
P_FIELDS = ("p", "ter_p")
SPREAD_Z = 1.959963984540054


def p_text(p: float) -> str:
    """A p of the reproduction engine's table: two decimals from 0.1 (0.30), else two significant
    digits (0.0025, 0.011, 0.010), "< 0.001" below that."""
    if p < 0.001:
        return "< 0.001"
    return f"{p:.2f}" if p >= 0.1 else f"{p:#.2g}"


def _scores(report: dict, pair: str, system: str, field: str) -> Dict[int, float]:
    subset, _, field = field.rpartition(":")
    subset = subset or "test"
    found = {r["seed"]: r["subsets"].get(subset, {}).get(FIELDS.get(field, field))
             for r in report["results"] if r["pair"] == pair and r["system"] == system}
    if not found or any(v is None for v in found.values()):
        raise KeyError(f"no {field} of {system} ({pair}) on the {subset} set")
    return found


WHICH = ("mean", "sd", "spread", "apart")


def _split(parts):
    """``PAIR/SYSTEM/WHICH/...`` with a system name that may hold a "/" (RAN-ALL w/o LN&RES): the
    rightmost seed number or WHICH with a suffix of the right length."""
    for i in range(len(parts) - 1, 1, -1):
        extra = len(parts) - i - 1
        if parts[i] == "apart" and extra in (1, 2) or (
                (parts[i].isdigit() or parts[i] in WHICH[:3]) and extra in (0, 1)):
            return parts[0], "/".join(parts[1:i]), parts[i], parts[i + 1:]
    raise KeyError(f"not a figure: {'/'.join(parts)!r}")


def _step(items: list, key: str) -> list:
    """``(names, value)`` items one key further in; a wildcard adds the name it matched."""
    out = []
    for names, v in items:
        if "=" in key:  # FIELD=VALUE[&FIELD=VALUE...]: a list's items
            tests = [test.partition("=")[::2] for test in re.split(r"&(?=\w+=)", key)]
            out += [(names + tuple(str(i[f]) for f, value in tests if glob.has_magic(value)), i)
                    for i in (v if isinstance(v, list) else []) if isinstance(i, dict) and
                    all(fnmatch.fnmatchcase(str(i.get(f)), value) for f, value in tests)]
            continue
        keys = list(v) if isinstance(v, dict) else [str(n) for n in range(len(v))] \
            if isinstance(v, list) else []
        wild = glob.has_magic(key)
        for k in (sorted(k for k in keys if fnmatch.fnmatchcase(k, key)) if wild
                  else [key] if key in keys else []):
            out.append((names + ((k,) if wild else ()), v[k] if isinstance(v, dict) else v[int(k)]))
    if len({names for names, _ in out}) < len(out):
        raise KeyError(f"{key!r} picks several items of one list")
    return out


def _values(folder: Path, term: str) -> Dict[tuple, float]:
    """A term's values by the names its wildcards matched (``()`` for a term without any)."""
    try:
        return {(): float(term)}
    except ValueError:
        pass
    which, _, inner = term.partition("(")
    if which in AGGREGATES and inner.endswith(")"):
        return {(): AGGREGATES[which](_values(folder, inner[:-1]).values())}
    name, _, path = term.partition(":")
    found = {}
    files = sorted(folder.glob(name)) if glob.has_magic(name) else [folder / name]
    for file in files:
        items = [((str(file.relative_to(folder)),) if glob.has_magic(name) else (),
                  json.loads(file.read_text(encoding="utf-8")))]
        for key in path.split(".") if path else []:
            items = _step(items, key)
        found.update((names, v) for names, v in items if v is not None or not names)
    if not found:
        raise KeyError(f"{folder}/{name} holds no {path!r}")
    if any(isinstance(v, (dict, list)) for v in found.values()):
        raise KeyError(f"{folder}/{name}: {path!r} is not one value")
    return found


OPS = {"÷": lambda a, b: a / b, "×": lambda a, b: a * b, "−": lambda a, b: a - b}
AGGREGATES = {"min": min, "max": max, "median": median, "count": lambda values: len(list(values))}


def _evaluated(folder: Path, expression: str, spec: str) -> Dict[tuple, float]:
    """An expression's values by the names its terms' wildcards matched, left to right."""
    terms = re.split(r" ([÷×−]) ", expression)
    values = _values(folder, terms[0])
    for op, term in zip(terms[1::2], terms[2::2]):
        a, b = values, _values(folder, term)
        la, lb = len(next(iter(a))), len(next(iter(b)))
        if any(k[:la] not in a or k[:lb] not in b for k in (a if la >= lb else b)):
            raise KeyError(f"{spec!r}: the terms match different names")
        values = {k: OPS[op](a[k[:la]], b[k[:lb]]) for k in (a if la >= lb else b)}
    return values


def recorded(folder: str, spec: str, repo: Path) -> str:
    """The text of a ``FILE.json:KEY.KEY...[|FORMAT]`` figure, or of an expression of such values
    (see the module's text)."""
    where, _, fmt = spec.replace("\\|", "|").partition("|")
    which, _, rest = where.partition(" ")
    if which not in AGGREGATES:
        which, rest = None, where
    values = {}
    for n, expression in enumerate(rest.split(", ") if which else [rest]):
        values.update({(n,) + k: v for k, v in _evaluated(Path(repo) / folder, expression,
                                                           spec).items()})
    if which is None and len(values) != 1 or which and not values:
        raise KeyError(f"{spec!r}: {len(values)} values (an aggregate gives one)")
    value = AGGREGATES[which](values.values()) if which else next(iter(values.values()))
    if fmt:
        return format(value, fmt)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f"{value:,}" if is_number else str(value)


def figure(folder: str, spec: str, repo: Path,
           verdicts_of: Optional[Callable[[str], dict]] = None) -> str:
    """The text of ``SPEC`` (see the module's text) for ``folder``."""
    if ".json:" in spec.partition("|")[0]:
        return recorded(folder, spec, repo)
    if spec == "samples":
        return f"{table_data(Path(repo) / folder)['settings']['significance']['samples']:,}"
    parts = spec.split("/")
    if parts[0].startswith("paper:"):
        from . import claims_file_of
        from .spec import load
        claim = load(claims_file_of(Path(repo) / folder, repo), repo).by_id(parts[0][6:])
        for entry in claim.get("paper", []):
            if parts[1] in entry.get("values", {}):
                value = entry["values"][parts[1]]
                return str(value)  # as the paper prints it
        raise KeyError(f"claim {parts[0][6:]} has no paper number for {parts[1]}")
    if parts[0] == "replaced":
        _, pair, system, seed = parts
        listed = json.loads((Path(repo) / folder / "replaced.json").read_text(encoding="utf-8"))
        for r in listed["replaced"]:
            if (r["pair"], r["system"], str(r["seed"])) == (pair, system, seed):
                return f"{r['sacrebleu']:.2f}"
        raise KeyError(f"{folder}/replaced.json lists no {system} seed {seed} ({pair})")
    if "@" in parts[0]:
        if verdicts_of is None:
            raise KeyError(f"no verdicts to quote {spec}")
        if parts[1:] == ["verdict"]:
            return verdicts_of(folder)[parts[0]].outcome
        comparisons = dict(verdicts_of(folder)[parts[0]].comparisons)
        system, what = (parts[1], parts[2]) if len(parts) == 3 else (None, parts[1])
        if system is None:
            (c,) = comparisons.values()
        else:
            c = comparisons[system]
        if what == "interval":
            return interval_text(c.pooled)
        if what == "p":
            return pval(c.combined.p)
        if what == "mde":
            return f"{c.mde:.2f}"
        if what == "difference":
            return num(c.difference)
        raise KeyError(f"not a verdict's figure: {what!r}")
    pair, system, which, rest = _split(parts)
    report = table_data(Path(repo) / folder)
    if which == "apart":
        seeds, *rest = rest
        field = rest[0] if rest else "sacrebleu"
        a, b = (int(s) for s in seeds.split(","))
        scores = _scores(report, pair, system, field)
        return f"{abs(scores[a] - scores[b]):.2f}"
    field = rest[0] if rest else "sacrebleu"
    scores = _scores(report, pair, system, field)
    if which == "mean":
        return f"{fmean(scores.values()):.2f}"
    if which in ("sd", "spread"):
        sd = stdev(scores.values())
        return f"{sd if which == 'sd' else SPREAD_Z * math.sqrt(2) * sd:.2f}"
    value = scores[int(which)]
    return p_text(value) if field.rpartition(":")[2] in P_FIELDS else f"{value:.2f}"

