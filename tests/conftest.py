import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpora  # noqa: E402
import ran_fairseq  # noqa: E402,F401  (registers the plugin as --user-dir does: default fixes only)

# Multi30k is read from the offline copy beside the checkout where there is one (as a user's
# MULTI30K_DIR names it). The plugin runs as a user loads it: an opt-in fix of ran_fairseq.fixes is
# on only in the tests about it and in the lab's engine, which sets RAN_FAIRSEQ_FIXES itself.
_MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
if not os.environ.get("MULTI30K_DIR") and _MIRROR.is_dir():
    os.environ["MULTI30K_DIR"] = str(_MIRROR)

# Model-level tests compare float32 results at a tight tolerance; one thread keeps runs repeatable
# and leaves the second core to the fairseq subprocesses.
torch.set_num_threads(1)


def pytest_addoption(parser):
    # scripts/gpu-check.sh runs the model-level conformance checks on a GPU with --device cuda
    parser.addoption("--device", default=None,
                     help="run only the checks that take the `device` fixture, on this device "
                          "(without it every test runs, those on the CPU)")


@pytest.fixture(scope="session")
def device(request):
    """The torch device of the model-level checks (pytest --device; cpu unless asked)."""
    name = request.config.getoption("--device") or "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("--device cuda: no CUDA device")
    if name.startswith("cuda"):
        # The checks compare float32 scores to 1e-4. cuDNN's convolutions and LSTMs (Pervasive
        # Attention's DenseNet, RNNSearch) default to TF32, whose 10-bit mantissa moves a score by
        # about 1e-3 when the batch around a sentence changes (seen on an H100: 1.4e-3 to 6.1e-3,
        # results/gpu-check); the matrix products already default to full float32.
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(name)


# The synthetic corpora several files read, built once per test run however many workers run
# the files (tests/corpora.py). They are shared: a test that writes into one works on a copy.

@pytest.fixture(scope="session")
def synthetic_databin(tmp_path_factory):
    """A binarized synthetic de→en corpus (tests/helpers.make_synthetic_corpus), its text in
    ``../raw``. Shared: read it only (copy it with corpora.copy_of to change it)."""
    return corpora.built(tmp_path_factory, "synthetic", corpora.synthetic) / "bin"


@pytest.fixture(scope="session")
def joined_databin(tmp_path_factory):
    """The corpus of ``synthetic_databin`` binarized with one dictionary for both languages (for
    recipes that share all embeddings). Shared: read it only."""
    return corpora.built(tmp_path_factory, "synthetic-joined",
                         lambda root: corpora.synthetic(root, joined=True)) / "bin"


@pytest.fixture(scope="session")
def scored_corpus(tmp_path_factory):
    """``scored_corpus(root)`` puts a copy of helpers.scored_corpus's corpus in ``root`` (``raw``
    and ``bin.de-en``, which the reproduction engine may write beside) and returns
    ``root/bin.de-en``; the corpus itself is built once per test run."""
    shared = corpora.built(tmp_path_factory, "scored", corpora.scored)

    def place(root):
        root = Path(root)
        for name in ("raw", "bin.de-en"):
            corpora.copy_of(shared / name, root / name)
        return root / "bin.de-en"
    return place


@pytest.fixture(scope="session")
def multi30k_references(tmp_path_factory):
    """A folder of Multi30k's raw references, ``{valid,test}.raw.{en,de}`` as a data-bin
    holds them, made from the raw corpus once per test run (tests/corpora.py); the tests that take
    it skip, naming what they need, where the raw corpus is not here. No test reads the
    checkout's own data-bin/."""
    raw = corpora.multi30k_raw()
    if raw is None:
        pytest.skip("needs the raw Multi30k files (val and test_2016_flickr .en.gz and .de.gz): "
                    "set MULTI30K_DIR, or put them in ../shared/data/multi30k beside the checkout")
    return corpora.built(tmp_path_factory, "multi30k-references",
                         lambda root: corpora.multi30k_references(raw, root))


# Every test file lives in the folder of its tier, by what it costs (a marker; `make test` runs the
# tiers in this order, each on every core, and stops at the first that fails):
#   unit         in this process on tensors, strings and small files, or a fake fairseq: seconds a
#                file; `make test-fast` (marker `fast`), the inner loop
#   integration  the architectures through fairseq itself, in this process or as fairseq commands
#                forked from a process that has imported them (tests/cli_server.py); the claims
#   system       across processes as a user runs them: the reproduction engine end to end, the
#                benchmark's workers, torchrun, a Slurm cluster, a wheel, the documentation's
#                commands
TIERS = ("unit", "integration", "system")
# Within a tier the slowest files run first (`make test` passes --no-loadscope-reorder, so
# pytest-xdist hands each free worker the next file): a long file started last would hold the tier
# open while the other cores idle. The order comes from `pytest --durations=0` on two cores; files
# not named here follow in name order.
SLOWEST_FIRST = {
    "unit": ["test_positional_attention.py", "test_recurrent_cross_attention.py", "test_dynamic_memory_attention.py", "test_pervasive_attention.py", "test_attention_entropy.py", "test_scoring.py", "test_replace_unk.py", "test_epoch_anneal.py"],
    "integration": ["test_conformance.py", "test_decoding_inputs.py", "test_workflow_decoding.py", "test_claims.py", "test_prepare.py", "test_workflow_hydra.py", "test_seeds.py", "test_reproducible.py"],
    "system": ["test_slurm.py", "test_reproduce.py", "test_gpu_check.py", "test_bench.py", "test_docs_commands.py", "test_quickstart.py", "test_workflow_distributed.py"],
}


def _tier_and_rank(item):
    path = Path(str(item.fspath))
    tier = path.parent.name
    if tier not in TIERS:
        raise pytest.UsageError(f"{path} is in no tier folder: move it to tests/unit, "
                                f"tests/integration or tests/system")
    slow = SLOWEST_FIRST[tier]
    rank = slow.index(path.name) if path.name in slow else len(slow)
    return TIERS.index(tier), rank, path.name


def pytest_collection_modifyitems(config, items):
    if config.getoption("--device"):
        # on another device only the checks that run on it (those taking the `device` fixture)
        kept = [item for item in items if "device" in getattr(item, "fixturenames", ())]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        _tier_and_rank(item)
        item.add_marker(getattr(pytest.mark, tier))
        if tier == "unit":
            item.add_marker(pytest.mark.fast)
    # the tiers' order, and within one the files' (stable: a file's tests keep theirs)
    items.sort(key=_tier_and_rank)
