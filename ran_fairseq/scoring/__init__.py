"""Scoring: the ``ter`` scorer for ``fairseq-generate --scoring ter`` and ``evaluate``, which scores
detokenized ``fairseq-generate`` output with sacreBLEU (fairseq-score fails with sacrebleu 2.6)."""
from . import ter  # noqa: F401  (registers --scoring ter)
