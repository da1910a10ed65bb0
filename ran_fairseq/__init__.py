"""ran_fairseq: recurrent and pervasive attention architectures as a fairseq ``--user-dir`` plugin.

Importing the package registers its models, criterions and scorers with fairseq and makes
fairseq checkpoints loadable under torch's safe (weights-only) unpickling; nothing else.
"""
from . import compat

compat.allow_fairseq_checkpoints()

from . import criterions, models, scoring  # noqa: E402,F401  (register with fairseq)
