"""configs/PAPER/claims.json: the claims a paper makes, as data, and their validation.

The file holds ``paper`` (the paper, as the tables name it), ``paper_file`` (its numbers,
``configs/PAPER/paper.json``), ``defaults`` (keys every claim takes unless it sets them: usually
``against``, ``metric``, ``subset``, ``pairs``) and ``claims``, a list of objects with

- ``id``: unique in the file; ``where``: the table, section or figure; ``claim``: a one-line
  paraphrase in this project's words;
- ``relation``: ``>``, ``<``, ``≈``, ``≥``, ``≤`` (a comparison of ``system``, or of each of
  ``systems``, with ``against``), ``order`` (``groups``: lists of systems the paper puts level, best
  first) or ``threshold`` (``measure`` and ``tests``: see :mod:`.analysis`);
- ``metric``: ``sacrebleu`` or ``ter``; ``subset``: ``test`` or ``valid``; ``pairs``: the
  translation directions to check (a pair the results lack is reported as not run);
- ``paper``: the paper's numbers, a list of ``{"label", "values": {name: number}}``, with
  ``column`` where they come from a column of ``paper_file`` (checked against it) or ``text``
  where the paper states them in prose;
- optionally ``note``: a sentence that the report prints beside the verdict;
- optionally ``own``: true for a claim of this project's own rather than the paper's (a question
  about its readings of the paper or the authors' code): judged and reported like the others, but
  not counted among the paper's claims that hold;
- ``margin`` (``≈``, ``≥``, ``≤``; usually from ``defaults``): ``{"value": δ, "why": ...}``, δ in
  the metric's units (BLEU, TER points), and where it comes from (the paper's own reported
  difference, or the field default the file states once);
- optionally ``size`` (comparisons): the size the paper states, ``{"text": "about 2", "value": d}``
  (``d`` the paper's difference, system minus ``against``, in the metric's units, or ``[lo, hi]``
  for a range; ``values`` instead: by pair or by system), and ``test``: ``inside`` (the default:
  the paper's difference lies inside our pooled interval), ``at_least`` ("over 14": ours may be
  larger) or ``at_most`` (ours may be smaller); ``comparable``: true only where the paper
  measured on this project's setting (corpus, model size), so that the size decides the claim
  (else it is a second verdict, shown beside the direction);
- optionally ``same_as`` (threshold claims): the id of the claim this one measures again (another
  device): the tally counts the paper's claim once, under that id;
- optionally ``checkpoints``: the results folder whose trained checkpoints a threshold claim's
  measure read: the tally counts it only for that folder (its budget);
- optionally ``by_construction`` (threshold claims): why the measure follows from the sizes this
  project chose (a parameter count fixed by the configuration): the claim is descriptive.

Beside the claims, the file may hold

- ``seed_variance``: ``{FOLDER: {"from": OTHER, "why": ...}}``: a results folder where no system
  has two seeds judges its comparisons by the between-seed variance (and its degrees of freedom)
  of ``OTHER``, a folder of the same recipe and scale, ``why`` saying so; a folder with neither
  reads "not judged (one seed, no seed variance)";
- ``weak_baselines``: ``{FOLDER: [{"system": S, "why": ...}]}``: a system that, in that folder,
  fell below where the paper puts it (its order among the paper's systems): a claim held against
  it says so.
"""
from pathlib import Path
from typing import List, Optional

from ran_lab.common import LabError, schema
from ran_text import textio

from .rule import OPS, RELATIONS, SIZE_TESTS

METRICS = ("sacrebleu", "ter")
SUBSETS = ("test", "valid")
COMPARISONS = (">", "<", "≈", "≥", "≤")
KEYS = {"id", "where", "claim", "relation", "system", "systems", "against", "groups", "metric",
        "subset", "pairs", "paper", "note", "measure", "tests", "own", "margin", "size",
        "same_as", "checkpoints", "by_construction"}
