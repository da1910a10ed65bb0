"""ran_fairseq: recurrent and pervasive attention architectures as a fairseq ``--user-dir`` plugin.

Importing the package registers its models, criterions, optimizers and the ``ter`` scorer with
fairseq and makes fairseq checkpoints loadable under torch's safe (weights-only) unpickling; it
also corrects, in ``compat``, fairseq 0.12 behaviours: the dropped last batch, non-atomic
checkpoint copies, multi-process training on CPUs, a multi-process run's resume (the state rank
0 sends the other ranks), checkpoint saves under names unique to the writer, errors for
too-long sentences, truncated checkpoints and damaged data-bins that name the problem, a resume
that stops when the model's architecture flags differ from the checkpoint's, and ``--bf16``
taken for a TPU's flag where there is no TPU. Before fairseq is imported,
``quiet`` silences the noise its import prints (tensorboardX, hydra's deprecation warnings, the
root logger set to DEBUG). Nothing else.

The registration happens when fairseq is there: at once if fairseq is already imported (as under
``fairseq-train --user-dir``), otherwise right after the process first imports fairseq; torch's
safe-loading list likewise grows when torch is imported. So the lab's commands that never use
fairseq or torch (``ran-claims``, ``ran-remake``, ``ran-reproduce``'s own process,
``ran-evaluate``, ...) start in a fraction of a second instead of the seconds that importing
torch and fairseq takes.
"""
import importlib.abc
import importlib.util
import sys

from . import quiet

quiet.install()
_registered = False


def _allow_checkpoints() -> None:
    from . import safe_checkpoints

    safe_checkpoints.allow_fairseq_checkpoints()


def register() -> None:
    """Register the plugin with fairseq and apply ``compat`` (once per process; imports fairseq)."""
    global _registered
    if _registered:
        return
    _registered = True
    with quiet.library_logging():
        from . import compat

        _allow_checkpoints()
        compat.keep_last_batch()
        compat.atomic_checkpoint_copies()
        compat.cpu_data_parallel()
        compat.objects_broadcast_between_ranks()
        compat.named_length_errors()
        compat.named_checkpoint_errors()
        compat.one_line_file_faults()
        compat.atomic_checkpoint_saves()
        compat.named_data_bin_errors()
        compat.architecture_checked_on_resume()
        compat.bf16_without_tpu()

        from . import criterions, models, optim  # noqa: F401  (register with fairseq)
        from .scoring import ter  # noqa: F401  (--scoring ter)


# what follows the first import of each module, once the module has run
_AFTER_IMPORT = {"torch": _allow_checkpoints, "fairseq": register}


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder that finds nothing itself: on the first import of a module of ``_AFTER_IMPORT`` it
    hands on the spec that the other finders give, its loader's ``exec_module`` followed by what
    the table names; the finder leaves once every module of the table has been imported."""

    def __init__(self):
        self._finding = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _AFTER_IMPORT or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_follow(module):
            with quiet.library_logging():
                exec_module(module)
            if all(name in sys.modules for name in _AFTER_IMPORT) and self in sys.meta_path:
                sys.meta_path.remove(self)
            _AFTER_IMPORT[fullname]()

        spec.loader.exec_module = exec_then_follow
        return spec


for _name, _follow in _AFTER_IMPORT.items():
    if _name in sys.modules:
        _follow()
if not all(name in sys.modules for name in _AFTER_IMPORT) \
        and not any(isinstance(f, _AfterImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _AfterImport())
