"""RAN's recurrence with the paper's transition (Eqs. 3-4), A_l = LN(tanh(A_{l-1} Wᵀ + b)) + A_{l-1}:
:class:`_PaperRecurrence`, one autograd node whose backward is written out (derived in
docs/backward/positional_attention.md), and :func:`paper_recurrence_eager`, its reference by
autograd, which :data:`USE_EAGER` selects instead.
"""
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

# True: RecurrentAttentionMatrices computes the recurrence by autograd (paper_recurrence_eager), for
# checking or debugging the written-out backward; a switch of the code, not a model option
USE_EAGER = False

# the lower triangle's constants the recurrence reads (RecurrentAttentionMatrices._build_constants)
TRIANGLE_KEYS = ("visible", "s·visible", "visible / s", "beyond / count")


def paper_recurrence_eager(a0: Tensor, weight: Tensor, bias: Tensor, gain: Tensor, shift: Tensor,
                           num_layers: int, eps: float, future: Optional[Tensor] = None) -> Tensor:
    """What :class:`_PaperRecurrence` computes, by autograd through every operation: A_1..A_L
    (L, h, R, n) of a0 (h, R, n). ``future`` (R, n), True at keys j > i, is §2.2's lower
    triangle: A_0 is zero there and each row's layer norm takes the mean and biased variance of
    its visible entries, zero beyond."""
    a = a0 if future is None else a0.masked_fill(future, 0.0)
    n = a.size(-1)
    layers = []
    for _ in range(num_layers):
        x = torch.tanh(F.linear(a, weight, bias))
        if future is None:
            y = F.layer_norm(x, (n,), gain, shift, eps)
        else:
            count = (~future).sum(-1, keepdim=True).to(x.dtype)
            x = x.masked_fill(future, 0.0)
            centred = (x - x.sum(-1, keepdim=True) / count).masked_fill(future, 0.0)
            variance = centred.pow(2).sum(-1, keepdim=True) / count
            y = (centred * torch.rsqrt(variance + eps) * gain + shift).masked_fill(future, 0.0)
        a = y + a
        layers.append(a)
    return torch.stack(layers)


