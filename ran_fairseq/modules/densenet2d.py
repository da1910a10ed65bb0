"""The DenseNet of Pervasive Attention over the (target, source) grid (Elbayad et al. 2018, §3.1).

Input X (B, f_0, T, S), e.g. the grid of Eq. 1, X_ij = [y_i; x_j]. Layer l (l = 1..L) reads the
concatenation of X and the outputs of layers 1..l-1 (f_0 + (l-1)·g channels) and computes::

    BN → ReLU → 1×1 conv to 4g → BN → ReLU → masked conv (k×⌈k/2⌉, see masked_conv2d) to g → dropout

with gated linear units after the convolutions :data:`GATINGS` names; the block returns
BN → ReLU of the final concatenation. Cells whose target row or source column is padding are zero
at every layer and left out of the batch-norm statistics. In training, BN → ReLU is one autograd
Function (:class:`_BatchNormReLU`, derived in docs/backward/densenet2d.md); :data:`USE_EAGER`
selects its eager reference. The statistics of every batch norm of a training pass share one
buffer (:data:`SHARED_STATISTICS`, batch_norm_statistics.py; False: concatenated per layer).
docs/pervasive_attention.md gives the choices where the paper is silent (gating, padding, the memory-efficient mode, incremental decoding).
The grid may come in channels-last memory (the model builds it so), which every layer's tensors
then keep; values and dropout masks are the same in either layout (:func:`dropout_channels_first`).
"""
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ._torch_ops import batch_norm_eval_backward, relu_backward
from .batch_norm_statistics import (_MEAN, _UNBIASED, _SharedBatchNormReLU, _StatisticsBuffer,
                                    masked_feature)
from .masked_conv2d import MaskedConv2d
from .grid_cells import (bottleneck_on_rows, dropout_channels_first,  # noqa: F401
                         real_cell_mask, real_cell_rows)

# True: batch-norm statistics and BN → ReLU in training are differentiated by autograd
# (masked_moments_eager, batch_norm_relu_eager), the reference of _MaskedMoments and
# _BatchNormReLU, for checking or debugging them; a switch of the code, not a model option
USE_EAGER = False

BOTTLENECK_FACTOR = 4  # the 1×1 convolution's output is 4g channels
GATINGS = ("none", "masked", "both")  # which convolutions of a layer a GLU gates


def check_gating(gated_convolutions) -> str:
    """``gated_convolutions`` as one of :data:`GATINGS` (False means ``"none"``); anything else
    is an error."""
    gated = gated_convolutions
    if gated is False or gated is None:
        return "none"
    if gated not in GATINGS:
        raise ValueError(f"gated_convolutions must be one of {', '.join(GATINGS)}, "
                         f"got {gated!r}")
    return gated


def _fast(x: Tensor) -> bool:
    """Whether x takes the fused training path (:class:`_BatchNormReLU`): float32 and float64,
    whose statistics torch's batch-norm kernels take in x's own dtype. Half precision keeps the
    composition of elementwise operations with float32 statistics."""
    return x.dtype in (torch.float32, torch.float64)


