"""Training Functions of Eqs. 5-8 (``expand-kv``): the extra key/value pair made from the
previous context. With L_i = logsumexp_j α̂_{i,j}, the extra pair's weight is
σ_i = sigmoid(x_i - L_i) and the source weights are (1 - σ_i) softmax(α̂_i), so
c_i = c^0_i + σ_i (u_i - c^0_i) with the plain contexts c^0 of all steps computed at once: only σ_i
and the context recur, on the deviations D_i = c_i - c^0_i. Each Function runs all target steps of
a teacher-forced call as one autograd node with a written-out backward pass; the derivations
(equations, saved tensors, why exact) are in docs/backward/recurrent_cross_attention.md §4."""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .._torch_ops import sigmoid_times
from .common import MASKED


def _head_forward_step(row, previous, matrix, column: int, mask, negative_c0, scaled, deviation):
    """Eqs. 7, 8, step i, on the deviations D_i = c_i - c^0_i: ``row`` (B*H, 1, d + T) holds,
    before the loop, [u_i - c^0_i | z_j for all steps j] computed from c^0_{i-1}; one product
    adds D_{i-1}'s part ([D_{i-1} W_vᵀ | D_{i-1}·q̃_j], Eqs. 7, 8 being linear in c_{i-1}), and
    one kernel gives D_i = σ_i (m_i u_i - c^0_i), σ_i = sigmoid(z_i) (z_i in ``column``). With a
    dropout mask m_i on the extra pair ``row`` holds u_i, and one more kernel forms
    m_i u_i - c^0_i."""
    if previous is not None:
        row.baddbmm_(previous, matrix)
    value = row[..., :deviation.size(-1)]
    if mask is not None:
        value = torch.addcmul(negative_c0, mask, value, out=scaled)
    sigmoid_times(value, row[..., column:column + 1], deviation)



def _head_backward_step(grad, matrix, out, coefficients, rows, previous):
    """The reverse of :func:`_head_forward_step`: one product gives gc_i W and gc_i·y_i, a
    second adds s_i q̃_i + σ'_i gc_i W to the gradient of c_{i-1}."""
    torch.bmm(grad, matrix, out=out)
    previous.baddbmm_(coefficients, rows)



def _full_forward_step(projected, previous, weight_t, lse, query, logits, mask, negative_c0,
                       scaled, deviation):
    """Eqs. 5, 6, step i, on the deviations D_i = c_i - c^0_i of all heads' contexts (B, E):
    ``projected`` (B, 2E) holds, before the loop, [k'_i | u_i - c^0_i] computed from c^0_{i-1}
    (Eqs. 5, 6 being linear in c_{i-1}); one product adds D_{i-1}'s part (W_f D_{i-1}), one
    gives the extra logits z_i = q_i·k'_i - L_i (of every pair of heads; the diagonal is used)
    and one D_i = σ_i (m_i u_i - c^0_i), σ_i = sigmoid(z_i). With a dropout mask m_i on the extra
    pair ``projected`` holds u_i, and one more kernel forms m_i u_i - c^0_i."""
    if previous is not None:
        projected.addmm_(previous, weight_t)
    batch, heads, dim = query.shape
    keys = projected[:, :heads * dim].view(batch, heads, dim).transpose(1, 2)
    torch.baddbmm(lse, query, keys, beta=-1, out=logits)
    value = projected[:, heads * dim:].view(batch, heads, dim)
    if mask is not None:
        value = torch.addcmul(negative_c0, mask.unsqueeze(-1), value, out=scaled)
    sigmoid_times(value, torch.diagonal(logits, 0, 1, 2).unsqueeze(-1), deviation)



