"""Attention entropy per layer (Zeng et al. 2021, Fig. 4, Eq. 5) and the Jensen-Shannon divergence
between the attention of every pair of layers (Fig. 7), from teacher-forced forward passes.

Sides: ``enc`` (encoder self-attention), ``dec`` (decoder self-attention), ``crs``
(encoder-decoder attention). Layers are numbered from 1 (the lowest), as in the paper's figures
(the criterion's ``ent_enc0`` is layer 1 here). Both statistics are means over real query positions
(padding queries excluded; padding keys carry no weight), in nats.

Jensen-Shannon divergence of two attention rows p, q over the same keys:
JS(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m), m = (p + q) / 2, between 0 and log 2. ``heads`` chooses
what is compared for query i of layers l and l':

- ``"mean"`` (default): each layer's row averaged over its heads first. It compares where the
  layers attend as a whole, does not depend on head order, and suits dot-product models, whose
  head k of one layer has nothing to do with head k of another.
- ``"matched"``: head k of layer l with head k of layer l', averaged over heads; meaningful for RAN,
  where head k of every layer descends from the same initial matrix A_0^k (Eqs. 3-4).
"""
from collections import defaultdict
from typing import Dict, List, NamedTuple

import torch

from .checkpoints import recorded_forwards

SIDES = ("enc", "dec", "crs")
HEAD_MODES = ("mean", "matched")


def _side_order(key):
    side, layer = key
    return SIDES.index(side) if side in SIDES else len(SIDES), side, layer


def layer_entropy(model, samples, pad) -> List[dict]:
    """Mean attention entropy (Eq. 5) per side and layer over ``samples``: rows
    ``{"side", "layer", "entropy", "queries"}`` (queries: query rows × heads averaged over)."""
    sums, counts = defaultdict(float), defaultdict(int)
    for recorder in recorded_forwards(model, samples, pad):
        for key, total in recorder.sums.items():
            sums[key] += total
            counts[key] += recorder.counts[key]
    return [{"side": key[0], "layer": key[1] + 1, "entropy": sums[key] / counts[key],
             "queries": counts[key]}
            for key in sorted(sums, key=_side_order) if counts[key] > 0]


def js_divergence(p, q):
    """Jensen-Shannon divergence (nats) between distributions along the last axis of ``p`` and
    ``q`` (same shape, zeros allowed); returns the leading shape."""
    m = 0.5 * (p + q)
    kl_pm = (torch.special.xlogy(p, p) - torch.special.xlogy(p, m)).sum(-1)
    kl_qm = (torch.special.xlogy(q, q) - torch.special.xlogy(q, m)).sum(-1)
    return (0.5 * (kl_pm + kl_qm)).clamp_min(0)


def pairwise_js_sums(layers, query_mask=None, heads="mean"):
    """Summed JS divergence between every pair of layers of one side for one batch.

    layers: L tensors (h, B, T, S), the per-head weights of each layer; query_mask: (B, T), True at
    real queries (None: all). Returns ``(sums (L, L) float64, queries)``: the sum over real
    queries of the JS between layer a's and layer b's row (see the module docstring for
    ``heads``), and the number of real queries."""
    if heads not in HEAD_MODES:
        raise ValueError(f"heads must be one of {', '.join(HEAD_MODES)}, got {heads!r} (--heads)")
    rows = [w.double() for w in layers]
    if heads == "mean":
        rows = [w.mean(dim=0, keepdim=True) for w in rows]
    mask = (torch.ones(rows[0].shape[1:3], dtype=torch.bool) if query_mask is None
            else query_mask.bool())
    sums = torch.zeros(len(rows), len(rows), dtype=torch.float64)
    for a in range(len(rows)):
        for b in range(a + 1, len(rows)):
            js = js_divergence(rows[a], rows[b]).mean(dim=0)  # (B, T): mean over heads
            sums[a, b] = sums[b, a] = js.masked_select(mask).sum()
    return sums, int(mask.sum())


class LayerDivergence(NamedTuple):
    layers: List[int]  # 1-based layer numbers of the matrix rows and columns
    js: torch.Tensor  # (L, L) mean JS divergence, float64
    queries: int  # real query positions averaged over


def layer_js(model, samples, pad, heads="mean") -> Dict[str, LayerDivergence]:
    """Mean JS divergence between the attention of every pair of layers of each side (Fig. 7)."""
    sums, counts, layers = {}, defaultdict(int), {}
    for recorder in recorded_forwards(model, samples, pad, keep_weights=True):
        by_side = defaultdict(dict)
        for (side, layer), entry in recorder.weights.items():
            by_side[side][layer] = entry
        for side, entries in by_side.items():
            order = sorted(entries)
            layers.setdefault(side, order)
            if order != layers[side]:
                raise ValueError(f"side {side}: layers {order} recorded, {layers[side]} before")
            total, queries = pairwise_js_sums([entries[layer][0] for layer in order],
                                              entries[order[0]][1], heads)
            sums[side] = sums[side] + total if side in sums else total
            counts[side] += queries
    return {side: LayerDivergence([layer + 1 for layer in layers[side]], sums[side] / counts[side],
                                  counts[side])
            for side in sorted(sums, key=lambda s: _side_order((s, 0)))}