SIZE_KEYS = {"text", "value", "values", "test", "comparable"}
MEASURES = {
    "histogram_share": {"kind", "file", "side", "below"},
    "length_bins": {"kind", "file", "by", "min_sentences", "skip_last"},
    "bench": {"kind", "files", "metric", "baseline", "aggregate", "passes"},
    "params": {"kind"},
    "entropy": {"kind", "file", "side", "stat"},
    "js": {"kind", "file", "side", "pairs"},
    "none": {"kind", "why"},
}
TEST_KEYS = {"label", "system", "of", "op", "limit", "times", "files", "aggregate", "side",
             "of_side", "stat"}
# Test keys only some measures read: a test naming one for another measure is refused.
TEST_KEYS_OF = {"files": ("bench",), "aggregate": ("bench",), "side": ("entropy", "js"),
                "of_side": ("entropy", "js"), "stat": ("entropy",)}
SIDES = ("enc", "dec")
STATS = ("mean", "last_minus_first")
JS_PAIRS = ("adjacent", "all")


class Claims:
    """A loaded claims file: ``paper``, ``path``, ``paper_file``, ``claims`` (dicts with the
    defaults applied)."""

    def __init__(self, path: Path, data: dict):
        self.path = Path(path)
        self.paper = data["paper"]
        self.paper_file = data.get("paper_file")
        self.claims: List[dict] = data["claims"]
        self.seed_variance: dict = data.get("seed_variance", {})
        self.weak_baselines: dict = data.get("weak_baselines", {})

    def borrow_for(self, folder: str) -> Optional[dict]:
        """The ``seed_variance`` entry of ``folder`` (repository-relative), if any."""
        return self.seed_variance.get(folder)

    def weak(self, folder: str, system: str) -> Optional[str]:
        """Why ``system`` is a baseline below its paper's order in ``folder``, if it is."""
        for entry in self.weak_baselines.get(folder, []):
            if entry["system"] == system:
                return entry["why"]
        return None

    def by_id(self, claim_id: str) -> dict:
        for c in self.claims:
            if c["id"] == claim_id:
                return c
        raise KeyError(f"{self.path}: no claim {claim_id!r}")


def _check(ok, where, message):
    if not ok:
        raise LabError(f"{where}: {message}")


def _check_measure(measure, where):
    _check(isinstance(measure, dict) and measure.get("kind") in MEASURES, where,
           f"'measure' needs a 'kind', one of {', '.join(MEASURES)}")
    extra = set(measure) - MEASURES[measure["kind"]]
    _check(not extra, where, f"unknown key(s) {sorted(extra)} in a {measure['kind']} measure")
    if measure["kind"] == "bench":
        _check(measure.get("metric") in ("decode_tokens_per_s", "train_time"), where,
               "a bench measure's metric is decode_tokens_per_s or train_time")
    if measure["kind"] in ("entropy", "js"):
        _check(isinstance(measure.get("file"), str), where,
               f"the {measure['kind']} measure needs a 'file'")
        _check(measure.get("side") in SIDES, where, f"a measure's side is one of {', '.join(SIDES)}")
        _check(measure.get("stat", "mean") in STATS, where,
               f"an entropy measure's stat is one of {', '.join(STATS)}")
        _check(measure.get("pairs", "adjacent") in JS_PAIRS, where,
               f"a js measure's pairs is one of {', '.join(JS_PAIRS)}")


def _check_tests(tests, measure, where):
    _check(isinstance(tests, list) and tests, where, "a threshold claim needs a list of 'tests'")
    labels = set()
    for t in tests:
        extra = set(t) - TEST_KEYS
        _check(not extra, where, f"unknown key(s) {sorted(extra)} in a test")
        _check(t.get("op") in OPS, where, f"a test's 'op' is one of {', '.join(OPS)}")
        _check("system" in t and "label" in t, where, "a test names its 'label' and 'system'")
        _check(("limit" in t) != ("times" in t), where,
               "a test has either a 'limit' or 'times' (a factor of system 'of')")
        _check("times" not in t or "of" in t, where, "'times' needs 'of'")
        _check(t["label"] not in labels, where, f"two tests labelled {t['label']!r}")
        labels.add(t["label"])
        for key, kinds in TEST_KEYS_OF.items():
            _check(key not in t or measure["kind"] in kinds, where,
                   f"a test's {key!r} is read only by {' and '.join(kinds)} measures, "
                   f"not by a {measure['kind']} measure")
        for key in ("side", "of_side"):
            _check(t.get(key, "enc") in SIDES, where, f"a test's {key!r} is one of "
                   f"{', '.join(SIDES)}")
        _check(t.get("stat", "mean") in STATS, where,
               f"a test's 'stat' is one of {', '.join(STATS)}")
        if measure["kind"] in ("length_bins", "params"):
            _check("of" in t and "times" not in t, where,
                   f"a {measure['kind']} test compares 'system' with 'of' against a 'limit'")


