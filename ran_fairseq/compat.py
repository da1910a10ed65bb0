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
import os
import shutil
import zipfile

import numpy as np
import torch

def _numpy_globals():
    """What a numpy scalar in a checkpoint unpickles through: fairseq-train --eval-bleu keeps the
    best validation BLEU (``extra_state["best"]``, ``checkpoint_best.best``) as a numpy float."""
    import importlib

    # numpy 2 moved numpy.core to numpy._core
    major = int(np.__version__.split(".")[0])
    multiarray = importlib.import_module("numpy._core.multiarray" if major >= 2
                                         else "numpy.core.multiarray")
    classes = [multiarray._reconstruct, np.ndarray, np.dtype]
    # numpy >= 1.25 pickles a dtype through its class (numpy.dtypes.Float64DType, ...)
    classes += [type(np.dtype(t)) for t in (np.float64, np.float32, np.int64, np.int32, np.bool_)]
    return tuple(dict.fromkeys(classes))


# Every non-tensor, non-builtin class found in checkpoints written by fairseq-train 0.12 (checked by
# tests/test_checkpoint_loading.py with torch.serialization.get_unsafe_globals_in_checkpoint).
FAIRSEQ_CHECKPOINT_GLOBALS = (argparse.Namespace,) + _numpy_globals()


