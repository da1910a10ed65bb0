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
  "compute"}``, the name of a column of :data:`.measures.COLUMNS` (a function of the result
  returning the cell's text);
- ``measure`` (optional): the name of a measure of :data:`.measures.MEASURES`, called as
  ``function(run, result)`` after each system is scored, returning extra result fields (e.g.
  FLOPs or a plot's path);
- ``old_names`` (optional): names the paper went by, which ``ran-reproduce`` still takes with a
  notice.

A paper file is data: it names entries of the engine's registries and nothing is imported by its
name. Papers are read when they are used, each on its own: a broken paper file is one line about
that file, and the other papers run.
"""
from collections.abc import Mapping
from pathlib import Path
from typing import Dict, List

from ran_text import textio

from ran_text.textio import read_lines
from ..common import LabError
from ..common.paths import REPO
from . import measures
from .config import Column, FullSetting, Paper
from .markdown import fmt

PAPER_FILE = "reproduce.json"
KEYS = {"title", "cpu_config", "full", "notes", "columns", "measure", "old_names"}


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
        raise LabError(f"{where}: each of 'columns' is {{\"title\", \"field\"[, "
                             f"\"format\"]}} or {{\"title\", \"compute\"}}, got {spec!r}")
    field, spec_format = spec["field"], spec.get("format")
    if spec_format is None:
        return Column(spec["title"], lambda r: r.get(field, ""))
    return Column(spec["title"], lambda r: fmt(r.get(field), spec_format))


def _measure(name, where, key="measure"):
    """The function of the registry ``key`` names (:data:`.measures.MEASURES` for ``measure``,
    :data:`.measures.COLUMNS` for a column's ``compute``); one line listing the registry's names
    for any other (a ``module:function``, as paper files held before, included)."""
    registry = measures.MEASURES if key == "measure" else measures.COLUMNS
    if isinstance(name, str) and name in registry:
        return registry[name]
    old = ("; a paper file names an entry of the engine, never a module or a function to "
           "import (ran_lab/reproduce/measures.py)" if isinstance(name, str) and ":" in name
           else "")
    raise LabError(f"{where}: '{key}' {name!r} is not a {key} of the engine; write one of: "
                         f"{', '.join(registry)}{old}")


def load_paper(folder: Path) -> Paper:
    """The paper of ``folder`` (``configs/KEY``), from its ``reproduce.json``."""
    folder = Path(folder)
    where = folder / PAPER_FILE
    data = _read(where)
    if not isinstance(data, dict) or not {"title", "cpu_config", "full"} <= set(data) \
            or set(data) - KEYS:
        raise LabError(f"{where}: an object with title, cpu_config and full (and optionally "
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
        raise LabError(f"{where}: 'full' is {{\"config\", \"help\"}} or a list of "
                             f"{{\"name\", \"config\", \"help\"}}, got {full!r}")
    if "notes" in data:
        notes_file = folder / data["notes"]
        if not notes_file.is_file():
            raise LabError(f"{where}: its 'notes' file {notes_file} does not exist")
        kwargs["notes"] = read_notes(notes_file)
    if "measure" in data:
        kwargs["measure"] = _measure(data["measure"], where)
    try:
        return Paper(key=folder.name, title=data["title"], cpu_config=folder / data["cpu_config"],
                     columns=[_column(c, where) for c in data.get("columns", [])], **kwargs)
    except ValueError as e:
        raise LabError(f"{where}: {e}") from None


def _read(where):
    """The JSON of a paper file (one line naming it when it cannot be read)."""
    try:
        return textio.read_json(where, "a paper file", "fix it as docs/adding-a-paper.md says")
    except OSError as e:
        raise LabError(f"{where}: {e}") from None


class Papers(Mapping):
    """The papers of ``configs`` by key (a folder holding a ``reproduce.json``), in the order of
    the keys; each read and checked when it is first used (:func:`load_paper`), so that a broken
    paper file is an error of that paper only."""

    def __init__(self, configs: Path = REPO / "configs"):
        self.configs, self._loaded = Path(configs), {}

    def _keys(self):
        return sorted(p.parent.name for p in self.configs.glob(f"*/{PAPER_FILE}"))

    def __iter__(self):
        return iter(self._keys())

    def __len__(self):
        return len(self._keys())

    def __contains__(self, key):
        return isinstance(key, str) and (self.configs / key / PAPER_FILE).is_file() \
            and key in self._keys()

    def __getitem__(self, key):
        if key not in self:
            raise KeyError(key)
        if key not in self._loaded:
            self._loaded[key] = load_paper(self.configs / key)
        return self._loaded[key]


def load_old_names(configs: Path = REPO / "configs") -> Dict[str, str]:
    """Names papers went by before -> their keys (a paper file that cannot be read has none
    here: its own error comes when the paper is used)."""
    old = {}
    for path in sorted(Path(configs).glob(f"*/{PAPER_FILE}")):
        try:
            names = _read(path).get("old_names", [])
        except (LabError, AttributeError):
            continue
        for name in names if isinstance(names, list) else []:
            if isinstance(name, str):
                old[name] = path.parent.name
    return old


PAPERS = Papers()


def paper_of(script):
    """The paper that ``scripts/reproduce-KEY.sh`` (a path) reproduces."""
    name = Path(script).name
    key = name[len("reproduce-"):-len(".sh")] if name.startswith("reproduce-") else name
    if not name.endswith(".sh") or key not in PAPERS:
        raise KeyError(f"{script}: not one of scripts/reproduce-{{{','.join(PAPERS)}}}.sh")
    return PAPERS[key]
