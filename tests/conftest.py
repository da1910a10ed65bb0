import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import helpers  # noqa: E402

# Model-level tests compare float32 results at a tight tolerance; one thread keeps runs repeatable
# and leaves the second core to the fairseq subprocesses.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def synthetic_databin(tmp_path_factory):
    """A binarized synthetic de→en corpus (tests/helpers.make_synthetic_corpus)."""
    root = tmp_path_factory.mktemp("synthetic")
    helpers.make_synthetic_corpus(root / "raw")
    return helpers.binarize(root / "raw", root / "bin")
