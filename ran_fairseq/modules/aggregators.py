"""Aggregation of the grid over the source axis (Elbayad et al. 2018, §3.2-3.3).

H (B, C, T, S), the DenseNet's features, pooled over the real source tokens j of each row i:

- ``max`` (Eq. 2): H^pool_i = max_j H_ij;
- ``avg`` (Eq. 3): H^pool_i = (1/√|s|) Σ_j H_ij;
- ``attn`` (Eqs. 8-9): ρ_ij = softmax_j(w·H_ij), H^att_i = √|s| Σ_j ρ_ij H_ij;
- ``max-attn``: [H^pool_i; H^att_i].

Each also returns weights per source token (B, T, S), the model's implicit alignment (Eq. 7;
:func:`eq7_contributions` is Eq. 7 as written); docs/pervasive_attention.md gives how they are
read.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

AGGREGATORS = ("max", "avg", "attn", "max-attn")


def _source_lengths(source_padding: Tensor) -> Tensor:
    """True source lengths (B,) as floats; an all-padding sentence is an error."""
    lengths = (~source_padding).sum(-1)
    if bool((lengths == 0).any()):
        raise ValueError("a source sentence has no real tokens (all padding); the aggregation "
                         "over the source axis needs at least one")
    return lengths.to(torch.float32)


def _uniform(source_padding: Tensor, rows: int, dtype: torch.dtype) -> Tensor:
    real = (~source_padding).to(dtype)
    return (real / real.sum(-1, keepdim=True)).unsqueeze(1).expand(-1, rows, -1)


def _without_padded_columns(features: Tensor, source_padding: Tensor) -> Tensor:
    """The features (B, C, T, S) with -inf at padded source columns, for a maximum over the
    source axis: a broadcast sum with a (B, 1, 1, S) row of 0 and -inf (on a CPU several times
    faster than ``masked_fill``), or the features themselves when no column is padding."""
    if not bool(source_padding.any()):
        return features
    minus_inf = torch.zeros(source_padding.shape, dtype=features.dtype, device=features.device)
    minus_inf = minus_inf.masked_fill_(source_padding, float("-inf"))
    return features + minus_inf[:, None, None, :]


def max_pool(features: Tensor, source_padding: Tensor, need_weights: bool = True,
             rectified: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. 2 and the Eq. 7 weights: (B, T, C), (B, T, S) or None. ``rectified``: the features
    are ≥ 0 and 0 at padded columns (the DenseNet's closing ReLU, zero at padding), so a padded
    column never exceeds a row's real maximum and needs no -inf; where it ties (a maximum of 0),
    the pooled value, the Eq. 7 weights (no mass) and every gradient through that ReLU (none at
    0) are those of the masked maximum."""
    _source_lengths(source_padding)
    masked = features if rectified else _without_padded_columns(features, source_padding)
    # The maximum over j of the (B, T, S, C) view: its backward scatters the gradient into a
    # (B, T, S, C) tensor, which is the features' own layout when they are channels last (the
    # model's grid; ran_fairseq/models/pervasive_attention.py) and the batch norm before it then
    # reads both in one layout. The maxima and their (first) indices are those over the last axis
    # of the (B, C, T, S) features; the pooled values are returned in (B, C, T) memory as that
    # maximum gives them, which the dropout after pooling draws its mask in.
    pooled, argmax = masked.permute(0, 2, 3, 1).max(dim=2)  # (B, T, C)
    pooled = pooled.transpose(1, 2).contiguous().transpose(1, 2)
    if not need_weights:
        return pooled, None
    with torch.no_grad():
        mass = pooled.float().clamp_min(0)  # (B, T, C)
        share = mass.new_zeros(features.size(0), features.size(2), features.size(3))
        share.scatter_add_(2, argmax, mass)  # Eq. 7: per-source-token sum
        total = share.sum(-1, keepdim=True)
        uniform = _uniform(source_padding, features.size(2), share.dtype)
        weights = torch.where(total > 0, share / total.clamp_min(1e-30), uniform)
    return pooled, weights.to(features.dtype)


def eq7_contributions(features: Tensor, source_padding: Tensor, output_rows: Tensor) -> Tensor:
    """Eq. 7 as written: α_ij = Σ_{d ∈ B_ij} E_wd H_ijd, the part of the logit of token w at
    output position i (Eqs. 5-6) that comes from the channels whose maximum over the source
    (Eq. 2) is at column j. ``features`` H (B, C, T, S); ``source_padding`` (B, S), True at
    padding; ``output_rows`` (B, T, C): E_w for the token w of each row (e.g. the predicted one).
    Returns α (B, T, S), zero at padded columns; the values are logit contributions, not a
    distribution (they can be negative, and Σ_j α_ij = E_w·H^pool_i)."""
    if features.dim() != 4 or output_rows.shape != (features.size(0), features.size(2),
                                                     features.size(1)):
        raise ValueError(f"Eq. 7 needs features (batch, C, target, source) and one output row "
                         f"per target position (batch, target, C); got {tuple(features.shape)} "
                         f"and {tuple(output_rows.shape)}")
    _source_lengths(source_padding)
    masked = features.masked_fill(source_padding[:, None, None, :], float("-inf"))
    pooled, argmax = masked.max(dim=-1)  # (B, C, T): H^pool and the column that supplies it
    terms = output_rows.float() * pooled.transpose(1, 2).float()  # E_wd H^pool_id, (B, T, C)
    alpha = terms.new_zeros(features.size(0), features.size(2), features.size(3))
    return alpha.scatter_add_(2, argmax.transpose(1, 2), terms)