def _check_paper(numbers, where, paper_numbers):
    _check(isinstance(numbers, list), where, "'paper' is a list of {label, values}")
    columns = {c["key"]: c for c in (paper_numbers or {}).get("columns", [])}
    for entry in numbers:
        _check(isinstance(entry.get("values"), dict) and "label" in entry, where,
               "each 'paper' entry has a 'label' and 'values'")
        key = entry.get("column")
        if key is None:
            continue
        _check(key in columns, where, f"paper column {key!r} is not in the paper file")
        printed = columns[key]["values"]
        for name, value in entry["values"].items():
            _check(printed.get(name) == value, where,
                   f"paper column {key!r} has {printed.get(name)!r} for {name!r}, not {value!r}")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _size_value(x) -> bool:
    return _number(x) or (isinstance(x, list) and len(x) == 2 and all(map(_number, x))
                          and x[0] <= x[1])


def _check_margin_size(claim, here):
    relation = claim["relation"]
    if relation in ("≈", "≥", "≤"):
        margin = claim.get("margin")
        _check(isinstance(margin, dict) and _number(margin.get("value")) and margin["value"] >= 0
               and isinstance(margin.get("why"), str) and margin["why"], here,
               f"a {relation} comparison needs 'margin': {{\"value\": δ >= 0, \"why\": ...}}")
    size = claim.get("size")
    if size is None:
        return
    _check(relation in COMPARISONS and isinstance(size, dict), here,
           "'size' belongs to a comparison and is an object")
    extra = set(size) - SIZE_KEYS
    _check(not extra, here, f"unknown key(s) {sorted(extra)} in 'size'")
    _check(("value" in size) != ("values" in size), here, "'size' has 'value' or 'values'")
    values = [size["value"]] if "value" in size else list((size.get("values") or {}).values())
    _check(values and all(map(_size_value, values)), here,
           "a size's value is a number or [low, high]")
    _check(isinstance(size.get("comparable", False), bool), here,
           "a size's 'comparable' is true or false")
    _check(size.get("test", "inside") in SIZE_TESTS, here,
           f"a size's test is one of {', '.join(SIZE_TESTS)}")


def _check_annotations(data: dict, where: str):
    """``seed_variance`` and ``weak_baselines`` (see the module's text)."""
    borrow = data.get("seed_variance", {})
    _check(isinstance(borrow, dict), where, "'seed_variance' maps a folder to {from, why}")
    for folder, entry in borrow.items():
        _check(isinstance(entry, dict) and set(entry) == {"from", "why"}
               and isinstance(entry["from"], str) and entry["from"] != folder
               and isinstance(entry["why"], str) and entry["why"], f"{where}: seed_variance",
               f"{folder!r} needs exactly 'from' (another folder) and 'why'")
    weak = data.get("weak_baselines", {})
    _check(isinstance(weak, dict), where, "'weak_baselines' maps a folder to a list")
    for folder, entries in weak.items():
        _check(isinstance(entries, list) and all(
            isinstance(e, dict) and set(e) == {"system", "why"} and isinstance(e["why"], str)
            and e["why"] for e in entries), f"{where}: weak_baselines",
            f"{folder!r} lists objects with exactly 'system' and 'why'")


