"""Encoder-decoder attention that sees its own earlier decisions (Rosendahl et al. 2021,
"Recurrent Attention for the Transformer", §3): the nn.Module, its teacher-forced pass (through
the training Functions of ``weight_functions`` and ``context_functions``) and its incremental
decoding step. The variants and the choices where the paper is silent are described in the
package's docstring (``__init__.py``)."""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules.fairseq_dropout import FairseqDropout

from .common import MASKED, HeadwiseLinear, check_options, continuous_step, weight_recurrence
from .context_functions import FullContextRecurrence, HeadContextRecurrence
from .weight_functions import PrevContextRecurrence, WeightRecurrence, continuous_scan

# True: a teacher-forced pass runs as consecutive decoding steps differentiated by autograd
# (RecurrentCrossAttention._full_eager), the reference of the training Functions' written-out
# backward passes, for checking or debugging them; a switch of the code, not a model option
USE_EAGER = False

# The recurrent quantity each variant keeps between decoding steps (per hypothesis).
_STATE_KEY = {"prev-context": "prev_context", "expand-kv": "prev_context",
              "prev-weight": "prev_weights", "prev-accum-weight": "accum_weights",
              "coverage": "accum_weights", "continuous": "prev_energies"}
# What the state caches from the source alone: the same for every hypothesis of a sentence.
_SOURCE_KEYS = ("key", "value", "gain")


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
                 vdim: Optional[int] = None, dropout: float = 0.0, bias: bool = True, *,
                 cross_attention: str, kv_variant: int, rescale_lambda: float,
                 rescale_window: int):
        # the arguments after * are the model's options of the same names (their defaults in
        # RecurrentCrossTransformerConfig); the others follow fairseq's MultiheadAttention
        super().__init__()
        check_options(cross_attention, kv_variant, rescale_lambda, rescale_window)
        variant = cross_attention
        if embed_dim % num_heads:
            raise ValueError(f"embedding size {embed_dim} is not divisible by {num_heads} heads")
        kdim = kdim if kdim is not None else embed_dim
        vdim = vdim if vdim is not None else embed_dim
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.cross_attention = cross_attention
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
                    f"kv_variant 1 feeds the decoder-side context (size {embed_dim}) through "
                    f"the shared W_k and W_v, which take encoder states (size {kdim}): it needs "
                    f"kdim = vdim = embed_dim; kv_variant 2, 3 and 4 do not")
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
        s = (f"cross_attention={self.cross_attention}, heads={self.num_heads}, "
             f"dropout={self.dropout_module.p}")
        if self.cross_attention == "expand-kv":
            s += f", kv_variant={self.kv_variant}"
        if self.cross_attention in ("continuous", "coverage"):
            s += f", rescale_lambda={self.rescale_lambda}"
        if self.cross_attention == "continuous":
            s += f", rescale_window={self.rescale_window}"
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
        fused = state is None and not USE_EAGER  # a full pass through the training Functions
        stacked = None  # [W_k; W_v] and [b_k; b_v] where Eq. 5's full pass shares them
        if state is not None and state.get("key") is not None:
            k, v = state["key"], state["value"]
        else:
            if key is None or value is None:
                raise ValueError("recurrent cross-attention needs the encoder output as key/value")
            if fused and self._full_context and self.kv_variant == 1 and key is value:
                stacked = self._stacked_kv_weights()
                k, v = (self._heads(x) for x in self._project_twice(key, *stacked))
            else:
                k, v = self._heads(self._keys(key, fused)), self._heads(self.v_proj(value))
        q = self._heads(self.q_proj(query) * self.scaling)  # (B, H, T, d)
        padding = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
        energies = torch.matmul(q, k.transpose(2, 3)).float()  # α̂ (Eq. 1), (B, H, T, S)

        if fused:
            probs, context = self._full(q, k, v, energies, padding, need_weights, stacked)
        elif state is None:
            probs, context = self._full_eager(q, k, v, energies, padding)
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
            self.cross_attention == "expand-kv" else None
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
        return energies.masked_fill(padding[:, None, None, :], MASKED)

    def _mix(self, probs: Tensor, v: Tensor) -> Tensor:
        """Contexts (B, H, T, d) from weights (B, H, T, S), with attention dropout."""
        return torch.matmul(self.dropout_module(probs).to(v.dtype), v)

    def _gain(self, k: Tensor):
        """The factor of the recurrent weights in the energies of Eqs. 3, 4 (u·k_j/√d_k, (B, H, S))
        and Eq. 10 (-λ/√d_k)."""
        if self.cross_attention == "coverage":
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

    # ---- full (teacher-forced) sequences ---------------------------------------------------------
    def _full(self, q, k, v, energies, padding, need_weights=True, stacked=None):
        variant = self.cross_attention
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
                0.0 if tensor_gain is not None else float(gain),
                variant != "prev-weight").permute(1, 2, 0, 3)
        elif variant == "prev-context":
            return self._prev_context_full(k, v, energies, pad)
        else:
            return self._expand_kv_full(q, v, energies, padding, need_weights, stacked)
        return probs, self._mix(probs, v)

    def _full_eager(self, q, k, v, energies, padding):
        """What :meth:`_full` computes, as consecutive decoding steps (:meth:`_step`) that autograd
        differentiates through every operation: the reference of the training Functions, which
        :data:`USE_EAGER` selects instead. Attention dropout is drawn step by step."""
        batch = q.size(0)
        state: Dict[str, Optional[Tensor]] = {}
        probs, contexts = [], []
        for i in range(q.size(2)):
            p, c = self._step(q[:, :, i:i + 1], k, v, energies[:, :, i:i + 1], padding, state)
            if self._full_context:  # Eqs. 5, 6 read the layer's previous output (§3.1)
                state["prev_context"] = self.out_proj(
                    c.permute(2, 0, 1, 3).reshape(batch, self.embed_dim))
            probs.append(p)
            contexts.append(c)
        return torch.cat(probs, dim=2), torch.cat(contexts, dim=2)

    def _prev_context_full(self, k, v, energies, pad):
        """Eq. 2 as a recurrence on weights: the extra energies of step i are a_{i-1} R with
        R[j', j] = (U v_j')·k_j / √d_k and a_{i-1} the previous (dropped-out) weights."""
        batch, heads, steps, src_len = energies.shape
        relation = torch.matmul(self.context_query(v), k.transpose(2, 3)).float() * self.scaling
        masks = self._dropout_masks(steps, batch, src_len, energies)
        out = PrevContextRecurrence.apply(energies.permute(2, 0, 1, 3), pad, relation, masks)
        probs, used = (out, out) if masks is None else out
        probs, used = probs.permute(1, 2, 0, 3), used.permute(1, 2, 0, 3)
        return probs, torch.matmul(used.to(v.dtype), v)

    def _expand_kv_full(self, q, v, energies, padding, need_weights, stacked=None):
        """Eqs. 5-8 for all steps (see :class:`HeadContextRecurrence`): the plain weights and
        contexts of every step at once, then a recurrence on the extra pair's weight σ_i and the
        context. Returns the source weights (1 - σ_i) softmax(α̂_i) (None without
        ``need_weights``) and the contexts."""
        batch, heads, steps, src_len = energies.shape
        masks = self._dropout_masks(steps, batch, src_len + 1, energies)
        values = v.float()
        if self._full_context:  # Eqs. 5, 6
            weight, bias = self._fused_full_context(stacked)
            out = FullContextRecurrence.apply(
                self._masked(energies, padding), values, q.permute(2, 0, 1, 3).float(),
                weight.float(), None if bias is None else bias.float(), masks, need_weights)
        else:  # Eqs. 7, 8
            weight = bias = None
            if self.kv_variant == 3:
                weight = self.extra_value.weight.float()
                bias = None if self.extra_value.bias is None else self.extra_value.bias.float()
            out = HeadContextRecurrence.apply(
                energies, padding, values, q.float(), self.extra_key.weight.float(), None,
                weight, bias, masks, need_weights)  # b_k: in the keys (_keys)
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

    def _stacked_kv_weights(self) -> Tuple[Tensor, Optional[Tensor]]:
        """W_g = [W_k; W_v] (2, E, E) and b_g = [b_k; b_v] (2, E) (or None) of the full
        context's extra key and value. With kv_variant 1 (Eq. 5: the source's own W_k, W_v)
        ``forward`` also projects the source with them, so that each parameter and the encoder
        output reach autograd once, through the stack (fewer kernels: docs/benchmarks.md)."""
        k_proj, v_proj = self._full_context_projections()
        w_g = torch.stack([k_proj.weight, v_proj.weight])  # (2, E, E)
        return w_g, None if k_proj.bias is None else torch.stack([k_proj.bias, v_proj.bias])

    def _project_twice(self, key: Tensor, weight: Tensor, bias: Optional[Tensor]):
        """The source keys and values (S, B, E) each, from [W_k; W_v] and [b_k; b_v] in one
        batched product whose two outputs are contiguous (a (S, B, 2E) product split in two would
        leave both strided, and the attention's products would copy them)."""
        length, batch, embed = key.shape
        rows = key.reshape(1, length * batch, embed).expand(2, -1, -1)
        weights = weight.transpose(1, 2)
        both = (torch.bmm(rows, weights) if bias is None
                else torch.baddbmm(bias.unsqueeze(1), rows, weights))
        return tuple(x.view(length, batch, embed) for x in both.unbind(0))

    def _fused_full_context(self, stacked=None) -> Tuple[Tensor, Optional[Tensor]]:
        """Eqs. 5, 6 for a full pass, from the heads' previous contexts C (B, E): with
        c^ℓ = W_o C + b_o, [g_k; g_v] = W_g c^ℓ + b_g = (W_g W_o) C + (W_g b_o + b_g). Returns
        W_g W_o (2E, E), formed once per call (each step is then one product), and the bias;
        ``stacked`` is (W_g, b_g) where the caller formed them already."""
        w_g, b_g = self._stacked_kv_weights() if stacked is None else stacked
        w_g = w_g.view(-1, w_g.size(-1))  # (2E, E)
        b_g = None if b_g is None else b_g.view(-1)
        weight = torch.matmul(w_g, self.out_proj.weight)
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
        variant = self.cross_attention
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
