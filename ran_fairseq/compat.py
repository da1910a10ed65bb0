"""The changes the plugin can make to fairseq 0.12: each function below replaces named fairseq
functions, only in the case its docstring describes, and is idempotent. ``fixes`` lists them,
says which importing the plugin makes (the default ones) and which only where asked (opt-in),
and makes them. Loading fairseq checkpoints under torch's weights-only unpickler is
``safe_checkpoints``.
"""
import io
import logging
import os
import pickle
import struct
import subprocess
import threading

import numpy as np
import torch

from .safe_checkpoints import BadCheckpoint, checkpoint_error, weights_only_forced_off


# ---- fairseq 0.12 behaviours the plugin corrects ----------------------------------------------
# ran_fairseq/fixes.py applies them; docs/pitfalls.md names the tests of each.

logger = logging.getLogger(__name__)


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
    the next run cannot resume from. For local paths, copy to a temporary file beside ``<dst>``
    whose name is unique to the writer (``<dst>.tmp-PID-RANDOM``: two trainings writing one folder
    by mistake never share one), flush it to disk and rename it over ``<dst>``, so ``<dst>`` is
    always either the old or the new checkpoint; a failed copy (a full disk) removes its partial
    file. Paths handled by ioPath (``s3://``, ``manifold://``, ...) keep fairseq's behaviour."""
    from fairseq.file_io import PathManager

    from ran_text.textio import copy_atomic

    original = PathManager.copy
    if getattr(original, "_ran_fairseq_atomic", False):
        return

    def copy(src_path, dst_path, overwrite=False):
        if PathManager.path_requires_pathmanager(dst_path) \
                or PathManager.path_requires_pathmanager(src_path):
            return original(src_path, dst_path, overwrite=overwrite)
        if not overwrite and os.path.exists(dst_path):
            raise FileExistsError(f"{dst_path} exists and overwrite=False")
        copy_atomic(src_path, dst_path)
        return True

    copy._ran_fairseq_atomic = True
    PathManager.copy = staticmethod(copy)


def atomic_checkpoint_saves():
    """fairseq saves a checkpoint to ``<file>.tmp`` and renames it: two trainings writing one
    folder by mistake write the same ``.tmp`` (one then fails with FileNotFoundError, or renames
    the other's half-written file), and a save that fails (a full disk) leaves the partial
    ``.tmp`` behind, taking the space that is left. For local paths we save to a temporary name
    unique to the writer (``<file>.tmp-PID-RANDOM``), flush it to disk, rename it, and remove it
    when the save fails; asynchronous and ioPath saves keep fairseq's behaviour."""
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    from ran_text.textio import atomic_write

    original = checkpoint_utils.torch_persistent_save
    if getattr(original, "_ran_fairseq_atomic", False):
        return

    def torch_persistent_save(obj, filename, async_write: bool = False):
        if async_write or not isinstance(filename, str) \
                or PathManager.path_requires_pathmanager(filename):
            return original(obj, filename, async_write)
        atomic_write(filename, lambda f: checkpoint_utils._torch_persistent_save(obj, f),
                     binary=True)

    torch_persistent_save._ran_fairseq_atomic = True
    checkpoint_utils.torch_persistent_save = torch_persistent_save


def cpu_data_parallel():
    """Multi-process training on CPUs with fairseq's defaults. fairseq 0.12 hands
    ``device_ids=[device_id]`` to torch's DistributedDataParallel whatever the device (torch
    refuses it for a CPU module). Under ``torchrun`` without GPUs, it keeps its default world size
    of one per GPU count (each process then trains alone), or, given ``--distributed-world-size``,
    sets ``device_id = rank % torch.cuda.device_count()`` (a division by zero) and keeps the
    ``nccl`` backend (CUDA only). Without CUDA we pass no device ids, take the world size and rank
    from torchrun's environment, use device 0 and switch ``nccl`` to ``gloo``. Under ``srun`` with
    several tasks and ``--distributed-port`` (fairseq's Slurm detection, which asks the world size
    to match a GPU count), likewise from Slurm's SLURM_NTASKS and SLURM_PROCID, with the step's
    first node as the rendezvous. With CUDA, or under neither, nothing changes.
    docs/distributed.md has the launch commands."""
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
            if cfg.distributed_init_method is not None or torch.cuda.is_available():
                return infer(cfg, force_distributed)
            if _started_by_srun(cfg):
                _slurm_cpu_init(cfg)
                return
            if not _started_by_torchrun():
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


def objects_broadcast_between_ranks():
    """A multi-process run resumes. fairseq's ``Trainer.load_checkpoint`` reads the checkpoint on
    rank 0 only (without ``--load-checkpoint-on-all-dp-ranks``) and sends the state it loaded to
    the other ranks with ``distributed_utils.broadcast_object``: the tensors as tensors, the rest
    through ``_broadcast_object_slow``, which ``torch.save``-s it to bytes and ``torch.load``-s
    them on the other ranks. Under torch >= 2.6 that load is weights-only, and the state holds
    objects of the run itself (the ``cfg`` that ``load_checkpoint_to_cpu`` made an omegaconf
    DictConfig, fairseq's placeholders for the tensors sent apart): every rank but rank 0 stopped
    with "Unsupported global: GLOBAL omegaconf.dictconfig.DictConfig". These bytes are no file:
    rank 0 of the same run made them in memory (what it read from the checkpoint went through
    weights-only loading there), and the ranks of a run already unpickle what the others send
    (fairseq's ``all_gather_list`` sends every update's logging outputs so, as torch's own
    object collectives do). The replacement sends them as a pickle and the other ranks unpickle
    it: what a checkpoint file holds is still loaded weights-only on every rank, and torch's
    allow-list of classes is unchanged. A tensor that is not on the CPU is sent as a CPU tensor
    (fairseq's load mapped the bytes to the CPU). Every rank of a run applies it (the plugin is
    imported by each), so sender and receivers agree on the format."""
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils._broadcast_object_slow
    if getattr(original, "_ran_fairseq_run_state", False):
        return

    def _broadcast_object_slow(obj, src_rank, group, dist_device):
        if distributed_utils.get_rank(group) == src_rank:
            data = _pickled_on_cpu(obj)
            length = torch.tensor([len(data)], dtype=torch.long).to(dist_device)
            buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dist_device)
            distributed_utils.broadcast(length, src=src_rank, group=group)
            distributed_utils.broadcast(buffer, src=src_rank, group=group)
            return obj
        length = torch.zeros(1, dtype=torch.long).to(dist_device)
        distributed_utils.broadcast(length, src=src_rank, group=group)
        buffer = torch.empty(int(length.item()), dtype=torch.uint8).to(dist_device)
        distributed_utils.broadcast(buffer, src=src_rank, group=group)
        return pickle.loads(buffer.cpu().numpy().tobytes())

    _broadcast_object_slow._ran_fairseq_run_state = True
    _broadcast_object_slow.__doc__ = original.__doc__
    distributed_utils._broadcast_object_slow = _broadcast_object_slow


