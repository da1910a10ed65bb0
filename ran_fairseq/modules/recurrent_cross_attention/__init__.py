"""Encoder-decoder attention that sees its own earlier decisions (Rosendahl et al. 2021,
"Recurrent Attention for the Transformer", §3).

Per decoder layer and head, with decoding step i, source position j, decoder state s_i, encoder
states h_j, keys k_j = W_k h_j, values v_j = W_v h_j and head size d_k, plain attention (Eq. 1) has
energies α̂_{i,j} = (W_q s_i)·k_j / √d_k, weights α_i = softmax_j(α̂_i) and context
c_i = Σ_j α_{i,j} v_j. :class:`RecurrentCrossAttention` implements it and six recurrent variants
(``variant``, ``--cross-attention``):

- ``dot`` (Eq. 1): no recurrence.
- ``prev-context`` (Eq. 2): the query is W_q' [s_i; c_{i-1}] = W_q s_i + U c_{i-1}, with the
  head's previous context c_{i-1} and a d_k×d_k matrix U per head.
- ``prev-weight`` (Eq. 3): source position j's query is extended with α_{i-1,j}:
  (W_q s_i + u α_{i-1,j})·k_j / √d_k, with a vector u per head.
- ``prev-accum-weight`` (Eq. 4): as Eq. 3 with Σ_{i'<i} α_{i',j}.
- ``expand-kv`` (Eqs. 5-8): one extra key/value pair made from the previous context; ``kv_variant``
  1: the layer's full context c^ℓ_{i-1} through the shared W_k, W_v; 2: c^ℓ_{i-1} through
  separate matrices; 3: the head's own c_{i-1} through separate per-head matrices; 4: as 3, but
  the value is c_{i-1} itself (key transformed, value not). The full context is the one §3.1
  defines: all heads' contexts concatenated *and* passed through the attention's output
  projection, c^ℓ_{i-1} = W_o [c^1_{i-1}; ...; c^H_{i-1}] + b_o, i.e. the attention output of
  step i-1 (before the decoder layer's residual dropout and connection).
- ``continuous`` (Eq. 9): rescaled energies α̊_{i,j} = λ α̂_{i,j} + (1-λ)/(2k+1) Σ_{|j'-j|≤k}
  α̊_{i-1,j'}, then softmax over α̊_i (λ = ``rescale_lambda``, k = ``rescale_window``).
- ``coverage`` (Eq. 10): α̊_{i,j} = α̂_{i,j} - λ/√d_k Σ_{i'<i} α_{i',j}, then softmax.

Choices where the paper is silent:

- The first step has no predecessor, and every variant's first step is plain attention (Eq. 1):
  c_{-1} = 0 (Eq. 2), α_{-1} = 0 (Eq. 3), empty sums (Eqs. 4, 10), no extra key/value pair
  (Eqs. 5-8), α̊_0 = α̂_0 (Eq. 9).
- Eqs. 3, 4, 10 use the attention weights before dropout; Eqs. 2, 5-8 use the context the layer
  actually produced (after attention dropout).
- Source padding never gives or receives weight: padded keys are masked before every softmax
  (their weights, previous and accumulated, are exactly 0); Eq. 9's window sums run over real
  positions only, out-of-sentence positions counting as 0 with the divisor kept at 2k+1. Windows
  act on positions relative to the sentence, so left and right padding give identical results.
- ``expand-kv``: the returned weights are those of the source positions; the extra pair takes the
  rest of each row's mass.

The package has one module per job: ``module`` (the nn.Module, its teacher-forced pass and its
incremental decoding step), ``weight_functions`` (the training Functions of Eqs. 2-4, 9, 10),
``context_functions`` (those of Eqs. 5-8) and ``common`` (option checks, Eq. 9's window, the
step-by-step weight recurrence, per-head linear maps). A teacher-forced call computes projections
and energies of all target positions at once and runs each recurrence as one autograd Function
whose loop over the target steps holds only what depends on the previous step; the backward
passes are written out, their derivations in docs/backward/recurrent_cross_attention.md.
Incremental decoding runs one step of the same recurrences (the equations as written) from the
state kept under the module's own incremental-state key, reordered with the beam.
"""
from .common import (
    CROSS_ATTENTION_VARIANTS,
    KV_VARIANTS,
    HeadwiseLinear,
    check_options,
    continuous_step,
    weight_recurrence,
    window_average,
    window_matrix,
)
from .context_functions import FullContextRecurrence, HeadContextRecurrence
from .module import RecurrentCrossAttention
from .weight_functions import (
    ContinuousScan,
    PrevContextRecurrence,
    WeightRecurrence,
    continuous_scan,
)

__all__ = ["CROSS_ATTENTION_VARIANTS", "KV_VARIANTS", "ContinuousScan", "FullContextRecurrence",
           "HeadContextRecurrence", "HeadwiseLinear", "PrevContextRecurrence",
           "RecurrentCrossAttention", "WeightRecurrence", "check_options", "continuous_scan",
           "continuous_step", "weight_recurrence", "window_average", "window_matrix"]
