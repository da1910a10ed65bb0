"""The papers the engine reproduces, read from the checkout's ``configs/``: a folder
``configs/KEY/`` holding a ``reproduce.json`` is the paper ``KEY`` (``ran-reproduce KEY``,
``scripts/reproduce-KEY.sh``, results under ``results/KEY/``). Its ``reproduce.json`` says what the
engine adds to the folder's scale configs (docs/adding-a-paper.md):

- ``title``: the heading of TABLE.md;
- ``cpu_config``: the scale config run without ``--config`` or ``--full`` (a file of the folder);
- ``full``: the full-size settings, either one ``{"config", "help"}`` (a bare ``--full``) or a list
  of named ones ``[{"name", "config", "help"}, ...]`` (``--full NAME``, the first without a NAME);
- ``notes`` (optional): a Markdown file of the folder whose bullets (``- ...``, a line indented
  under a bullet going on with it) are written under the table's legend;
- ``columns`` (optional): extra table columns ``{"title", "field", "format"}``, each the result's
  ``field`` (formatted with the Python format spec ``format`` if given), or ``{"title",
  "compute"}``, ``"module:function"`` called with the result and returning the cell's text;
- ``measure`` (optional): ``"module:function"``, called as ``function(run, result)`` after each
  system is scored, returning extra result fields (e.g. FLOPs or a plot's path);
- ``old_names`` (optional): names the paper went by, which ``ran-reproduce`` still takes with a
  notice.
"""
import importlib
import json
from pathlib import Path
from typing import Dict, List

from ran_text.textio import read_lines
from ..common.paths import REPO
from .config import Column, FullSetting, Paper
from .markdown import fmt

PAPER_FILE = "reproduce.json"
KEYS = {"title", "cpu_config", "full", "notes", "columns", "measure", "old_names"}


class PaperFileError(ValueError):
    """A ``configs/KEY/reproduce.json`` that is not as docs/adding-a-paper.md describes."""


def read_notes(path: Path) -> List[str]:
    """The bullets of a Markdown file, each one line: a ``- `` line starts one, an indented line
    goes on with it (joined with a space); anything before the first bullet is a heading or
    preamble, and a line that is neither ends the bullet."""
    notes, current = [], None
    for line in read_lines(path):
        if line.startswith("- "):
            current = [line[2:].strip()]
            notes.append(current)
        elif current is not None and line[:1] in (" ", "\t") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return [" ".join(parts) for parts in notes]


def _column(spec, where):
    if isinstance(spec, dict) and set(spec) == {"title", "compute"}:
        return Column(spec["title"], _measure(spec["compute"], where, "compute"))
    if not isinstance(spec, dict) or not {"title", "field"} <= set(spec) <= {"title", "field",
                                                                            "format"}:
        raise PaperFileError(f"{where}: each of 'columns' is {{\"title\", \"field\"[, "
                             f"\"format\"]}} or {{\"title\", \"compute\"}}, got {spec!r}")
    field, spec_format = spec["field"], spec.get("format")
    if spec_format is None:
        return Column(spec["title"], lambda r: r.get(field, ""))
    return Column(spec["title"], lambda r: fmt(r.get(field), spec_format))


# the packages whose functions a paper file may name (a paper file is data: it never makes the
# engine import or call code from elsewhere)
PROJECT_PACKAGES = ("ran_fairseq", "ran_lab")


def _of_the_project(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PROJECT_PACKAGES)


def _measure(name, where, key="measure"):
    module, _, function = str(name).partition(":")
    if not _of_the_project(module) or not function.isidentifier() or function.startswith("_"):
        raise PaperFileError(f"{where}: '{key}' {name!r} must name a public function of the "
                             f"project's packages ({', '.join(PROJECT_PACKAGES)}) as "
                             f"module:function; nothing else is imported")
    try:
        found = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError, ValueError) as e:
        raise PaperFileError(f"{where}: '{key}' {name!r} is not an importable "
                             f"module:function ({e})") from None
    if not callable(found) or not _of_the_project(getattr(found, "__module__", None) or ""):
        raise PaperFileError(f"{where}: '{key}' {name!r} is not a function defined in the "
                             f"project's packages ({', '.join(PROJECT_PACKAGES)})")
    return found


def load_paper(folder: Path) -> Paper:
    """The paper of ``folder`` (``configs/KEY``), from its ``reproduce.json``."""
    folder = Path(folder)
    where = folder / PAPER_FILE
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PaperFileError(f"{where}: {e}") from None
    if not isinstance(data, dict) or not {"title", "cpu_config", "full"} <= set(data) \
            or set(data) - KEYS:
        raise PaperFileError(f"{where}: an object with title, cpu_config and full (and optionally "
                             f"{', '.join(sorted(KEYS - {'title', 'cpu_config', 'full'}))}) "
                             f"expected, got keys {sorted(data) if isinstance(data, dict) else data}")
    full = data["full"]
    kwargs = {}
    if isinstance(full, dict) and set(full) == {"config", "help"}:
        kwargs.update(full_config=folder / full["config"], full_help=full["help"])
    elif isinstance(full, list) and full and all(
            isinstance(s, dict) and set(s) == {"name", "config", "help"} for s in full):
        kwargs["full_settings"] = [FullSetting(s["name"], folder / s["config"], s["help"])
                                   for s in full]
    else:
        raise PaperFileError(f"{where}: 'full' is {{\"config\", \"help\"}} or a list of "
                             f"{{\"name\", \"config\", \"help\"}}, got {full!r}")
    if "notes" in data:
        notes_file = folder / data["notes"]
        if not notes_file.is_file():
            raise PaperFileError(f"{where}: its 'notes' file {notes_file} does not exist")
        kwargs["notes"] = read_notes(notes_file)
    if "measure" in data:
        kwargs["measure"] = _measure(data["measure"], where)
    try:
        return Paper(key=folder.name, title=data["title"], cpu_config=folder / data["cpu_config"],
                     columns=[_column(c, where) for c in data.get("columns", [])], **kwargs)
    except ValueError as e:
        raise PaperFileError(f"{where}: {e}") from None


def load_papers(configs: Path = REPO / "configs") -> Dict[str, Paper]:
    """Every paper of ``configs``, by key (its folder's name), in the order of the keys."""
    return {folder.name: load_paper(folder)
            for folder in sorted(p.parent for p in Path(configs).glob(f"*/{PAPER_FILE}"))}


def load_old_names(configs: Path = REPO / "configs") -> Dict[str, str]:
    """Names papers went by before -> their keys."""
    old = {}
    for path in sorted(Path(configs).glob(f"*/{PAPER_FILE}")):
        for name in json.loads(path.read_text(encoding="utf-8")).get("old_names", []):
            old[name] = path.parent.name
    return old


PAPERS = load_papers()
OLD_NAMES = load_old_names()


def paper_of(script):
    """The paper that ``scripts/reproduce-KEY.sh`` (a path) reproduces."""
    name = Path(script).name
    key = name[len("reproduce-"):-len(".sh")] if name.startswith("reproduce-") else name
    if not name.endswith(".sh") or key not in PAPERS:
        raise KeyError(f"{script}: not one of scripts/reproduce-{{{','.join(PAPERS)}}}.sh")
    return PAPERS[key]
