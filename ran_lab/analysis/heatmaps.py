"""Self-attention weights per layer and head for a sentence of a given length (Zeng et al. 2021,
Fig. 6).

For a side with input-independent self-attention (RAN, Random Synthesizer, HC-SA) the weights are
the learned matrices themselves: ``self_attn_matrices.probs(layer, length)``, i.e. softmax(A_l) over
the first ``length`` positions (Eq. 2), causal in the decoder. Dot-product attention has no such
matrices; for it the weights are averaged over the sentences of a data set whose length is exactly
``length`` (source tokens for the encoder, target tokens for the decoder, end-of-sentence
included), position by position. Either way each row is a distribution over keys.
"""
from collections import defaultdict
from typing import Dict, NamedTuple, Optional

import torch

from ran_fairseq.modules.positional_attention import GaussianAttentionMatrices, RandomSynthesizerMatrices, RecurrentAttentionMatrices
from .checkpoints import recorded_forwards

SELF_SIDES = {"enc": "encoder", "dec": "decoder"}
_KINDS = {RecurrentAttentionMatrices: "ran", RandomSynthesizerMatrices: "synthesizer",
          GaussianAttentionMatrices: "gaussian"}


class SideWeights(NamedTuple):
    attention: str  # ran, synthesizer, gaussian (learned or fixed matrices) or dot (data average)
    weights: torch.Tensor  # (L, h, length, length), rows sum to 1
    sentences: Optional[int]  # sentences averaged over (dot), None for matrices


def input_independent(model, side):
    """The matrix source of ``side`` ("enc" or "dec"), or None for dot-product self-attention."""
    if side not in SELF_SIDES:
        raise ValueError(f"side must be one of {', '.join(SELF_SIDES)}, got {side!r} (--sides)")
    return getattr(getattr(model, SELF_SIDES[side], None), "self_attn_matrices", None)


@torch.no_grad()
def matrix_weights(matrices, length) -> SideWeights:
    """The weights of every layer of an input-independent side for ``length`` positions."""
    if not 1 <= length <= matrices.max_positions:
        raise ValueError(f"--length {length} is outside 1..{matrices.max_positions}, the positions "
                         "covered by the model's attention matrices (--max-attention-positions)")
    weights = torch.stack([matrices.probs(layer, length) for layer in range(matrices.num_layers)])
    return SideWeights(_KINDS.get(type(matrices), type(matrices).__name__), weights, None)


def data_average_weights(model, samples, pad, length, sides):
    """Per-head self-attention of ``sides``, averaged over the sentences of ``samples`` with
    exactly ``length`` tokens on that side: ``{side: SideWeights}``."""
    sums, counts = defaultdict(dict), defaultdict(int)
    for recorder in recorded_forwards(model, samples, pad, keep_weights=True):
        for (side, layer), (weights, query_mask) in recorder.weights.items():
            if side not in sides:
                continue
            if query_mask is None:
                query_mask = torch.ones(weights.shape[1:3], dtype=torch.bool)
            chosen = (query_mask.sum(dim=1) == length).nonzero().flatten().tolist()
            for b in chosen:
                real = query_mask[b].nonzero().flatten()
                block = weights[:, b].index_select(1, real).index_select(2, real).double()
                sums[side][layer] = sums[side].get(layer, 0) + block
            if layer == 0:
                counts[side] += len(chosen)
    out = {}
    for side in sides:
        if counts[side] == 0:
            raise ValueError(f"side {side} has dot-product self-attention, whose weights are "
                             f"averaged over sentences of exactly {length} tokens, and the data "
                             "has none; change --length or raise --max-sentences")
        layers = sorted(sums[side])
        stacked = torch.stack([sums[side][layer] for layer in layers]) / counts[side]
        out[side] = SideWeights("dot", stacked.float(), counts[side])
    return out


def self_attention_weights(model, length, sides=("enc", "dec"), samples=None,
                           pad=None) -> Dict[str, SideWeights]:
    """``{side: SideWeights}`` for ``length`` positions: learned matrices where the side has them,
    else the average over ``samples`` (fairseq batches, needed only then)."""
    out, averaged = {}, []
    for side in sides:
        matrices = input_independent(model, side)
        if matrices is not None:
            out[side] = matrix_weights(matrices, length)
        else:
            averaged.append(side)
    if averaged:
        if samples is None:
            raise ValueError(f"side(s) {', '.join(averaged)} use dot-product self-attention, "
                             "which has no input-independent matrices: give data (--data/--subset) "
                             "to average its weights over sentences")
        out.update(data_average_weights(model, samples, pad, length, averaged))
    return {side: out[side] for side in sides}
