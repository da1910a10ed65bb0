"""Encoder-decoder attention that sees its own earlier decisions (Rosendahl et al. 2021,
"Recurrent Attention for the Transformer", §3).

Per decoder layer and head, with decoding step i, source position j, decoder state s_i, encoder
states h_j, keys k_j = W_k h_j, values v_j = W_v h_j and head size d_k, plain attention (Eq. 1) has
energies α̂_{i,j} = (W_q s_i)·k_j / √d_k, weights α_i = softmax_j(α̂_i) and context
c_i = Σ_j α_{i,j} v_j. :class:`RecurrentCrossAttention` implements it and six recurrent variants
(``variant``):

- ``dot`` (Eq. 1): no recurrence.
- ``prev-context`` (Eq. 2): the query is W_q' [s_i; c_{i-1}] = W_q s_i + U c_{i-1}, with the
  head's previous context c_{i-1} and a d_k×d_k matrix U per head.
- ``prev-weight`` (Eq. 3): source position j's query is extended with α_{i-1,j}:
  (W_q s_i + u α_{i-1,j})·k_j / √d_k, with a vector u per head.
- ``prev-accum-weight`` (Eq. 4): as Eq. 3 with Σ_{i'<i} α_{i',j}.
- ``expand-kv`` (Eqs. 5-8): one extra key/value pair made from the previous context; ``kv_variant``
  1: the layer's full context c^ℓ_{i-1} through the shared W_k, W_v; 2: c^ℓ_{i-1} through
  separate matrices; 3: the head's own c_{i-1} through separate per-head matrices; 4: as 3, but
  the value is c_{i-1} itself (key transformed, value not). The full context is the one §3.1
  defines: all heads' contexts concatenated *and* passed through the attention's output
  projection, c^ℓ_{i-1} = W_o [c^1_{i-1}; ...; c^H_{i-1}] + b_o, i.e. the attention output of
  step i-1 (before the decoder layer's residual dropout and connection).
- ``continuous`` (Eq. 9): rescaled energies α̊_{i,j} = λ α̂_{i,j} + (1-λ)/(2k+1) Σ_{|j'-j|≤k}
  α̊_{i-1,j'}, then softmax over α̊_i (λ = ``rescale_lambda``, k = ``rescale_window``).
- ``coverage`` (Eq. 10): α̊_{i,j} = α̂_{i,j} - λ/√d_k Σ_{i'<i} α_{i',j}, then softmax.

Choices where the paper is silent:

- The first step has no predecessor, and every variant's first step is plain attention (Eq. 1):
  c_{-1} = 0 (Eq. 2), α_{-1} = 0 (Eq. 3), empty sums (Eqs. 4, 10), no extra key/value pair
  (Eqs. 5-8), α̊_0 = α̂_0 (Eq. 9).
- Eqs. 3, 4, 10 use the attention weights before dropout; Eqs. 2, 5-8 use the context the layer
  actually produced (after attention dropout).
- Source padding never gives or receives weight: padded keys are masked before every softmax
  (their weights, previous and accumulated, are exactly 0); Eq. 9's window sums run over real
  positions only, out-of-sentence positions counting as 0 with the divisor kept at 2k+1. Windows
  act on positions relative to the sentence, so left and right padding give identical results.
- ``expand-kv``: the returned weights are those of the source positions; the extra pair takes the
  rest of each row's mass.

Training (a teacher-forced call) computes projections and energies α̂ of all target positions at
once; each recurrence then runs as one autograd Function whose loop over the target steps writes
into preallocated buffers, with everything that does not depend on the previous step computed
before the loop, and whose backward pass is a second loop, in reverse, over gradients formed by
hand. A target position costs each layer:

- Eqs. 3, 4, 10 (:class:`WeightRecurrence`): a softmax and one fused update of the energies
  still to come (a running sum adds g ⊙ α_i to all later steps at once); backward the same, so
  4 kernels. Contexts are one product after the loop.
- Eq. 2 (:class:`PrevContextRecurrence`), a recurrence on weights too:
  (U c_{i-1})·k_j = Σ_j' a_{i-1,j'} (U v_j')·k_j, so the extra energies are a_{i-1} R with
  R = (V Uᵀ) Kᵀ / √d_k computed once: one product and a softmax, 4 kernels forward and backward
  (one more each way with attention dropout, whose masks are drawn once per call).
- Eqs. 5-8 (:class:`HeadContextRecurrence`, :class:`FullContextRecurrence`): with
  L_i = logsumexp_j α̂_{i,j}, the extra pair's weight is σ_i = sigmoid(x_i - L_i) and the source
  weights are (1 - σ_i) softmax(α̂_i), so c_i = c^0_i + σ_i (u_i - c^0_i) with the plain
  contexts c^0 of all steps computed at once: only σ_i and the context recur. Eqs. 7, 8 fold
  x_i = (W_kᵀ q_i)·c_{i-1} + q_i·b_k into one product with W_v per head and recur on the
  deviations D_i = c_i - c^0_i, the part of that product from c^0_{i-1} being formed for all steps
  before the loop: a step is the product with D_{i-1} and one kernel for σ_i (u_i - c^0_i)
  (softplus's backward operator: softplus' = sigmoid), 2 kernels forward, 2 backward. A full pass
  folds b_k into the keys (k_j - b_k leaves softmax(α̂_i) as it is and makes the logsumexp
  L_i - q_i·b_k). Eqs. 5, 6 multiply the output projection and the extra key/value projections into
  one (2E, E) matrix W_f once per call and recur on the deviations of all heads' contexts (B, E)
  likewise: a step is the product with D_{i-1}, the logits of all heads (one batched product) and
  σ_i (u_i - c^0_i) in one kernel, 3 forward; backward the logits' gradient s_i = gc_i·y_i, [s_i q_i
  | σ_i gc_i] and the product through W_f, 3. (Two kernels forward would need W_f beside each
  sentence's W_kᵀ q_i in one per-sentence matrix: a copy of W_f per sentence, or a product with
  every other sentence's q̃, work and traffic per step that grow with B·E² or B²·E and cost more
  on a GPU at base size than the launch they save.)
- Eq. 9 is linear in the energies: with the windowed averaging written as a banded matrix M,
  α̊_i = (1-λ) M α̊_{i-1} + b_i, solved for all steps by a log-depth (Hillis-Steele) scan,
  :class:`ContinuousScan`: 5 kernels per doubling of the target length, none per step.

Kernels of one training step (forward and backward, aten operators without views, counted by
``ran_fairseq.lab.bench.kernels``) of ``recurrent_cross_transformer_small`` on 64 Multi30k
validation sentences, as multiples of ``--cross-attention dot`` (603 kernels, at any length),
before these kernels and now (docs/recurrent_cross_transformer.md has the script):

======================  ===============  ===============  ==========================
variant                 target length 31 target length 42 per target position
======================  ===============  ===============  ==========================
prev-context            ×2.13 → ×1.70    ×2.51 → ×1.92    21 → 12
prev-weight             ×2.39 → ×1.67    ×2.89 → ×1.89    27 → 12
prev-accum-weight       ×2.69 → ×1.67    ×3.29 → ×1.89    33 → 12
coverage                ×2.05 → ×1.62    ×2.44 → ×1.84    21 → 12
continuous              ×1.35 → ×1.18    ×1.41 → ×1.21    33 → 15 per doubling
expand-kv 1             ×5.71 → ×2.03    ×7.41 → ×2.36    93 → 18
expand-kv 2             ×5.69 → ×2.01    ×7.39 → ×2.34    93 → 18
expand-kv 3             ×6.54 → ×1.69    ×8.56 → ×1.91    111 → 12
expand-kv 4             ×5.49 → ×1.68    ×7.13 → ×1.90    90 → 12
======================  ===============  ===============  ==========================

``recurrence="compile"`` (``--cross-attention-recurrence compile``) runs each loop body through
``torch.compile`` (:func:`step_functions`); gradients are the same. Incremental decoding runs one
step of the same recurrences (the equations as written, eagerly) from the state kept under the
module's own incremental-state key, reordered with the beam.
"""
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules.fairseq_dropout import FairseqDropout

