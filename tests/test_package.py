"""The plugin loads the ways the README says: ``--user-dir ran_fairseq`` from the checkout and
``--user-dir "$(python -m ran_fairseq)"`` from anywhere."""
import subprocess
import sys

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