def _full_backward_step(stacked, y, coefficients, left, previous, weight, extra):
    """The reverse of :func:`_full_forward_step`: s_i = gc_i·y_i per head (plus ``extra``, the
    gradient of z_i through the returned weights) into row 0 of ``coefficients`` [s_i; σ'_i]
    (2, B, H), then [s_i q_i | σ'_i gc_i] (one product with ``stacked`` [q_i; gc_i] (2, B, E))
    into ``left`` (B, 2E) and through W_f into the gradient of c_{i-1}."""
    _, batch, heads = coefficients.shape
    dim = stacked.size(2) // heads
    grad = stacked[1].view(batch * heads, 1, dim)
    s_out = coefficients[0].view(batch * heads, 1, 1)
    if extra is None:
        torch.bmm(grad, y, out=s_out)
    else:
        torch.baddbmm(extra, grad, y, out=s_out)
    torch.mul(coefficients.transpose(0, 1).unsqueeze(-1),
              stacked.transpose(0, 1).view(batch, 2, heads, dim),
              out=left.view(batch, 2, heads, dim))
    previous.addmm_(left, weight)



def _zeros(like: Tensor, *shapes) -> Tuple[Tensor, ...]:
    """Zero tensors of the given shapes, as consecutive views of one allocation: one kernel
    instead of one per buffer in a step's kernel count. Each is saved for backward (the backward
    pass writes into some of them), so saved-tensor hooks see every one
    (tests/unit/test_saved_tensors_recurrent_cross.py)."""
    buffer = like.new_zeros(sum(math.prod(shape) for shape in shapes))
    views, offset = [], 0
    for shape in shapes:
        size = math.prod(shape)
        views.append(buffer[offset:offset + size].view(shape))
        offset += size
    return tuple(views)


def _plain_attention(masked: Tensor, values: Tensor, masks: Optional[Tensor],
                     with_lse: bool = True):
    """Eqs. 5-8 before the recurrence, for all steps at once: softmax(α̂_i) over the source,
    L_i = logsumexp_j α̂_{i,j} (None unless ``with_lse``), the weights the plain context uses
    (with the source part of the dropout masks) and the plain contexts c^0_i (B, H, T, d)."""
    source = torch.softmax(masked, dim=-1)
    lse = torch.logsumexp(masked, dim=-1) if with_lse else None
    used = source
    if masks is not None:
        used = source * masks[..., :-1].permute(1, 2, 0, 3)
    return source, lse, used, torch.matmul(used, values)


def _plain_attention_backward(grad_c0, grad_z, source, used, values, masks, sigma, grad_probs):
    """The gradients of the masked energies and the values from those of c^0 (T, B, H, d), of
    z = x - L (B, H, T) and of the returned source weights (1 - σ) softmax(α̂) if any. The
    products read c^0's gradient and the values as batched (B*H) matrices with their own strides
    (views of (T, B, H, d) and (S, B, H, d) tensors): no copies."""
    steps_, batch, heads, dim = grad_c0.shape
    src_len = source.size(-1)
    grad_c0 = grad_c0.permute(1, 2, 0, 3).reshape(batch * heads, steps_, dim)
    flat_values = values.reshape(batch * heads, src_len, dim)
    grad_values = torch.bmm(used.reshape(batch * heads, steps_, src_len).transpose(1, 2),
                            grad_c0).view(batch, heads, src_len, dim)
    grad_source = torch.bmm(grad_c0, flat_values.transpose(1, 2)).view(source.shape)
    if masks is not None:
        grad_source.mul_(masks[..., :-1].permute(1, 2, 0, 3))
    if grad_probs is not None:
        keep = sigma.permute(1, 2, 0).unsqueeze(-1)
        grad_source.add_(grad_probs).addcmul_(grad_probs, keep, value=-1.0)
    # the softmax's backward pass and ∂L_i/∂α̂_i = softmax(α̂_i) together:
    # softmax ⊙ (g - Σ_j softmax_j g_j - ∂z) (docs/backward/recurrent_cross_attention.md §1, §4)
    total = torch.matmul(source.unsqueeze(-2), grad_source.unsqueeze(-1)).squeeze(-1)
    total.add_(grad_z.unsqueeze(-1))
    return grad_source.sub_(total).mul_(source), grad_values