CROSS_ATTENTION_VARIANTS = ("dot", "prev-context", "prev-weight", "prev-accum-weight",
                            "expand-kv", "continuous", "coverage")
KV_VARIANTS = (1, 2, 3, 4)
# how the training recurrences run their loop bodies (--cross-attention-recurrence)
RECURRENCES = ("eager", "compile")

# Masked energies get a large finite value (energies are float32): a fully padded row then yields
# uniform weights instead of NaN, and masked positions get weights of exactly 0 otherwise.
_MASKED = -1e9

# The recurrent quantity each variant keeps between decoding steps (per hypothesis).
_STATE_KEY = {"prev-context": "prev_context", "expand-kv": "prev_context",
              "prev-weight": "prev_weights", "prev-accum-weight": "accum_weights",
              "coverage": "accum_weights", "continuous": "prev_energies"}
# What the state caches from the source alone: the same for every hypothesis of a sentence.
_SOURCE_KEYS = ("key", "value", "gain")


def check_options(variant: str, kv_variant: int, rescale_lambda: float, rescale_window: int,
                  recurrence: str = "eager"):
    """Raise a ValueError naming the flag for options no variant can use."""
    if recurrence not in RECURRENCES:
        raise ValueError(f"--cross-attention-recurrence must be one of {', '.join(RECURRENCES)}, "
                         f"got {recurrence!r}")
    if recurrence == "compile" and not hasattr(torch, "compile"):
        raise ValueError("--cross-attention-recurrence compile needs torch.compile (PyTorch 2.0 or "
                         f"later, this is {torch.__version__}); use --cross-attention-recurrence "
                         "eager")
    if variant not in CROSS_ATTENTION_VARIANTS:
        raise ValueError(f"--cross-attention must be one of {', '.join(CROSS_ATTENTION_VARIANTS)}, "
                         f"got {variant!r}")
    if kv_variant not in KV_VARIANTS:
        raise ValueError(f"--kv-variant must be 1, 2, 3 or 4 (Eqs. 5-8), got {kv_variant!r}")
    if not math.isfinite(rescale_lambda):
        raise ValueError(f"--rescale-lambda must be finite, got {rescale_lambda}")
    if variant == "continuous" and not 0 < rescale_lambda <= 1:
        raise ValueError(f"--cross-attention continuous mixes new and previous energies with "
                         f"weights λ and 1-λ: --rescale-lambda must be in (0, 1], got "
                         f"{rescale_lambda}")
    if variant == "coverage" and rescale_lambda < 0:
        raise ValueError(f"--cross-attention coverage subtracts λ times the attention already "
                         f"paid: --rescale-lambda must be >= 0, got {rescale_lambda}")
    if isinstance(rescale_window, bool) or not isinstance(rescale_window, int) \
            or rescale_window < 0:
        raise ValueError(f"--rescale-window (k, the window j-k..j+k of Eq. 9) must be an integer "
                         f">= 0, got {rescale_window!r}")


# ---- Eq. 9: the windowed averaging and its linear recurrence -----------------------------------


def window_average(x: Tensor, padding: Optional[Tensor], window: int) -> Tensor:
    """(1/(2k+1)) Σ_{|j'-j|≤k} x_{j'} over real positions (Eq. 9's window): x (B, H, S),
    padding (B, S) True at pads or None. Pads give and receive 0."""
    if padding is not None:
        x = x.masked_fill(padding[:, None, :], 0.0)
    out = F.avg_pool1d(x, 2 * window + 1, stride=1, padding=window, count_include_pad=True)
    return out if padding is None else out.masked_fill(padding[:, None, :], 0.0)


def window_matrix(padding: Optional[Tensor], src_len: int, window: int,
                  device=None, scale: Optional[float] = None) -> Tensor:
    """Eq. 9's windowed averaging as a matrix: M[b, j, j'] = 1/(2k+1) (or ``scale``) where
    |j-j'| ≤ k and both positions are real, else 0. Shape (B, S, S), or (1, S, S) without
    padding; symmetric."""
    if padding is not None:
        device = padding.device
    value = 1.0 / (2 * window + 1) if scale is None else scale
    band = torch.full((src_len, src_len), value, device=device).triu_(-window).tril_(window)
    if padding is None:
        return band.unsqueeze(0)
    real = ~padding
    return band * (real[:, :, None] & real[:, None, :])


def continuous_step(previous: Optional[Tensor], energies: Tensor, padding: Optional[Tensor],
                    rescale_lambda: float, window: int) -> Tensor:
    """One step of Eq. 9: α̊_i from α̂_i (B, H, S) and α̊_{i-1} (None at the first step, where
    α̊_0 = α̂_0)."""
    if previous is None:
        return energies
    return rescale_lambda * energies + (1 - rescale_lambda) * window_average(previous, padding,
                                                                              window)


class ContinuousScan(torch.autograd.Function):
    """Eq. 9's linear recurrence for all steps, α̊_i = A α̊_{i-1} + b_i (b_0 = α̂_0, b_i = λ α̂_i,
    A = (1-λ) M symmetric and constant), by a Hillis-Steele scan: for d = 1, 2, 4, ... each row
    i ≥ d adds A^d times row i-d, one batched product per doubling (rows of all heads and steps
    together), so the scan costs ⌈log2 T⌉ products instead of T steps. The backward pass is the
    same scan run backwards (Aᵀ = A). ``energies`` α̂ (B, H, T, S), ``power`` A (B, S, S)."""

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


# ---- Eqs. 3, 4, 10: recurrences on weights ------------------------------------------------------


