"""Per-cell operations of a Pervasive Attention DenseNet (densenet2d.py) over its (target, source)
grid: the real-cell mask, dropout drawn in channels-first order, and the per-cell part of a
layer's bottleneck on the real cells of a padded batch only (:data:`densenet2d.COMPACT_BOTTLENECK`).

Between the input's BN → ReLU and the masked convolution, a dense layer computes per grid cell: a
1×1 convolution (a matrix product per cell), an optional GLU, then a batch norm whose statistics
are those of the real cells, a ReLU, and zeros at padded cells (the masked convolution reads
neighbouring cells). On the rows of the real cells alone, gathered from the channels-last grid,
that is a matrix product with fewer rows and torch's training-mode batch norm over those rows,
whose statistics are then exactly the real cells' (summed in another order); the result is
scattered back into zeros. The values, gradients and running statistics are those of the masked
path (the reference) up to the order of float sums.
"""
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def real_cell_rows(keep: Tensor) -> Tensor:
    """Indices of the real cells of the mask ``keep`` (B, 1, T, S), 1 at real cells, in the
    order of the rows of a (B, C, T, S) tensor's (B·T·S, C) channels-last view."""
    return keep.reshape(-1).nonzero().squeeze(1)


def bottleneck_on_rows(x: Tensor, weight: Tensor, rows: Tensor, gate: bool,
                       norm_relu: Callable[[Tensor], Tensor]) -> Tensor:
    """``norm_relu``(GLU?(1×1 convolution of x by ``weight`` (C_out, C, 1, 1))) on the cells
    ``rows`` of x (B, C, T, S), zero at every other cell: (B, C_out', T, S), channels last."""
    b, c, t, s = x.shape
    cells = x.permute(0, 2, 3, 1).reshape(b * t * s, c).index_select(0, rows)
    h = F.linear(cells, weight.flatten(1))
    if gate:
        h = F.glu(h, dim=1)
    h = norm_relu(h)
    out = h.new_zeros(b * t * s, h.size(1)).index_copy(0, rows, h)
    return out.view(b, t, s, h.size(1)).permute(0, 3, 1, 2)


def dropout_channels_first(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(x, p, training)`` with its random mask drawn in the channels-first order of x's
    elements whatever x's memory layout (torch draws in memory order): a grid in channels-last
    memory drops the same cells, from the same seed, as in channels-first memory."""
    if not training or p == 0:  # the identity, without an autograd node
        return x
    if p == 1 or x.is_contiguous():
        return F.dropout(x, p, training)
    noise = torch.empty(x.shape, dtype=x.dtype, device=x.device).bernoulli_(1 - p)
    return x * noise.div_(1 - p)  # as F.dropout: the mask scaled by 1/(1 - p), then the product


def real_cell_mask(pad: Tensor, dtype: torch.dtype) -> Tensor:
    """1 at real cells and 0 at padded ones (``pad`` True), in ``dtype``: padding is zeroed by a
    product, which on a CPU is several times faster than ``masked_fill`` with a broadcast mask."""
    return (~pad).to(dtype)
