"""``fairseq-generate --scoring ter``: corpus-level translation edit rate from sacreBLEU.

fairseq passes the detokenized reference and hypothesis strings of every sentence to
``add_string``; ``result_string`` prints sacreBLEU's TER line with its signature.
"""
from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.scoring import BaseScorer, register_scorer


@dataclass
class TerScorerConfig(FairseqDataclass):
    ter_normalized: bool = field(default=False, metadata={"help": "tercom-style normalization"})
    ter_no_punct: bool = field(default=False, metadata={"help": "remove punctuation before scoring"})
    ter_case_insensitive: bool = field(default=False, metadata={"help": "lowercase before scoring"})
    ter_asian_support: bool = field(default=False, metadata={"help": "split Asian characters"})


@register_scorer("ter", dataclass=TerScorerConfig)
class TerScorer(BaseScorer):
    def __init__(self, cfg):
        super().__init__(cfg)
        from sacrebleu.metrics import TER

        self.metric = TER(
            normalized=cfg.ter_normalized,
            no_punct=cfg.ter_no_punct,
            case_sensitive=not cfg.ter_case_insensitive,
            asian_support=cfg.ter_asian_support,
        )

    def _corpus_score(self):
        return self.metric.corpus_score(self.pred, [self.ref])

    def score(self):
        return self._corpus_score().score

    def result_string(self):
        return f"{self._corpus_score()} ({self.metric.get_signature()})"