def weight_recurrence(energies: Tensor, gain, accumulate: bool,
                      previous: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """α_i = softmax_j(α̂_{i,j} + gain_j r_{i-1,j}) for the steps of ``energies`` (B, H, T, S),
    float32 with pads already masked, where r is the previous weights (Eq. 3) or their running sum
    (Eqs. 4, 10) and ``gain`` is a (B, H, S) tensor or a number. ``previous`` is r before the first
    of these steps (None: none, r = 0). Returns the weights (B, H, T, S) and the last r."""
    steps = []
    r = previous
    for e in energies.permute(2, 0, 1, 3).contiguous():  # one (B, H, S) slice per step
        if r is not None:
            e = torch.addcmul(e, gain, r) if torch.is_tensor(gain) else e.add(r, alpha=gain)
        p = torch.softmax(e, dim=-1)
        steps.append(p)
        r = r + p if accumulate and r is not None else p
    return torch.stack(steps, dim=2), r


# ---- training kernels: whole-sequence recurrences with hand-written backward passes ------------
#
# Each autograd Function below runs one recurrence over all target steps of a teacher-forced call.
# Everything that does not depend on the previous step is computed before the loop, per-step
# results are written into preallocated buffers (``out=``, in-place updates of slices), and the
# backward pass is a second loop over the steps in reverse whose gradients are formed by hand from
# quantities kept by the forward pass. A loop body is one of the ``_*_step`` functions, which the
# ``compile`` recurrence (``--cross-attention-recurrence compile``) runs through ``torch.compile``.

def _softmax_into(x: Tensor, out: Tensor):
    torch._softmax(x, -1, False, out=out)


def _softmax_backward_into(grad: Tensor, probs: Tensor, out: Tensor):
    torch.ops.aten._softmax_backward_data.out(grad, probs, -1, probs.dtype, grad_input=out)


def _weight_forward_step(energy, probs, rest, gain, scalar: float):
    """Eqs. 3, 4, 10, step i: α_i = softmax(energy); the energies still to come (``rest``: step
    i+1, or all later steps for a running sum) get gain ⊙ α_i."""
    _softmax_into(energy, probs)
    if rest is not None:
        if gain is None:
            rest.add_(probs, alpha=scalar)
        else:
            rest.addcmul_(gain, probs)


def _weight_backward_step(grad, probs, delta, rest, gain, scalar: float):
    """The reverse of :func:`_weight_forward_step`: δ_i = ∂L/∂(energy of step i) from the
    gradient of α_i; the gradients of the weights that fed step i (``rest``) get gain ⊙ δ_i."""
    _softmax_backward_into(grad, probs, delta)
    if rest is not None:
        if gain is None:
            rest.add_(delta, alpha=scalar)
        else:
            rest.addcmul_(gain, delta)


def _context_forward_step(energy, probs, previous, relation, mask, used):
    """Eq. 2, step i: energies + a_{i-1} R (one batched product), softmax, and with attention
    dropout the weights the context uses. ``energy`` (B, H, S) is updated in place."""
    if previous is not None:
        flat = energy.view(-1, 1, energy.size(-1))
        flat.baddbmm_(previous.view(flat.shape), relation)
    _softmax_into(energy, probs)
    if mask is not None:
        torch.mul(probs, mask, out=used)


def _context_backward_step(grad, probs, delta, grad_used, mask, relation_t, previous):
    """The reverse of :func:`_context_forward_step`: δ_i from the gradient of α_i (plus that of
    the dropped-out weights), then the gradient of a_{i-1} gets δ_i Rᵀ."""
    if mask is not None:
        grad.addcmul_(grad_used, mask)
    _softmax_backward_into(grad, probs, delta)
    if previous is not None:
        flat = previous.view(-1, 1, previous.size(-1))
        flat.baddbmm_(delta.view(flat.shape), relation_t)


def _sigmoid_times(value, logit, out, threshold: float):
    """out = sigmoid(logit) ⊙ value in one kernel (``logit`` broadcasts): the derivative of
    softplus(x) = log(1 + e^x) is sigmoid(x), so softplus's backward operator with ``value`` as
    the incoming gradient is this product. Above ``threshold`` it returns ``value`` itself, where
    sigmoid rounds to 1 (20 for float32, 40 for float64, see :func:`_sigmoid_threshold`)."""
    torch.ops.aten.softplus_backward.grad_input(value, logit, 1.0, threshold, grad_input=out)


def _sigmoid_threshold(dtype) -> float:
    """Where sigmoid(x) rounds to 1 in ``dtype``: 1 - sigmoid(x) ≈ e^-x below half an ulp of 1."""
    return 40.0 if dtype == torch.float64 else 20.0


def _head_forward_step(row, previous, matrix, column: int, mask, negative_c0, scaled, deviation,
                       threshold: float):
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
    _sigmoid_times(value, row[..., column:column + 1], deviation, threshold)


def _head_forward_step_for_compile(row, previous, matrix, column: int, mask, negative_c0, scaled,
                                   deviation, threshold: float):
    """:func:`_head_forward_step` in a form ``torch.compile`` lowers (the product out of place,
    then read, rather than updated in place and read through views)."""
    if previous is not None:
        fresh = torch.baddbmm(row, previous, matrix)
        row.copy_(fresh)
    else:
        fresh = row
    value = fresh[..., :deviation.size(-1)]
    if mask is not None:
        value = torch.addcmul(negative_c0, mask, value)
    deviation.copy_(torch.ops.aten.softplus_backward(value, fresh[..., column:column + 1], 1.0,
                                                     threshold))


def _head_backward_step(grad, matrix, out, coefficients, rows, previous):
    """The reverse of :func:`_head_forward_step`: one product gives gc_i W and gc_i·y_i, a
    second adds s_i q̃_i + σ'_i gc_i W to the gradient of c_{i-1}."""
    torch.bmm(grad, matrix, out=out)
    previous.baddbmm_(coefficients, rows)


def _full_forward_step(projected, previous, weight_t, lse, query, logits, mask, negative_c0,
                       scaled, deviation, threshold: float):
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
    _sigmoid_times(value, torch.diagonal(logits, 0, 1, 2).unsqueeze(-1), deviation, threshold)


def _full_forward_step_for_compile(projected, previous, weight_t, lse, query, logits, mask,
                                   negative_c0, scaled, deviation, threshold: float):
    """:func:`_full_forward_step` in a form ``torch.compile`` lowers (out of place, then
    copied)."""
    if previous is not None:
        projected.copy_(torch.addmm(projected, previous, weight_t))
    batch, heads, dim = query.shape
    keys = projected[:, :heads * dim].view(batch, heads, dim).transpose(1, 2)
    fresh = torch.baddbmm(lse, query, keys, beta=-1)
    logits.copy_(fresh)
    value = projected[:, heads * dim:].view(batch, heads, dim)
    if mask is not None:
        value = torch.addcmul(negative_c0, mask.unsqueeze(-1), value)
    deviation.copy_(torch.ops.aten.softplus_backward(
        value, torch.diagonal(fresh, 0, 1, 2).unsqueeze(-1), 1.0, threshold))


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


def _context_backward_step_for_compile(grad, probs, delta, grad_used, mask, relation_t,
                                       previous):
    """:func:`_context_backward_step` in a form ``torch.compile`` lowers (no in-place update of
    an input that an ``out=`` operator then reads)."""
    if mask is not None:
        grad = grad + grad_used * mask
    step_delta = torch._softmax_backward_data(grad, probs, -1, probs.dtype)
    delta.copy_(step_delta)
    if previous is not None:
        flat = previous.view(-1, 1, previous.size(-1))
        flat.baddbmm_(step_delta.view(flat.shape), relation_t)


def _full_backward_step_for_compile(stacked, y, coefficients, left, previous, weight, extra):
    """:func:`_full_backward_step` without ``out=`` into a view of another layout, which
    ``torch.compile`` does not lower (it fuses the product and the copy into one kernel)."""
    _, batch, heads = coefficients.shape
    dim = stacked.size(2) // heads
    grad = stacked[1].view(batch * heads, 1, dim)
    s_out = coefficients[0].view(batch * heads, 1, 1)
    if extra is None:
        s_out.copy_(torch.bmm(grad, y))
    else:
        s_out.copy_(torch.baddbmm(extra, grad, y))
    left.view(batch, 2, heads, dim).copy_(coefficients.transpose(0, 1).unsqueeze(-1)
                                          * stacked.transpose(0, 1).view(batch, 2, heads, dim))
    previous.addmm_(left, weight)


_STEP_FUNCTIONS = {f.__name__: f for f in (
    _weight_forward_step, _weight_backward_step, _context_forward_step, _context_backward_step,
    _head_forward_step, _head_backward_step, _full_forward_step, _full_backward_step)}
_COMPILED_STEPS: Dict[str, object] = {}


def step_functions(recurrence: str) -> Dict[str, object]:
    """The loop bodies of the training kernels by name: as written (``eager``) or through
    ``torch.compile`` (``compile``, compiled once per process, shapes dynamic)."""
    if recurrence == "eager":
        return _STEP_FUNCTIONS
    if not _COMPILED_STEPS:
        if not hasattr(torch, "compile"):
            raise ValueError("--cross-attention-recurrence compile needs torch.compile "
                             "(PyTorch 2.0 or later); use --cross-attention-recurrence eager")
        compiled = dict(_STEP_FUNCTIONS, _full_backward_step=_full_backward_step_for_compile,
                        _context_backward_step=_context_backward_step_for_compile,
                        _head_forward_step=_head_forward_step_for_compile,
                        _full_forward_step=_full_forward_step_for_compile)
        # a loop body is traced once per kind of call (the last step, a running sum of one more
        # step, the variant's gain...), more than the default limit when variants are mixed
        config = torch._dynamo.config
        if hasattr(config, "recompile_limit"):
            config.recompile_limit = max(config.recompile_limit, 64)
        else:
            config.cache_size_limit = max(config.cache_size_limit, 64)
        _COMPILED_STEPS.update({name: torch.compile(f, dynamic=True)
                                for name, f in compiled.items()})
    return _COMPILED_STEPS


class WeightRecurrence(torch.autograd.Function):
    """Eqs. 3, 4, 10 for all steps: α_i = softmax(α̂_i + g ⊙ r_{i-1}), r the previous weights
    (Eq. 3) or their running sum (Eqs. 4, 10). ``energies`` (T, B, H, S) float32 (any strides),
    ``padding`` broadcastable to it (True at pads) or None, ``gain`` g (B, H, S) or None with the
    number ``scalar`` instead. Returns α (T, B, H, S). A running sum is kept by adding g ⊙ α_i to
    all later energies at once, so a step is two kernels forward and two backward."""

    @staticmethod
    def forward(ctx, energies, padding, gain, scalar, accumulate, steps):
        work = energies.clone(memory_format=torch.contiguous_format)
        if padding is not None:
            work.masked_fill_(padding, _MASKED)
        probs = torch.empty_like(work)
        forward_step = steps["_weight_forward_step"]
        last = work.size(0) - 1
        for i in range(last + 1):
            rest = None if i == last else (work[i + 1:] if accumulate else work[i + 1])
            forward_step(work[i], probs[i], rest, gain, scalar)
        ctx.accumulate, ctx.scalar, ctx.steps = accumulate, scalar, steps
        ctx.save_for_backward(probs, gain, padding)
        return probs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_probs):
        probs, gain, padding = ctx.saved_tensors
        grad = grad_probs.clone(memory_format=torch.contiguous_format)
        delta = torch.empty_like(probs)
        backward_step = ctx.steps["_weight_backward_step"]
        for i in range(probs.size(0) - 1, -1, -1):
            rest = None if i == 0 else (grad[:i] if ctx.accumulate else grad[i - 1])
            backward_step(grad[i], probs[i], delta[i], rest, gain, ctx.scalar)
        grad_gain = None
        if gain is not None and ctx.needs_input_grad[2] and probs.size(0) > 1:
            earlier = probs[:-1].cumsum(0) if ctx.accumulate else probs[:-1]
            grad_gain = (delta[1:] * earlier).sum(0)
        if padding is not None:  # the masked energies are constants
            delta.masked_fill_(padding, 0.0)
        return delta, None, grad_gain, None, None, None


