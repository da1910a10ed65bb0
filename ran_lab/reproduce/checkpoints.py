"""fairseq checkpoints as the engine reads and copies them."""
import re
from pathlib import Path

from ran_text.textio import copy_atomic  # noqa: F401  (the engine's copies of checkpoints and logs)


def load_checkpoint(path):
    """A fairseq checkpoint, unpickled with torch's weights-only loader (classes allowed by
    ran_fairseq.safe_checkpoints only), whatever torch's default; a truncated or refused file is
    an error naming it (:func:`ran_fairseq.safe_checkpoints.load_plain_checkpoint`)."""
    from ran_fairseq.safe_checkpoints import load_plain_checkpoint

    return load_plain_checkpoint(path)


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