def validate(data: dict, where: str, paper_numbers: Optional[dict] = None) -> List[dict]:
    """The claims of ``data`` with the defaults applied; LabError on the first fault."""
    _check(isinstance(data, dict) and isinstance(data.get("claims"), list) and "paper" in data,
           where, "a claims file is an object with 'paper' and a list of 'claims'")
    _check_annotations(data, where)
    defaults = data.get("defaults", {})
    seen, claims = set(), []
    for raw in data["claims"]:
        claim = {**defaults, **raw}
        here = f"{where}: claim {raw.get('id', '?')!r}"
        extra = set(claim) - KEYS
        _check(not extra, here, f"unknown key(s) {sorted(extra)}")
        for key in ("id", "where", "claim", "relation"):
            _check(isinstance(claim.get(key), str) and claim[key], here, f"needs {key!r}")
        _check(claim["id"] not in seen, here, "the id is used twice")
        _check(isinstance(claim.get("own", False), bool), here, "'own' is true or false")
        seen.add(claim["id"])
        relation = claim["relation"]
        _check(relation in RELATIONS, here, f"relation is one of {', '.join(RELATIONS)}")
        if relation in COMPARISONS:
            _check(("system" in claim) != ("systems" in claim), here,
                   "a comparison names 'system' or 'systems'")
            _check(isinstance(claim.get("against"), str), here, "a comparison names 'against'")
        _check_margin_size(claim, here)
        _check("same_as" not in claim or relation == "threshold", here,
               "'same_as' belongs to a threshold claim")
        _check("by_construction" not in claim or relation == "threshold"
               and isinstance(claim["by_construction"], str) and claim["by_construction"], here,
               "'by_construction' belongs to a threshold claim and says why")
        if relation == "order":
            groups = claim.get("groups")
            _check(isinstance(groups, list) and len(groups) >= 2
                   and all(isinstance(g, list) and g for g in groups), here,
                   "an order has 'groups': two or more lists of systems, best first")
            names = [s for g in groups for s in g]
            _check(len(names) == len(set(names)), here, "a system appears twice in the order")
        if relation in COMPARISONS + ("order",):
            _check(claim.get("metric") in METRICS, here, f"metric is one of {', '.join(METRICS)}")
            _check(claim.get("subset") in SUBSETS, here, f"subset is one of {', '.join(SUBSETS)}")
            _check(isinstance(claim.get("pairs"), list) and claim["pairs"], here,
                   "needs 'pairs' (the directions to check)")
        if relation == "threshold":
            _check_measure(claim.get("measure"), here)
            if claim["measure"]["kind"] == "none":
                _check(isinstance(claim["measure"].get("why"), str), here,
                       "a claim without a measure says 'why' it has none")
            else:
                _check_tests(claim.get("tests"), claim["measure"], here)
        _check_paper(claim.get("paper", []), here, paper_numbers)
        claims.append(claim)
    ids = {c["id"] for c in claims}
    for claim in claims:
        _check(claim.get("same_as") in (None, *ids) and claim.get("same_as") != claim["id"],
               f"{where}: claim {claim['id']!r}", f"'same_as' names no other claim of the file: "
               f"{claim.get('same_as')!r}")
    return claims


def load(path, repo: Optional[Path] = None) -> Claims:
    """Read and validate a claims file; its ``paper_file`` (repository-relative) checks the
    paper's numbers where a claim names a column."""
    path = Path(path)
    try:
        data = textio.read_json(path, "claims file", "fix the file (or take it again from the "
                                "repository)")
    except OSError as e:
        raise LabError(f"{path}: {e}") from None
    schema.check(data, schema.CLAIMS, path, "claims file")
    paper_numbers = None
    if data.get("paper_file"):
        paper_path = Path(repo or Path.cwd()) / data["paper_file"]
        try:
            paper_numbers = textio.read_json(paper_path, "paper numbers")
        except (OSError, textio.BadTextFile) as e:
            raise LabError(f"{path}: paper_file: {e}") from None
    data = {**data, "claims": validate(data, str(path), paper_numbers)}
    return Claims(path, data)


def systems_of(claim: dict) -> List[str]:
    """Every system a comparison or order claim names."""
    if claim["relation"] == "order":
        return [s for g in claim["groups"] for s in g]
    if claim["relation"] == "threshold":
        return []
    return list(claim.get("systems") or [claim["system"]]) + [claim["against"]]


def compared(claim: dict) -> List[str]:
    """The systems a comparison claim compares with ``against`` (one or several)."""
    return list(claim.get("systems") or [claim["system"]])

