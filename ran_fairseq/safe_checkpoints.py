"""fairseq checkpoints through torch's weights-only (safe) unpickler.

torch >= 2.6 unpickles ``torch.load`` files with ``weights_only=True`` by default, which rejects
every class that is not on its allow-list. fairseq 0.12 checkpoints store the model options of
archs registered through ``register_model_architecture`` as an ``argparse.Namespace`` (under
``cfg["model"]`` and ``args``), so stock fairseq cannot load its own checkpoints (generate,
validation, ``--restore-file``). We add exactly the classes fairseq checkpoints contain to torch's
safe-globals list instead of turning safe loading off: everything else in a checkpoint is still
unpickled by torch's restricted loader. A checkpoint that is not loaded is a
:class:`BadCheckpoint` naming the file, why and what to do.

This module imports torch and NumPy only inside its functions: ``ran_fairseq`` calls
:func:`allow_fairseq_checkpoints` right after a program's first import of torch.
"""
import argparse
import os
import zipfile

from ran_text.textio import FileFault

_checkpoints_allowed = False


def _numpy_globals():
    """What a numpy scalar in a checkpoint unpickles through: fairseq-train --eval-bleu keeps the
    best validation BLEU (``extra_state["best"]``, ``checkpoint_best.best``) as a numpy float."""
    import importlib

    import numpy as np

    # numpy 2 moved numpy.core to numpy._core
    major = int(np.__version__.split(".")[0])
    multiarray = importlib.import_module("numpy._core.multiarray" if major >= 2
                                         else "numpy.core.multiarray")
    classes = [multiarray._reconstruct, np.ndarray, np.dtype]
    # numpy >= 1.25 pickles a dtype through its class (numpy.dtypes.Float64DType, ...)
    classes += [type(np.dtype(t)) for t in (np.float64, np.float32, np.int64, np.int32, np.bool_)]
    return tuple(dict.fromkeys(classes))


# Every non-tensor, non-builtin class found in checkpoints written by fairseq-train 0.12 (checked by
# tests/integration/test_checkpoint_loading.py with torch.serialization.get_unsafe_globals_in_checkpoint).
def fairseq_checkpoint_globals():
    return (argparse.Namespace,) + _numpy_globals()


def allow_fairseq_checkpoints():
    """Let ``torch.load(weights_only=True)`` accept fairseq checkpoints; a no-op on torch < 2.4,
    whose ``torch.load`` does not default to weights-only loading."""
    import torch

    global _checkpoints_allowed
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None and not _checkpoints_allowed:
        add_safe_globals(list(fairseq_checkpoint_globals()))
        _checkpoints_allowed = True


class BadCheckpoint(FileFault, RuntimeError):
    """A checkpoint that is not loaded: truncated, not a torch file, or not a plain checkpoint
    (weights-only loading refused it); the message names the file, why and what to do."""


def _unsafe_global(error):
    """What torch's weights-only unpickler refused, as its message names it ('posix.system')."""
    import re

    found = re.search(r"(?:GLOBAL|global) ([\w.]+)", str(error))
    return found.group(1) if found else "code that is not a tensor or a plain value"


def weights_only_forced_off():
    return os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() in ("1", "y", "yes",
                                                                           "true")


def checkpoint_error(path, error):
    """``error`` (from loading the checkpoint ``path``) as a :class:`BadCheckpoint` naming it, or
    None where it is not about the file (a missing file keeps its own error)."""
    import pickle

    if isinstance(error, pickle.UnpicklingError):
        return BadCheckpoint(
            f"{path} is not a plain checkpoint: it asks to run {_unsafe_global(error)} when "
            f"loaded, which torch's weights-only loading refuses, so it was not loaded; use a "
            f"checkpoint written by fairseq-train, or one from a source you trust")
    local = str(path)
    if isinstance(error, (RuntimeError, EOFError, OSError)) and os.path.isfile(local) \
            and not zipfile.is_zipfile(local):
        return BadCheckpoint(
            f"cannot read the checkpoint {path}: it is truncated or not a torch file ({error}). "
            f"A run killed while writing it can leave it so; use another checkpoint of the run "
            f"(checkpoint_best.pt, checkpoint_N.pt, checkpoint_1_N.pt) via --path or "
            f"--restore-file, or delete it to train again")
    return None


def load_plain_checkpoint(path):
    """The checkpoint ``path`` through torch's weights-only unpickler (the classes fairseq
    checkpoints hold are allowed, :func:`allow_fairseq_checkpoints`), asked for explicitly:
    whatever torch's default or TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, a checkpoint never runs code. A
    truncated or refused file is a :class:`BadCheckpoint` naming it."""
    import torch

    allow_fairseq_checkpoints()
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 (named where it is about the file, else raised)
        named = checkpoint_error(path, error)
        if named is None:
            raise
        raise named from None