def allow_fairseq_checkpoints():
    """Let ``torch.load(weights_only=True)`` accept fairseq checkpoints; a no-op on torch < 2.4,
    whose ``torch.load`` does not default to weights-only loading."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:
        add_safe_globals(list(FAIRSEQ_CHECKPOINT_GLOBALS))


# ---- fairseq 0.12 behaviours the plugin corrects at import time -------------------------------
# Each function below changes one named fairseq function, only in the case described, and is
# idempotent; ran_fairseq/__init__.py applies them all. tests/test_reliability.py checks each.


def keep_last_batch():
    """fairseq 0.12's ``data_utils.batch_by_size`` drops the last batch when its size is not a
    multiple of ``required_batch_size_multiple`` (default 8; fairseq issue #5036): fairseq-generate
    then silently skips up to the last batch's sentences (Multi30k valid: 1,008 of 1,014), and
    training and validation never see the longest sentences of the set. The batcher partitions the
    sorted indices in order, so the dropped sentences are the tail of ``indices``; we hand them back
    as a multiple-of-N batch plus a batch of fewer than N, which keeps fairseq's documented
    contract (every batch is a multiple of N or smaller than N) and loses no sentence."""
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "_ran_fairseq_keeps_last_batch", False):
        return

    def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                      max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
        batches = original(indices, num_tokens_fn, num_tokens_vec=num_tokens_vec,
                           max_tokens=max_tokens, max_sentences=max_sentences,
                           required_batch_size_multiple=required_batch_size_multiple,
                           fixed_shapes=fixed_shapes)
        if fixed_shapes is not None:
            return batches
        indices = np.asarray(indices if isinstance(indices, np.ndarray) else list(indices),
                             dtype=np.int64)
        kept = sum(len(batch) for batch in batches)
        tail = indices[kept:]
        if len(tail):
            whole = len(tail) - len(tail) % required_batch_size_multiple
            batches = list(batches) + [part for part in (tail[:whole], tail[whole:]) if len(part)]
        return batches

    batch_by_size._ran_fairseq_keeps_last_batch = True
    batch_by_size.__doc__ = original.__doc__
    data_utils.batch_by_size = batch_by_size


def atomic_checkpoint_copies():
    """fairseq writes the first checkpoint of a save atomically (``.tmp`` then rename) but copies
    it to the others (``checkpoint_last.pt``, ``checkpoint_best.pt``, ...) with a plain
    ``shutil.copyfile``: a kill during the copy leaves a truncated ``checkpoint_last.pt`` that
    the next run cannot resume from. For local paths, copy to ``<dst>.tmp``, flush it to disk and
    rename it over ``<dst>``, so ``<dst>`` is always either the old or the new checkpoint. Paths
    handled by ioPath (``s3://``, ``manifold://``, ...) keep fairseq's behaviour."""
    from fairseq.file_io import PathManager

    original = PathManager.copy
    if getattr(original, "_ran_fairseq_atomic", False):
        return

    def copy(src_path, dst_path, overwrite=False):
        if PathManager.path_requires_pathmanager(dst_path) \
                or PathManager.path_requires_pathmanager(src_path):
            return original(src_path, dst_path, overwrite=overwrite)
        if not overwrite and os.path.exists(dst_path):
            raise FileExistsError(f"{dst_path} exists and overwrite=False")
        tmp = f"{dst_path}.tmp"
        shutil.copyfile(src_path, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, dst_path)
        return True

    copy._ran_fairseq_atomic = True
    PathManager.copy = staticmethod(copy)


def cpu_data_parallel():
    """Multi-process training on CPUs with fairseq's defaults. fairseq 0.12 hands
    ``device_ids=[device_id]`` to torch's DistributedDataParallel whatever the device (torch
    refuses it for a CPU module). Under ``torchrun`` without GPUs, it keeps its default world size
    of one per GPU count (each process then trains alone), or, given ``--distributed-world-size``,
    sets ``device_id = rank % torch.cuda.device_count()`` (a division by zero) and keeps the
    ``nccl`` backend (CUDA only). Without CUDA we pass no device ids, take the world size and rank
    from torchrun's environment, use device 0 and switch ``nccl`` to ``gloo``; with CUDA, or
    without torchrun, nothing changes. docs/distributed.md has the launch commands."""
    from fairseq.distributed import utils as distributed_utils
    from fairseq.models import distributed_fairseq_model

    ddp = distributed_fairseq_model.DistributedDataParallel
    if not getattr(ddp, "_ran_fairseq_cpu", False):
        class DistributedDataParallel(ddp):
            """torch's DistributedDataParallel, without device ids for a module on the CPU."""
            _ran_fairseq_cpu = True

            def __init__(self, module, device_ids=None, output_device=None, **kwargs):
                if all(p.device.type == "cpu" for p in module.parameters()):
                    device_ids = output_device = None
                super().__init__(module, device_ids=device_ids, output_device=output_device,
                                 **kwargs)

        distributed_fairseq_model.DistributedDataParallel = DistributedDataParallel

    infer = distributed_utils.infer_init_method
    if not getattr(infer, "_ran_fairseq_cpu", False):
        def infer_init_method(cfg, force_distributed=False):
            if cfg.distributed_init_method is not None or torch.cuda.is_available() \
                    or not _started_by_torchrun():
                return infer(cfg, force_distributed)
            # fairseq's default world size is the number of GPUs (1 here): each torchrun process
            # would train alone, all writing the same --save-dir.
            cfg.distributed_init_method = "env://"
            cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
            cfg.distributed_rank = int(os.environ["RANK"])
            cfg.device_id = 0
            cfg.distributed_no_spawn = True  # torchrun started the processes
            if cfg.distributed_backend == "nccl":
                cfg.distributed_backend = "gloo"

        infer_init_method._ran_fairseq_cpu = True
        distributed_utils.infer_init_method = infer_init_method


def _started_by_torchrun():
    return all(k in os.environ for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"))


class PositionLimit(int):
    """A model's maximum sentence length that remembers the flag that sets it (a model's
    ``max_positions()`` may return one); it prints as ``256 (--max-attention-positions)`` in
    fairseq's messages and pickles as a plain int."""

    def __new__(cls, value, flag):
        limit = super().__new__(cls, value)
        limit.flag = flag
        return limit

    def __repr__(self):
        return f"{int(self)} ({self.flag})"

    def __reduce__(self):
        return int, (int(self),)


def named_length_errors():
    """A sentence longer than the model takes stops fairseq-generate, fairseq-interactive and the
    hub's ``translate`` with fairseq's "Size of sample #0 is invalid ... max_positions=(256, 256)".
    We raise a ValueError instead that names the sentence, its length, the limit and the flag that
    sets it, and how to go on. Only that exception is replaced."""
    from fairseq.tasks.fairseq_task import FairseqTask

    original = FairseqTask.filter_indices_by_size
    if getattr(original, "_ran_fairseq_named", False):
        return

    def filter_indices_by_size(self, indices, dataset, max_positions=None,
                               ignore_invalid_inputs=False):
        try:
            return original(self, indices, dataset, max_positions, ignore_invalid_inputs)
        except Exception as error:
            if ignore_invalid_inputs or max_positions is None \
                    or not str(error).startswith("Size of sample #"):
                raise
            _, too_long = dataset.filter_indices_by_size(indices, max_positions)
            raise ValueError(_too_long_message(dataset, too_long, max_positions)) from error

    filter_indices_by_size._ran_fairseq_named = True
    FairseqTask.filter_indices_by_size = filter_indices_by_size


def _too_long_message(dataset, too_long, max_positions):
    first = too_long[0]
    size = dataset.size(first)
    sizes = tuple(size) if isinstance(size, (tuple, list, np.ndarray)) else (size,)
    limits = max_positions if isinstance(max_positions, tuple) else (max_positions,)
    sides = ("source", "target")
    over = [(side, int(n), limit) for side, n, limit in zip(sides, sizes, limits)
            if limit is not None and n > limit]
    if not over:  # a dict of limits (multilingual tasks): keep fairseq's wording
        return (f"sentence {first} is longer than the model takes (size {size}, "
                f"max_positions={max_positions})")
    parts = []
    for side, n, limit in over:
        flag = getattr(limit, "flag", f"--max-{side}-positions")
        parts.append(f"{n} {side} tokens (end of sentence included), more than the {int(limit)} "
                     f"this model takes ({flag})")
    others = f" ({len(too_long)} sentences of this set are too long)" if len(too_long) > 1 else ""
    return (f"sentence {first} is too long: {'; '.join(parts)}{others}. The limit was set when the "
            f"model was trained; split the sentence, or pass "
            f"--skip-invalid-size-inputs-valid-test to leave such sentences untranslated "
            f"(fairseq-generate, fairseq-interactive).")


def named_checkpoint_errors():
    """A truncated checkpoint (a run killed while fairseq copied it) makes torch fail with
    "PytorchStreamReader failed reading zip archive" or an OSError, naming no file. When
    fairseq's ``load_checkpoint_to_cpu`` fails on a file that is not a whole zip archive (torch's
    format), we re-raise naming the file and what to do; other errors pass unchanged."""
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_ran_fairseq_named", False):
        return

    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return original(path, *args, **kwargs)
        except (RuntimeError, EOFError, OSError) as error:
            local = PathManager.get_local_path(path) if isinstance(path, str) else path
            if not os.path.isfile(local) or zipfile.is_zipfile(local):
                raise  # missing files and readable archives keep their own errors
            raise RuntimeError(
                f"cannot read the checkpoint {path}: it is truncated or not a torch file "
                f"({error}). A run killed while writing it can leave it so; use another "
                f"checkpoint of the run (checkpoint_best.pt, checkpoint_N.pt, checkpoint_1_N.pt) "
                f"via --path or --restore-file.") from error

    load_checkpoint_to_cpu._ran_fairseq_named = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
