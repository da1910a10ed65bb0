"""One buffer for the batch-norm statistics of a Pervasive Attention DenseNet's training pass
(Elbayad et al. 2018, §3.1; :data:`densenet2d.SHARED_STATISTICS` switches it on).

Each feature's mean and mean of squares over the real cells are written once into a column of the
buffer, and every batch norm that reads the feature reads its columns as a view; in the backward
pass each reader adds its gradient of the statistics into two accumulator rows, applied to the
feature once. The reference is densenet2d's ``_MaskedMoments`` and ``_BatchNormReLU`` with the
statistics concatenated per layer; docs/backward/densenet2d.md derives both.
"""
from typing import Optional

import torch
from torch import Tensor

from ._torch_ops import batch_norm_eval_backward, relu_backward

# rows of _StatisticsBuffer.rows
_MEAN, _MEANSQ, _VAR, _INVSTD, _CURV, _UNBIASED, _ONES, _ZEROS, _GRAD_MEAN, _GRAD_SCALE = range(10)


class _StatisticsBuffer:
    """The training statistics of one DenseNet pass (§3.1's batch norms) in one (10, W) tensor,
    a column per channel: those of the final concatenation [X; H_1; ...; H_L] first (a reading
    layer's statistics are a prefix of them, read as a view), then each layer's 4g bottleneck
    channels when they are normalized with their own statistics (padding). Per channel: mean m,
    mean of squares q over the N real cells, v = max(q − m², 0), 1/√(v + ε), c = 1{q − m² ≥ 0}/(v + ε),
    the unbiased variance for the running statistics, constant ones and zeros (torch's batch-norm
    kernel as a per-channel affine map), and the gradient accumulators G_m/N, G_s/N: every reading
    layer's backward adds its ∂L/∂m/N and −2·∂L/∂q/N in place (:class:`_SharedBatchNormReLU`), and a
    feature's backward turns them into (G_m + x·G_s)/N once (:class:`_FeatureStatistics`;
    docs/backward/densenet2d.md derives both)."""

    def __init__(self, like: Tensor, columns: int, count: int, eps: float):
        self.rows = torch.zeros(10, columns, dtype=like.dtype, device=like.device)  # zeros row
        self.rows[_ONES].fill_(1)
        self.count, self.eps, self.used = count, eps, 0

    def column(self, channels: int) -> int:
        """The first of ``channels`` new columns."""
        start, self.used = self.used, self.used + channels
        if self.used > self.rows.size(1):
            raise ValueError("the statistics buffer is full")
        return start

    @torch.no_grad()
    def moments(self, x: Tensor, start: int):
        """Statistics of x (B, c, T, S), zero at padded cells, into columns start..start + c."""
        rows, n, end = self.rows, self.count, start + x.size(1)
        torch.sum(x, (0, 2, 3), out=rows[_MEAN, start:end])
        torch.sum(x * x, (0, 2, 3), out=rows[_MEANSQ, start:end])
        rows[_MEAN:_MEANSQ + 1, start:end].div_(n)
        m, q = rows[_MEAN, start:end], rows[_MEANSQ, start:end]
        raw = torch.addcmul(q, m, m, value=-1)  # q − m², negative by rounding at most
        var = torch.clamp_min(raw, 0, out=rows[_VAR, start:end])
        shifted = var + self.eps
        torch.rsqrt(shifted, out=rows[_INVSTD, start:end])
        torch.div(raw >= 0, shifted, out=rows[_CURV, start:end])
        torch.mul(var, n / max(n - 1, 1), out=rows[_UNBIASED, start:end])


class _FeatureStatistics(torch.autograd.Function):
    """x itself, or x·keep with the real-cell mask ``keep`` (B, 1, T, S) (0 or 1, so the product
    is exact in any order); its forward writes the statistics of that output into the buffer
    (:meth:`_StatisticsBuffer.moments`), its backward adds ∂L/∂m·∂m/∂x + ∂L/∂q·∂q/∂x = (G_m +
    x·G_s)/N, summed over every layer that read them, to the gradient of x (one per-cell pass,
    torch's batch-norm kernel as the affine map), then zeroes padded cells in place where it masked
    (the product's backward, without an autograd node and a tensor of its own). Autograd runs it
    after the backward of every layer that reads x, which are those that read its statistics.
    Without ``keep``, x is zero at padded cells and its producer's backward zeroes them."""

    @staticmethod
    def forward(ctx, x: Tensor, stats: _StatisticsBuffer, start: int,
                keep: Optional[Tensor] = None):
        out = x * keep if keep is not None else x.view_as(x)
        stats.moments(out, start)
        ctx.save_for_backward(out, keep)
        ctx.stats, ctx.start = stats, start
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, keep = ctx.saved_tensors
        stats, start = ctx.stats, ctx.start
        end = start + x.size(1)
        rows = stats.rows
        affine = torch.batch_norm(x, rows[_GRAD_SCALE, start:end], rows[_GRAD_MEAN, start:end],
                                  rows[_ZEROS, start:end],
                                  rows[_ONES, start:end], False, 0.0, 0.0, False)
        affine = affine.add_(grad)
        if keep is not None:
            affine = affine.mul_(keep)
        return affine, None, None, None


