"""Starting and resuming a training with fairseq-train and the plugin: a flag out of range stops it
before its first update, naming the flag; a kill while fairseq copies a checkpoint leaves a
checkpoint_last.pt to resume from (the opt-in atomic_checkpoint_copies); a resume with other
architecture flags stops naming them, one with the same flags or another dropout goes on. Two
ranks under torchrun: tests/system/test_workflow_distributed.py."""
import re
import shutil
import subprocess
import sys

import pytest

import helpers
from helpers import REPO, train
from systems import TINY_DYNMEM, TINY_RAN


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    raw = helpers.make_synthetic_corpus(root / "raw", n_test=6)
    return helpers.binarize(raw, root / "bin")


@pytest.fixture(scope="module")
def ran_checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("resume-ckpt")
    train(data, save, "ran_transformer", TINY_RAN, max_update=2)
    return save / "checkpoint_last.pt"


def test_cli_refuses_out_of_range_dropout_before_training(data, tmp_path):
    """fairseq alone builds the model, crashes at the first update with torch's message (the
    flag unnamed), exits 134 and writes crash.pt."""
    proc = train(data, tmp_path / "ckpt", "rnnsearch_dynmem", (*TINY_DYNMEM, "--dropout", "1.5"),
                 check=False)
    assert proc.returncode != 0
    assert "--dropout must be in [0, 1), got 1.5" in proc.stderr + proc.stdout
    assert not list((tmp_path / "ckpt").glob("*.pt"))


def test_kill_during_checkpoint_copy_leaves_checkpoint_last_intact(data, tmp_path, monkeypatch):
    """Interval checkpoints make fairseq write checkpoint_1_N.pt and copy it to
    checkpoint_last.pt; fairseq alone leaves half a checkpoint_last.pt after this kill and the
    next run fails ("failed reading zip archive"), so the fix is opt-in: on in this test."""
    helpers.opt_in_fixes(monkeypatch, "atomic_checkpoint_copies")
    save = tmp_path / "ckpt"
    extra = (*TINY_RAN, "--save-interval-updates", "2")
    train(data, save, "ran_transformer", extra, max_update=2)
    args = helpers.train_args(data, save, "ran_transformer", extra, max_update=4)
    killed = subprocess.run([sys.executable, str(REPO / "tests" / "kill_during_copy.py"),
                             *map(str, args)], env=helpers.fairseq_env(), capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert (save / "checkpoint_1_4.pt").exists()  # the save was under way
    resumed = train(data, save, "ran_transformer", extra, max_update=6)
    log = resumed.stdout + resumed.stderr
    assert re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", log), \
        log[-3000:]
    assert "num_updates=6" in log


@pytest.mark.parametrize("change, named", [
    (("--no-encoder-positional-embeddings",),
     "--no-encoder-positional-embeddings (checkpoint: not set, this run: set)"),
    (("--ran-decoder-initial", "full"), "--ran-decoder-initial (checkpoint: 'lower-triangle', "
                                        "this run: 'full')"),
])
def test_resuming_with_other_architecture_flags_stops_naming_them(ran_checkpoint, data, tmp_path,
                                                                  change, named):
    save = tmp_path / "ckpt"
    save.mkdir()
    shutil.copy(ran_checkpoint, save / "checkpoint_last.pt")
    proc = train(data, save, "ran_transformer", (*TINY_RAN, *change), max_update=3, check=False)
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr[-3000:]
    assert "num_updates=3" not in proc.stdout + proc.stderr  # stopped before an update


def test_resuming_with_the_same_flags_or_another_dropout_goes_on(ran_checkpoint, data, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    shutil.copy(ran_checkpoint, save / "checkpoint_last.pt")
    proc = train(data, save, "ran_transformer", (*TINY_RAN, "--dropout", "0.3"), max_update=3)
    assert re.search(r"Loaded checkpoint \S+ \(epoch \d+ @ 2 updates\)", proc.stdout + proc.stderr)