class PrevContextRecurrence(torch.autograd.Function):
    """Eq. 2 for all steps as a recurrence on weights: α_i = softmax(α̂_i + a_{i-1} R) with a the
    weights the context used (α, or α times the dropout ``masks``). ``energies`` (T, B, H, S)
    float32, ``padding`` broadcastable to it or None, ``relation`` R (B, H, S, S), ``masks``
    (T, B, H, S) scaled dropout masks or None. Returns α, and a when ``masks`` is given."""

    @staticmethod
    def forward(ctx, energies, padding, relation, masks, steps):
        steps_, batch, heads, src_len = energies.shape
        ctx.set_materialize_grads(False)
        work = energies.clone(memory_format=torch.contiguous_format)
        if padding is not None:
            work.masked_fill_(padding, _MASKED)
        probs = torch.empty_like(work)
        used = probs if masks is None else torch.empty_like(work)
        flat = relation.reshape(batch * heads, src_len, src_len)
        forward_step = steps["_context_forward_step"]
        for i in range(steps_):
            forward_step(work[i], probs[i], used[i - 1] if i else None, flat,
                         None if masks is None else masks[i], used[i])
        ctx.steps = steps
        ctx.save_for_backward(probs, used if masks is not None else None, flat, masks, padding)
        return probs if masks is None else (probs, used)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_probs, grad_used=None):
        probs, used, flat, masks, padding = ctx.saved_tensors
        steps_, batch, heads, src_len = probs.shape
        if grad_probs is None:
            grad_probs = torch.zeros_like(probs)
        grad = grad_probs.clone(memory_format=torch.contiguous_format)
        grad_a = None
        if masks is not None:
            grad_a = (torch.zeros_like(probs) if grad_used is None
                      else grad_used.clone(memory_format=torch.contiguous_format))
        delta = torch.empty_like(probs)
        relation_t = flat.transpose(1, 2)
        backward_step = ctx.steps["_context_backward_step"]
        recurrent = grad if masks is None else grad_a  # the gradient that a_{i-1} R feeds
        for i in range(steps_ - 1, -1, -1):
            backward_step(grad[i], probs[i], delta[i], None if masks is None else grad_a[i],
                          None if masks is None else masks[i], relation_t,
                          recurrent[i - 1] if i else None)
        grad_relation = None
        if ctx.needs_input_grad[2] and steps_ > 1:
            a = (probs if used is None else used)[:-1].view(steps_ - 1, batch * heads, src_len)
            d = delta[1:].view(steps_ - 1, batch * heads, src_len)
            grad_relation = torch.bmm(a.permute(1, 2, 0), d.transpose(0, 1)).view(
                batch, heads, src_len, src_len)
        if padding is not None:
            delta.masked_fill_(padding, 0.0)
        return delta, None, grad_relation, None, None


