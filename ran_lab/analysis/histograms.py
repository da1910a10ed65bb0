"""Histograms of self-attention weights per layer (Zeng et al. 2021, §4.1, Fig. 5).

For each side (``enc``: encoder self-attention, ``dec``: decoder self-attention) and chosen layer,
the weights a_ij of every head over the sentences of a data set, in teacher-forced forward passes,
counted in equal-width bins over [0, 1]. Only the weights the model distributes are counted: real
queries i and real keys j, and in the decoder only j ≤ i (the weights on padding and on future
positions are zeros by construction, and would otherwise swamp the histogram: our choice, the paper
does not say). This is the same for every attention kind: for RAN, Random Synthesizer and HC-SA the
weights are their input-independent matrices cut to each sentence's length (Eq. 2), for TransF the
dot-product weights (Eq. 1), so the systems' histograms compare directly.

The paper shows layers 1, 3 and 6 of base models (6 layers); ``default_layers(L)`` gives the first,
middle (⌈L/2⌉) and last layer, which is 1, 3, 6 for L = 6 and 1, 2, 3 for the 3-layer small size.
"""
import math
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import torch

from .checkpoints import recorded_forwards

SELF_SIDES = ("enc", "dec")


def default_layers(num_layers: int) -> List[int]:
    """First, middle and last layer (1-based), as Fig. 5 shows layers 1, 3 and 6 of six."""
    return sorted({1, math.ceil(num_layers / 2), num_layers})


def counted_weights(weights, query_mask, causal):
    """The weights of one (side, layer) call that the model distributes, flattened: real query
    rows, real key columns, and (causal) keys up to the query. weights: (h, B, T, S) with S == T
    (self-attention); query_mask: (B, T), True at real positions (None: all real)."""
    heads, batch, queries, keys = weights.shape
    if queries != keys:
        raise ValueError(f"self-attention weights expected, got {queries} queries and {keys} keys")
    real = (torch.ones(batch, queries, dtype=torch.bool) if query_mask is None
            else query_mask.bool().cpu())
    mask = real.unsqueeze(2) & real.unsqueeze(1)  # (B, T, S): a real query and a real key
    if causal:
        mask &= torch.ones(queries, keys, dtype=torch.bool).tril().unsqueeze(0)
    return weights.detach().float().cpu().masked_select(mask.unsqueeze(0).expand_as(weights))


def weight_histograms(model, samples, pad, bins: int = 50, sides: Sequence[str] = SELF_SIDES,
                      layers: Optional[Sequence[int]] = None) -> List[dict]:
    """Counts of attention weights in ``bins`` equal bins over [0, 1] per side and layer over
    ``samples`` (fairseq batches): rows ``{"side", "layer", "bin", "lo", "hi", "count",
    "fraction"}`` (layer 1-based; fraction: count over the weights of that side and layer).
    ``layers``: 1-based layers to keep (default: :func:`default_layers` of each side)."""
    if bins < 1:
        raise ValueError(f"--bins must be positive, got {bins}")
    unknown = [s for s in sides if s not in SELF_SIDES]
    if unknown or not sides:
        raise ValueError(f"sides must be among {', '.join(SELF_SIDES)}, got {list(sides)} (--sides)")
    counts: Dict[tuple, torch.Tensor] = defaultdict(lambda: torch.zeros(bins, dtype=torch.float64))
    for recorder in recorded_forwards(model, samples, pad, keep_weights=True):
        for (side, layer), (weights, query_mask) in recorder.weights.items():
            if side not in sides:
                continue
            values = counted_weights(weights, query_mask, causal=side == "dec")
            counts[side, layer + 1] += torch.histc(values.double(), bins=bins, min=0.0, max=1.0)
    if not counts:
        raise ValueError(f"no {'/'.join(sides)} self-attention was recorded: the model has none "
                         "that the analyses can read")
    rows = []
    for side in sides:
        present = sorted(layer for s, layer in counts if s == side)
        if not present:
            raise ValueError(f"the model records no {side} self-attention (--sides)")
        wanted = default_layers(max(present)) if layers is None else list(layers)
        missing = [layer for layer in wanted if layer not in present]
        if missing:
            raise ValueError(f"{side} has layers 1..{max(present)}; no layer {missing} (--layers)")
        for layer in wanted:
            total = float(counts[side, layer].sum())
            for b, count in enumerate(counts[side, layer].tolist()):
                rows.append({"side": side, "layer": layer, "bin": b, "lo": b / bins,
                             "hi": (b + 1) / bins, "count": int(count),
                             "fraction": count / total if total else None})
    return rows
