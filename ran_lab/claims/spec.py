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

COMPARISONS = (">", "<", "≈", "≥", "≤")
# Test keys only some measures read: a test naming one for another measure is refused.
TEST_KEYS_OF = {"files": ("bench",), "aggregate": ("bench",), "side": ("entropy", "js"),
                "of_side": ("entropy", "js"), "stat": ("entropy",)}

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


def _check_tests(tests, measure, where):
    _check(tests is not None, where, "a threshold claim needs a list of 'tests'")
    labels = set()
    for t in tests:
        _check(("limit" in t) != ("times" in t), where,
               "a test has either a 'limit' or 'times' (a factor of system 'of')")
        _check("times" not in t or "of" in t, where, "'times' needs 'of'")
        _check(t["label"] not in labels, where, f"two tests labelled {t['label']!r}")
        labels.add(t["label"])
        for key, kinds in TEST_KEYS_OF.items():
            _check(key not in t or measure["kind"] in kinds, where,
                   f"a test's {key!r} is read only by {' and '.join(kinds)} measures, "
                   f"not by a {measure['kind']} measure")
        if measure["kind"] in ("length_bins", "params"):
            _check("of" in t and "times" not in t, where,
                   f"a {measure['kind']} test compares 'system' with 'of' against a 'limit'")


def _check_paper(numbers, where, paper_numbers):
    columns = {c["key"]: c for c in (paper_numbers or {}).get("columns", [])}
    for entry in numbers:
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
        _check("margin" in claim, here,
               f"a {relation} comparison needs 'margin': {{\"value\": δ >= 0, \"why\": ...}}")
    size = claim.get("size")
    if size is None:
        return
    _check(relation in COMPARISONS, here, "'size' belongs to a comparison")
    _check(("value" in size) != ("values" in size), here, "'size' has 'value' or 'values'")
    values = [size["value"]] if "value" in size else list(size["values"].values())
    _check(values and all(map(_size_value, values)), here,
           "a size's value is a number or [low, high]")


def validate(data: dict, where: str, paper_numbers: Optional[dict] = None) -> List[dict]:
    """The claims of ``data`` with the defaults applied; LabError on the first fault."""
    schema.check(data, schema.CLAIMS, where, "claims file")
    for folder, entry in data.get("seed_variance", {}).items():
        _check(entry["from"] != folder, f"{where}: seed_variance",
               f"{folder!r} needs 'from' another folder than itself")
    defaults = data.get("defaults", {})
    seen, claims = set(), []
    for i, raw in enumerate(data["claims"]):
        claim = {**defaults, **raw}
        here = f"{where}: claim {raw.get('id', '?')!r}"
        schema.check(claim, schema.CLAIM, here, key=f"claims[{i}]")
        _check(claim["id"] not in seen, here, "the id is used twice")
        seen.add(claim["id"])
        relation = claim["relation"]
        if relation in COMPARISONS:
            _check(("system" in claim) != ("systems" in claim), here,
                   "a comparison names 'system' or 'systems'")
            _check("against" in claim, here, "a comparison names 'against'")
        _check_margin_size(claim, here)
        _check("same_as" not in claim or relation == "threshold", here,
               "'same_as' belongs to a threshold claim")
        _check("by_construction" not in claim or relation == "threshold", here,
               "'by_construction' belongs to a threshold claim and says why")
        if relation == "order":
            _check(len(claim.get("groups", ())) >= 2, here,
                   "an order has 'groups': two or more lists of systems, best first")
            names = [s for g in claim["groups"] for s in g]
            _check(len(names) == len(set(names)), here, "a system appears twice in the order")
        if relation in COMPARISONS + ("order",):
            for key in ("metric", "subset", "pairs"):
                _check(key in claim, here, f"needs {key!r}")
        if relation == "threshold":
            measure = claim.get("measure", {})
            _check(measure.get("kind") in schema.MEASURES, here,
                   f"'measure' needs a 'kind', one of {', '.join(schema.MEASURES)}")
            schema.check(measure, schema.MEASURES[measure["kind"]], here, key="measure")
            if measure["kind"] != "none":
                _check_tests(claim.get("tests"), measure, here)
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

