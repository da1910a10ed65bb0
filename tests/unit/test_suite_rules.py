"""The test suite's own rules, read from its source (no test of it runs):

- no test reads what a run makes in the checkout (data-bin/, checkpoints/, the demo's demo-out/,
  bench-out/, runs/): a test that needs a Multi30k data-bin makes what it needs under a temporary
  folder from the raw corpus, or skips naming it, so `make demo && make test` pass in one checkout
  as on a fresh clone;
- the plugin's tests, conftest.py and the modules every tier shares import nothing of the lab
  (``ran_lab``): the plugin is tested as a fairseq user loads it;
- no conftest or shared module turns on an opt-in fix of ``ran_fairseq.fixes`` for every test
  (``helpers.opt_in_fixes`` turns one on in a test about it);
- test names, docstrings and comments say what is tested, not which piece of work added it.
"""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FILES = sorted(TESTS.rglob("*.py"))
# what a run writes into the checkout (the Makefile's `clean` removes them)
MADE = ("data-bin", "checkpoints", "demo-out", "bench-out", "runs")
SHARED = ["conftest.py", "helpers.py", "corpora.py", "systems.py", "cli_server.py",
          "cli_client.py", "ddp_worker.py", "kill_during_copy.py"]
# the test files whose subject is the lab (ran_lab), the only ones that may import it; every
# other test file (the plugin's, the package's, the shared modules) imports nothing of it, so a
# new test file is held to that until it is listed here
LAB = ["integration/test_analysis.py", "integration/test_analyze_pervasive.py",
       "integration/test_claims.py", "integration/test_claims_annotations.py",
       "integration/test_engine_store.py", "integration/test_kernels.py",
       "integration/test_prose_figures.py", "integration/test_reproducible.py",
       "integration/test_seeds.py", "system/test_bench.py", "system/test_bench_peers_workers.py",
       "system/test_gpu_check.py", "system/test_leaderboard.py", "system/test_reproduce.py",
       "system/test_reproduce_dynmem.py", "system/test_reproduce_pervasive.py",
       "system/test_reproduce_recurrent_cross.py", "unit/test_alignments.py",
       "unit/test_bench_peers.py", "unit/test_declared_steps.py", "unit/test_engine.py",
       "unit/test_engine_records.py", "unit/test_error_messages.py", "unit/test_file_schemas.py",
       "unit/test_fragile_verdicts.py", "unit/test_gpu_plans.py", "unit/test_json_reading.py",
       "unit/test_kernel_counts.py", "unit/test_leaderboard_page.py",
       "unit/test_markdown_tables.py", "unit/test_multi30k_download.py",
       "unit/test_no_write_through_links.py", "unit/test_portable.py",
       "unit/test_reading_text.py", "unit/test_readme_summary.py", "unit/test_remake.py",
       "unit/test_replace_unk.py", "unit/test_significance.py", "unit/test_upstream.py",
       "unit/test_verdict_error_rates.py"]


def _repo_root(node):
    """Whether ``node`` names the checkout: ``REPO`` or ``something.REPO``."""
    return (isinstance(node, ast.Name) and node.id == "REPO") or \
        (isinstance(node, ast.Attribute) and node.attr == "REPO")


def reads_of_made_folders(source):
    """The lines of ``source`` that join the checkout's path with a folder a run makes
    (``REPO / "data-bin"``, ``helpers.REPO / "checkpoints/x"``). A string that names such a path
    (``f"{REPO}/data-bin/x"``, as the tests of portable records write) reads nothing."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) \
                and _repo_root(node.left) and isinstance(node.right, ast.Constant) \
                and isinstance(node.right.value, str) \
                and node.right.value.split("/")[0] in MADE:
            found.append(node.lineno)
    return sorted(found)


def lab_imports(source):
    """The lines of ``source`` that import ``ran_lab`` (at the top or inside a function)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "ran_lab" or n.startswith("ran_lab.") for n in names):
            found.append(node.lineno)
    return sorted(found)


