"""Scoring: the ``ter`` scorer for ``fairseq-generate --scoring ter`` (``ter``, registered with
fairseq when the package registers, see ``ran_fairseq.register``) and ``evaluate``, which scores
detokenized ``fairseq-generate`` output with sacreBLEU (fairseq-score fails with sacrebleu 2.6)."""
