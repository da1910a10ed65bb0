"""Reading a data-bin with the plugin's opt-in fixes, each turned on in its own test: the batches
keep every sentence and fairseq's --required-batch-size-multiple (keep_last_batch; fairseq 0.12
drops the last batch), and a truncated or damaged data-bin file is named with what to do
(named_data_bin_errors). fairseq-generate translating every sentence:
tests/integration/test_decoding_inputs.py."""
import gc
import re
import shutil

import numpy as np
import pytest

import helpers


@pytest.mark.parametrize("n, multiple, batch", [(21, 8, 8), (1014, 8, 128), (13, 8, 100),
                                                 (16, 8, 8), (5, 8, 8), (30, 1, 7)])
def test_batch_by_size_keeps_every_index_and_the_multiple(n, multiple, batch, monkeypatch):
    helpers.opt_in_fixes(monkeypatch, "keep_last_batch")
    from fairseq.data import data_utils

    batches = data_utils.batch_by_size(np.arange(n), lambda i: 5, max_sentences=batch,
                                       required_batch_size_multiple=multiple)
    assert np.concatenate(batches).tolist() == list(range(n))
    assert all(len(b) <= batch and (len(b) < multiple or len(b) % multiple == 0)
               for b in batches)


@pytest.mark.parametrize("part, cut, message", [
    ("bin", 0.5, "is truncated: "), ("idx", 0.5, "it is truncated or damaged"),
    ("idx", 0.1, "it is truncated or damaged")])
def test_a_truncated_data_bin_file_is_named(synthetic_databin, tmp_path, monkeypatch, part, cut, message):
    helpers.opt_in_fixes(monkeypatch, "named_data_bin_errors")
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    data = tmp_path / "bin"
    shutil.copytree(synthetic_databin, data)
    path = data / f"train.de-en.de.{part}"
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * cut)])
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        MMapIndexedDataset(str(data / "train.de-en.de"))
    assert str(path) in str(error.value) and "rebuild the data-bin" in str(error.value)
    # the half-made dataset goes while the fix's __del__, which knows it, is still in place
    del error
    gc.collect()