class _SharedBatchNormReLU(torch.autograd.Function):
    """:class:`_BatchNormReLU` with the statistics read from a :class:`_StatisticsBuffer`
    (columns start..start + C of x, the concatenation of ``features``): forward, torch's
    batch-norm kernel with m and v, a ReLU and the mask ``keep``; backward, ∂/∂x through the
    normalization alone, ∂/∂w, ∂/∂b, and the statistics' gradients added in place to the buffer's
    accumulators: ∂L/∂m = −(w/√(v + ε))·Σg + m·t and −2·∂L/∂q = −t, t = c·w·Σ g·x̂
    (docs/backward/densenet2d.md). ``first``: the reader whose backward runs first of those that
    read these columns (the closing batch norm for the features, which every layer's output
    reaches; the only reader of a bottleneck's), which writes the accumulators instead of adding
    to them, so that a second backward pass through the same graph starts from zero. The buffer's
    rows are read as views, not saved tensors: the columns a layer reads are written before it
    runs and not again."""

    @staticmethod
    def forward(ctx, weight: Tensor, bias: Tensor, stats: _StatisticsBuffer, start: int,
                first: bool, keep: Optional[Tensor], from_output: bool, *features: Tensor):
        x = torch.cat(features, dim=1) if len(features) > 1 else features[0]
        end = start + x.size(1)
        y = torch.batch_norm(x, weight, bias, stats.rows[_MEAN, start:end],
                             stats.rows[_VAR, start:end], False, 0.0, stats.eps, False).relu_()
        if keep is not None:
            y = y.mul_(keep)
        ctx.save_for_backward(y, weight, bias, *features)
        ctx.stats, ctx.start, ctx.end, ctx.from_output = stats, start, end, from_output
        ctx.first = first
        return y

    @staticmethod
    def backward(ctx, grad_y: Tensor):
        y, weight, bias, *features = ctx.saved_tensors
        rows, start, end = ctx.stats.rows, ctx.start, ctx.end
        grad = relu_backward(grad_y, y)
        need_x = any(ctx.needs_input_grad[7:])
        scale = weight * rows[_INVSTD, start:end]  # w/√(v + ε)
        if ctx.from_output:  # as _BatchNormReLU: x̂ = (y − b)/w where the gradient flows
            grad_x, weighted, grad_b = batch_norm_eval_backward(
                grad, y, scale, bias, rows[_ONES, start:end], 0.0, need_x)
            grad_w = weighted / weight
        else:
            x = torch.cat(features, dim=1) if len(features) > 1 else features[0]
            grad_x, grad_w, grad_b = batch_norm_eval_backward(
                grad, x, weight, rows[_MEAN, start:end], rows[_VAR, start:end], ctx.stats.eps,
                need_x)
            weighted = grad_w * weight  # w·Σ g·x̂
        t = weighted * rows[_CURV, start:end]
        n = ctx.stats.count  # the accumulators hold G_m/N and G_s/N
        grad_scale, grad_mean = rows[_GRAD_SCALE, start:end], rows[_GRAD_MEAN, start:end]
        if ctx.first:  # the first reader of these columns in the backward pass: no stale sums
            torch.mul(t, -1 / n, out=grad_scale)
            torch.addcmul(rows[_ZEROS, start:end], scale, grad_b, value=-1 / n, out=grad_mean)
        else:
            grad_scale.sub_(t, alpha=1 / n)
            grad_mean.addcmul_(scale, grad_b, value=-1 / n)
        grad_mean.addcmul_(rows[_MEAN, start:end], t, value=1 / n)
        grad_features = (grad_x.split([f.size(1) for f in features], dim=1) if need_x
                         else [None] * len(features))
        return (grad_w, grad_b, None, None, None, None, None, *grad_features)


def masked_feature(x: Tensor, stats: _StatisticsBuffer, start: int, keep: Optional[Tensor],
                   product_first: bool = False) -> Tensor:
    """x·keep (x where ``keep`` is None) with its statistics written into columns start.. of
    ``stats``; ``product_first``: the product as an autograd node of its own (the reference)."""
    if keep is not None and product_first:
        return _FeatureStatistics.apply(x * keep, stats, start)
    return _FeatureStatistics.apply(x, stats, start, keep)