def _sigma_gradient(grad_probs, source, sigma):
    """The gradient of z = x - L through the returned source weights (1 - σ) softmax(α̂):
    -Σ_j g_j softmax_j times σ (1 - σ), (T, B, H)."""
    slope = torch.addcmul(sigma, sigma, sigma, value=-1.0)
    return (grad_probs * source).sum(-1).permute(2, 0, 1).mul_(slope).neg_()


def _expand_kv_outputs(ctx, saved, buffers, need_weights, sigma):
    """The end of both expand-kv Functions' forward: save what backward reads (``buffers`` last:
    the backward pass writes into them), then return the contexts and, if asked, the source
    weights (the extra pair takes σ of each row's mass)."""
    ctx.save_for_backward(*saved, *buffers)
    contexts, source = saved[-1], saved[0]
    if not need_weights:
        return contexts
    probs = torch.addcmul(source, source, sigma.permute(1, 2, 0).unsqueeze(-1), value=-1.0)
    return contexts, probs


def _heads_first(x: Tensor) -> Tensor:
    """(B, H, T, n) -> (H, T*B, n): a view where ``x`` is one of a (T, B, H, n) tensor (a
    copy otherwise)."""
    batch, heads, steps_, n = x.shape
    return x.permute(1, 2, 0, 3).reshape(heads, steps_ * batch, n)


def _block_sigma(block: Tensor, batch: int, heads: int, dim: int) -> Tensor:
    """The view (T, B, H) of σ'_i in the expand-kv 3/4 backward pass's block (T, B*H, 3, d + T):
    row 2, column d + i of step i (a diagonal over the steps and the columns from d)."""
    return torch.diagonal(block[:, :, 2, dim:], 0, 0, 2).t().view(block.size(0), batch, heads)