class _PaperRecurrence(torch.autograd.Function):
    """RAN's recurrence with the paper's transition (Eqs. 3-4) over all L layers, as one autograd
    node: A_l = LN(tanh(A_{l-1} Wᵀ + b)) + A_{l-1}, l = 1..L, for a0 = the rows of A_0 in use
    (h, R, n); returns A_1..A_L (L, h, R, n). The backward is written out
    (docs/backward/positional_attention.md): the inputs of all layers are stored contiguously, so
    that the gradients of W and b (shared by all layers) are one product and one sum, and the
    residual's gradient is folded into the product with W.

    ``triangle`` (the lower triangle's constants, see RecurrentAttentionMatrices._build_constants)
    restricts row i to its keys j <= i (§2.2): A_0 is zero beyond, and the layer norm of each row
    takes the mean and biased variance of its i + 1 visible entries, with those positions' gain and
    bias, and gives zero beyond. One layer norm over whole rows computes it: with
    s = sqrt(n / (i + 1)), the row that holds s·x at j <= i and s times their mean beyond has that
    mean (times s) and, over n entries, exactly their variance; its normalized entries j <= i are s
    times the visible ones: the norm's gain, then a product with visible / s (zero beyond) and the
    shift of the visible keys give the row.

    Every tensor the backward reads goes through ``ctx.save_for_backward`` (the triangle's
    constants included), so saved-tensor hooks, activation checkpointing and offloading see them
    all (tests/unit/test_saved_tensors.py)."""

    @staticmethod
    def forward(ctx, a0, weight, bias, gain, shift, num_layers: int, eps: float,
                triangle: Optional[Dict[str, Tensor]]):
        heads, rows, n = a0.shape
        # A_0 (zero beyond under the triangle) in slot 0 and A_l in slot l: the inputs of all layers
        # are contiguous, so that W's gradient is one product
        out = a0.new_empty(num_layers + 1, heads, rows, n)
        flat = out.view(num_layers + 1, heads * rows, n)
        if triangle is not None:
            torch.mul(a0, triangle["visible"], out=out[0])
            row_shift = shift * triangle["visible"]  # the shift of each row's visible keys
        else:
            out[0].copy_(a0)
        a, saved = flat[0], []
        for layer in range(num_layers):
            t = torch.addmm(bias, a, weight.t()).tanh_()  # Eq. 3, inside LN
            if triangle is None:
                y = F.layer_norm(t, (n,), gain, shift, eps)
                saved.append(t)
            else:
                filled = t.view(heads, rows, n) * triangle["s·visible"]
                filled.addcmul_(filled.sum(dim=-1, keepdim=True), triangle["beyond / count"])
                scaled = F.layer_norm(filled, (n,), gain, None, eps)
                y = torch.addcmul(row_shift, scaled, triangle["visible / s"]).view(-1, n)
                saved += [t, filled]
            a = torch.add(y, a, out=flat[layer + 1])  # Eq. 4
        ctx.num_layers, ctx.eps, ctx.masked = num_layers, eps, triangle is not None
        constants = [triangle[k] for k in TRIANGLE_KEYS] if triangle is not None else []
        ctx.save_for_backward(out, weight, gain, shift, *constants, *saved)
        return out[1:]

    @staticmethod
    def backward(ctx, grad):
        out, weight, gain, shift, *saved = ctx.saved_tensors
        num_layers, eps = ctx.num_layers, ctx.eps
        triangle = None
        if ctx.masked:
            triangle = dict(zip(TRIANGLE_KEYS, saved[:len(TRIANGLE_KEYS)]))
            saved = saved[len(TRIANGLE_KEYS):]
        _, heads, rows, n = out.shape
        grad = grad.reshape(num_layers, heads * rows, n)
        grad_z = torch.empty_like(grad)  # tanh's input, every layer
        grad_a = grad[-1]  # with respect to A_l: from its consumers and from layer l + 1
        grad_gain = grad_shift = grad_first = None
        # the layer norm's backward is autograd's, on its recomputed forward (one kernel)
        gain_leaf = gain.detach().requires_grad_()
        shift_leaf = shift.detach().requires_grad_() if triangle is None else None
        for layer in reversed(range(num_layers)):
            if triangle is None:
                t = saved[layer]
                grad_t, g_gain, g_shift = _layer_norm_backward(t, grad_a, gain_leaf, shift_leaf,
                                                               eps)
                grad_gain = g_gain if grad_gain is None else grad_gain.add_(g_gain)
                grad_shift = g_shift if grad_shift is None else grad_shift.add_(g_shift)
            else:
                t, filled = saved[2 * layer:2 * layer + 2]
                grad_y = grad_a.view(heads, rows, n)
                # the shift's gradient: summed over layers here, over heads and rows below
                if grad_shift is None:
                    grad_shift = grad_y
                elif layer == num_layers - 2:
                    grad_shift = grad_shift + grad_y  # not in place: the first is the caller's
                else:
                    grad_shift.add_(grad_y)
                grad_filled, g_gain, _ = _layer_norm_backward(
                    filled, grad_y * triangle["visible / s"], gain_leaf, None, eps)
                grad_gain = g_gain if grad_gain is None else grad_gain.add_(g_gain)
                # through the fill of the entries beyond: each row's sum of s·x, times 1 / (i + 1)
                grad_sum = torch.bmm(grad_filled.transpose(0, 1),
                                     triangle["beyond / count"].unsqueeze(-1)).transpose(0, 1)
                grad_t = (grad_filled + grad_sum).mul_(triangle["s·visible"]).view(-1, n)
            # tanh: dz = dt (1 - t²), written into the stack of every layer's dz
            grad_z_layer = torch.addcmul(grad_t, grad_t * t, t, value=-1, out=grad_z[layer])
            if layer > 0:
                grad_a = torch.add(grad[layer - 1], grad_a).addmm_(grad_z_layer, weight)
            elif ctx.needs_input_grad[0]:
                grad_first = torch.addmm(grad_a, grad_z_layer, weight).view(heads, rows, n)
                if triangle is not None:
                    grad_first = grad_first.mul_(triangle["visible"])
        # W's gradient over all layers: one product of the stacked tanh-input gradients and inputs
        grad_weight = torch.mm(grad_z.view(-1, n).t(), out[:-1].reshape(-1, n))
        grad_bias = grad_z.sum(dim=(0, 1))
        if triangle is not None:
            grad_shift = (grad_shift * triangle["visible"]).sum(dim=(0, 1))
        return grad_first, grad_weight, grad_bias, grad_gain, grad_shift, None, None, None


def _layer_norm_backward(x: Tensor, grad_out: Tensor, gain: Tensor, shift: Optional[Tensor],
                         eps: float):
    """The gradients of ``F.layer_norm(x, gain, shift)`` over the last axis with respect to x, the
    gain and (None without) the shift, given ``grad_out``: autograd's own, on a recomputed forward.
    ``gain`` and ``shift`` are detached leaves that require gradients."""
    with torch.enable_grad():
        leaf = x.detach().requires_grad_()
        y = F.layer_norm(leaf, x.shape[-1:], gain, shift, eps)
        inputs = (leaf, gain) if shift is None else (leaf, gain, shift)
        grads = torch.autograd.grad(y, inputs, grad_out)
    return grads if shift is not None else grads + (None,)
