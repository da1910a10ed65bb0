"""The synthetic corpora several test files read, each kind built once per test run.

Under pytest-xdist every worker is a process of its own, so a session-scoped fixture alone would
build its corpus once per worker. Here a kind is built into a folder of the run's shared temporary
directory (``tmp_path_factory.getbasetemp().parent`` in a worker, the base directory itself
without xdist; ``$RAN_TEST_CORPORA`` where set, as `make test` does for its tiers), under an
exclusive lock: the first process to ask builds it into a temporary folder
and renames that into place when it is whole, and the others wait, then read it. A build that
fails leaves nothing in place, and the next process to ask tries again.

The folders are shared, so tests only read them: a test that changes a corpus or a data-bin, or
writes beside one, works on a copy (:func:`copy_of`, or the ``scored_corpus`` fixture of
tests/conftest.py).
"""
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import helpers


def shared_root(tmp_path_factory):
    """The folder of this test run's shared corpora: ``$RAN_TEST_CORPORA`` where it is set (`make
    test` sets it to a new folder for its tiers, each a pytest run of its own, and removes it
    after), else a folder of this pytest run's temporary directory."""
    if os.environ.get("RAN_TEST_CORPORA"):
        root = Path(os.environ["RAN_TEST_CORPORA"])
        root.mkdir(parents=True, exist_ok=True)
        return root
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER", "master") != "master":
        base = base.parent  # the run's folder, above each worker's own
    root = base / "corpora"
    root.mkdir(exist_ok=True)
    return root


def built(tmp_path_factory, name, build):
    """The folder ``name`` of the shared corpora, made by ``build(folder)`` if no process of this
    run has made it yet."""
    root = shared_root(tmp_path_factory)
    dest = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not dest.is_dir():
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                build(tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # as a folder made by mkdir (mkdtemp's is private)
            os.rename(tmp, dest)
    return dest


def copy_of(folder, dest):
    """A copy of a shared ``folder`` at ``dest``, for a test that writes into it."""
    return Path(shutil.copytree(folder, dest))


# ---- the kinds ---------------------------------------------------------------------------------

def synthetic(root, joined=False):
    """``root/raw``: helpers.make_synthetic_corpus with its defaults; ``root/bin``: it binarized
    (one dictionary for both languages with ``joined``)."""
    helpers.make_synthetic_corpus(root / "raw")
    helpers.binarize(root / "raw", root / "bin", joined=joined)


def scored(root):
    """helpers.scored_corpus: ``root/raw`` and ``root/bin.de-en``."""
    helpers.scored_corpus(root)