class HeadContextRecurrence(torch.autograd.Function):
    """Eqs. 7, 8 for all steps. With L_i = logsumexp_j α̂_{i,j}, the extra pair's weight is
    σ_i = sigmoid(x_i - L_i) (x_i its energy), the source weights are (1 - σ_i) softmax(α̂_i),
    and so c_i = c^0_i + σ_i (m_i u_i - c^0_i) with c^0_i = Σ_j softmax(α̂_i)_j m_{i,j} v_j the
    plain context (dropout masks m, 1 without dropout): only σ_i and u_i recur. x_i =
    q_i·(W_k c_{i-1} + b_k) = q̃_i·c_{i-1} + q_i·b_k with q̃_i = W_kᵀ q_i, so one product of
    c_{i-1} with [W_vᵀ | q̃ᵀ] (per head, all steps' q̃) gives u_i and z_i = x_i - L_i.

    ``energies`` α̂ (B, H, T, S) and ``padding`` (B, S) or None (the pads are masked here:
    their weights are exactly 0, and so is their gradient, with no masking of it), ``values``
    (B, H, S, d), ``query`` q (B, H, T, d) (scaled; fastest as a view of a (T, B, H, d) tensor), ``key_weight`` W_k
    (H, d, d) (row o, column i: x_i = Σ_o q_o (Σ_i W_k[o, i] c_i + b_k[o])) and ``key_bias``
    b_k (H, d) or None, ``weight`` W_v (H, d, d) and ``bias`` b_v (H, d) of Eq. 7 (None, None:
    Eq. 8, u_i = c_{i-1}), ``masks`` scaled dropout masks (T, B, H, S + 1) or None. Returns the
    contexts (T, B, H, d), and with ``need_weights`` the source weights (B, H, T, S)."""

    @staticmethod
    def forward(ctx, energies, padding, values, query, key_weight, key_bias, weight, bias, masks,
                need_weights):
        ctx.set_materialize_grads(False)
        masked = (energies if padding is None
                  else energies.masked_fill(padding[:, None, None, :], MASKED))
        source, _, used, c0 = _plain_attention(masked, values, masks, with_lse=False)
        batch, heads, steps_, dim = c0.shape
        rows = batch * heads
        width = dim + steps_
        # the deviations D_i = c_i - c^0_i (0 at step 0), the backward pass's block (rows
        # [q̃_i | q_i·b_k], [gc_i W | gc_i·y_j], [. | σ'_i]), the loop's rows before it and, with
        # dropout, σ (T, B, H)
        deviation, scaled, block, out, sigma = _zeros(
            c0, (steps_, rows, 1, dim), (steps_ * (masks is not None), rows, 1, dim),
            (steps_, rows, 3, width), (rows, max(steps_ - 1, 0), width),
            (steps_ * (masks is not None), batch, heads))
        if masks is None:  # σ'_i = σ_i: σ lives where the backward pass reads it (0 at step 0)
            sigma = _block_sigma(block, batch, heads, dim)
        # q̃_i = W_kᵀ q_i (and q_i·b_k) per head over all (step, sentence) rows, written into row
        # 0 of the block, where the backward pass reads them: (T, B*H, ...) is (H, T*B, ...)
        queries = _heads_first(query)
        tilde = block[:, :, 0, :dim].view(steps_, batch, heads, dim).permute(2, 0, 1, 3).view(
            heads, steps_ * batch, dim)
        column_bias = None  # q_i·b_k (B, H, T)
        if steps_ > 1:
            torch.bmm(queries, key_weight, out=tilde)
            if key_bias is not None:
                column = block[:, :, 0, dim].view(steps_, batch, heads)
                torch.bmm(queries, key_bias.unsqueeze(-1),
                          out=column.permute(2, 0, 1).view(heads, steps_ * batch, 1))
                column_bias = column.permute(1, 2, 0)
        query = block[:, :, 0, :dim].view(steps_, batch, heads, dim).permute(1, 2, 0, 3)  # q̃
        first = None
        if steps_ > 1:
            first = (torch.eye(dim, dtype=c0.dtype, device=c0.device) if weight is None
                     else weight.transpose(1, 2))  # W_v (Eq. 7) or the identity (Eq. 8)
            matrix = torch.cat([first.expand(batch, heads, dim, dim), query.transpose(2, 3)],
                               dim=3).view(rows, dim, width)  # [W_vᵀ | q̃ᵀ of all steps]
            # [u_i - c^0_i | z_j] from c^0_{i-1} for all steps at once, beta = -1 on
            # [c^0_i - b_v | L_j - q_j·b_k] (with dropout, u_i: [-b_v | L_j - q_j·b_k])
            # (each part written in place into ``out``, which is zero; q_j·b_k only when the
            # key bias is given here rather than folded into the keys)
            given = out.view(batch, heads, steps_ - 1, width)
            shape = (batch, heads, steps_ - 1, dim)
            if masks is None and bias is None:
                given[..., :dim].copy_(c0[:, :, 1:])
            elif masks is None:
                torch.sub(c0[:, :, 1:], bias.view(1, heads, 1, dim), out=given[..., :dim])
            elif bias is not None:
                torch.neg(bias.view(1, heads, 1, dim).expand(shape), out=given[..., :dim])
            # of the z columns only z_i (row i, column d + i) is read: L_i goes there, straight
            # from the logsumexp, the other columns stay 0
            logits = torch.diagonal(given[..., dim + 1:], 0, 2, 3)  # (B, H, T - 1)
            torch.logsumexp(masked[:, :, 1:], dim=-1, out=logits)
            if column_bias is not None:
                logits.sub_(column_bias[:, :, 1:])
            flat_c0 = c0.view(rows, steps_, dim)
            out.baddbmm_(flat_c0[:, :-1], matrix, beta=-1)  # (rows, T - 1, d + T)
            extra = negative_c0 = None
            if masks is not None:
                extra = masks[..., -1].reshape(steps_, rows, 1, 1)
                negative_c0 = flat_c0.neg()
            for i in range(1, steps_):
                _head_forward_step(out[:, i - 1:i], deviation[i - 1] if i > 1 else None, matrix,
                                   dim + i, None if extra is None else extra[i],
                                   None if masks is None else negative_c0[:, i:i + 1],
                                   None if masks is None else scaled[i], deviation[i])
            # σ_i = sigmoid(z_i), z_i in column d + i of row i
            torch.sigmoid(torch.diagonal(out[:, :, dim + 1:], 0, 1, 2),
                          out=sigma[1:].view(steps_ - 1, rows).t())
        contexts = deviation.view(steps_, batch, heads, dim).add(c0.permute(2, 0, 1, 3))
        assert contexts.is_contiguous()
        identity = first if weight is None else None  # Eq. 8's u_i = c_{i-1}: W_v = I
        return _expand_kv_outputs(ctx, (source, used, values, queries, key_weight,
                                               key_bias, weight, identity, masks, c0, contexts),
                                  (sigma, block, deviation), need_weights, sigma)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_contexts, grad_probs=None):
        (source, used, values, queries, key_weight, key_bias, weight, identity, masks, c0,
         contexts, sigma, block, deviation) = ctx.saved_tensors
        if grad_contexts is None:  # only the returned weights have a gradient
            grad_contexts = torch.zeros_like(contexts)
        batch, heads, steps_, dim = c0.shape
        rows = batch * heads
        grad = grad_contexts.clone(memory_format=torch.contiguous_format)  # (T, B, H, d)
        grad_query = grad_key_weight = grad_key_bias = grad_weight = grad_bias = None
        if steps_ == 1:
            grad_z = c0.new_zeros(steps_, batch, heads)
        else:
            # y_i = σ_i (1 - σ_i) (m_i u_i - c^0_i) = (1 - σ_i) D_i: gc_i·y_i is the gradient of z_i
            deviation = deviation.view(steps_, batch, heads, dim)
            y = torch.addcmul(deviation, deviation, sigma.unsqueeze(-1), value=-1.0)
            first = identity if weight is None else weight  # W_v, or the identity (Eq. 8)
            matrix = torch.cat([first.expand(batch, heads, dim, dim), y.permute(1, 2, 3, 0)],
                               dim=3).view(rows, dim, dim + steps_)
            # per step i: rows [q̃_i | .], [gc_i W | gc_i·y_j for all j], [. | σ'_i at d+i], in a
            # copy of the saved block (saved tensors stay as saved: backward may run again)
            block = block.clone()
            sigma_used = _block_sigma(block, batch, heads, dim)  # σ' = σ (forward wrote it)
            if masks is not None:  # σ' = σ m
                torch.mul(sigma, masks[..., -1], out=sigma_used)
            query_t = block[:, :, 0, :dim].view(steps_, batch, heads, dim)  # q̃ (forward)
            extra = None
            if grad_probs is not None:  # through the returned source weights
                extra = _sigma_gradient(grad_probs, source, sigma)
                grad[:-1].addcmul_(extra[1:].unsqueeze(-1), query_t[1:])
            flat = grad.view(steps_, rows, 1, dim)
            for i in range(steps_ - 1, 0, -1):
                _head_backward_step(flat[i], matrix, block[i, :, 1:2],
                              block[i, :, 1:3, dim + i].unsqueeze(1), block[i, :, 0:2, :dim],
                              flat[i - 1])
            grad_z = torch.diagonal(block[:, :, 1, dim:], 0, 0, 2).t().reshape(
                steps_, batch, heads)
            if extra is not None:
                grad_z = grad_z + extra
            # ∂/∂q̃_i = s_i c_{i-1} (s_i = ∂z_i, 0 at step 0), ∂/∂(q_i·b_k) = s_i; through
            # q̃ = q W_k: ∂q = ∂q̃ W_kᵀ + s b_k, ∂W_k = Σ qᵀ ∂q̃, ∂b_k = Σ s q
            weighted = torch.zeros_like(contexts)  # s_i c_{i-1}, 0 at step 0
            torch.mul(grad_z[1:].unsqueeze(-1), contexts[:-1], out=weighted[1:])
            weighted_h = _heads_first(weighted.permute(1, 2, 0, 3))
            grad_query = torch.bmm(weighted_h, key_weight.transpose(1, 2))  # (H, T*B, d)
            grad_query = grad_query.view(heads, steps_, batch, dim).permute(2, 0, 1, 3)
            grad_key_weight = torch.bmm(queries.transpose(1, 2), weighted_h)
            if key_bias is not None:
                grad_query.addcmul_(grad_z.permute(1, 2, 0).unsqueeze(-1),
                                    key_bias.view(1, heads, 1, dim))
                if ctx.needs_input_grad[4]:
                    grad_key_bias = (grad_z.permute(2, 0, 1).unsqueeze(-1)
                                     * queries.view(heads, steps_, batch, dim)).sum((1, 2))
            if weight is not None:
                grad_u = grad * sigma_used.unsqueeze(-1)  # (T, B, H, d), 0 at step 0
                # Σ gu_i c_{i-1}ᵀ per head over all steps and sentences: (T, B, H, d) in memory
                # is (H, T*B, d) with strides (d, E, 1), so one product reads both as they are
                grad_weight = torch.bmm(
                    grad_u[1:].permute(2, 0, 1, 3).reshape(heads, -1, dim).transpose(1, 2),
                    contexts[:-1].permute(2, 0, 1, 3).reshape(heads, -1, dim))
                grad_bias = grad_u.sum((0, 1)) if ctx.needs_input_grad[4] else None
            grad.addcmul_(sigma.unsqueeze(-1), grad, value=-1.0)  # now the gradient of c^0
        grad_z_b = grad_z.permute(1, 2, 0)
        grad_masked, grad_values = _plain_attention_backward(
            grad, grad_z_b, source, used, values, masks, sigma, grad_probs)
        return (grad_masked, None, grad_values, grad_query, grad_key_weight, grad_key_bias,
                grad_weight, grad_bias, None, None)