def test_the_rules_catch_what_they_are_about():
    bad = ('from helpers import REPO\nx = REPO / "data-bin" / "multi30k.de-en"\n'
           'y = helpers.REPO / "checkpoints/a"\nz = (REPO / "demo-out").is_dir()\n'
           'def f():\n    from ran_lab.claims import results\n    import ran_lab\n')
    assert reads_of_made_folders(bad) == [2, 3, 4]
    assert lab_imports(bad) == [6, 7]
    good = ('x = tmp_path / "data-bin"\ny = "{repo}/data-bin/x"\nz = REPO / "results"\n'
            'import ran_lab_extra\nfrom ran_fairseq import fixes\n')
    assert reads_of_made_folders(good) == [] and lab_imports(good) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_reads_what_a_run_made_in_the_checkout(path):
    lines = reads_of_made_folders(path.read_text(encoding="utf-8"))
    assert not lines, (f"{path.relative_to(TESTS)}:{lines} reads the checkout's "
                       f"{'/'.join(MADE)}: make what the test needs under a temporary folder "
                       f"(tests/corpora.py) or skip naming it")


def test_only_the_labs_tests_import_the_lab():
    missing = [name for name in LAB if not (TESTS / name).is_file()]
    assert not missing, f"listed here but not in tests/: {missing}"
    others = [p for p in FILES if str(p.relative_to(TESTS)) not in LAB]
    assert {"conftest.py", "helpers.py", "unit/test_options.py"} <= {
        str(p.relative_to(TESTS)) for p in others}
    found = {str(p.relative_to(TESTS)): lab_imports(p.read_text(encoding="utf-8")) for p in others}
    assert not {k: v for k, v in found.items() if v}, \
        f"test files that import ran_lab without being listed in LAB: { {k: v for k, v in found.items() if v} }"


def test_no_shared_module_turns_on_an_opt_in_fix_for_every_test():
    for name in SHARED:
        text = (TESTS / name).read_text(encoding="utf-8")
        assert not re.search(r"""(environ\[|setenv\(|setdefault\()\s*["']RAN_FAIRSEQ_FIXES""",
                             text), name
        assert "fixes.apply(" not in text and "plugin.load(" not in text, name


WORK_ITEM = re.compile(r"(?<![a-z])(issue|item)s?[ _#]*\d", re.I)


def work_items(source):
    """The names, docstrings and comments of ``source`` that name a piece of work (the word issue
    or item and its number) instead of what is tested."""
    tree = ast.parse(source)
    texts = [ast.get_docstring(tree) or ""]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            texts += [node.name, ast.get_docstring(node) or ""]
    texts += [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type == tokenize.COMMENT]
    return [text for text in texts if WORK_ITEM.search(text)]


def test_the_work_item_rule_catches_names_docstrings_and_comments():
    bad = ('"""Faults (issue 43)."""\ndef test_item_4():\n    """Items 5-13."""\n'
           '    x = 1  # issue #19\n')
    assert work_items(bad) == ["Faults (issue 43).", "test_item_4", "Items 5-13.", "# issue #19"]
    assert work_items('def test_an_issue_of_the_loader():\n    """Every item."""\n') == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_names_docstrings_and_comments_say_what_is_tested(path):
    found = work_items(path.read_text(encoding="utf-8"))
    assert not found, (path.name, [text[:200] for text in found])


def imported_test_modules(source):
    """The test modules ``source`` imports (``from test_x import ...``, ``import test_x``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [n for n in names if n.startswith("test_")]
    return found


def test_a_test_file_imports_test_modules_of_its_own_tier_only():
    """A tier runs on its own (``pytest tests/unit``): a test module of another tier's folder is
    not importable there, so what several tiers share lives in the shared modules."""
    assert imported_test_modules("from test_engine import a\nimport test_x\nfrom helpers import b\n") == \
        ["test_engine", "test_x"]
    crossing = {}
    for path in FILES:
        if path.parent == TESTS:
            continue
        for name in imported_test_modules(path.read_text(encoding="utf-8")):
            if not (path.parent / f"{name}.py").is_file():
                crossing.setdefault(str(path.relative_to(TESTS)), []).append(name)
    assert not crossing, f"test modules imported from another tier's folder: {crossing}"