def _channel_affine(x: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    """scale_c · x + shift_c per channel c of x (B, C, T, S), in one pass: torch's evaluation-mode
    batch-norm kernel with mean 0, variance 1, ε = 0 (on a CPU faster than a broadcast addcmul)."""
    if not _fast(x):
        return torch.addcmul(shift.view(1, -1, 1, 1), x, scale.view(1, -1, 1, 1))
    zeros = torch.zeros_like(scale)
    return torch.batch_norm(x, scale, shift, zeros, torch.ones_like(scale), False, 0.0, 0.0,
                            False)


def masked_moments_eager(x: Tensor, pad: Optional[Tensor], count: int) -> Tuple[Tensor, Tensor]:
    """What :class:`_MaskedMoments` computes, by autograd: the per-channel mean and mean of
    squares of x (B, C, T, S) over the ``count`` cells where ``pad`` (B, 1, T, S) is False."""
    real = x if pad is None else x.masked_fill(pad, 0)
    dtype = torch.promote_types(x.dtype, torch.float32)
    mean = real.sum((0, 2, 3), dtype=dtype) / count
    return mean, (real * real).sum((0, 2, 3), dtype=dtype) / count


def batch_norm_relu_eager(mean: Tensor, meansq: Tensor, weight: Tensor, bias: Tensor, eps: float,
                          keep: Optional[Tensor], *features: Tensor) -> Tensor:
    """What :class:`_BatchNormReLU` computes, by autograd: y = ReLU(w·(x − m)/√(v + ε) + b)·keep,
    v = max(q − m², 0), x the channel concatenation of ``features``."""
    x = torch.cat(features, dim=1) if len(features) > 1 else features[0]
    var = (meansq - mean * mean).clamp_min(0)
    scale = (weight * torch.rsqrt(var + eps)).view(1, -1, 1, 1)
    y = torch.relu((x - mean.view(1, -1, 1, 1)) * scale + bias.view(1, -1, 1, 1))
    return y if keep is None else y * keep


def _moments(x: Tensor, pad: Optional[Tensor], count: int, zero_padding: bool):
    """:class:`_MaskedMoments`, or its eager reference under :data:`USE_EAGER`."""
    if USE_EAGER:
        return masked_moments_eager(x, pad, count)
    return _MaskedMoments.apply(x, pad, count, zero_padding)


class _MaskedMoments(torch.autograd.Function):
    """Per-channel mean and mean of squares of x (B, C, T, S) over the cells where ``pad``
    (B, 1, T, S) is False (``pad`` None: every cell), in float32 (float64 for a float64 x). Saves
    only x and the mask, through ``ctx.save_for_backward``; the backward is derived in
    docs/backward/densenet2d.md. With ``zero_padding`` the caller guarantees x = 0 at padded cells
    (x is the product of something with the real-cell mask), which saves a masked copy in the
    forward pass and the mask in the backward: the gradient at padded cells is then left for that
    product's backward to zero."""

    @staticmethod
    def forward(ctx, x: Tensor, pad: Optional[Tensor], count: int, zero_padding: bool):
        masked = pad is not None and not zero_padding
        real = x.masked_fill(pad, 0) if masked else x
        dtype = torch.promote_types(x.dtype, torch.float32)
        mean = real.sum((0, 2, 3), dtype=dtype) / count
        if _fast(real):  # Σx² as one product and a sum: a vector norm is several times slower
            meansq = (real * real).sum((0, 2, 3), dtype=dtype) / count
        else:
            meansq = torch.linalg.vector_norm(real, 2, (0, 2, 3), dtype=dtype).square() / count
        ctx.save_for_backward(x, pad if masked else None)
        ctx.count = count
        return mean, meansq

    @staticmethod
    def backward(ctx, grad_mean: Optional[Tensor], grad_meansq: Optional[Tensor]):
        x, pad = ctx.saved_tensors
        dtype = torch.promote_types(x.dtype, torch.float32)
        channels = x.size(1)
        zero = torch.zeros(channels, dtype=dtype, device=x.device)
        # ∂m/∂x = 1/N, ∂q/∂x = 2x/N at real cells (docs/backward/densenet2d.md)
        shift = (zero if grad_mean is None else grad_mean.to(dtype)) / ctx.count
        scale = (zero if grad_meansq is None else 2 * grad_meansq.to(dtype)) / ctx.count
        if _fast(x):
            grad = _channel_affine(x, scale.to(x.dtype), shift.to(x.dtype))
        else:
            grad = (shift.view(1, -1, 1, 1) + scale.view(1, -1, 1, 1) * x.to(dtype)).to(x.dtype)
        if pad is not None:
            grad = grad.masked_fill(pad, 0)
        return grad, None, None, None


# A batch norm of one feature without padding (the 4g channels after each layer's 1×1 convolution,
# whose statistics no other layer shares) runs torch's training-mode kernels and autograd nodes
# (the statistics of every cell, which are then the real cells; the same values up to the order
# of float sums); False: the fused path with its own statistics, as with padding.
NATIVE_UNPADDED_NORM = True

# The backward of the fused BN → ReLU takes the normalized input x̂ = (y − b)/w from its output y
# where the gradient flows (y > 0), instead of concatenating the layer's input features again,
# when every batch norm of the DenseNet has |b| < 8·|w| in every channel (so w ≠ 0), which keeps
# the rounding that the division adds to x̂ within a few units in the last place of
# max(|x̂|, 8); otherwise, and with False, it concatenates.
NORMALIZED_FROM_OUTPUT = True


@torch.no_grad()
def _normalized_from_output(norms: Sequence[nn.BatchNorm2d]) -> bool:
    """Whether x̂ can be taken from the output of each of ``norms`` (NORMALIZED_FROM_OUTPUT):
    one check per forward pass for all of them."""
    weight = torch.cat([n.weight for n in norms])
    bias = torch.cat([n.bias for n in norms])
    return bool((bias.abs() < 8 * weight.abs()).all())


class _BatchNormReLU(torch.autograd.Function):
    """ReLU(BN(x)) in training mode with the batch statistics given, (mean m, mean of squares q)
    per channel, variance v = max(q − m², 0), optionally times the real-cell mask ``keep``
    (B, 1, T, S): y = ReLU(w·(x − m)/√(v + ε) + b)·keep, where x is the channel concatenation of
    ``features``. Forward: one pass of torch's batch-norm kernel (in evaluation mode, with m and v
    as its statistics) and one ReLU. Backward: torch's evaluation-mode batch-norm backward, which
    gives ∂/∂x through the normalization alone and ∂/∂w, ∂/∂b, and from those the gradients of m
    and q as two vectors per channel (derived in docs/backward/densenet2d.md), which
    :class:`_MaskedMoments` turns into a per-cell gradient once per feature rather than once per
    reading layer. The concatenation is not kept for the backward pass, its parts are (the
    DenseNet keeps them anyway) and it is made again there: a DenseNet's layers would otherwise
    keep O(L²) channels. Every tensor the backward reads goes through ``ctx.save_for_backward``."""

    @staticmethod
    def forward(ctx, mean: Tensor, meansq: Tensor, weight: Tensor, bias: Tensor, eps: float,
                keep: Optional[Tensor], from_output: bool, *features: Tensor):
        x = torch.cat(features, dim=1) if len(features) > 1 else features[0]
        var = meansq - mean * mean
        clamped = var < 0
        var = var.masked_fill(clamped, 0)
        y = torch.batch_norm(x, weight, bias, mean, var, False, 0.0, eps, False).relu_()
        if keep is not None:
            y = y.mul_(keep)
        ctx.save_for_backward(y, weight, bias, mean, var, clamped, *features)
        ctx.eps, ctx.from_output = eps, from_output
        return y

    @staticmethod
    def backward(ctx, grad_y: Tensor):
        y, weight, bias, mean, var, clamped, *features = ctx.saved_tensors
        # y is zero wherever ReLU or the mask cut it: the gradient flows only where y > 0
        grad = relu_backward(grad_y, y)
        need_x = any(ctx.needs_input_grad[7:])
        invstd = torch.rsqrt(var + ctx.eps)
        if ctx.from_output:
            # Where the gradient flows, y = w·x̂ + b with x̂ = (x − m)/√(v + ε), so x̂ = (y − b)/w
            # and grad_w = Σ g·x̂ = Σ g·(y − b)/w: the features need not be concatenated again.
            # torch's kernel on y with weight w/√(v + ε), mean b, variance 1 and ε = 0 gives
            # g·w/√(v + ε), Σ g·(y − b) and Σ g in one pass.
            grad_x, grad_w, grad_b = batch_norm_eval_backward(
                grad, y, weight * invstd, bias, torch.ones_like(var), 0.0, need_x)
            grad_w = grad_w / weight
        else:
            x = torch.cat(features, dim=1) if len(features) > 1 else features[0]
            grad_x, grad_w, grad_b = batch_norm_eval_backward(grad, x, weight, mean, var,
                                                              ctx.eps, need_x)
        # grad_w = Σ g·(x − m)/√(v + ε) and grad_b = Σ g; y depends on m directly and through v
        grad_var = (-0.5 * weight * invstd * invstd * grad_w).masked_fill(clamped, 0)
        grad_mean = -weight * invstd * grad_b - 2 * mean * grad_var  # v = q − m²
        grad_features = (grad_x.split([f.size(1) for f in features], dim=1) if need_x
                         else [None] * len(features))
        return (grad_mean, grad_var, grad_w, grad_b, None, None, None, *grad_features)


# A feature's product with the real-cell mask done by the node that writes its statistics, whose
# backward masks in place (batch_norm_statistics.masked_feature); False: a node of its own.
MASK_WITH_STATISTICS = True
# With padding, each layer's 1×1 convolution and the batch norm after it on the real cells only
# (grid_cells.py; torch's batch norm on them); False: on every cell, masked (the reference).
COMPACT_BOTTLENECK = True

# One statistics buffer per training pass instead of each feature's moments as autograd tensors,
# concatenated again for every reading layer (2(L + 1) small concatenations, and autograd's sums of
# their gradients, O(L²) small additions): see _StatisticsBuffer. False: _MaskedMoments and
# _BatchNormReLU with concatenated statistics (the reference).
SHARED_STATISTICS = True


class MaskedBatchNorm2d(nn.BatchNorm2d):
    """Batch normalization of x (B, C, T, S) whose training statistics are the mean and variance
    over the real cells only (``pad`` (B, 1, T, S), True at padding); evaluation uses the running
    statistics, which are updated from the same real-cell statistics (unbiased variance). Values
    at padded cells are normalized like the others; callers zero them. ``zero_padding=True``
    promises that x is already zero at padded cells (the DenseNet keeps it so), which skips a
    masked copy of x; ``moments`` gives the training statistics precomputed (see
    :func:`masked_moments`). Parameters and buffers are those of ``nn.BatchNorm2d``.
    :meth:`relu` is the DenseNet's fused ReLU(BN(x)), zero at padding."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1):
        super().__init__(num_features, eps=eps, momentum=momentum)

    def _check(self, x: Tensor):
        if x.dim() != 4 or x.size(1) != self.num_features:
            raise ValueError(f"MaskedBatchNorm2d expects (batch, {self.num_features}, target, "
                             f"source), got {tuple(x.shape)}")

    def _statistics(self, x: Tensor, pad: Optional[Tensor], count: Optional[int],
                    update_stats: bool, zero_padding: bool,
                    moments: Optional[Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
        """Training mode: the real cells' (mean, mean of squares), running statistics updated."""
        if count is None:
            count = x.size(0) * x.size(2) * x.size(3) if pad is None else real_cells(pad)
        if count < 1:
            raise ValueError("batch normalization in training needs at least one real grid "
                             "cell; the batch is all padding")
        if moments is None:
            moments = _moments(x, pad, count, zero_padding)
        if update_stats:
            mean, meansq = moments
            with torch.no_grad():  # nothing for autograd to save (a recomputation saves no more)
                var = (meansq - mean.square()).clamp_min(0)
            self._update_running_stats(mean, var, count)
        return moments

    def forward(self, x: Tensor, pad: Optional[Tensor], count: Optional[int] = None,
                update_stats: bool = True, zero_padding: bool = False,
                moments: Optional[Tuple[Tensor, Tensor]] = None) -> Tensor:
        self._check(x)
        if self.training:
            mean, meansq = self._statistics(x, pad, count, update_stats, zero_padding, moments)
            var = (meansq - mean.square()).clamp_min(0)
        else:
            mean, var = self.running_mean.float(), self.running_var.float()
        scale = self.weight.float() * torch.rsqrt(var + self.eps)
        shift = self.bias.float() - mean * scale
        return torch.addcmul(shift.to(x.dtype).view(1, -1, 1, 1), x,
                             scale.to(x.dtype).view(1, -1, 1, 1))

    def relu(self, features: Sequence[Tensor], keep: Optional[Tensor], pad: Optional[Tensor],
             count: Optional[int], update_stats: bool = True,
             moments: Optional[Tuple[Tensor, Tensor]] = None, zero_output: bool = True,
             native: bool = False, from_output: bool = False) -> Tensor:
        """ReLU(BN(x)) of x, the channel concatenation of ``features``, zero at padded cells,
        times the real-cell mask ``keep`` (B, 1, T, S) (None: no padding in the batch) when
        ``zero_output``. ``pad`` is the padding mask itself (True at padding, or None). In
        training the concatenation is not kept for the backward pass (see
        :class:`_BatchNormReLU`; ``from_output``: its backward may take the normalized input
        from the output, see :data:`NORMALIZED_FROM_OUTPUT`). ``native``: one feature without padding or given statistics
        may take torch's training-mode batch norm (:data:`NATIVE_UNPADDED_NORM`; not under
        activation checkpointing, which needs the same autograd nodes when it recomputes)."""
        features = list(features)
        fast = _fast(features[0])
        if (native and NATIVE_UNPADDED_NORM and fast and self.training and pad is None
                and moments is None and len(features) == 1
                and features[0].size(1) == self.num_features):
            return self._native_training(features[0], update_stats).relu_()
        if fast and self.training:
            if sum(f.size(1) for f in features) != self.num_features:
                self._check(torch.cat(features, dim=1))
            whole = features[0] if moments is not None or len(features) == 1 else \
                torch.cat(features, dim=1)  # the statistics read it only when not given
            mean, meansq = self._statistics(whole, pad, count, update_stats, True, moments)
            if USE_EAGER:
                return batch_norm_relu_eager(mean.to(features[0].dtype),
                                             meansq.to(features[0].dtype), self.weight, self.bias,
                                             self.eps, keep if zero_output else None, *features)
            return _BatchNormReLU.apply(mean.to(features[0].dtype), meansq.to(features[0].dtype),
                                        self.weight, self.bias, self.eps,
                                        keep if zero_output else None, from_output, *features)
        x = torch.cat(features, dim=1) if len(features) > 1 else features[0]
        self._check(x)
        if not fast:
            out = self(x, pad, count, update_stats, zero_padding=True, moments=moments)
        else:  # evaluation
            out = torch.batch_norm(x, self.weight, self.bias, self.running_mean.to(x.dtype),
                                   self.running_var.to(x.dtype), False, 0.0, self.eps, False)
        # the mask before the ReLU (ReLU(z)·k = ReLU(z·k) for k in {0, 1}): ReLU keeps its output
        # for its backward, the normalization does not
        if keep is not None and zero_output:
            out = out.mul_(keep)
        return out.relu_()

    def _native_training(self, x: Tensor, update_stats: bool) -> Tensor:
        """Training-mode batch normalization of x without padding by torch's own kernels (its
        statistics over every cell, running statistics updated as :meth:`_update_running_stats`
        does: unbiased variance, the same momentum), when ``update_stats``."""
        factor = 0.0
        if update_stats:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        running = (self.running_mean, self.running_var) if update_stats else (None, None)
        return F.batch_norm(x, *running, self.weight, self.bias, True, factor, self.eps)

    def shared_relu(self, features: Sequence[Tensor], stats: "_StatisticsBuffer", start: int,
                    keep: Optional[Tensor], from_output: bool, first: bool) -> Tensor:
        """:meth:`relu` in training with the statistics of columns start.. of ``stats``
        (:class:`_SharedBatchNormReLU`, ``first`` as there), running statistics updated from
        them."""
        if sum(f.size(1) for f in features) != self.num_features:
            self._check(torch.cat(features, dim=1))
        rows, end = stats.rows, start + self.num_features
        self._move_running_stats(rows[_MEAN, start:end], rows[_UNBIASED, start:end])
        return _SharedBatchNormReLU.apply(self.weight, self.bias, stats, start, first, keep,
                                          from_output, *features)

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, count: int):
        self._move_running_stats(mean, var * (count / max(count - 1, 1)))

    @torch.no_grad()
    def _move_running_stats(self, mean: Tensor, unbiased: Tensor):
        self.num_batches_tracked.add_(1)  # in place: no nn.Module attribute assignment
        factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                  else self.momentum)
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), factor)
        self.running_var.lerp_(unbiased.to(self.running_var.dtype), factor)