class _CpuPickler(pickle.Pickler):
    """A pickler that writes a tensor on another device as the same tensor on the CPU."""

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return obj.detach().cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _pickled_on_cpu(obj):
    out = io.BytesIO()
    _CpuPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return out.getvalue()


def _started_by_srun(cfg):
    """Whether this is one of several tasks of an ``srun`` step and fairseq's Slurm detection is
    asked for (``--distributed-port``, as fairseq's own condition)."""
    return (cfg.distributed_port > 0 and int(os.environ.get("SLURM_NTASKS", "1")) > 1
            and all(k in os.environ for k in ("SLURM_PROCID", "SLURM_LOCALID")))


def _slurm_cpu_init(cfg):
    """fairseq's Slurm detection on CPUs: one process per task, world size SLURM_NTASKS, rank
    SLURM_PROCID, the first node of the step as the rendezvous at --distributed-port, gloo.
    (fairseq's own takes the world size from the GPU count, or asks --distributed-world-size to
    match the tasks, and keeps nccl.)"""
    nodes = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    host = "127.0.0.1"
    if nodes:
        try:
            host = subprocess.check_output(["scontrol", "show", "hostnames", nodes],
                                           text=True).split()[0]
        except (OSError, subprocess.CalledProcessError, IndexError):
            host = nodes.split(",")[0]
    cfg.distributed_init_method = f"tcp://{host}:{cfg.distributed_port}"
    cfg.distributed_world_size = int(os.environ["SLURM_NTASKS"])
    cfg.distributed_rank = int(os.environ["SLURM_PROCID"])
    cfg.device_id = 0  # SLURM_LOCALID names a GPU; every task here is on the CPU
    cfg.distributed_no_spawn = True  # srun started the processes
    if cfg.distributed_backend == "nccl":
        cfg.distributed_backend = "gloo"


