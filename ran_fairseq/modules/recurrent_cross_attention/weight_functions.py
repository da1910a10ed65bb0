"""Training Functions of the recurrences on attention weights (Eqs. 2, 3, 4, 9, 10): each runs
all target steps of a teacher-forced call as one autograd node whose backward pass is written out.
The derivations (equations, saved tensors, why each is exact) are in
docs/backward/recurrent_cross_attention.md, cited below by section."""
from typing import Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .common import MASKED, window_matrix


class ContinuousScan(torch.autograd.Function):
    """Eq. 9's linear recurrence for all steps, α̊_i = A α̊_{i-1} + b_i (b_0 = α̂_0, b_i = λ α̂_i,
    A = (1-λ) M symmetric and constant), by a Hillis-Steele scan: for d = 1, 2, 4, ... each row
    i ≥ d adds A^d times row i-d, one batched product per doubling (rows of all heads and steps
    together), so the scan costs ⌈log2 T⌉ products instead of T steps. The backward pass is the
    same scan run backwards (Aᵀ = A; docs/backward/recurrent_cross_attention.md §5). ``energies``
    α̂ (B, H, T, S), ``power`` A (B, S, S)."""

    @staticmethod
    def forward(ctx, energies, power, rescale_lambda):
        batch, heads, steps_, src_len = energies.shape
        x = energies.transpose(1, 2).clone(memory_format=torch.contiguous_format)  # (B, T, H, S)
        x[:, 1:].mul_(rescale_lambda)
        powers = []
        if steps_ > 1:
            y = torch.empty_like(x)
            shift = 1
            while shift < steps_:
                rows = (steps_ - shift) * heads
                torch.baddbmm(x[:, shift:].view(batch, rows, src_len),
                              x[:, :-shift].view(batch, rows, src_len), power,
                              out=y[:, shift:].view(batch, rows, src_len))
                y[:, :shift].copy_(x[:, :shift])
                powers.append(power)
                x, y = y, x
                shift *= 2
                if shift < steps_:
                    power = torch.bmm(power, power)
        ctx.rescale_lambda = rescale_lambda
        ctx.save_for_backward(*powers)
        return x.transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        powers = ctx.saved_tensors
        batch, heads, steps_, src_len = grad.shape
        g = grad.transpose(1, 2).clone(memory_format=torch.contiguous_format)
        if powers:
            h = torch.empty_like(g)
            for level in range(len(powers) - 1, -1, -1):  # the adjoint of each doubling, last first
                shift = 1 << level
                rows = (steps_ - shift) * heads
                torch.baddbmm(g[:, :-shift].view(batch, rows, src_len),
                              g[:, shift:].view(batch, rows, src_len), powers[level],
                              out=h[:, :-shift].view(batch, rows, src_len))
                h[:, -shift:].copy_(g[:, -shift:])
                g, h = h, g
        g[:, 1:].mul_(ctx.rescale_lambda)
        return g.transpose(1, 2), None, None


def continuous_scan(energies: Tensor, padding: Optional[Tensor], rescale_lambda: float,
                    window: int) -> Tensor:
    """Eq. 9 for all steps at once: energies α̂ (B, H, T, S) -> α̊ (B, H, T, S).

    With A = (1-λ) M (:func:`window_matrix`), b_0 = α̂_0 and b_i = λ α̂_i, the recurrence is
    α̊_i = A α̊_{i-1} + b_i, i.e. α̊_i = Σ_{p≤i} A^p b_{i-p}, computed by :class:`ContinuousScan`
    in ⌈log2 T⌉ batched products. It is exact up to rounding and stable, since A's rows sum to
    at most 1-λ < 1 (powers shrink)."""
    power = window_matrix(padding, energies.size(3), window, energies.device,
                          scale=(1 - rescale_lambda) / (2 * window + 1)).to(energies.dtype)
    power = power.expand(energies.size(0), -1, -1)
    return ContinuousScan.apply(energies, power, rescale_lambda)


