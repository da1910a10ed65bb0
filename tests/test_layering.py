"""The package's layers, read from the source (no import runs): the plugin that fairseq loads
through ``--user-dir`` imports only the plugin, never the lab (``ran_fairseq.lab``, the data
preparation, the analyses); ``modules/`` (the papers' mechanisms, usable on plain tensors)
never imports ``models/`` (the fairseq wiring above it); the lab and the analyses lean one way:
``lab/`` may import ``analysis/``, and ``analysis/`` imports of the lab only its leaf (the
helpers both share, which import neither side); and every import of the package's own
modules, function-level ones included, names a module that exists (a moved module leaves none
behind)."""
import ast
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ran_fairseq"

# What `import ran_fairseq` may load: the plugin core and the few small modules it shares with
# the lab (import quieting, atomic text files, the tokenization record that the hub reads).
PLUGIN = ("ran_fairseq", "ran_fairseq.models", "ran_fairseq.modules", "ran_fairseq.criterions",
          "ran_fairseq.optim", "ran_fairseq.scoring", "ran_fairseq.compat",
          "ran_fairseq.safe_checkpoints", "ran_fairseq.hub",
          "ran_fairseq.quiet", "ran_fairseq.textio", "ran_fairseq.data",
          "ran_fairseq.data.tokenization")
# The lab's leaf: helpers the lab and the analyses share (system names as folders, recorded
# paths), which import no other module of the lab and none of the analyses.
LEAF = ("ran_fairseq.lab.common", "ran_fairseq.lab.portable")
# Packages whose __init__ alone belongs to the plugin (their other modules are the lab's).
INIT_ONLY = {"ran_fairseq", "ran_fairseq.data"}


def module_files(root: Path) -> Dict[str, Path]:
    """Every module of the package under ``root``: dotted name -> file."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def imports_of(name: str, path: Path, known: Dict[str, Path]) -> Iterator[Tuple[int, str]]:
    """(line, imported module) for every import of the package's own modules in ``path``,
    function-level imports included, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    root = next(iter(known)).split(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from X import y` imports X.y where y is a module, else X itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            if target == root or target.startswith(root + "."):
                yield node.lineno, target


def in_plugin(module: str) -> bool:
    if module in INIT_ONLY:
        return True
    return any(module == p or (module.startswith(p + ".") and p not in INIT_ONLY) for p in PLUGIN)


def under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(root: Path) -> List[str]:
    known = module_files(root)
    found = []
    for name, path in known.items():
        for line, target in imports_of(name, path, known):
            where = f"{path.relative_to(root.parent)}:{line}"
            if target not in known:
                found.append(f"{where}: {name} imports {target}, which does not exist")
                continue
            if in_plugin(name) and not in_plugin(target):
                found.append(f"{where}: the plugin module {name} imports {target}, outside the "
                             f"plugin (fairseq loads the plugin with --user-dir; the lab stays out)")
            if name.startswith(f"{root.name}.modules") and target.startswith(f"{root.name}.models"):
                found.append(f"{where}: {name} imports {target}: modules/ must not depend on "
                             f"models/")
            lab, analysis = f"{root.name}.lab", f"{root.name}.analysis"
            leaf = tuple(f"{root.name}{m[len('ran_fairseq'):]}" for m in LEAF)
            if under(name, (analysis,)) and under(target, (lab,)) and not under(target, leaf):
                found.append(f"{where}: {name} imports {target}: the analyses import of the lab "
                             f"only its leaf ({', '.join(leaf)}); move the shared helper there")
            if under(name, leaf) and (under(target, (analysis,)) or
                                      (under(target, (lab,)) and not under(target, leaf))):
                found.append(f"{where}: the leaf module {name} imports {target}: the leaf "
                             f"imports no other module of the lab and none of the analyses")
    return found


def test_the_plugin_does_not_import_the_lab_and_modules_do_not_import_models():
    assert violations(PACKAGE) == []


def test_the_plugin_is_the_core_the_architecture_names():
    known = module_files(PACKAGE)
    for name in PLUGIN:
        assert name in known, f"{name} is listed as plugin but does not exist"
    # the lab exists and is outside the plugin, so the rule above has something to keep out
    assert not in_plugin("ran_fairseq.lab.reproduce") and not in_plugin("ran_fairseq.analysis")
    assert not in_plugin("ran_fairseq.data.prepare")
    for name in LEAF:
        assert name in known, f"{name} is listed as the lab's leaf but does not exist"


@pytest.mark.parametrize("module, source, expected", [
    ("ran_fairseq/models/bad.py", "from ..lab.claims import spec\n", "outside the plugin"),
    ("ran_fairseq/hub.py", "def f():\n    import ran_fairseq.analysis\n", "outside the plugin"),
    ("ran_fairseq/modules/bad.py", "from ..models import ran_transformer\n", "must not depend"),
    ("ran_fairseq/__init__.py", "from .data import prepare\n", "outside the plugin"),
    ("ran_fairseq/analysis/bad.py", "def f():\n    from ..reproduce import slug\n",
     "does not exist"),
    ("ran_fairseq/analysis/bad.py", "from ..lab.reproduce import store\n", "only its leaf"),
    ("ran_fairseq/lab/common/bad.py", "from ...analysis import plots\n", "the leaf module"),
    ("ran_fairseq/lab/portable.py", "from .reproduce import store\n", "the leaf module"),
])
def test_the_check_finds_each_kind_of_violation(tmp_path, module, source, expected):
    """A copy of the package's skeleton with one bad import: the check names it."""
    for name, path in module_files(PACKAGE).items():
        copy = tmp_path / path.relative_to(PACKAGE.parent)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text("")
    (tmp_path / module).write_text(source)
    found = violations(tmp_path / "ran_fairseq")
    assert len(found) == 1 and expected in found[0] and module in found[0], found


def test_no_plugin_module_over_600_lines():
    """A plugin module (what ``--user-dir`` loads) fits on a few screens: 500 lines is the aim,
    600 the limit that fails."""
    files = module_files(PACKAGE)
    long = {name: n for name, path in files.items()
            if name.split(".")[:2] != ["ran_fairseq", "lab"]
            and (n := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, f"plugin modules over 600 lines: {long}"
