"""Input-independent self-attention: Recurrent Attention (RAN), Random Synthesizer, HC-SA.

Layer l of a side with h heads mixes its values with weights that depend on positions only
(Zeng et al. 2021, Eq. 2): H = softmax(A_l[:T, :T]) · (x W_v), output = H W_o, where a matrix
source (:class:`PositionalAttentionMatrices`) holds the logits A_l (h, n, n) of n positions:

- RAN (§2.2-2.3): a learned A_0 and one transition for all heads and layers,
  A_l = LN(tanh(A_{l-1} Wᵀ + b)) + A_{l-1} (Eqs. 3-4): :class:`RecurrentAttentionMatrices`;
- Random Synthesizer (Tay et al. 2020): a learned matrix per layer;
- HC-SA (You et al. 2020): fixed Gaussian logits -(j - i - c_k)² / 2σ² per head k.

docs/ran_transformer.md ("Implementation notes") gives the padding, caching and kernel layout.
"""
from typing import Optional

from .common import (
    RAN_DECODER_INITIAL,
    RAN_INITIAL_INIT,
    RAN_TRANSITIONS,
    STEP_BLOCK,
    PositionLimit,
)
from .gaussian import GaussianAttentionMatrices
from .layer import PositionalSelfAttention
from .matrices import PositionalAttentionMatrices
from .ran import FeedForwardTransition, RecurrentAttentionMatrices
from .recurrence import _PaperRecurrence
from .synthesizer import RandomSynthesizerMatrices

__all__ = [
    "RAN_DECODER_INITIAL", "RAN_INITIAL_INIT", "RAN_TRANSITIONS", "STEP_BLOCK",
    "FeedForwardTransition", "GaussianAttentionMatrices", "PositionLimit",
    "PositionalAttentionMatrices", "PositionalSelfAttention", "RandomSynthesizerMatrices",
    "RecurrentAttentionMatrices", "_PaperRecurrence", "build_positional_matrices",
]


def build_positional_matrices(kind: str, num_layers: int, num_heads: int, max_positions: int,
                              causal: bool, *, freeze_initial: bool, layernorm_residual: bool,
                              gaussian_std: float, ran_transition: str, ran_decoder_initial: str,
                              ran_initial_init: str, ran_ffn_dim: Optional[int]
                              ) -> PositionalAttentionMatrices:
    """The matrix source for ``kind`` in {"ran", "synthesizer", "gaussian"}; the other arguments
    are the model's options of the same names (``ran_transformer``'s config holds the defaults)."""
    if kind == "ran":
        return RecurrentAttentionMatrices(num_layers, num_heads, max_positions, causal,
                                          ran_transition=ran_transition,
                                          ran_decoder_initial=ran_decoder_initial,
                                          ran_initial_init=ran_initial_init,
                                          ran_ffn_dim=ran_ffn_dim, freeze_initial=freeze_initial,
                                          layernorm_residual=layernorm_residual)
    if kind == "synthesizer":
        return RandomSynthesizerMatrices(num_layers, num_heads, max_positions, causal)
    if kind == "gaussian":
        return GaussianAttentionMatrices(num_layers, num_heads, max_positions, causal,
                                         std=gaussian_std)
    raise ValueError(f"unknown input-independent attention {kind!r}; "
                     f"choose one of ran, synthesizer, gaussian")
