"""Every console script of setup.py also runs as ``python -m MODULE`` (docs/guarantees.md promises
the ``python -m`` form of each): ``--help`` prints the command's usage and exits 0. Before, ``python
-m ran_lab.remake`` and ``python -m ran_lab.claims.cli`` did nothing and exited 0."""
import re
import subprocess
import sys

import pytest

from helpers import REPO

SCRIPTS = re.findall(r'"(ran-[\w-]+) = ([\w.]+):main"', (REPO / "setup.py").read_text())


def test_setup_lists_the_console_scripts():
    assert len(SCRIPTS) >= 7


@pytest.mark.parametrize("script, module", SCRIPTS, ids=[s for s, _ in SCRIPTS])
def test_python_m_runs_the_command(script, module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout
