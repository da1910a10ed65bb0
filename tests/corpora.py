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


# ---- Multi30k, from the raw corpus -------------------------------------------------------------

MULTI30K_LANGS = ("en", "de")  # those of the committed results; fr and cs where they are here


def multi30k_raw():
    """The folder of the raw Multi30k files (``$MULTI30K_DIR``, which tests/conftest.py points at
    the offline copy beside the checkout where there is one), or None."""
    from ran_text.corpora import MULTI30K_SPLITS, missing_files

    folder = os.environ.get("MULTI30K_DIR")
    if not folder:
        return None
    names = [Path(folder) / f"{MULTI30K_SPLITS[s]}.{lang}.gz"
             for s in ("valid", "test") for lang in MULTI30K_LANGS]
    return None if missing_files(names) else Path(folder)


def multi30k_references(raw, root):
    """``root/{valid,test}.raw.{lang}``: the raw references a Multi30k data-bin holds, as data
    preparation writes them (ran_text.prepare: the corpus reader's lines, one a line; Multi30k is
    prepared without --lowercase), from the raw files in ``raw``."""
    from ran_text.corpora import MULTI30K_SPLITS, read_text

    for split in ("valid", "test"):
        for lang in ("en", "de", "fr", "cs"):
            if lang not in MULTI30K_LANGS and not (raw / f"{MULTI30K_SPLITS[split]}.{lang}.gz").is_file():
                continue
            lines = list(read_text(raw / f"{MULTI30K_SPLITS[split]}.{lang}.gz"))
            (root / f"{split}.raw.{lang}").write_text("".join(line + "\n" for line in lines),
                                                      encoding="utf-8")


def references_of(results_folder, references):
    """``{(pair, subset): file}`` for every (pair, subset) of a results folder's table, each file
    the one of ``references`` (the folder of :func:`multi30k_references`) with the name of the
    references its runs recorded (``data-bin/multi30k*.SRC-TGT/SUBSET.raw.TGT``), for
    ``ran_lab.claims.results.Folder``'s ``refs``; None if a run recorded other references."""
    import json

    table = json.loads((Path(results_folder) / "results.json").read_text(encoding="utf-8"))
    refs = {}
    for run in table["results"]:
        for subset, scores in run.get("subsets", {}).items():
            recorded = Path(scores["raw_ref"])
            if not recorded.parent.name.startswith("multi30k"):
                return None
            refs[(run["pair"], subset)] = Path(references) / recorded.name
    return refs
