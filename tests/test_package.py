"""The plugin loads the ways the README says: ``--user-dir ran_fairseq`` from the checkout and
``--user-dir "$(python -m ran_fairseq)"`` from anywhere; importing it registers with fairseq
whichever of the two a program imports first, and the lab's commands import neither torch nor
fairseq."""
import json
import subprocess
import sys

import pytest

import helpers
from systems import TINY_TRANSFORMER


def test_module_prints_user_dir():
    proc = subprocess.run([sys.executable, "-m", "ran_fairseq"], capture_output=True, text=True,
                          cwd="/", env=helpers.fairseq_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == helpers.USER_DIR


def test_relative_user_dir_from_checkout(synthetic_databin, tmp_path):
    args = helpers.train_args(synthetic_databin, tmp_path, "transformer", TINY_TRANSFORMER, max_update=1)
    args[args.index("--user-dir") + 1] = "ran_fairseq"
    proc = helpers.run_cli("train", [*args, "--no-save"], cwd=helpers.REPO, fresh=True)
    log = proc.stdout + proc.stderr
    assert "num_updates 1" in log or "num_updates=1" in log


def test_plugin_registers_with_fairseq():
    import ran_fairseq  # noqa: F401
    from fairseq.scoring import SCORER_REGISTRY

    assert "ter" in SCORER_REGISTRY


# In a fresh interpreter: what is registered, and whether torch and fairseq were imported.
_PROBE = """
import importlib.util, json, sys
{setup}
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.scoring import SCORER_REGISTRY
from fairseq import checkpoint_utils
print(json.dumps({{"arch": "ran_transformer" in ARCH_MODEL_REGISTRY,
                  "ter": "ter" in SCORER_REGISTRY,
                  "compat": getattr(checkpoint_utils.torch_persistent_save, "_ran_fairseq_atomic", False),
                  "finders": sum(type(f).__name__ == "_AfterImport" for f in sys.meta_path)}}))
"""


# (fairseq first, then the plugin, is every fairseq-train --user-dir of the suite)
@pytest.mark.parametrize("setup", [
    # fairseq imported by the probe's next line, after a look (find_spec) that imports nothing
    "import ran_fairseq; importlib.util.find_spec('fairseq')",
    "import ran_fairseq.models",  # a subpackage that imports fairseq while it is imported
    "import ran_fairseq.compat",  # a module that imports torch while it is imported
])
def test_registration_whichever_is_imported_first(setup):
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(setup=setup)], capture_output=True,
                          text=True, cwd="/", env=helpers.fairseq_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "arch": True, "ter": True, "compat": True, "finders": 0}


def test_the_lab_imports_neither_torch_nor_fairseq():
    """The commands that never use fairseq start without importing it (about 8 s on 2 cores)."""
    modules = ["ran_fairseq", "ran_fairseq.lab.reproduce.cli", "ran_fairseq.lab.claims.cli",
               "ran_fairseq.lab.remake", "ran_fairseq.lab.bench.cli", "ran_fairseq.analysis.cli",
               "ran_fairseq.data.prepare.cli", "ran_fairseq.scoring.evaluate",
               "ran_fairseq.scoring.replace_unk", "ran_fairseq.data.tokenization"]
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in ('torch', 'fairseq') if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                          env=helpers.fairseq_env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
