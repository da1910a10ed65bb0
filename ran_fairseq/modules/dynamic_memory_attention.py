"""Additive attention with a dynamic memory of past attention per source word (Yang et al. 2017,
"Neural Machine Translation with Recurrent Attention Modeling", §2).

For decoder step j with query s_j (the decoder state) and source annotations h_i (keys):

    e_ij = v_aᵀ tanh(W_a h_i + U_a s_j)                        (Eq. 5, plain RNNSearch)
    e_ij = v_aᵀ tanh(W_a [h_i; d_ij] + U_a s_j)                 (Eq. 11, with dynamic memory)
    α_ij = softmax_i(e_ij),  c_j = Σ_i α_ij h_i                (Eqs. 6-7 = Eq. 13: no d in the read)

where the memory d_ij = LSTM(d_{i,j-1}, α̃_ij) of source word i reads the window
α̃_ij = [α_{i-k,j-1}, ..., α_{i+k,j-1}] of the previous step's attention (zero outside the sentence
and at padding). docs/rnnsearch_dynmem.md gives the choices where the paper is silent.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.models.lstm import LSTMCell, Linear


# Masked scores get a large finite value (the softmax runs in float32): padded positions get a
# weight of exactly zero, and a row without any real position could not turn into NaN.
_MASKED = -1e9

State = Dict[str, Optional[Tensor]]


def attention_windows(attn: Tensor, k: int) -> Tensor:
    """Windows of half-width ``k`` around every position: (B, S) -> (B, S, 2k+1), where
    ``out[b, i, o] = attn[b, i + o - k]`` and zero outside 0..S-1."""
    return F.pad(attn, (k, k)).unfold(1, 2 * k + 1, 1)


@with_incremental_state
class DynamicMemoryAttention(nn.Module):
    """Additive attention over source annotations (B, S, key_dim) for one decoder step at a time,
    with the dynamic memory of Yang et al. 2017 in its scores (``dynamic_memory_dim > 0``) or
    without it (``dynamic_memory_dim == 0``: RNNSearch's attention, Eqs. 5-7).

    Usage per decoder forward: ``state = attn.start(keys, padding_mask, incremental_state)``, then
    per step ``context, weights, state = attn.step(query, keys, padding_mask, state)``, then
    ``attn.save(incremental_state, state)`` when decoding incrementally. The state (the
    projected keys W_h h_i, the previous attention and the memory) lives in fairseq's incremental
    state under the module's own key, reordered by :meth:`reorder_incremental_state`.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int, *,
                 dynamic_memory_window: int, dynamic_memory_dim: int):
        # the model's options of the same names (their defaults in RNNSearchDynamicMemoryConfig);
        # --no-dynamic-memory arrives as dynamic_memory_dim = 0
        super().__init__()
        window, memory_dim = dynamic_memory_window, dynamic_memory_dim
        if window < 0:
            raise ValueError(f"the attention window half-width k (dynamic_memory_window) must be "
                             f">= 0, got {window}")
        if memory_dim < 0:
            raise ValueError(f"the dynamic memory size (dynamic_memory_dim) must be >= 0 (0 turns "
                             f"the memory off), got {memory_dim}")
        self.dynamic_memory_window = window
        self.dynamic_memory_dim = memory_dim
        self.key_proj = Linear(key_dim, attention_dim, bias=False)  # W_a acting on h_i
        self.query_proj = Linear(query_dim, attention_dim, bias=False)  # U_a
        self.score_proj = Linear(attention_dim, 1, bias=False)  # v_a
        if memory_dim > 0:
            self.memory_cell = LSTMCell(2 * window + 1, memory_dim)  # d_ij, §2.2
            self.memory_proj = Linear(memory_dim, attention_dim, bias=False)  # W_a acting on d_ij
        else:
            self.memory_cell = self.memory_proj = None

    @property
    def has_memory(self) -> bool:
        return self.memory_cell is not None

    def extra_repr(self) -> str:
        if not self.has_memory:
            return "no dynamic memory"
        k = self.dynamic_memory_window
        return (f"window={2 * k + 1} (dynamic_memory_window={k}), "
                f"dynamic_memory_dim={self.dynamic_memory_dim}")

    # -- state -----------------------------------------------------------------------------------
    def start(self, keys: Tensor, padding_mask: Optional[Tensor] = None,
              incremental_state=None) -> State:
        """The state before the next step: the cached one when ``incremental_state`` holds it,
        else a fresh one (keys projected once, zero previous attention, zero memory).
        keys: (B, S, key_dim); padding_mask: (B, S), True at padding."""
        cached = self.get_incremental_state(incremental_state, "dynamic_memory")
        if cached is not None:
            return cached
        bsz, srclen, _ = keys.shape
        state: State = {"projected_keys": self.key_proj(keys),
                        "prev_attn": keys.new_zeros(bsz, srclen)}
        if self.has_memory:
            state["memory_h"] = keys.new_zeros(bsz, srclen, self.dynamic_memory_dim)
            state["memory_c"] = keys.new_zeros(bsz, srclen, self.dynamic_memory_dim)
        return state

    def save(self, incremental_state, state: State) -> None:
        self.set_incremental_state(incremental_state, "dynamic_memory", state)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor) -> None:
        state = self.get_incremental_state(incremental_state, "dynamic_memory")
        if state is not None:
            self.save(incremental_state, {name: None if value is None
                                          else value.index_select(0, new_order)
                                          for name, value in state.items()})

    # -- one decoder step ------------------------------------------------------------------------
    def step(self, query: Tensor, keys: Tensor, padding_mask: Optional[Tensor],
             state: State) -> Tuple[Tensor, Tensor, State]:
        """query: (B, query_dim) = s_j; keys: (B, S, key_dim) = h_i; padding_mask: (B, S) or None.
        Returns the context c_j (B, key_dim), the weights α_j (B, S) (zero at padding) and the
        state for step j+1."""
        projected = state["projected_keys"]
        bsz, srclen, _ = projected.shape
        features = projected + self.query_proj(query).unsqueeze(1)  # W_a h_i + U_a s_j
        new_state: State = {"projected_keys": projected}
        if self.has_memory:
            # α̃_ij, §2.2
            windows = attention_windows(state["prev_attn"], self.dynamic_memory_window)
            h, c = self.memory_cell(
                windows.reshape(bsz * srclen, -1),
                (state["memory_h"].reshape(bsz * srclen, -1),
                 state["memory_c"].reshape(bsz * srclen, -1)))
            new_state["memory_h"] = h.view(bsz, srclen, -1)
            new_state["memory_c"] = c.view(bsz, srclen, -1)
            features = features + self.memory_proj(new_state["memory_h"])  # + W_a d_ij, Eq. 11
        scores = self.score_proj(torch.tanh(features)).squeeze(-1).float()  # e_ij
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask, _MASKED)
        attn = F.softmax(scores, dim=-1).type_as(keys)  # Eq. 6
        context = torch.bmm(attn.unsqueeze(1), keys).squeeze(1)  # Eq. 7 = Eq. 13: h only
        new_state["prev_attn"] = attn
        return context, attn, new_state


class AttentionRows(nn.Module):
    """Identity on a recurrent decoder's attention rows (B, T, S), called once per forward pass in
    fairseq ``MultiheadAttention``'s calling convention, so that attention statistics
    (:class:`ran_fairseq.modules.attention_entropy.AttentionEntropyRecorder`) can record an
    attention that is computed one step at a time. Returns ``(rows, weights)`` with weights
    (1, B, T, S) when ``need_weights`` or ``need_head_weights``, else None."""

    records_attention = True
    attention_side = "crs"

    def forward(self, rows: Tensor, need_weights: bool = False, need_head_weights: bool = False):
        return rows, rows.unsqueeze(0) if need_weights or need_head_weights else None