def real_cells(pad: Tensor) -> int:
    """Number of real (non-padded) cells of a (B, 1, T, S) padding mask."""
    return int(pad.numel() - pad.sum())


def masked_moments(x: Tensor, pad: Optional[Tensor], count: int) -> Tuple[Tensor, Tensor]:
    """Per-channel (C,) mean and mean of squares of x (B, C, T, S), zero at padded cells, over
    the ``count`` real cells. Statistics are per channel, so those of a concatenation are the
    concatenated statistics of its parts: the DenseNet computes them once per layer output
    instead of once per reading layer."""
    return _moments(x, pad, count, True)


def _recompute_in_backward(fn: Callable[..., Tensor], features: List[Tensor],
                           enabled: bool) -> Tensor:
    """``fn(*features, update_stats=True)``; with ``enabled`` and autograd recording, run it
    under activation checkpointing: its intermediate tensors are recomputed in the backward pass
    (where ``update_stats`` is False, so batch-norm running statistics move once)."""
    if not (enabled and torch.is_grad_enabled()):
        return fn(*features, update_stats=True)
    calls = []

    def run(*inputs):
        out = fn(*inputs, update_stats=not calls)
        calls.append(True)
        return out

    return checkpoint(run, *features, use_reentrant=False)


class DenseLayer2d(nn.Module):
    """One DenseNet layer: (B, in_channels, T, S) features in, (B, growth_rate, T, S) out."""

    def __init__(self, in_channels: int, growth_rate: int, kernel_size: int, dropout: float,
                 gated_convolutions: str):
        super().__init__()
        width = BOTTLENECK_FACTOR * growth_rate
        self.gated_convolutions = check_gating(gated_convolutions)
        self.gate_bottleneck = self.gated_convolutions == "both"
        self.gate_masked = self.gated_convolutions != "none"
        self.dropout = dropout
        self.norm1 = MaskedBatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, (2 if self.gate_bottleneck else 1) * width,
                               kernel_size=1, bias=False)
        self.norm2 = MaskedBatchNorm2d(width)
        self.conv2 = MaskedConv2d(width, (2 if self.gate_masked else 1) * growth_rate,
                                  kernel_size)
        nn.init.kaiming_normal_(self.conv1.weight, nonlinearity="relu")

    def bottleneck(self, *inputs: Tensor, pad: Optional[Tensor], keep: Optional[Tensor],
                   count: Optional[int], update_stats: bool = True, native: bool = True,
                   from_output: bool = False) -> Tensor:
        """Concatenation → BN → ReLU → 1×1 convolution (→ GLU) → BN → ReLU: the masked
        convolution's input (B, 4g, T, S). ``inputs``: the features, then in training their
        concatenated per-channel mean and mean of squares (:func:`masked_moments`). ``pad`` and
        ``keep``: the padding mask (B, 1, T, S) and the real-cell mask (1 − pad, in x's dtype),
        both None for a batch without padding."""
        features, moments = (inputs[:-2], inputs[-2:]) if self.training else (inputs, None)
        # The 1×1 convolution (and the GLU) are per cell, so padded cells of its input reach
        # only padded cells of its output, zeroed there: the narrow 4g channels are masked
        # instead of the wide input.
        x = self.norm1.relu(features, keep, pad, count, update_stats, moments,
                            zero_output=False, from_output=from_output)
        x = self.conv1(x)
        if self.gate_bottleneck:
            x = F.glu(x, dim=1)
        if keep is not None:
            x = x * keep
        return self.norm2.relu([x], keep, pad, count, update_stats, native=native,
                               from_output=from_output)

    def shared_forward(self, features: List[Tensor], stats: _StatisticsBuffer,
                       keep: Optional[Tensor], from_output: bool,
                       rows: Optional[Tensor] = None) -> Tensor:
        """:meth:`forward` in training with the features' statistics in ``stats`` (columns
        from 0), and the bottleneck's too unless torch's batch norm takes it (no padding,
        :data:`NATIVE_UNPADDED_NORM`; ``rows``, the real cells, :data:`COMPACT_BOTTLENECK`)."""
        x = self.norm1.shared_relu(features, stats, 0, None, from_output, first=False)
        if rows is not None:  # COMPACT_BOTTLENECK: the real cells' rows
            x = bottleneck_on_rows(x, self.conv1.weight, rows, self.gate_bottleneck,
                                   lambda h: self.norm2._native_training(h, True).relu_())
            return self._masked_convolution(x, keep)
        x = self.conv1(x)
        if self.gate_bottleneck:
            x = F.glu(x, dim=1)
        if keep is None and NATIVE_UNPADDED_NORM:
            x = self.norm2._native_training(x, True).relu_()
        else:
            start = stats.column(x.size(1))
            x = masked_feature(x, stats, start, keep, not MASK_WITH_STATISTICS)
            x = self.norm2.shared_relu([x], stats, start, keep, from_output, first=True)
        return self._masked_convolution(x, keep)

    def _masked_convolution(self, x: Tensor, keep: Optional[Tensor]) -> Tensor:
        h = self.conv2(x)
        if self.gate_masked:
            h = F.glu(h, dim=1)
        if keep is not None and not MASK_WITH_STATISTICS:  # else the caller's masked_feature
            h = h * keep
        return dropout_channels_first(h, self.dropout, self.training)

    def forward(self, features: List[Tensor], pad: Optional[Tensor], count: Optional[int] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                memory_efficient: bool = False,
                moments: Optional[Tuple[Tensor, Tensor]] = None,
                keep: Optional[Tensor] = None, from_output: bool = False) -> Tensor:
        """``pad``: the padding mask (B, 1, T, S), or None for a batch without padding;
        ``keep``: 1 − pad in the features' dtype (computed here when not given). ``moments``: in
        training, the features' concatenated per-channel mean and mean of squares; computed here
        when not given. ``from_output``: see :data:`NORMALIZED_FROM_OUTPUT` (the DenseNet
        checks its batch norms once per forward pass)."""
        if pad is not None and keep is None:
            keep = real_cell_mask(pad, features[0].dtype)
        if pad is None:
            keep = None

        def bottleneck(*inputs, update_stats):
            return self.bottleneck(*inputs, pad=pad, keep=keep, count=count,
                                   update_stats=update_stats, native=not memory_efficient,
                                   from_output=from_output)

        if self.training and count is None:
            count = _cells(features[0], pad)
        if self.training and moments is None:
            moments = masked_moments(torch.cat(features, dim=1), pad, count)
        inputs = list(features) + (list(moments) if self.training else [])
        h = _recompute_in_backward(bottleneck, inputs, memory_efficient)
        h = self.conv2(h, incremental_state)
        if self.gate_masked:
            h = F.glu(h, dim=1)
        if keep is not None:
            h = h * keep
        return dropout_channels_first(h, self.dropout, self.training)


