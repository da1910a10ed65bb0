"""``--criterion label_smoothed_cross_entropy_with_entropy``: fairseq's label-smoothed cross-entropy
plus the mean attention entropy per layer and side (Zeng et al. 2021, Eq. 5), logged in validation.

Metrics are named ``ent_{side}{layer}`` (side: ``enc`` encoder self-attention, ``dec`` decoder
self-attention, ``crs`` encoder-decoder attention), in nats, averaged over heads and real query
positions. The logging outputs are plain sums, so they add up across workers.
"""
from dataclasses import dataclass, field

from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from ..modules.attention_entropy import AttentionEntropyRecorder


@dataclass
class LabelSmoothedCrossEntropyWithEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    attention_entropy_in_training: bool = field(
        default=False,
        metadata={"help": "also record attention entropy on training batches (slower: per-head weights)"},
    )


@register_criterion("label_smoothed_cross_entropy_with_entropy",
                    dataclass=LabelSmoothedCrossEntropyWithEntropyConfig)
class LabelSmoothedCrossEntropyWithEntropy(LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, attention_entropy_in_training=False):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self.in_training = attention_entropy_in_training

    def forward(self, model, sample, reduce=True):
        if model.training and not self.in_training:
            return super().forward(model, sample, reduce)
        target_mask = sample["target"].ne(self.padding_idx)
        with AttentionEntropyRecorder(model, target_mask) as recorder:
            loss, sample_size, logging_output = super().forward(model, sample, reduce)
        for (side, layer), total in recorder.sums.items():
            logging_output[f"ent_{side}{layer}_sum"] = total
            logging_output[f"ent_{side}{layer}_n"] = recorder.counts[(side, layer)]
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        names = sorted({k[: -len("_sum")] for log in logging_outputs for k in log if k.endswith("_sum")
                        and k.startswith("ent_")})
        for name in names:
            total = sum(log.get(f"{name}_sum", 0) for log in logging_outputs)
            count = sum(log.get(f"{name}_n", 0) for log in logging_outputs)
            if count > 0:
                metrics.log_scalar(name, total / count, count, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
