"""ran_fairseq: recurrent and pervasive attention architectures as a fairseq ``--user-dir`` plugin.

Importing the package registers its models, criterions and scorers with fairseq and makes
fairseq checkpoints loadable under torch's safe (weights-only) unpickling; it also corrects, in
``compat``, fairseq 0.12 behaviours: the dropped last batch, non-atomic checkpoint copies,
multi-process training on CPUs, checkpoint saves under names unique to the writer, errors for
too-long sentences, truncated checkpoints and damaged data-bins that name the problem, and a
resume that stops when the model's architecture flags differ from the checkpoint's, and
``--bf16`` taken for a TPU's flag where there is no TPU. Before
fairseq is imported, ``quiet`` silences the noise its import prints (tensorboardX, hydra's
deprecation warnings, the root logger set to DEBUG). Nothing else.
"""
from . import quiet

quiet.install()
with quiet.library_logging():
    from . import compat

    compat.allow_fairseq_checkpoints()
    compat.keep_last_batch()
    compat.atomic_checkpoint_copies()
    compat.cpu_data_parallel()
    compat.named_length_errors()
    compat.named_checkpoint_errors()
    compat.one_line_file_faults()
    compat.atomic_checkpoint_saves()
    compat.named_data_bin_errors()
    compat.architecture_checked_on_resume()
    compat.bf16_without_tpu()

    from . import criterions, models, optim, scoring  # noqa: E402,F401  (register with fairseq)