def _started_by_torchrun():
    return all(k in os.environ for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"))


def named_length_errors():
    """A sentence longer than the model takes stops fairseq-generate, fairseq-interactive and the
    hub's ``translate`` with fairseq's "Size of sample #0 is invalid ... max_positions=(256, 256)".
    We raise a ValueError instead that names the sentence, its length, the limit and the flag that
    sets it, and how to go on; fairseq-interactive instead logs that error for each such input
    line and translates the others (fairseq's loop would end the session at the first). Only that
    exception is replaced."""
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
            kept, too_long = dataset.filter_indices_by_size(indices, max_positions)
            # fairseq-interactive builds a dataset per --buffer-size lines: number the sentence
            # by its line in the input, as the user counts, not by its place in the buffer
            offset = getattr(self, "_ran_fairseq_input_offset", None)
            if offset is None:
                raise ValueError(_too_long_message(dataset, too_long, max_positions)) from error
            # an interactive session names each such line and goes on with the others
            for index in too_long:
                logger.error(_too_long_message(dataset, [index], max_positions, offset,
                                               interactive=True))
            return kept

    filter_indices_by_size._ran_fairseq_named = True
    FairseqTask.filter_indices_by_size = filter_indices_by_size

    tokens_of = FairseqTask.get_interactive_tokens_and_lengths

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        # only fairseq-interactive calls this, once per buffer of input lines, in input order
        self._ran_fairseq_input_offset = getattr(self, "_ran_fairseq_lines_read", 0)
        self._ran_fairseq_lines_read = self._ran_fairseq_input_offset + len(lines)
        # fairseq's buffered_read keeps a byte-order mark (an editor's, U+FEFF) at the start of
        # the input, which would become <unk>; it is no word of a sentence, so it is dropped
        lines = [line.lstrip("\ufeff") for line in lines]
        return tokens_of(self, lines, encode_fn)

    FairseqTask.get_interactive_tokens_and_lengths = get_interactive_tokens_and_lengths


def _too_long_message(dataset, too_long, max_positions, input_offset=None, interactive=False):
    first = too_long[0]
    name = (f"sentence {first}" if input_offset is None else
            f"input line {input_offset + int(first) + 1} (id {input_offset + int(first)} in the "
            f"S-/H- lines)")
    size = dataset.size(first)
    sizes = tuple(size) if isinstance(size, (tuple, list, np.ndarray)) else (size,)
    limits = max_positions if isinstance(max_positions, tuple) else (max_positions,)
    sides = ("source", "target")
    over = [(side, int(n), limit) for side, n, limit in zip(sides, sizes, limits)
            if limit is not None and n > limit]
    if not over:  # a dict of limits (multilingual tasks): keep fairseq's wording
        return (f"{name} is longer than the model takes (size {size}, "
                f"max_positions={max_positions})")
    parts = []
    for side, n, limit in over:
        flag = getattr(limit, "flag", f"--max-{side}-positions")
        parts.append(f"{n} {side} tokens (end of sentence included), more than the {int(limit)} "
                     f"this model takes ({flag})")
    others = f" ({len(too_long)} sentences of this set are too long)" if len(too_long) > 1 else ""
    if interactive:
        return (f"{name} is too long: {'; '.join(parts)}. It is left untranslated and the next "
                f"lines are translated (the limit was set when the model was trained: split the "
                f"sentence to translate it)")
    return (f"{name} is too long: {'; '.join(parts)}{others}. The limit was set when the "
            f"model was trained; split the sentence, or pass "
            f"--skip-invalid-size-inputs-valid-test to leave such sentences untranslated "
            f"(fairseq-generate, fairseq-interactive).")


def named_checkpoint_errors():
    """fairseq's ``load_checkpoint_to_cpu``, the loader of its commands (train --restore-file,
    generate, interactive, validate) and of the hub, with three changes. A truncated checkpoint
    (a run killed while fairseq copied it) makes torch fail with "PytorchStreamReader failed
    reading zip archive" or an OSError, naming no file; a checkpoint that asks to run code makes
    torch's weights-only unpickler raise a bare UnpicklingError: both become a
    :class:`BadCheckpoint` naming the file and what to do. And fairseq calls ``torch.load``
    without ``weights_only``, so TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 would make it unpickle freely
    (run any code a file holds): with that variable set, the loader refuses, naming it (the
    plugin keeps weights-only loading on; docs/guarantees.md)."""
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    original = checkpoint_utils.load_checkpoint_to_cpu
    if getattr(original, "_ran_fairseq_named", False):
        return

    def load_checkpoint_to_cpu(path, *args, **kwargs):
        if weights_only_forced_off():
            raise BadCheckpoint(
                f"{path} was not loaded: TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set, which would let "
                f"torch run any code the file holds; ran_fairseq loads checkpoints weights-only "
                f"(fairseq checkpoints load so): unset TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
        try:
            return original(path, *args, **kwargs)
        except Exception as error:  # noqa: BLE001 (named where it is about the file, else raised)
            local = PathManager.get_local_path(path) if isinstance(path, str) else path
            named = checkpoint_error(local, error)
            if named is None:
                raise
            raise named from error

    load_checkpoint_to_cpu._ran_fairseq_named = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu


def named_data_bin_errors():
    """A truncated or damaged data-bin file (``.idx``, ``.bin``) makes fairseq fail with numpy's
    "offset must be non-negative" or "buffer is smaller than requested size", an AssertionError,
    or, for a ``.bin`` cut short, garbage or a crash at the first batch that reads past its end;
    its ``__del__`` then adds "AttributeError: _bin_buffer_mmap". We raise a ValueError naming
    the file, what is wrong and what to do, and check when a dataset is opened that the ``.bin``
    holds every sentence its index points to."""
    from fairseq.data import indexed_dataset

    cls = indexed_dataset.MMapIndexedDataset
    original = cls._do_init
    if getattr(original, "_ran_fairseq_named", False):
        return

    def _do_init(self, path):
        index = indexed_dataset.index_file_path(path)
        data = indexed_dataset.data_file_path(path)
        rebuild = ("rebuild the data-bin (its prepare command with --force, e.g. "
                   "scripts/prepare-multi30k.sh de en --force)")
        try:
            original(self, path)
        except (AssertionError, ValueError, IndexError, KeyError, struct.error, OSError) as error:
            raise ValueError(f"cannot read the data-bin file {index} (with {data}): it is "
                             f"truncated or damaged ({error or type(error).__name__}); "
                             f"{rebuild}") from None
        sizes, pointers = self._index.sizes, self._index._pointers
        needed = int(pointers[-1]) + int(sizes[-1]) * self._index._dtype_size if len(sizes) else 0
        have = os.path.getsize(data)
        if have < needed:
            raise ValueError(f"the data-bin file {data} is truncated: {have} bytes where its "
                             f"index {index} needs {needed}; {rebuild}")

    def __del__(self):
        if hasattr(self, "_bin_buffer_mmap"):  # not there when opening the files failed
            self._bin_buffer_mmap._mmap.close()
            del self._bin_buffer_mmap
        if hasattr(self, "_index"):
            del self._index

    _do_init._ran_fairseq_named = True
    cls._do_init = _do_init
    cls.__del__ = __del__


class _Resuming(threading.local):
    """The model options of the checkpoint that ``Trainer.load_checkpoint`` is loading."""
    active = False
    model_args = None


_RESUMING = _Resuming()


def architecture_checked_on_resume():
    """fairseq-train resuming from a checkpoint loads its parameters into the model built from
    this run's flags: a changed option that keeps the parameter shapes (a RAN model's
    ``--no-encoder-positional-embeddings`` or ``--ran-decoder-initial full``) trains on silently,
    and the checkpoint then records flags its first updates did not use. When
    ``Trainer.load_checkpoint`` resumes a model of this plugin (not with ``--reset-optimizer``,
    which starts a new training from a checkpoint's weights), the model's own architecture flags
    are compared with the checkpoint's (``ran_fairseq.models._common.check_resumed_flags``), and
    a difference stops training before its first update with an error naming the flags. Flags
    that change the parameters' shapes (``--decoder-self-attention dot`` on a RAN-ALL checkpoint)
    make fairseq's own load fail first ("Cannot load model parameters from checkpoint" and the
    state dict): that failure becomes the same error naming them. In a multi-process run every
    rank checks, the ranks other than rank 0 on the state rank 0 sends
    them (fairseq reads the file on rank 0 only): they all stop with that error, none is left
    waiting for the others in its first update."""
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils
    from fairseq.trainer import Trainer

    original = Trainer.load_checkpoint
    if getattr(original, "_ran_fairseq_checked", False):
        return
    load_to_cpu = checkpoint_utils.load_checkpoint_to_cpu
    broadcast = distributed_utils.broadcast_object

    def load_checkpoint_to_cpu(path, *args, **kwargs):
        state = load_to_cpu(path, *args, **kwargs)
        _remember_model_args(state)
        return state

    def broadcast_object(obj, *args, **kwargs):
        obj = broadcast(obj, *args, **kwargs)
        _remember_model_args(obj)
        return obj

    def load_checkpoint(self, filename, reset_optimizer=False, *args, **kwargs):
        _RESUMING.active, _RESUMING.model_args = True, None
        try:
            extra = original(self, filename, reset_optimizer, *args, **kwargs)
        except Exception as error:
            # flags that change the parameters' shapes make fairseq's load_state_dict fail
            # ("Cannot load model parameters from checkpoint" and the state dict): name them
            named = _shapes_changed_error(self.get_model(), _RESUMING.model_args, self.cfg.model,
                                          filename, error)
            if named is None:
                raise
            raise named from None
        finally:
            checkpoint_args = _RESUMING.model_args
            _RESUMING.active, _RESUMING.model_args = False, None
        if checkpoint_args is not None and not reset_optimizer:
            from .models._common import check_resumed_flags

            check_resumed_flags(self.get_model(), checkpoint_args, self.cfg.model, filename)
        return extra

    load_checkpoint_to_cpu._ran_fairseq_named = getattr(load_to_cpu, "_ran_fairseq_named", False)
    load_checkpoint._ran_fairseq_checked = True
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
    distributed_utils.broadcast_object = broadcast_object
    Trainer.load_checkpoint = load_checkpoint


def _shapes_changed_error(model, checkpoint_args, args, filename, error):
    """The ValueError naming the architecture flags of a plugin ``model`` that differ from its
    checkpoint's, where loading the checkpoint's parameters failed (``error``, fairseq's "Cannot
    load model parameters"); None where no flag differs or the model is not the plugin's."""
    if checkpoint_args is None or "Cannot load model parameters" not in str(error):
        return None
    cls = type(model)
    if not cls.__module__.startswith("ran_fairseq.models.") or not hasattr(cls, "add_args"):
        return None
    from .models._common import changed_flags

    changed = changed_flags(cls, checkpoint_args, args)
    if not changed:
        return None

    def shown(value):
        return ("set" if value else "not set") if isinstance(value, bool) else repr(value)

    flags = "; ".join(f"{flag} (checkpoint: {shown(old)}, this run: {shown(new)})"
                      for flag, old, new in changed)
    return ValueError(
        f"cannot resume from {filename}: it was trained with other architecture flags than this "
        f"run's, which give its parameters other shapes: {flags}. Pass the checkpoint's flags to "
        f"go on with its training, or train into another --save-dir to start a new one.")


def _remember_model_args(state):
    """While ``Trainer.load_checkpoint`` runs, keep the model options of a checkpoint's state
    (as read from the file, or as received from rank 0)."""
    if not _RESUMING.active or not isinstance(state, dict) \
            or not ("cfg" in state or "args" in state):
        return
    cfg = state.get("cfg") or {}
    model = cfg.get("model") if hasattr(cfg, "get") else None
    _RESUMING.model_args = model if model is not None else state.get("args")


def _xla_installed():
    import importlib.util

    return importlib.util.find_spec("torch_xla") is not None


def bf16_without_tpu():
    """``--bf16`` on a GPU or a CPU. fairseq 0.12 reads ``--bf16`` as "bfloat16 on a TPU": its
    option parser sets ``--tpu`` with it, and the trainer then asks torch_xla for its device
    (``'NoneType' object has no attribute 'xla_device'`` where torch_xla is not installed).
    Everything else of fairseq's bfloat16 path (the model cast, the samples cast, its FP16
    optimizer with bfloat16 parameters) is device-independent. Where torch_xla is not installed
    there is no TPU to mean, so the trainer of a ``--bf16`` run trains on the device it would
    have used without the flag (CUDA, else the CPU); with torch_xla, nothing changes."""
    from fairseq.trainer import Trainer

    original = Trainer.__init__
    if getattr(original, "_ran_fairseq_bf16", False):
        return

    def __init__(self, cfg, *args, **kwargs):
        common = cfg.common
        if common.bf16 and common.tpu and not _xla_installed():
            common.tpu = False
        original(self, cfg, *args, **kwargs)

    __init__._ran_fairseq_bf16 = True
    Trainer.__init__ = __init__