class WeightRecurrence(torch.autograd.Function):
    """Eqs. 3, 4, 10 for all steps: α_i = softmax(α̂_i + g ⊙ r_{i-1}), r the previous weights
    (Eq. 3) or their running sum (Eqs. 4, 10). ``energies`` (T, B, H, S) float32 (any strides),
    ``padding`` broadcastable to it (True at pads) or None, ``gain`` g (B, H, S) or None with the
    number ``scalar`` instead. Returns α (T, B, H, S). A running sum is kept by adding g ⊙ α_i to
    all later energies at once: a step is two kernels forward, three backward
    (docs/backward/recurrent_cross_attention.md §2)."""

    @staticmethod
    def forward(ctx, energies, padding, gain, scalar, accumulate):
        work = energies.clone(memory_format=torch.contiguous_format)
        if padding is not None:
            work.masked_fill_(padding, MASKED)
        probs = []
        last = work.size(0) - 1
        for i in range(last + 1):
            p = torch.softmax(work[i], dim=-1)
            probs.append(p)
            if i < last:  # the energies still to come: step i+1, or all later steps
                rest = work[i + 1:] if accumulate else work[i + 1]
                if gain is None:
                    rest.add_(p, alpha=scalar)
                else:
                    rest.addcmul_(gain, p)
        probs = torch.stack(probs)
        ctx.accumulate, ctx.scalar = accumulate, scalar
        ctx.save_for_backward(probs, gain, padding)
        return probs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_probs):
        probs, gain, padding = ctx.saved_tensors
        # t_i = α_i ⊙ ∂L/∂α_i, completed step by step from the last; in place it becomes δ_i
        delta = torch.mul(probs, grad_probs).contiguous()  # contiguous already: a no-op
        feed = probs if gain is None else probs * gain  # what δ_i adds to earlier t: α ⊙ g ⊙ δ_i
        scale = ctx.scalar if gain is None else 1.0
        for i in range(probs.size(0) - 1, -1, -1):
            total = delta[i].sum(-1, keepdim=True)
            delta[i].addcmul_(probs[i], total, value=-1.0)  # δ_i = t_i - α_i Σ_j t_ij
            if i:
                earlier = slice(0, i) if ctx.accumulate else slice(i - 1, i)
                delta[earlier].addcmul_(feed[earlier], delta[i], value=scale)
        grad_gain = None
        if gain is not None and ctx.needs_input_grad[2] and probs.size(0) > 1:
            earlier = probs[:-1].cumsum(0) if ctx.accumulate else probs[:-1]
            grad_gain = (delta[1:] * earlier).sum(0)
        if padding is not None:  # the masked energies are constants
            delta.masked_fill_(padding, 0.0)
        return delta, None, grad_gain, None, None


class PrevContextRecurrence(torch.autograd.Function):
    """Eq. 2 for all steps as a recurrence on weights: α_i = softmax(α̂_i + a_{i-1} R) with a the
    weights the context used (α, or α times the dropout ``masks``). ``energies`` (T, B, H, S)
    float32, ``padding`` broadcastable to it or None, ``relation`` R (B, H, S, S), ``masks``
    (T, B, H, S) scaled dropout masks or None. Returns α, and a when ``masks`` is given
    (docs/backward/recurrent_cross_attention.md §3)."""

    @staticmethod
    def forward(ctx, energies, padding, relation, masks):
        steps_, batch, heads, src_len = energies.shape
        ctx.set_materialize_grads(False)
        work = energies.clone(memory_format=torch.contiguous_format)
        if padding is not None:
            work.masked_fill_(padding, MASKED)
        flat = relation.reshape(batch * heads, src_len, src_len)
        probs, used = [], []
        for i in range(steps_):
            if i:  # + a_{i-1} R, one batched product
                row = work[i].view(-1, 1, src_len)
                row.baddbmm_(used[i - 1].view(row.shape), flat)
            p = torch.softmax(work[i], dim=-1)
            probs.append(p)
            used.append(p if masks is None else p * masks[i])
        probs = torch.stack(probs)
        used = None if masks is None else torch.stack(used)
        ctx.save_for_backward(probs, used, flat, masks, padding)
        return probs if masks is None else (probs, used)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_probs, grad_used=None):
        probs, used, flat, masks, padding = ctx.saved_tensors
        steps_, batch, heads, src_len = probs.shape
        a = probs if used is None else used
        # t_i = α_i ⊙ ∂L/∂α_i; the gradient of a_i from step i+1 (δ_{i+1} Rᵀ) joins it as
        # a_i-weighted, since ∂L/∂α_i gets m_i ⊙ ∂L/∂a_i; in place t_i becomes δ_i
        delta = (torch.zeros_like(probs) if grad_probs is None
                 else torch.mul(probs, grad_probs).contiguous())
        if grad_used is not None:
            delta.addcmul_(a, grad_used)
        relation_t = flat.transpose(1, 2)
        for i in range(steps_ - 1, -1, -1):
            total = delta[i].sum(-1, keepdim=True)
            delta[i].addcmul_(probs[i], total, value=-1.0)
            if i:
                fed = torch.bmm(delta[i].view(-1, 1, src_len), relation_t)  # ∂L/∂a_{i-1}
                delta[i - 1].addcmul_(a[i - 1], fed.view(batch, heads, src_len))
        grad_relation = None
        if ctx.needs_input_grad[2] and steps_ > 1:
            rows = a[:-1].view(steps_ - 1, batch * heads, src_len)
            d = delta[1:].view(steps_ - 1, batch * heads, src_len)
            grad_relation = torch.bmm(rows.permute(1, 2, 0), d.transpose(0, 1)).view(
                batch, heads, src_len, src_len)
        if padding is not None:
            delta.masked_fill_(padding, 0.0)
        return delta, None, grad_relation, None
