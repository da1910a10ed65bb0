"""Every change the plugin makes to fairseq, in one table (``FIXES``), and the one function that
makes them (``apply``, which importing ``ran_fairseq`` calls).

**Default** fixes are those the four architectures' users need: fairseq checkpoints under torch's
weights-only loading (torch >= 2.6), multi-process training and resume on CPUs, errors that name
the flag of a plugin model's length limit, the resume check of the plugin's architecture flags,
``--bf16`` off a TPU, and checkpoints written atomically (which change when a file appears, never
what it holds). **Opt-in** fixes correct fairseq in general and change what it computes or reads,
so they change nothing unless asked:
``RAN_FAIRSEQ_FIXES=all``, or their names separated by commas, in the environment of the fairseq
command (processes it starts inherit it); the reproduction engine sets ``all``. docs/pitfalls.md
lists them with their reasons; tests/system/test_package.py checks that importing the plugin changes
nothing of fairseq or ``sys`` beyond the registries and the default fixes' ``replaces``.
"""
import dataclasses
import os
from typing import Callable, Tuple

from .compat import (architecture_checked_on_resume, atomic_checkpoint_copies,
                     atomic_checkpoint_saves, bf16_without_tpu, cpu_data_parallel,
                     keep_last_batch, named_checkpoint_errors, named_data_bin_errors,
                     named_length_errors, objects_broadcast_between_ranks)


def allow_fairseq_checkpoints():
    """torch >= 2.6 loads weights-only by default: its allow-list grows by the classes a fairseq
    checkpoint holds (``safe_checkpoints.fairseq_checkpoint_globals``), so that fairseq's own
    loaders read plain checkpoints and still refuse any that asks to run code."""
    from .safe_checkpoints import allow_fairseq_checkpoints as allow

    allow()


@dataclasses.dataclass(frozen=True)
class Fix:
    """One change to fairseq: its name (for RAN_FAIRSEQ_FIXES), the function that makes it,
    whether importing the plugin makes it, the attributes it replaces and why."""
    name: str
    apply: Callable[[], None]
    default: bool
    replaces: Tuple[str, ...]
    why: str


FIXES = (
    Fix("safe_checkpoint_loading", allow_fairseq_checkpoints, True, (),
        "fairseq checkpoints load under torch's weights-only unpickler (torch >= 2.6); adds "
        "fairseq's checkpoint classes to torch's allow-list of safe globals"),
    Fix("named_checkpoint_errors", named_checkpoint_errors, True,
        ("fairseq.checkpoint_utils.load_checkpoint_to_cpu",),
        "safe loading: a checkpoint that asks to run code, or is truncated, is refused naming "
        "the file; TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD cannot make fairseq unpickle freely"),
    Fix("cpu_data_parallel", cpu_data_parallel, True,
        ("fairseq.models.distributed_fairseq_model.DistributedDataParallel",
         "fairseq.distributed.utils.infer_init_method"),
        "multi-process training on CPUs (torchrun, srun), which fairseq 0.12 cannot start"),
    Fix("objects_broadcast_between_ranks", objects_broadcast_between_ranks, True,
        ("fairseq.distributed.utils._broadcast_object_slow",),
        "a multi-process run resumes under torch >= 2.6 (the state rank 0 sends the others)"),
    Fix("named_length_errors", named_length_errors, True,
        ("fairseq.tasks.fairseq_task.FairseqTask.filter_indices_by_size",
         "fairseq.tasks.fairseq_task.FairseqTask.get_interactive_tokens_and_lengths"),
        "a sentence longer than a model of the plugin takes is named with the flag that sets "
        "the limit; fairseq-interactive goes on with the next line"),
    Fix("architecture_checked_on_resume", architecture_checked_on_resume, True,
        ("fairseq.trainer.Trainer.load_checkpoint",
         "fairseq.checkpoint_utils.load_checkpoint_to_cpu",
         "fairseq.distributed.utils.broadcast_object"),
        "a resume stops when a plugin model's architecture flags differ from its checkpoint's"),
    Fix("bf16_without_tpu", bf16_without_tpu, True, ("fairseq.trainer.Trainer.__init__",),
        "--bf16 trains the plugin's models (their backward passes are tested in bfloat16) on a "
        "GPU or CPU; fairseq 0.12 takes the flag for a TPU's"),
    Fix("atomic_checkpoint_copies", atomic_checkpoint_copies, True,
        ("fairseq.file_io.PathManager.copy",),
        "a kill while fairseq copies a checkpoint (checkpoint_last.pt, checkpoint_best.pt) left "
        "it truncated under its final name; changes when a file appears, never what it holds"),
    Fix("atomic_checkpoint_saves", atomic_checkpoint_saves, True,
        ("fairseq.checkpoint_utils.torch_persistent_save",),
        "two trainings on one folder share fairseq's .tmp file; a failed save leaves it behind; "
        "changes when a file appears, never what it holds"),
    Fix("keep_last_batch", keep_last_batch, False, ("fairseq.data.data_utils.batch_by_size",),
        "fairseq 0.12 drops the last batch (fairseq-generate skips up to 7 sentences of a test "
        "set); changes which batches training and decoding see"),
    Fix("named_data_bin_errors", named_data_bin_errors, False,
        ("fairseq.data.indexed_dataset.MMapIndexedDataset._do_init",
         "fairseq.data.indexed_dataset.MMapIndexedDataset.__del__"),
        "a truncated or damaged data-bin is named, not a numpy error or garbage batches"),
)
BY_NAME = {fix.name: fix for fix in FIXES}
ENVIRONMENT = "RAN_FAIRSEQ_FIXES"


def requested(environ=None):
    """The opt-in fixes that RAN_FAIRSEQ_FIXES asks for: ``all``, or names separated by commas."""
    environ = os.environ if environ is None else environ
    names = [n.strip() for n in environ.get(ENVIRONMENT, "").split(",") if n.strip()]
    if names == ["all"]:
        return [fix for fix in FIXES if not fix.default]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"{ENVIRONMENT}={environ[ENVIRONMENT]!r}: no fix named "
                         f"{', '.join(unknown)}; use 'all' or names among "
                         f"{', '.join(f.name for f in FIXES if not f.default)}")
    return [BY_NAME[n] for n in names]


def apply(environ=None):
    """Make the default fixes and those RAN_FAIRSEQ_FIXES asks for (each at most once; the order
    of ``FIXES``, where named_checkpoint_errors comes before the resume check that wraps it)."""
    wanted = {fix.name for fix in FIXES if fix.default} | {f.name for f in requested(environ)}
    for fix in FIXES:
        if fix.name in wanted:
            fix.apply()