def avg_pool(features: Tensor, source_padding: Tensor, need_weights: bool = True,
             rectified: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. 3, (1/√|s|)·Σ_j: (B, T, C) and uniform weights (B, T, S) or None; ``rectified``:
    as :func:`max_pool` (padded columns are 0 and add nothing)."""
    lengths = _source_lengths(source_padding)
    if not rectified and bool(source_padding.any()):
        features = features * (~source_padding).to(features.dtype)[:, None, None, :]
    summed = features.sum(-1).transpose(1, 2)
    pooled = summed / lengths.sqrt().to(features.dtype).view(-1, 1, 1)
    if not need_weights:
        return pooled, None
    return pooled, _uniform(source_padding, features.size(2), features.dtype)


def attention_pool(features: Tensor, source_padding: Tensor, score_weight: Tensor,
                   need_weights: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """Eqs. 8-9 with score vector ``score_weight`` (C,): (B, T, C) and ρ (B, T, S) or None."""
    lengths = _source_lengths(source_padding)
    scores = torch.einsum("bcts,c->bts", features, score_weight.to(features.dtype))
    scores = scores.float().masked_fill(source_padding[:, None, :], float("-inf"))
    rho = torch.softmax(scores, dim=-1).to(features.dtype)  # Eq. 8
    context = torch.einsum("bcts,bts->btc", features, rho)
    pooled = context * lengths.sqrt().to(features.dtype).view(-1, 1, 1)  # Eq. 9
    return pooled, (rho if need_weights else None)


class SourceAggregator(nn.Module):
    """One of :data:`AGGREGATORS` over C input channels; ``out_channels`` is C, or 2C for
    ``max-attn``. ``forward(features (B, C, T, S), source_padding (B, S))`` returns the pooled
    features (B, T, out_channels) and the weights: (B, T, S), (1, B, T, S) with
    ``need_head_weights``, or None without ``need_weights``; ``rectified``: the features are ≥ 0
    and 0 at padded columns (see :func:`max_pool`), which spares masking them."""

    records_attention = True  # modules/attention_entropy.py records its weights
    attention_side = "crs"

    def __init__(self, kind: str, channels: int):
        super().__init__()
        if kind not in AGGREGATORS:
            raise ValueError(f"unknown aggregator {kind!r}; the aggregators are "
                             f"{', '.join(AGGREGATORS)}")
        self.kind = kind
        self.channels = channels
        self.out_channels = 2 * channels if kind == "max-attn" else channels
        if kind in ("attn", "max-attn"):
            self.score = nn.Parameter(torch.empty(channels))
            nn.init.normal_(self.score, std=1 / math.sqrt(channels))
        else:
            self.register_parameter("score", None)

    def extra_repr(self) -> str:
        return f"{self.kind}, channels={self.channels}"

    def forward(self, features: Tensor, source_padding: Tensor, need_weights: bool = True,
                need_head_weights: bool = False, rectified: bool = False
                ) -> Tuple[Tensor, Optional[Tensor]]:
        if features.dim() != 4 or features.size(1) != self.channels:
            raise ValueError(f"the aggregator expects (batch, {self.channels}, target, source), "
                             f"got {tuple(features.shape)}")
        if source_padding.shape != (features.size(0), features.size(3)):
            raise ValueError(f"source padding {tuple(source_padding.shape)} does not match the "
                             f"grid's (batch, source) = {(features.size(0), features.size(3))}")
        need_weights = need_weights or need_head_weights
        if self.kind == "max":
            pooled, weights = max_pool(features, source_padding, need_weights, rectified)
        elif self.kind == "avg":
            pooled, weights = avg_pool(features, source_padding, need_weights, rectified)
        elif self.kind == "attn":
            pooled, weights = attention_pool(features, source_padding, self.score, need_weights)
        else:
            pooled_max, weights_max = max_pool(features, source_padding, need_weights, rectified)
            pooled_att, weights_att = attention_pool(features, source_padding, self.score,
                                                     need_weights)
            pooled = torch.cat([pooled_max, pooled_att], dim=-1)
            weights = (weights_max + weights_att) / 2 if need_weights else None
        if weights is not None and need_head_weights:
            weights = weights.unsqueeze(0)
        return pooled, weights
