"""Where the project's checkout is: the one place that locates it.

The plugin (models, modules, the hub, ``ran-prepare``, ``ran-evaluate``) runs from any install. The
lab's commands (``ran-reproduce``, ``ran-bench``, ``ran-claims``, ``ran-remake``) read ``configs/``
and write ``results/`` of a checkout, the folder that holds ``setup.py`` and the ``ran_fairseq``
package. In a checkout (an editable install or ``PYTHONPATH``) that folder is the one above this
package; in an installed wheel the folder above is ``site-packages``, and :func:`require` refuses in
one line that says how to get a checkout.
"""
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# The folder a checkout would be: the package's parent (which is site-packages for a wheel).
ROOT = PACKAGE.parent
# What a checkout holds beside the package (a wheel's site-packages holds none of them).
MARKS = ("setup.py", "configs", "scripts")
HOW_TO_GET_ONE = ("clone the project's repository and run the command inside the clone, after "
                  "`pip install --no-build-isolation -e .` there (README.md, Install)")


def is_checkout(path: Path = ROOT) -> bool:
    """Whether ``path`` (default: the folder above the package) is a checkout of the project."""
    return all((Path(path) / mark).exists() for mark in MARKS)


def require(command: str) -> Path:
    """The checkout's root folder, for a console script: outside a checkout (an install without
    one), exit non-zero with one line that names ``command`` and says how to get one."""
    if not is_checkout(ROOT):
        raise SystemExit(f"{command}: error: {command} runs from a checkout of the project (it "
                         f"reads configs/ and writes results/ there), and ran_lab is installed at "
                         f"{PACKAGE} without one: {HOW_TO_GET_ONE}")
    return ROOT