def _cells(x: Tensor, pad: Optional[Tensor]) -> int:
    """Real cells of the grid x (B, C, T, S) with padding mask ``pad`` (None: no padding)."""
    return x.size(0) * x.size(2) * x.size(3) if pad is None else real_cells(pad)


class DenseNet2d(nn.Module):
    """L dense layers over the grid and the closing BN → ReLU (see the module docstring):
    (B, in_channels, T, S) → (B, out_channels = in_channels + L·g, T, S), zero at padding."""

    def __init__(self, in_channels: int, num_layers: int, growth_rate: int, kernel_size: int, *,
                 dropout: float, gated_convolutions: str, memory_efficient_densenet: bool):
        # the model's options of the same names (their defaults in PervasiveAttentionConfig)
        super().__init__()
        gated = check_gating(gated_convolutions)
        if num_layers < 1:
            raise ValueError(f"the DenseNet needs at least one layer, got {num_layers}")
        if growth_rate < 1:
            raise ValueError(f"the growth rate must be positive, got {growth_rate}")
        self.in_channels = in_channels
        self.num_layers = num_layers
        self.growth_rate = growth_rate
        self.kernel_size = kernel_size
        self.gated_convolutions = gated
        self.memory_efficient_densenet = memory_efficient_densenet
        self.layers = nn.ModuleList(
            DenseLayer2d(in_channels + i * growth_rate, growth_rate, kernel_size, dropout, gated)
            for i in range(num_layers))
        self.out_channels = in_channels + num_layers * growth_rate
        self.norm = MaskedBatchNorm2d(self.out_channels)
        self._batch_norms = tuple(m for m in self.modules() if isinstance(m, MaskedBatchNorm2d))

    def extra_repr(self) -> str:
        return f"memory_efficient_densenet={self.memory_efficient_densenet}"

    def forward(self, x: Tensor, padding: Tensor,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None
                ) -> Tensor:
        if x.dim() != 4 or x.size(1) != self.in_channels:
            raise ValueError(f"DenseNet2d expects (batch, {self.in_channels}, target, source), "
                             f"got {tuple(x.shape)}")
        if padding.shape != (x.size(0), x.size(2), x.size(3)):
            raise ValueError(f"padding mask {tuple(padding.shape)} does not match the grid "
                             f"(batch, target, source) = {(x.size(0), x.size(2), x.size(3))}")
        if incremental_state is not None and self.training:
            raise ValueError("incremental decoding needs evaluation mode (batch normalization "
                             "uses its running statistics there); call model.eval()")
        # A batch without padding skips every mask (the common case of length-bucketed batches).
        pad = padding.unsqueeze(1) if bool(padding.any()) else None
        keep = real_cell_mask(pad, x.dtype) if pad is not None else None
        count = _cells(x, pad) if self.training else None
        from_output = (NORMALIZED_FROM_OUTPUT and self.training and torch.is_grad_enabled()
                       and _normalized_from_output(self._batch_norms))
        if (SHARED_STATISTICS and not USE_EAGER and self.training and _fast(x)
                and not self.memory_efficient_densenet and incremental_state is None
                and len({n.eps for n in self._batch_norms}) == 1):
            return self._shared_forward(x, keep, count, from_output)
        features = [x * keep if keep is not None else x]
        # Training statistics of each feature, computed once and shared by every later layer.
        stats = [masked_moments(features[0], pad, count)] if self.training else None

        def concatenated_stats():
            return tuple(torch.cat(parts) for parts in zip(*stats)) if stats else None

        for layer in self.layers:
            features.append(layer(features, pad, count, incremental_state,
                                  self.memory_efficient_densenet, concatenated_stats(), keep,
                                  from_output))
            if stats is not None:
                stats.append(masked_moments(features[-1], pad, count))

        def close(*inputs, update_stats):
            features, moments = (inputs[:-2], inputs[-2:]) if self.training else (inputs, None)
            return self.norm.relu(features, keep, pad, count, update_stats, moments,
                                  from_output=from_output)

        inputs = features + list(concatenated_stats() or ())
        return _recompute_in_backward(close, inputs, self.memory_efficient_densenet)

    def _shared_forward(self, x: Tensor, keep: Optional[Tensor], count: int,
                        from_output: bool) -> Tensor:
        """The training pass with one :class:`_StatisticsBuffer` (:data:`SHARED_STATISTICS`):
        the same outputs, gradients and running statistics as the loop of :meth:`forward`."""
        if count < 1:
            raise ValueError("batch normalization in training needs at least one real grid "
                             "cell; the batch is all padding")
        own = 0 if (NATIVE_UNPADDED_NORM if keep is None else COMPACT_BOTTLENECK) else \
            sum(layer.norm2.num_features for layer in self.layers)
        stats = _StatisticsBuffer(x, self.out_channels + own, count, self.norm.eps)
        stats.used = self.out_channels  # the features' columns come first, in order
        features = [masked_feature(x, stats, 0, keep, not MASK_WITH_STATISTICS)]
        rows = real_cell_rows(keep) if keep is not None and COMPACT_BOTTLENECK else None
        start = self.in_channels
        for layer in self.layers:
            h = layer.shared_forward(features, stats, keep, from_output, rows)
            features.append(masked_feature(h, stats, start, keep, not MASK_WITH_STATISTICS))
            start += h.size(1)
        return self.norm.shared_relu(features, stats, 0, keep, from_output, first=True)

    def masked_weights(self) -> int:
        """Weights of the paper's full k×k kernels that the causal mask keeps at zero."""
        return sum(layer.conv2.masked_weights for layer in self.layers)