def _carve(buffer: Tensor, *shapes) -> Tuple[Tensor, ...]:
    """Consecutive views of a flat ``buffer`` with the given shapes (one allocation for all)."""
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
    z = x - L (B, H, T) and of the returned source weights (1 - σ) softmax(α̂) if any."""
    grad_c0 = grad_c0.permute(1, 2, 0, 3)
    grad_values = torch.matmul(used.transpose(2, 3), grad_c0)
    grad_source = torch.matmul(grad_c0, values.transpose(2, 3))
    if masks is not None:
        grad_source.mul_(masks[..., :-1].permute(1, 2, 0, 3))
    if grad_probs is not None:
        keep = sigma.permute(1, 2, 0).unsqueeze(-1)
        grad_source.add_(grad_probs).addcmul_(grad_probs, keep, value=-1.0)
    grad_masked = torch._softmax_backward_data(grad_source, source, -1, source.dtype)
    grad_masked.addcmul_(source, grad_z.unsqueeze(-1), value=-1.0)  # ∂L_i/∂α̂_i = softmax(α̂_i)
    return grad_masked, grad_values


def _sigma_gradient(grad_probs, source, sigma):
    """The gradient of z = x - L through the returned source weights (1 - σ) softmax(α̂):
    -Σ_j g_j softmax_j times σ (1 - σ), (T, B, H)."""
    slope = torch.addcmul(sigma, sigma, sigma, value=-1.0)
    return (grad_probs * source).sum(-1).permute(2, 0, 1).mul_(slope).neg_()


def _expand_kv_outputs(ctx, steps, saved, buffers, need_weights, sigma):
    """The end of both expand-kv Functions' forward: what backward reads, then the contexts and,
    if asked, the source weights (the extra pair takes σ of each row's mass)."""
    ctx.steps = steps
    ctx.save_for_backward(*saved)
    # views of one buffer that the backward pass writes into: kept outside the version checks
    ctx.buffers = buffers
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
    row 2, column d + i of step i."""
    steps_, _, _, width = block.shape
    step, row = block.stride(0), block.stride(1)
    return block.as_strided((steps_, batch, heads), (step + 1, heads * row, row),
                            block.storage_offset() + 2 * width + dim)


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
                need_weights, steps):
        ctx.set_materialize_grads(False)
        masked = (energies if padding is None
                  else energies.masked_fill(padding[:, None, None, :], _MASKED))
        source, _, used, c0 = _plain_attention(masked, values, masks, with_lse=False)
        batch, heads, steps_, dim = c0.shape
        rows = batch * heads
        width = dim + steps_
        # the deviations D_i = c_i - c^0_i (0 at step 0), the backward pass's block (rows
        # [q̃_i | q_i·b_k], [gc_i W | gc_i·y_j], [. | σ'_i]), the loop's rows before it, the
        # backward pass's s_i c_{i-1} (0 at step 0) and, with dropout, σ (T, B, H) in one buffer
        deviation, scaled, block, out, weighted, sigma = _carve(
            c0.new_zeros(steps_ * rows * (2 * dim + 3 * width + (masks is not None) * (dim + 1))
                         + max(steps_ - 1, 0) * rows * width),
            (steps_, rows, 1, dim), (steps_ * (masks is not None), rows, 1, dim),
            (steps_, rows, 3, width), (rows, max(steps_ - 1, 0), width),
            (steps_, batch, heads, dim), (steps_ * (masks is not None), batch, heads))
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
            threshold = _sigmoid_threshold(c0.dtype)
            forward_step = steps["_head_forward_step"]
            for i in range(1, steps_):
                forward_step(out[:, i - 1:i], deviation[i - 1] if i > 1 else None, matrix, dim + i,
                             None if extra is None else extra[i],
                             None if masks is None else negative_c0[:, i:i + 1],
                             None if masks is None else scaled[i], deviation[i], threshold)
            # σ_i = sigmoid(z_i), z_i in column d + i of row i
            torch.sigmoid(torch.diagonal(out[:, :, dim + 1:], 0, 1, 2),
                          out=sigma[1:].view(steps_ - 1, rows).t())
        contexts = deviation.view(steps_, batch, heads, dim).add(c0.permute(2, 0, 1, 3))
        assert contexts.is_contiguous()
        ctx.first = first
        return _expand_kv_outputs(ctx, steps, (source, used, values, queries, key_weight,
                                               key_bias, weight, masks, c0, contexts),
                                  (sigma, block, deviation, weighted), need_weights, sigma)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_contexts, grad_probs=None):
        (source, used, values, queries, key_weight, key_bias, weight, masks, c0,
         contexts) = ctx.saved_tensors
        sigma, block, deviation, weighted = ctx.buffers
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
            first = ctx.first if weight is None else weight  # W_v, or the identity (Eq. 8)
            matrix = torch.cat([first.expand(batch, heads, dim, dim), y.permute(1, 2, 3, 0)],
                               dim=3).view(rows, dim, dim + steps_)
            # per step i: rows [q̃_i | .], [gc_i W | gc_i·y_j for all j], [. | σ'_i at d+i]
            sigma_used = _block_sigma(block, batch, heads, dim)  # σ' = σ (forward wrote it)
            if masks is not None:  # σ' = σ m
                torch.mul(sigma, masks[..., -1], out=sigma_used)
            query_t = block[:, :, 0, :dim].view(steps_, batch, heads, dim)  # q̃ (forward)
            extra = None
            if grad_probs is not None:  # through the returned source weights
                extra = _sigma_gradient(grad_probs, source, sigma)
                grad[:-1].addcmul_(extra[1:].unsqueeze(-1), query_t[1:])
            flat = grad.view(steps_, rows, 1, dim)
            backward_step = ctx.steps["_head_backward_step"]
            for i in range(steps_ - 1, 0, -1):
                backward_step(flat[i], matrix, block[i, :, 1:2],
                              block[i, :, 1:3, dim + i].unsqueeze(1), block[i, :, 0:2, :dim],
                              flat[i - 1])
            grad_z = torch.diagonal(block[:, :, 1, dim:], 0, 0, 2).t().reshape(
                steps_, batch, heads)
            if extra is not None:
                grad_z = grad_z + extra
            # ∂/∂q̃_i = s_i c_{i-1} (s_i = ∂z_i, 0 at step 0), ∂/∂(q_i·b_k) = s_i; through
            # q̃ = q W_k: ∂q = ∂q̃ W_kᵀ + s b_k, ∂W_k = Σ qᵀ ∂q̃, ∂b_k = Σ s q
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
                grad_weight, grad_bias, None, None, None)


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
    def forward(ctx, masked, values, query, weight, bias, masks, need_weights, steps):
        ctx.set_materialize_grads(False)
        source, lse, used, c0 = _plain_attention(masked, values, masks)
        batch, heads, steps_, dim = c0.shape
        embed = heads * dim
        # σ in row 1 of (T, 2, B, H) (row 0 takes s_i = gc_i·y_i in the backward pass), the
        # rows [k'_i | u_i (- c^0_i)], the logits, the backward pass's [s_i q_i | σ'_i gc_i], the
        # deviations D_i (0 at step 0) and, with dropout, m_i u_i - c^0_i, in one buffer
        coefficients, projected, logits, left, deviation, scaled = _carve(
            c0.new_zeros(steps_ * batch * (2 * heads + 5 * embed + heads * heads
                                           + (masks is not None) * embed)),
            (steps_, 2, batch, heads), (steps_, batch, 2 * embed),
            (steps_, batch, heads, heads), (steps_, batch, 2, heads, dim),
            (steps_, batch, heads, dim), (steps_ * (masks is not None), batch, heads, dim))
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
            threshold = _sigmoid_threshold(c0.dtype)
            forward_step = steps["_full_forward_step"]
            for i in range(1, steps_):
                forward_step(projected[i], deviation[i - 1].view(batch, embed) if i > 1 else None,
                             weight_t, lse[:, :, i].unsqueeze(-1), query[i], logits[i],
                             None if masks is None else masks[i, :, :, -1],
                             None if masks is None else negative_c0[i],
                             None if masks is None else scaled[i], deviation[i], threshold)
            torch.sigmoid(torch.diagonal(logits[1:], 0, 2, 3), out=sigma[1:])
        contexts = deviation.add(plain)
        return _expand_kv_outputs(ctx, steps, (source, used, values, query, weight, masks, c0,
                                               contexts),
                                  (coefficients, projected, left, deviation), need_weights, sigma)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_contexts, grad_probs=None):
        source, used, values, query, weight, masks, c0, contexts = ctx.saved_tensors
        coefficients, projected, left, deviation = ctx.buffers
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
            keys = projected[:, :, :embed].view(steps_, batch, heads, dim)
            extra = None
            if grad_probs is not None:  # the gradient of z through the returned weights
                extra = _sigma_gradient(grad_probs, source, sigma).reshape(steps_, rows, 1, 1)
            backward_step = ctx.steps["_full_backward_step"]
            for i in range(steps_ - 1, 0, -1):
                backward_step(stacked[i], y[i].view(rows, dim, 1), coefficients[i],
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
        return grad_masked, grad_values, grad_query, grad_weight, grad_bias, None, None, None


class HeadwiseLinear(nn.Module):
    """A separate affine map per head: x (B, H, ..., d_in) -> (B, H, ..., d_out)."""

    def __init__(self, heads: int, d_in: int, d_out: int, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads, d_out, d_in))
        bound = math.sqrt(6.0 / (d_in + d_out))  # Xavier-uniform per head
        nn.init.uniform_(self.weight, -bound, bound)
        self.bias = nn.Parameter(torch.zeros(heads, d_out)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = torch.einsum("bh...i,hoi->bh...o", x, self.weight)
        if self.bias is None:
            return y
        return y + self.bias.view(self.bias.size(0), *([1] * (x.dim() - 3)), -1)

    def extra_repr(self) -> str:
        heads, d_out, d_in = self.weight.shape
        return f"heads={heads}, d_in={d_in}, d_out={d_out}, bias={self.bias is not None}"


@with_incremental_state
class RecurrentCrossAttention(nn.Module):
    """Multi-head encoder-decoder attention with one of the variants of the module docstring.

    Called like fairseq's ``MultiheadAttention`` for encoder-decoder attention: ``query`` (T, B, E)
    decoder states, ``key``/``value`` (S, B, kdim/vdim) encoder states, ``key_padding_mask``
    (B, S) True at pads. Returns ``(out (T, B, E), weights)``, weights (B, T, S) averaged over
    heads, (H, B, T, S) with ``need_head_weights``, or None. The target positions of a full
    (teacher-forced) call are consecutive decoding steps from the first. With
    ``incremental_state`` it runs one step (T = 1) and keeps, per hypothesis, the projected keys
    and values (and the gains u·k_j of Eqs. 3, 4) and the variant's recurrent quantity (previous
    context (B, H, d_k), previous or accumulated weights (B, H, S), or previous rescaled energies
    (B, H, S); for ``expand-kv`` 1 and 2 the previous full context (B, E), the layer's previous
    output), all reordered in :meth:`reorder_incremental_state`. Parameters q_proj, k_proj,
    v_proj, out_proj are named as in fairseq's ``MultiheadAttention``; each variant adds its own.
    """

    records_attention = True  # modules/attention_entropy.py records its weights

    def __init__(self, embed_dim: int, num_heads: int, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, dropout: float = 0.0, bias: bool = True,
                 variant: str = "dot", kv_variant: int = 1, rescale_lambda: float = 0.5,
                 rescale_window: int = 5, recurrence: str = "eager"):
        super().__init__()
        check_options(variant, kv_variant, rescale_lambda, rescale_window, recurrence)
        if embed_dim % num_heads:
            raise ValueError(f"embedding size {embed_dim} is not divisible by {num_heads} heads")
        kdim = kdim if kdim is not None else embed_dim
        vdim = vdim if vdim is not None else embed_dim
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.variant = variant
        self.kv_variant = kv_variant
        # Eqs. 5, 6 read the layer's full context (§3.1: heads concatenated, then W_o)
        self._full_context = variant == "expand-kv" and kv_variant in (1, 2)
        self.rescale_lambda = rescale_lambda
        self.rescale_window = rescale_window
        self.recurrence = recurrence
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.beam_size = 1

        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        gain = 2 ** -0.5 if kdim == vdim == embed_dim else 1.0  # as fairseq's MultiheadAttention
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=gain)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if bias:
            nn.init.zeros_(self.out_proj.bias)

        heads, d = num_heads, self.head_dim
        if variant == "prev-context":
            self.context_query = HeadwiseLinear(heads, d, d, bias=False)  # U of Eq. 2
        elif variant in ("prev-weight", "prev-accum-weight"):
            self.weight_query = nn.Parameter(torch.empty(heads, d))  # u of Eqs. 3, 4
            nn.init.normal_(self.weight_query, std=d ** -0.5)
        elif variant == "expand-kv":
            if kv_variant == 1 and not kdim == vdim == embed_dim:
                raise ValueError(
                    f"--kv-variant 1 feeds the decoder-side context (size {embed_dim}) through "
                    f"the shared W_k and W_v, which take encoder states (size {kdim}): it needs "
                    f"--encoder-embed-dim equal to --decoder-embed-dim; use --kv-variant 2, 3 or 4")
            if kv_variant == 2:  # Eq. 6
                self.extra_k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
                self.extra_v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
                for proj in (self.extra_k_proj, self.extra_v_proj):
                    nn.init.xavier_uniform_(proj.weight, gain=2 ** -0.5)
            elif kv_variant in (3, 4):  # Eqs. 7, 8
                self.extra_key = HeadwiseLinear(heads, d, d, bias=bias)
                if kv_variant == 3:
                    self.extra_value = HeadwiseLinear(heads, d, d, bias=bias)

    def extra_repr(self) -> str:
        s = f"variant={self.variant}, heads={self.num_heads}, dropout={self.dropout_module.p}"
        if self.variant == "expand-kv":
            s += f", kv_variant={self.kv_variant}"
        if self.variant in ("continuous", "coverage"):
            s += f", lambda={self.rescale_lambda}"
        if self.variant == "continuous":
            s += f", window={self.rescale_window}"
        if self.recurrence != "eager":
            s += f", recurrence={self.recurrence}"
        return s

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = True,
                attn_mask: Optional[Tensor] = None,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        if attn_mask is not None:
            raise ValueError("recurrent cross-attention takes no attn_mask")
        if not static_kv:
            raise ValueError("recurrent cross-attention attends to a fixed source (static_kv)")
        need_weights = need_weights or need_head_weights
        tgt_len, batch, _ = query.shape
        state: Optional[Dict[str, Optional[Tensor]]] = None
        if incremental_state is not None:
            if tgt_len != 1:
                raise ValueError(f"incremental decoding takes one target position per step, "
                                 f"got {tgt_len}")
            state = self._get_input_buffer(incremental_state)
        if state is not None and state.get("key") is not None:
            k, v = state["key"], state["value"]
        else:
            if key is None or value is None:
                raise ValueError("recurrent cross-attention needs the encoder output as key/value")
            k, v = self._heads(self._keys(key, state is None)), self._heads(self.v_proj(value))
        q = self._heads(self.q_proj(query) * self.scaling)  # (B, H, T, d)
        padding = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
        energies = torch.matmul(q, k.transpose(2, 3)).float()  # α̂ (Eq. 1), (B, H, T, S)

        if state is None:
            probs, context = self._full(q, k, v, energies, padding, need_weights)
        else:
            probs, context = self._step(q, k, v, energies, padding, state)
            state["key"], state["value"] = k, v
            self._set_input_buffer(incremental_state, state)
        out = self.out_proj(context.permute(2, 0, 1, 3).reshape(tgt_len, batch, self.embed_dim))
        if state is not None and self._full_context:
            state["prev_context"] = out[0]  # c^ℓ_i of §3.1, the next step's input (Eqs. 5, 6)
        if not need_weights:
            return out, None
        probs = probs.to(query.dtype)
        return out, (probs.transpose(0, 1) if need_head_weights else probs.mean(dim=1))

    # ---- helpers ---------------------------------------------------------------------------------
    def _heads(self, x: Tensor) -> Tensor:
        """(L, B, E) -> (B, H, L, d)."""
        length, batch, _ = x.shape
        return x.view(length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _keys(self, key: Tensor, full: bool) -> Tensor:
        """The source keys k_j (S, B, E). For a full pass of Eqs. 7, 8 with a key bias b_k,
        k_j - b_k instead: the energies become α̂_{i,j} - q_i·b_k, which leaves softmax(α̂_i)
        as it is and makes their logsumexp L_i - q_i·b_k, the term z_i = q̃_i·c_{i-1} + q_i·b_k
        - L_i needs beside q̃_i·c_{i-1} (so the recurrence takes no key bias). The bias is
        folded into k_proj's (one (E,) subtraction)."""
        bias = self.extra_key.bias if full and self.kv_variant in (3, 4) and \
            self.variant == "expand-kv" else None
        if bias is None:
            return self.k_proj(key)
        shift = bias.to(key.dtype).reshape(-1)
        return F.linear(key, self.k_proj.weight,
                        -shift if self.k_proj.bias is None else self.k_proj.bias - shift)

    @staticmethod
    def _masked(energies: Tensor, padding: Optional[Tensor]) -> Tensor:
        """energies (B, H, T, S) with pads set to a large negative value."""
        if padding is None:
            return energies
        return energies.masked_fill(padding[:, None, None, :], _MASKED)

    def _mix(self, probs: Tensor, v: Tensor) -> Tensor:
        """Contexts (B, H, T, d) from weights (B, H, T, S), with attention dropout."""
        return torch.matmul(self.dropout_module(probs).to(v.dtype), v)

    def _gain(self, k: Tensor):
        """The factor of the recurrent weights in the energies of Eqs. 3, 4 (u·k_j/√d_k, (B, H, S))
        and Eq. 10 (-λ/√d_k)."""
        if self.variant == "coverage":
            return -self.rescale_lambda * self.scaling
        return torch.einsum("bhsd,hd->bhs", k, self.weight_query.to(k.dtype)).float() * self.scaling

    def _dropout_masks(self, steps: int, batch: int, width: int, like: Tensor) -> Optional[Tensor]:
        """Attention-dropout masks (T, B, H, width), already scaled by 1/(1-p), for the weights
        of ``steps`` steps over ``width`` keys, or None when dropout is off. Eqs. 2, 5-8 draw
        them once per call and apply them inside their recurrences."""
        dropout = self.dropout_module
        if dropout.p <= 0 or not (dropout.training or dropout.apply_during_inference):
            return None
        ones = like.new_ones(steps, batch, self.num_heads, width)
        return F.dropout(ones, dropout.p, training=True)

    def _steps(self):
        return step_functions(self.recurrence)

    # ---- full (teacher-forced) sequences ---------------------------------------------------------
    def _full(self, q, k, v, energies, padding, need_weights=True):
        variant = self.variant
        pad = None if padding is None else padding[:, None, :]  # broadcasts to (T, B, H, S)
        if variant == "dot":
            probs = torch.softmax(self._masked(energies, padding), dim=-1)
        elif variant == "continuous":
            rescaled = continuous_scan(energies, padding, self.rescale_lambda, self.rescale_window)
            probs = torch.softmax(self._masked(rescaled, padding), dim=-1)  # Eq. 9
        elif variant in ("prev-weight", "prev-accum-weight", "coverage"):  # Eqs. 3, 4, 10
            gain = self._gain(k)
            tensor_gain = gain if torch.is_tensor(gain) else None
            probs = WeightRecurrence.apply(
                energies.permute(2, 0, 1, 3), pad, tensor_gain,
                0.0 if tensor_gain is not None else float(gain), variant != "prev-weight",
                self._steps()).permute(1, 2, 0, 3)
        elif variant == "prev-context":
            return self._prev_context_full(k, v, energies, pad)
        else:
            return self._expand_kv_full(q, v, energies, padding, need_weights)
        return probs, self._mix(probs, v)

    def _prev_context_full(self, k, v, energies, pad):
        """Eq. 2 as a recurrence on weights: the extra energies of step i are a_{i-1} R with
        R[j', j] = (U v_j')·k_j / √d_k and a_{i-1} the previous (dropped-out) weights."""
        batch, heads, steps, src_len = energies.shape
        relation = torch.matmul(self.context_query(v), k.transpose(2, 3)).float() * self.scaling
        masks = self._dropout_masks(steps, batch, src_len, energies)
        out = PrevContextRecurrence.apply(energies.permute(2, 0, 1, 3), pad, relation, masks,
                                          self._steps())
        probs, used = (out, out) if masks is None else out
        probs, used = probs.permute(1, 2, 0, 3), used.permute(1, 2, 0, 3)
        return probs, torch.matmul(used.to(v.dtype), v)

    def _expand_kv_full(self, q, v, energies, padding, need_weights):
        """Eqs. 5-8 for all steps (see :class:`HeadContextRecurrence`): the plain weights and
        contexts of every step at once, then a recurrence on the extra pair's weight σ_i and the
        context. Returns the source weights (1 - σ_i) softmax(α̂_i) (None without
        ``need_weights``) and the contexts."""
        batch, heads, steps, src_len = energies.shape
        masks = self._dropout_masks(steps, batch, src_len + 1, energies)
        values = v.float()
        if self._full_context:  # Eqs. 5, 6
            weight, bias = self._fused_full_context()
            out = FullContextRecurrence.apply(
                self._masked(energies, padding), values, q.permute(2, 0, 1, 3).float(), weight.float(),
                None if bias is None else bias.float(), masks, need_weights, self._steps())
        else:  # Eqs. 7, 8
            weight = bias = None
            if self.kv_variant == 3:
                weight = self.extra_value.weight.float()
                bias = None if self.extra_value.bias is None else self.extra_value.bias.float()
            out = HeadContextRecurrence.apply(
                energies, padding, values, q.float(), self.extra_key.weight.float(), None,
                weight, bias, masks, need_weights, self._steps())  # b_k: in the keys (_keys)
        contexts, probs = out if need_weights else (out, None)
        return probs, contexts.to(v.dtype).permute(1, 2, 0, 3)

    def _full_context_projections(self) -> Tuple[nn.Linear, nn.Linear]:
        """The maps of the full context to the extra key and value: W_k, W_v shared with the
        source (Eq. 5) or W_gk, W_gv of their own (Eq. 6)."""
        if self.kv_variant == 1:
            return self.k_proj, self.v_proj
        return self.extra_k_proj, self.extra_v_proj

    def _full_context_kv(self, full: Tensor) -> Tuple[Tensor, Tensor]:
        """Eqs. 5, 6 from the full context c^ℓ_{i-1} (B, E) (incremental decoding, where the
        state keeps the layer's previous output): extra key and value (B, H, d)."""
        k_proj, v_proj = self._full_context_projections()
        shape = (full.size(0), self.num_heads, self.head_dim)
        return k_proj(full).view(shape), v_proj(full).view(shape)

    def _fused_full_context(self) -> Tuple[Tensor, Optional[Tensor]]:
        """Eqs. 5, 6 for a full pass, from the heads' previous contexts C (B, E): with
        c^ℓ = W_o C + b_o, [g_k; g_v] = W_g c^ℓ + b_g = (W_g W_o) C + (W_g b_o + b_g). Returns
        W_g W_o (2E, E), formed once per call (each step is then one product), and the bias."""
        k_proj, v_proj = self._full_context_projections()
        w_g = torch.cat([k_proj.weight, v_proj.weight])  # (2E, E)
        weight = torch.matmul(w_g, self.out_proj.weight)
        b_g = None if k_proj.bias is None else torch.cat([k_proj.bias, v_proj.bias])
        if self.out_proj.bias is None:
            return weight, b_g
        if b_g is None:
            return weight, torch.mv(w_g, self.out_proj.bias)
        return weight, torch.addmv(b_g, w_g, self.out_proj.bias)

    def _head_context_kv(self, context: Tensor) -> Tuple[Tensor, Tensor]:
        """Eqs. 7, 8 from each head's own previous context c^{ℓ,n}_{i-1} (B, H, d)."""
        if self.kv_variant == 3:
            return self.extra_key(context), self.extra_value(context)  # Eq. 7
        return self.extra_key(context), context  # Eq. 8

    def _expand_kv_steps(self, q, v, masked, previous, extra):
        """Eqs. 5-8 for the steps of ``masked`` energies (B, H, T, S), starting from ``previous``
        (None at the first step), the input of ``extra``, which maps it to the extra key and value
        (B, H, d). From the second of these steps on, ``previous`` is the heads' context of the
        step before (B, H, d). Returns source weights (B, H, T, S), contexts (B, H, T, d) and the
        last context."""
        batch, _, _, src_len = masked.shape
        probs, contexts = [], []
        for i, e in enumerate(masked.unbind(2)):
            mask = self._dropout_masks(1, batch, src_len + 1, e)
            mask = None if mask is None else mask[0]  # (B, H, S + 1)
            if previous is None:  # first step: the source only
                p = torch.softmax(e, dim=-1)
                a = p if mask is None else p * mask[..., :src_len]
                context = torch.matmul(a.to(v.dtype).unsqueeze(2), v)
                source = p
            else:
                extra_k, extra_v = extra(previous)
                extra_e = (q[:, :, i] * extra_k).sum(dim=-1, keepdim=True).float()
                p = torch.softmax(torch.cat([e, extra_e], dim=-1), dim=-1)  # S + 1 pairs
                a = (p if mask is None else p * mask).to(v.dtype)
                context = torch.matmul(a[..., :src_len].unsqueeze(2), v)
                context = context + (a[..., src_len:] * extra_v).unsqueeze(2)
                source = p[..., :src_len]
            previous = context.squeeze(2)
            probs.append(source)
            contexts.append(context)
        return torch.stack(probs, dim=2), torch.cat(contexts, dim=2), previous

    # ---- incremental decoding --------------------------------------------------------------------
    def _step(self, q, k, v, energies, padding, state):
        """One decoding step from ``state`` (updated in place); q (B, H, 1, d)."""
        variant = self.variant
        name = _STATE_KEY.get(variant)
        previous = state.get(name) if name is not None else None
        if variant == "dot":
            probs = torch.softmax(self._masked(energies, padding), dim=-1)
        elif variant == "continuous":
            rescaled = continuous_step(previous, energies[:, :, 0], padding, self.rescale_lambda,
                                       self.rescale_window)  # Eq. 9
            state[name] = rescaled
            probs = torch.softmax(self._masked(rescaled.unsqueeze(2), padding), dim=-1)
        elif variant in ("prev-weight", "prev-accum-weight", "coverage"):
            gain = state.get("gain")
            if gain is None:
                gain = self._gain(k)
                if torch.is_tensor(gain):
                    state["gain"] = gain
            probs, state[name] = weight_recurrence(
                self._masked(energies, padding), gain, accumulate=variant != "prev-weight",
                previous=previous)  # Eqs. 3, 4, 10
        elif variant == "prev-context":
            if previous is not None:  # Eq. 2: q_i = W_q s_i + U c_{i-1}
                extra_q = self.context_query(previous).unsqueeze(2) * self.scaling
                energies = energies + torch.matmul(extra_q, k.transpose(2, 3)).float()
            probs = torch.softmax(self._masked(energies, padding), dim=-1)
            mask = self._dropout_masks(1, probs.size(0), probs.size(3), probs)
            used = probs if mask is None else probs * mask.permute(1, 2, 0, 3)
            context = torch.matmul(used.to(v.dtype), v)
            state[name] = context[:, :, 0]
            return probs, context
        else:
            extra = self._full_context_kv if self._full_context else self._head_context_kv
            probs, context, last = self._expand_kv_steps(
                q, v, self._masked(energies, padding), previous, extra)
            if not self._full_context:  # Eqs. 7, 8; for Eqs. 5, 6 forward keeps the output
                state[name] = last
            return probs, context
        return probs, self._mix(probs, v)

    def set_beam_size(self, beam_size: int):
        """Called by fairseq's generator; lets :meth:`reorder_incremental_state` skip the cached
        keys and values when a reorder stays within each sentence's beam."""
        self.beam_size = beam_size

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Reorder the per-hypothesis state (keys, values, recurrent quantity) for beam search.
        All hypotheses of a sentence share what comes from its source (keys, values, the gains of
        Eqs. 3, 4), so a reorder within each beam of ``beam_size`` rows leaves that as it is."""
        buffer = self._get_input_buffer(incremental_state)
        if not buffer:
            return incremental_state
        rows = new_order.numel()
        within_beams = False
        if self.beam_size > 1 and buffer.get("key") is not None and buffer["key"].size(0) == rows:
            start = torch.arange(rows, device=new_order.device) // self.beam_size
            within_beams = bool((new_order // self.beam_size == start).all())
        for name, value in buffer.items():
            if value is not None and not (within_beams and name in _SOURCE_KEYS):
                buffer[name] = value.index_select(0, new_order)
        return self._set_input_buffer(incremental_state, buffer)

    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, "attn_state")
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state, buffer: Dict[str, Optional[Tensor]]):
        return self.set_incremental_state(incremental_state, "attn_state", buffer)
