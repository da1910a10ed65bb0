"""Random Synthesizer's matrix source (Tay et al. 2020)."""
import torch
import torch.nn as nn

from .matrices import PositionalAttentionMatrices


class RandomSynthesizerMatrices(PositionalAttentionMatrices):
    """Random Synthesizer (Tay et al. 2020): an independent learned (h, n, n) logit matrix per
    layer, no transition."""

    def __init__(self, num_layers, num_heads, max_positions, causal):
        super().__init__(num_layers, num_heads, max_positions, causal)
        n = max_positions
        self.weight = nn.Parameter(torch.empty(num_layers, num_heads, n, n))
        nn.init.normal_(self.weight, std=n ** -0.5)
        self._consts(torch.device("cpu"))

    def _compute_logits(self, rows):
        return self.weight[:, :, :rows].float()
