"""The two houses, read from the source (no import runs; docs/houses.md has the picture):

- what a fairseq user installs, the plugin (``ran_fairseq``, what ``--user-dir`` loads) and its
  tools beside fairseq (``ran_text``: data preparation, scoring, text files), never imports the
  lab (``ran_lab``);
- ``ran_text`` imports neither the plugin, nor torch, nor fairseq (its commands, and the lab's
  that need no model, start without them);
- ``modules/`` (the papers' mechanisms, usable on plain tensors) never imports ``models/`` (the
  fairseq wiring above it);
- in the lab, the analyses import of the rest of the lab only its leaf (the helpers both share:
  system names as folders, recorded paths, loading the plugin), and the leaf imports no other
  module of the lab;
- every import of the project's own modules, function-level ones included, names a module that
  exists (a moved module leaves none behind).
"""
import ast
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ran_fairseq", "ran_text", "ran_lab")
# The packages a fairseq user installs: what they import stays among them.
PLUGIN = ("ran_fairseq", "ran_text")
# The lab's leaf: helpers the engine and the analyses share, which import no other module of the
# lab and none of the analyses.
LEAF = ("ran_lab.common", "ran_lab.portable", "ran_lab.checkout", "ran_lab.plugin",
        "ran_lab.quiet")
ANALYSIS = "ran_lab.analysis"


def module_files(root: Path) -> Dict[str, Path]:
    """Every module of the packages under ``root``: dotted name -> file."""
    files = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def imports_of(name: str, path: Path, known: Dict[str, Path]) -> Iterator[Tuple[int, str]]:
    """(line, imported module) for every import in ``path``, function-level imports included,
    relative imports resolved; ``from X import y`` imports X.y where that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        yield from ((node.lineno, target) for target in targets)


def under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(root: Path) -> List[str]:
    known = module_files(root)
    found = []
    for name, path in known.items():
        for line, target in imports_of(name, path, known):
            where = f"{path.relative_to(root)}:{line}"
            if under(name, ("ran_text",)) and under(target, ("torch", "fairseq", "ran_fairseq")):
                found.append(f"{where}: {name} imports {target}: ran_text imports neither the "
                             f"plugin nor torch nor fairseq")
            if not under(target, PACKAGES):
                continue
            if target not in known:
                found.append(f"{where}: {name} imports {target}, which does not exist")
                continue
            if under(name, PLUGIN) and not under(target, PLUGIN):
                found.append(f"{where}: the plugin module {name} imports {target}, outside the "
                             f"plugin (fairseq loads the plugin with --user-dir; the lab stays out)")
            if under(name, ("ran_fairseq.modules",)) and under(target, ("ran_fairseq.models",)):
                found.append(f"{where}: {name} imports {target}: modules/ must not depend on "
                             f"models/")
            in_lab = under(target, ("ran_lab",)) and target != "ran_lab"
            if under(name, (ANALYSIS,)) and in_lab and not under(target, (ANALYSIS, *LEAF)):
                found.append(f"{where}: {name} imports {target}: the analyses import of the lab "
                             f"only its leaf ({', '.join(LEAF)}); move the shared helper there")
            if under(name, LEAF) and in_lab and not under(target, LEAF):
                found.append(f"{where}: the leaf module {name} imports {target}: the leaf "
                             f"imports no other module of the lab and none of the analyses")
    return found


def test_the_houses_import_one_way():
    assert violations(REPO) == []


def test_the_layout_the_rules_name():
    known = module_files(REPO)
    for name in (*PACKAGES, *LEAF, ANALYSIS, "ran_fairseq.models", "ran_fairseq.modules",
                 "ran_lab.reproduce", "ran_lab.claims", "ran_lab.bench"):
        assert name in known, f"{name} is named by the layering rules but does not exist"


@pytest.mark.parametrize("module, source, expected", [
    ("ran_fairseq/models/bad.py", "from ran_lab.claims import spec\n", "outside the plugin"),
    ("ran_fairseq/hub.py", "def f():\n    import ran_lab.analysis\n", "outside the plugin"),
    ("ran_text/bad.py", "import ran_lab.quiet\n", "outside the plugin"),
    ("ran_text/bad.py", "def f():\n    import torch\n", "neither the plugin"),
    ("ran_fairseq/modules/bad.py", "from ..models import ran_transformer\n", "must not depend"),
    ("ran_lab/analysis/bad.py", "def f():\n    from ..reproduce import slug\n", "only its leaf"),
    ("ran_lab/analysis/bad.py", "from ran_lab.reproducing import store\n", "does not exist"),
    ("ran_lab/common/bad.py", "from ..analysis import plots\n", "the leaf module"),
    ("ran_lab/portable.py", "from .reproduce import store\n", "the leaf module"),
])
def test_the_check_finds_each_kind_of_violation(tmp_path, module, source, expected):
    """A copy of the packages' skeleton with one bad import: the check names it."""
    for path in module_files(REPO).values():
        copy = tmp_path / path.relative_to(REPO)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text("")
    (tmp_path / module).write_text(source)
    found = violations(tmp_path)
    assert len(found) == 1 and expected in found[0] and module in found[0], found


def test_no_plugin_module_over_600_lines():
    """A plugin module (what ``--user-dir`` loads) fits on a few screens: 500 lines is the aim,
    600 the limit that fails."""
    long = {name: n for name, path in module_files(REPO).items()
            if under(name, PLUGIN) and (n := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, f"plugin modules over 600 lines: {long}"


def import_cycles(root: Path) -> List[List[str]]:
    """The cycles of the import graph of the packages under ``root`` (function-level imports
    included; a package's own ``__init__`` importing its modules is no cycle)."""
    known = module_files(root)
    graph = {name: {target for _, target in imports_of(name, path, known)
                    if target in known and target != name
                    and not name.startswith(target + ".")}  # a module's package is imported first
             for name, path in known.items()}
    cycles, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_circles():
    """No module needs itself through another (the engine's scheduler, one run's work and the
    launchers were such a circle, broken only by imports inside functions)."""
    assert import_cycles(REPO) == []


def test_the_cycle_check_finds_a_cycle(tmp_path):
    for path in module_files(REPO).values():
        copy = tmp_path / path.relative_to(REPO)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text("")
    (tmp_path / "ran_lab/reproduce/execute.py").write_text("def f():\n    from . import schedule\n")
    (tmp_path / "ran_lab/reproduce/schedule.py").write_text("from . import execute\n")
    assert import_cycles(tmp_path) == [["ran_lab.reproduce.execute", "ran_lab.reproduce.schedule",
                                        "ran_lab.reproduce.execute"]]
