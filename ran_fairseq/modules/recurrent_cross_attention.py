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

Training keeps all steps parallel where the maths allows: projections and energies α̂ are
computed for all target positions at once. Eqs. 3, 4, 10 loop over target steps on (B, H, S)
weights only, and contexts are formed after the loop. Eq. 2 becomes a recurrence on weights too:
(U c_{i-1})·k_j = Σ_j' a_{i-1,j'} (U v_j')·k_j, so the extra energies are a_{i-1} R with
R = (V Uᵀ) Kᵀ / √d_k computed once. Eq. 9 is linear in the energies: with the windowed
averaging written as a banded matrix M, α̊_i = (1-λ) M α̊_{i-1} + b_i, solved for all steps by a
log-depth (Hillis-Steele) scan, :func:`continuous_scan`. Only Eqs. 5-8 loop on contexts; for
Eqs. 5, 6 the output projection and the extra key/value projections are multiplied into one
(2E, E) matrix once per call, so a step costs one product, as without the projection.
Incremental decoding runs one step of the same recurrences from the state kept under the
module's own incremental-state key, reordered with the beam.
"""
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules.fairseq_dropout import FairseqDropout

CROSS_ATTENTION_VARIANTS = ("dot", "prev-context", "prev-weight", "prev-accum-weight",
                            "expand-kv", "continuous", "coverage")
KV_VARIANTS = (1, 2, 3, 4)

# Masked energies get a large finite value (energies are float32): a fully padded row then yields
# uniform weights instead of NaN, and masked positions get weights of exactly 0 otherwise.
_MASKED = -1e9

# The recurrent quantity each variant keeps between decoding steps (per hypothesis).
_STATE_KEY = {"prev-context": "prev_context", "expand-kv": "prev_context",
              "prev-weight": "prev_weights", "prev-accum-weight": "accum_weights",
              "coverage": "accum_weights", "continuous": "prev_energies"}
# What the state caches from the source alone: the same for every hypothesis of a sentence.
_SOURCE_KEYS = ("key", "value", "gain")


def check_options(variant: str, kv_variant: int, rescale_lambda: float, rescale_window: int):
    """Raise a ValueError naming the flag for options no variant can use."""
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
                  device=None) -> Tensor:
    """Eq. 9's windowed averaging as a matrix: M[b, j, j'] = 1/(2k+1) where |j-j'| ≤ k and both
    positions are real, else 0. Shape (B, S, S), or (1, S, S) without padding; symmetric."""
    if padding is not None:
        device = padding.device
    pos = torch.arange(src_len, device=device)
    band = ((pos[:, None] - pos[None, :]).abs() <= window).float() / (2 * window + 1)
    if padding is None:
        return band.unsqueeze(0)
    real = (~padding).float()
    return band * real[:, :, None] * real[:, None, :]


def continuous_step(previous: Optional[Tensor], energies: Tensor, padding: Optional[Tensor],
                    rescale_lambda: float, window: int) -> Tensor:
    """One step of Eq. 9: α̊_i from α̂_i (B, H, S) and α̊_{i-1} (None at the first step, where
    α̊_0 = α̂_0)."""
    if previous is None:
        return energies
    return rescale_lambda * energies + (1 - rescale_lambda) * window_average(previous, padding,
                                                                              window)


def continuous_scan(energies: Tensor, padding: Optional[Tensor], rescale_lambda: float,
                    window: int) -> Tensor:
    """Eq. 9 for all steps at once: energies α̂ (B, H, T, S) -> α̊ (B, H, T, S).

    With A = (1-λ) M (:func:`window_matrix`), b_0 = α̂_0 and b_i = λ α̂_i, the recurrence is
    α̊_i = A α̊_{i-1} + b_i, i.e. α̊_i = Σ_{p≤i} A^p b_{i-p}. A Hillis-Steele scan adds
    A^d α̊_{i-d} for d = 1, 2, 4, ...: ⌈log2 T⌉ batched products instead of T steps. It is exact
    up to rounding and stable, since A's rows sum to at most 1-λ < 1 (powers shrink)."""
    steps = energies.size(2)
    power = (1 - rescale_lambda) * window_matrix(padding, energies.size(3), window,
                                                 energies.device)
    power = power.unsqueeze(1).to(energies.dtype)  # A^d, (B, 1, S, S); symmetric, so x A = A x
    x = torch.cat([energies[:, :, :1], rescale_lambda * energies[:, :, 1:]], dim=2)
    shift = 1
    while shift < steps:
        x = torch.cat([x[:, :, :shift], x[:, :, shift:] + torch.matmul(x[:, :, :-shift], power)],
                      dim=2)
        shift *= 2
        if shift < steps:
            power = torch.matmul(power, power)
    return x


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
                 rescale_window: int = 5):
        super().__init__()
        check_options(variant, kv_variant, rescale_lambda, rescale_window)
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
            k, v = self._heads(self.k_proj(key)), self._heads(self.v_proj(value))
        q = self._heads(self.q_proj(query) * self.scaling)  # (B, H, T, d)
        padding = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
        energies = torch.matmul(q, k.transpose(2, 3)).float()  # α̂ (Eq. 1), (B, H, T, S)

        if state is None:
            probs, context = self._full(q, k, v, energies, padding)
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

    # ---- full (teacher-forced) sequences ---------------------------------------------------------
    def _full(self, q, k, v, energies, padding):
        variant = self.variant
        if variant == "dot":
            probs = torch.softmax(self._masked(energies, padding), dim=-1)
        elif variant == "continuous":
            rescaled = continuous_scan(energies, padding, self.rescale_lambda, self.rescale_window)
            probs = torch.softmax(self._masked(rescaled, padding), dim=-1)  # Eq. 9
        elif variant in ("prev-weight", "prev-accum-weight", "coverage"):
            probs, _ = weight_recurrence(self._masked(energies, padding), self._gain(k),
                                         accumulate=variant != "prev-weight")  # Eqs. 3, 4, 10
        elif variant == "prev-context":
            return self._prev_context_full(k, v, energies, padding)
        else:
            extra = self._fused_full_context_kv() if self._full_context else self._head_context_kv
            return self._expand_kv_steps(q, v, self._masked(energies, padding), None, extra)[:2]
        return probs, self._mix(probs, v)

    def _prev_context_full(self, k, v, energies, padding):
        """Eq. 2 as a recurrence on weights: the extra energies of step i are a_{i-1} R with
        R[j', j] = (U v_j')·k_j / √d_k and a_{i-1} the previous (dropped-out) weights."""
        batch, heads, steps, src_len = energies.shape
        relation = torch.matmul(self.context_query(v), k.transpose(2, 3)).float() * self.scaling
        relation = relation.view(batch * heads, src_len, src_len)
        masked = self._masked(energies, padding).permute(2, 0, 1, 3).reshape(
            steps, batch * heads, 1, src_len)
        probs, used = [], []
        previous = None
        for e in masked:
            if previous is not None:
                e = torch.baddbmm(e, previous, relation)
            p = torch.softmax(e, dim=-1)
            previous = self.dropout_module(p)
            probs.append(p)
            used.append(previous)
        probs = torch.cat(probs, dim=1).view(batch, heads, steps, src_len)
        used = torch.cat(used, dim=1).view(batch, heads, steps, src_len)
        return probs, torch.matmul(used.to(v.dtype), v)

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

    def _fused_full_context_kv(self):
        """Eqs. 5, 6 from the heads' previous contexts C (B, H, d), for a full pass: with
        c^ℓ = W_o C + b_o, [g_k; g_v] = W_g c^ℓ + b_g = (W_g W_o) C + (W_g b_o + b_g). The product
        W_g W_o is formed once here; each step is then one (B, E) x (E, 2E) product."""
        k_proj, v_proj = self._full_context_projections()
        w_g = torch.cat([k_proj.weight, v_proj.weight])  # (2E, E)
        weight = torch.matmul(w_g, self.out_proj.weight)
        bias = None
        if self.out_proj.bias is not None:
            bias = torch.matmul(w_g, self.out_proj.bias)
        if k_proj.bias is not None:
            b_g = torch.cat([k_proj.bias, v_proj.bias])
            bias = b_g if bias is None else bias + b_g
        heads, d = self.num_heads, self.head_dim

        def extra(context: Tensor) -> Tuple[Tensor, Tensor]:
            both = F.linear(context.reshape(context.size(0), self.embed_dim), weight, bias)
            both = both.view(context.size(0), 2, heads, d)
            return both[:, 0], both[:, 1]

        return extra

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
        src_len = masked.size(3)
        probs, contexts = [], []
        for i, e in enumerate(masked.unbind(2)):
            if previous is None:  # first step: the source only
                p = torch.softmax(e, dim=-1)
                context = torch.matmul(self.dropout_module(p).to(v.dtype).unsqueeze(2), v)
                source = p
            else:
                extra_k, extra_v = extra(previous)
                extra_e = (q[:, :, i] * extra_k).sum(dim=-1, keepdim=True).float()
                p = torch.softmax(torch.cat([e, extra_e], dim=-1), dim=-1)  # S + 1 pairs
                a = self.dropout_module(p).to(v.dtype)
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
            context = self._mix(probs, v)
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
