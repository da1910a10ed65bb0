"""Input-independent self-attention: Recurrent Attention (RAN), Random Synthesizer, HC-SA.

In all three the attention weights of a layer depend on token positions only, never on the tokens.
For one side (encoder or decoder) with L layers and h heads, a *matrix source*
(:class:`PositionalAttentionMatrices`) holds logits A_l of shape (h, n, n) over n absolute
positions, l = 1..L, and layer l of a sentence of T tokens mixes its value vectors with
softmax(A_l[:T, :T]) (causal in a decoder). :class:`PositionalSelfAttention` is that mixing step,
with fairseq's ``MultiheadAttention`` call signature (Zeng et al. 2021, Eq. 2):

    H = softmax(A_l[:T, :T]) · (x W_v),   output = H W_o        (no queries, keys or dot products)

The sources:

- :class:`RecurrentAttentionMatrices` (RAN, Zeng et al. 2021 §2.2-2.3): a learned initial matrix
  A_0 per head and one transition shared by all heads and layers,
  A_l = LN(tanh(A_{l-1} Wᵀ + b)) + A_{l-1} (Eqs. 3-4), W acting along the key axis of every row;
  in a decoder, only the lower triangle of each matrix takes part in the transition (§2.2) unless
  ``ran_decoder_initial="full"``; ``ran_transition="ffn"`` is the feed-forward transition of the authors'
  released code (theirs where its hidden width ``ran_ffn_dim`` is 1,024), ``ran_initial_init="xavier"``
  their initialization of A_0.
- :class:`RandomSynthesizerMatrices` (Tay et al. 2020): a learned (h, n, n) matrix per layer.
- :class:`GaussianAttentionMatrices` (HC-SA, You et al. 2020): fixed logits -(j - i - c_k)² / 2σ²,
  head k centred at offset c_k from the query position.

Positions are absolute within each sentence: in a padded batch, the weight between two tokens is
looked up at their positions counted from their sentence's first token (left or right padding
alike); padding keys are masked before the softmax and padding queries get a zero context. A
sentence longer than n is an error naming n and its flag.

The matrices depend on parameters only: a forward pass wrapped in
:meth:`PositionalAttentionMatrices.forward_scope` computes them once and shares them between its
layers, and a decoded sequence computes them at its first step, for all n positions, and keeps them
in its incremental state for its later steps. Nothing is kept across passes or sequences, so no
change of the parameters can leave stale matrices behind.

A full-sequence pass over a padded batch, or a training pass with attention dropout, is also
organized for few kernels (on a GPU a small model's step costs about one launch per kernel): the
first layer of a scoped pass computes the weights of all L layers at once (the tokens' positions,
one gather of every layer's rows and columns, one masked softmax, one dropout draw) and each layer
then costs its value projection, one batched product and its output projection. RAN's recurrence
with the paper's transition is one autograd node with a written-out backward
(:class:`_PaperRecurrence`, derived in docs/backward/positional_attention.md). Tensors that depend
on the sizes only (masks, index ranges) are built once per device.

The package holds one job per module: ``common`` (constants), ``matrices`` (the matrix
source's base class: what a pass or a sequence shares, the weights layers read), ``ran`` (RAN's
initial matrices and transition), ``recurrence`` (the ``_PaperRecurrence`` Function),
``synthesizer``, ``gaussian`` (HC-SA) and ``layer`` (the self-attention layer and its incremental
step).
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