class FullContextRecurrence(torch.autograd.Function):
    """Eqs. 5, 6 for all steps, as :class:`HeadContextRecurrence` but from the layer's full
    context: [k'_i; u_i] = W_f c_{i-1} + b_f with c_{i-1} all heads' contexts (B, E) and W_f the
    extra key/value projections times the output projection (see ``_fused_full_context``). The
    recurrence runs on the deviations D_i = c_i - c^0_i: W_f c^0_{i-1} + b_f for all steps is
    one product before the loop, and a step is the (B, E) x (E, 2E) product with D_{i-1}, the
    logits q_i·k'_i - L_i of every head (one batched product) and σ_i (m_i u_i - c^0_i) in one
    kernel. ``masked`` (B, H, T, S), ``values`` (B, H, S, d), ``query`` q (T, B, H, d)
    (scaled), ``weight`` W_f (2E, E) (key rows, then value rows), ``bias`` b_f (2E) or None,
    ``masks`` (T, B, H, S + 1) or None. Returns the contexts (T, B, H, d), and with
    ``need_weights`` the source weights (B, H, T, S)."""

    @staticmethod
    def forward(ctx, masked, values, query, weight, bias, masks, need_weights):
        ctx.set_materialize_grads(False)
        source, lse, used, c0 = _plain_attention(masked, values, masks)
        batch, heads, steps_, dim = c0.shape
        embed = heads * dim
        # σ in row 1 of (T, 2, B, H) (row 0 takes s_i = gc_i·y_i in the backward pass), the
        # rows [k'_i | u_i (- c^0_i)], the logits, the deviations D_i (0 at step 0) and, with
        # dropout, m_i u_i - c^0_i
        coefficients, projected, logits, deviation, scaled = _zeros(
            c0, (steps_, 2, batch, heads), (steps_, batch, 2 * embed),
            (steps_, batch, heads, heads), (steps_, batch, heads, dim), (steps_ * (masks is not None), batch, heads, dim))
        sigma = coefficients[:, 1]
        plain = c0.permute(2, 0, 1, 3).contiguous()  # c^0 (T, B, H, d)
        if steps_ > 1:
            flat = plain.view(steps_, batch, embed)
            weight_t = weight.t()
            # [k'_i | u_i] from c^0_{i-1} for all steps at once, less c^0_i without dropout
            rows = projected[1:].view(-1, 2 * embed)
            if bias is None:
                torch.mm(flat[:-1].reshape(-1, embed), weight_t, out=rows)
            else:
                torch.addmm(bias, flat[:-1].reshape(-1, embed), weight_t, out=rows)
            negative_c0 = None
            if masks is None:
                projected[1:, :, embed:].sub_(flat[1:])
            else:
                negative_c0 = plain.neg()
            for i in range(1, steps_):
                _full_forward_step(projected[i], deviation[i - 1].view(batch, embed) if i > 1 else None,
                             weight_t, lse[:, :, i].unsqueeze(-1), query[i], logits[i],
                             None if masks is None else masks[i, :, :, -1],
                             None if masks is None else negative_c0[i],
                             None if masks is None else scaled[i], deviation[i])
            torch.sigmoid(torch.diagonal(logits[1:], 0, 2, 3), out=sigma[1:])
        contexts = deviation.add(plain)
        return _expand_kv_outputs(ctx, (source, used, values, query, weight, masks, c0,
                                               contexts),
                                  (coefficients, projected, deviation), need_weights, sigma)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_contexts, grad_probs=None):
        (source, used, values, query, weight, masks, c0, contexts, coefficients, projected,
         deviation) = ctx.saved_tensors
        if grad_contexts is None:  # only the returned weights have a gradient
            grad_contexts = torch.zeros_like(contexts)
        batch, heads, steps_, dim = c0.shape
        embed = heads * dim
        rows = batch * heads
        sigma = coefficients[:, 1]
        # per step: [q_i ; gc_i] stacked, the gradient of c_i being updated in place
        stacked = torch.stack([query.reshape(steps_, batch, embed),
                               grad_contexts.reshape(steps_, batch, embed)], dim=1)
        grad = stacked[:, 1]  # (T, B, E)
        grad_query = grad_weight = grad_bias = None
        if steps_ > 1:
            # y_i = (1 - σ_i) D_i: gc_i·y_i is the gradient of z_i through c_i
            y = torch.addcmul(deviation, deviation, sigma.unsqueeze(-1), value=-1.0)
            if masks is not None:  # [s_i | σ'_i = σ_i m_i]
                coefficients = torch.stack([sigma, sigma * masks[..., -1]], dim=1)
            else:  # [s_i | σ'_i = σ_i] in a copy (saved tensors stay as saved)
                coefficients = coefficients.clone()
            left = contexts.new_empty(steps_, batch, 2, heads, dim)  # [s_i q_i | σ'_i gc_i]
            keys = projected[:, :, :embed].view(steps_, batch, heads, dim)
            extra = None
            if grad_probs is not None:  # the gradient of z through the returned weights
                extra = _sigma_gradient(grad_probs, source, sigma).reshape(steps_, rows, 1, 1)
            for i in range(steps_ - 1, 0, -1):
                _full_backward_step(stacked[i], y[i].view(rows, dim, 1), coefficients[i],
                              left[i].view(batch, 2 * embed), grad[i - 1], weight,
                              None if extra is None else extra[i])
            grad_z = coefficients[:, 0]
            grad_query = grad_z.unsqueeze(-1) * keys  # 0 at step 0 (k'_0 = 0, s_0 = 0)
            left_flat = left[1:].view(-1, 2 * embed)
            grad_weight = torch.mm(left_flat.t(), contexts[:-1].view(-1, embed))
            grad_bias = left_flat.sum(0) if ctx.needs_input_grad[4] else None
            grad4 = grad.view(steps_, batch, heads, dim)
            grad = torch.addcmul(grad4, sigma.unsqueeze(-1), grad4, value=-1.0)  # of c^0
        else:
            grad = grad.view(steps_, batch, heads, dim)
            grad_z = query.new_zeros(steps_, batch, heads)
        grad_masked, grad_values = _plain_attention_backward(
            grad, grad_z.permute(1, 2, 0), source, used, values, masks, sigma, grad_probs)
        return grad_masked, grad_values, grad_query, grad_weight, grad_bias, None, None
