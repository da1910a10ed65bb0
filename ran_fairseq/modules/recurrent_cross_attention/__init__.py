"""Encoder-decoder attention that sees its own earlier decisions (Rosendahl et al. 2021, §3).

Plain attention (Eq. 1): α̂_{i,j} = (W_q s_i)·k_j / √d_k, α_i = softmax_j(α̂_i), c_i = Σ_j α_{i,j} v_j.
:class:`RecurrentCrossAttention` adds the previous step to it (``cross_attention``):
``prev-context`` (Eq. 2, W_q s_i + U c_{i-1}), ``prev-weight`` (Eq. 3, + u α_{i-1,j}),
``prev-accum-weight`` (Eq. 4, + u Σ_{i'<i} α_{i',j}), ``expand-kv`` (Eqs. 5-8, one extra key/value
pair from the previous context, ``kv_variant`` 1-4), ``continuous`` (Eq. 9, energies rescaled with
λ over the window j-k..j+k of the previous ones) and ``coverage`` (Eq. 10,
α̂_{i,j} - λ/√d_k Σ_{i'<i} α_{i',j}).
Every first step is plain attention. ``module.USE_EAGER`` runs a teacher-forced pass by autograd,
the reference of the training Functions' written-out backward passes.
docs/recurrent_cross_transformer.md ("Implementation notes") gives the choices where the paper is
silent and the layout of the package.
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
