"""ran_fairseq: recurrent and pervasive attention architectures as a fairseq ``--user-dir`` plugin.

Importing the package imports fairseq and registers the plugin's models, architectures,
criterion, the ``epoch_anneal`` learning-rate scheduler and the ``ter`` scorer. It also makes the
default fixes of ``ran_fairseq.fixes.FIXES``, those the four architectures' users need (fairseq
checkpoints under torch's weights-only loading, multi-process training and resume on CPUs, length
errors that name the flag, the resume check of architecture flags, ``--bf16`` off a TPU,
checkpoints copied and saved atomically), and the opt-in fixes that ``RAN_FAIRSEQ_FIXES`` names.
Nothing else of fairseq, torch or ``sys`` changes:
docs/pitfalls.md lists each replacement and why, and tests/system/test_package.py compares fairseq's
attributes before and after the import.
"""
from . import fixes

fixes.apply()

from . import criterions, lr_scheduler, models  # noqa: E402,F401  (register with fairseq)
from .scoring import ter  # noqa: E402,F401  (--scoring ter)
