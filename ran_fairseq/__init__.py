"""ran_fairseq: recurrent and pervasive attention architectures as a fairseq ``--user-dir`` plugin.

Importing the package registers its models, criterions and scorers with fairseq and makes
fairseq checkpoints loadable under torch's safe (weights-only) unpickling; it also corrects, in
``compat``, fairseq 0.12 behaviours: the dropped last batch, non-atomic checkpoint copies,
multi-process training on CPUs, and errors for too-long sentences and truncated checkpoints
that name the problem. Nothing else.
"""
from . import compat

compat.allow_fairseq_checkpoints()
compat.keep_last_batch()
compat.atomic_checkpoint_copies()
compat.cpu_data_parallel()
compat.named_length_errors()
compat.named_checkpoint_errors()

from . import criterions, models, optim, scoring  # noqa: E402,F401  (register with fairseq)
