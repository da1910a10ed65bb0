"""fairseq checkpoints as the engine reads and copies them."""
import os
import re
import shutil
from pathlib import Path

from ... import textio


def copy_atomic(src, dst):
    """Copy ``src`` to ``dst`` through a temporary file of a name unique to this writer, renamed
    over ``dst``; a failed copy leaves no partial file."""
    tmp = textio.unique_tmp(dst)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path):
    """A fairseq checkpoint, unpickled with torch's weights-only loader (classes allowed by
    ran_fairseq.compat only), whatever torch's default."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def checkpoint_updates(path):
    """The number of updates a fairseq checkpoint was saved at (None if it records none)."""
    history = load_checkpoint(path).get("optimizer_history") or [{}]
    return history[-1].get("num_updates")


def selected_checkpoint(path):
    """Epoch, update and validation score stored in a fairseq checkpoint (what ``select`` chose)."""
    state = load_checkpoint(path)
    extra = state.get("extra_state") or {}
    history = state.get("optimizer_history") or [{}]
    return {"file": Path(path).name, "epoch": (extra.get("train_iterator") or {}).get("epoch"),
            "num_updates": history[-1].get("num_updates"), "val_score": extra.get("val_loss")}


PARTIAL = re.compile(r".+\.pt\.tmp(-\d+-[0-9a-f]+)?$")


def remove_partial_files(save_dir):
    """Remove the partial checkpoints (``*.pt.tmp``, ``*.pt.tmp-PID-RANDOM``) a killed training
    left in ``save_dir`` (the caller holds the folder's lock: no writer is alive)."""
    for path in Path(save_dir).iterdir():
        if PARTIAL.fullmatch(path.name) and path.is_file():
            path.unlink(missing_ok=True)
