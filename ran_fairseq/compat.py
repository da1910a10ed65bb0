"""Version shims between torch and fairseq 0.12, kept in one place.

torch >= 2.6 unpickles ``torch.load`` files with ``weights_only=True`` by default, which rejects
every class that is not on its allow-list. fairseq 0.12 checkpoints store the model options of
archs registered through ``register_model_architecture`` as an ``argparse.Namespace`` (under
``cfg["model"]`` and ``args``), so stock fairseq cannot load its own checkpoints (generate,
validation, ``--restore-file``). We add exactly the classes fairseq checkpoints contain to torch's
safe-globals list instead of turning safe loading off: everything else in a checkpoint is still
unpickled by torch's restricted loader.
"""
import argparse

import torch

# Every non-tensor, non-builtin class found in checkpoints written by fairseq-train 0.12 (checked by
# tests/test_checkpoint_loading.py with torch.serialization.get_unsafe_globals_in_checkpoint).
FAIRSEQ_CHECKPOINT_GLOBALS = (argparse.Namespace,)


def allow_fairseq_checkpoints():
    """Let ``torch.load(weights_only=True)`` accept fairseq checkpoints; a no-op on torch < 2.4,
    whose ``torch.load`` does not default to weights-only loading."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:
        add_safe_globals(list(FAIRSEQ_CHECKPOINT_GLOBALS))
