"""The self-attention layer that mixes values with one layer's input-independent weights."""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.incremental_decoding_utils import with_incremental_state

from .common import STEP_BLOCK
from .matrices import PositionalAttentionMatrices


@with_incremental_state
class PositionalSelfAttention(nn.Module):
    """Self-attention with the input-independent weights of one layer (Eq. 2)::

        out = softmax(A_l[p, p]) · (value W_v) · W_o

    where p are the tokens' absolute positions within their sentence. Called like fairseq's
    ``MultiheadAttention`` for self-attention: ``query``/``value`` (T, B, E), ``key_padding_mask``
    (B, T), True at padding; returns ``(out (T, B, E), weights)`` with weights (B, T, S) averaged
    over heads, (h, B, T, S) with ``need_head_weights``, or None. ``key`` is not used. In a causal
    (decoder) source, the causal mask is built in and ``attn_mask`` (the decoder's future mask) is
    ignored. With ``incremental_state`` it decodes one step: the query is the newest token; the
    values of earlier tokens are cached append-only and :meth:`reorder_incremental_state` moves
    only each hypothesis's row numbers (see ``_step``).

    ``matrices`` is shared by all layers of a side; the owner (encoder or decoder) registers it,
    this module only refers to it.
    """

    records_attention = True  # modules/attention_entropy.py records its weights

    def __init__(self, embed_dim: int, num_heads: int, matrices: PositionalAttentionMatrices,
                 layer: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embedding size {embed_dim} is not divisible by {num_heads} heads")
        if matrices.num_heads != num_heads:
            raise ValueError(f"the attention matrices have {matrices.num_heads} heads, the layer "
                             f"{num_heads}")
        if not 0 <= layer < matrices.num_layers:
            raise ValueError(f"layer {layer} out of range for {matrices.num_layers} layers")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.layer = layer
        self.dropout = dropout
        self._matrices = (matrices,)  # a tuple, so that nn.Module does not register it here
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        nn.init.xavier_uniform_(self.v_proj.weight, gain=2 ** -0.5)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    @property
    def matrices(self) -> PositionalAttentionMatrices:
        return self._matrices[0]

    @property
    def causal(self) -> bool:
        return self.matrices.causal

    def extra_repr(self) -> str:
        return f"layer={self.layer}, heads={self.num_heads}, dropout={self.dropout}"

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, attn_mask: Optional[Tensor] = None,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        if attn_mask is not None and not self.causal:
            raise ValueError("input-independent encoder self-attention takes no attn_mask")
        if value is None:
            value = query
        need_weights = need_weights or need_head_weights
        if incremental_state is not None:
            if self.matrices.step_scope() is None:  # a layer decoding alone: its own pass
                with self.matrices.forward_scope(incremental_state):
                    context, weights = self._step(value, key_padding_mask, incremental_state)
            else:
                context, weights = self._step(value, key_padding_mask, incremental_state)
            out = self.out_proj(context)
            if not need_weights:
                return out, None
            return out, (weights.transpose(0, 1) if need_head_weights else weights.mean(dim=1))
        # the value projection in one kernel: nn.Linear on a transposed (T, B, E) input (as the
        # first layer gets it) copies it and adds its bias in a kernel of its own
        flat = value.reshape(-1, self.embed_dim)
        weight, bias = self.v_proj.weight.t(), self.v_proj.bias
        v = (torch.mm(flat, weight) if bias is None else torch.addmm(bias, flat, weight)).view(
            value.size(0), value.size(1), self.embed_dim)
        length, batch = v.size(0), v.size(1)
        dropout = self.dropout if self.training else 0.0
        if key_padding_mask is None and dropout == 0:
            probs = self.matrices.probs(self.layer, length, v.dtype)  # (h, T, T)
            context = self._mix_shared(probs, v)
            weights = probs.unsqueeze(0).expand(batch, -1, -1, -1) if need_weights else None
        else:
            padding = None if key_padding_mask is None else key_padding_mask.to(torch.bool)
            probs, weights = self.matrices.batch_probs(self.layer, padding, batch, length,
                                                       v.dtype, dropout)  # (B, h, T, T)
            context = self._mix(probs, v)
        out = self.out_proj(context)
        if not need_weights:
            return out, None
        # the weights before attention dropout
        return out, (weights.transpose(0, 1) if need_head_weights else weights.mean(dim=1))

    def _mix_shared(self, probs: Tensor, v: Tensor) -> Tensor:
        """Weighted sums of values with weights (h, T, S) shared by the batch: one (T×S)·(S×B·d)
        product per head for the whole batch. v (S, B, E); returns (T, B, E)."""
        src_len, batch, _ = v.shape
        heads, head_dim = self.num_heads, self.head_dim
        values = v.view(src_len, batch, heads, head_dim).permute(2, 0, 1, 3)
        context = torch.bmm(probs, values.reshape(heads, src_len, batch * head_dim))
        context = context.view(heads, -1, batch, head_dim).permute(1, 2, 0, 3)
        return context.reshape(-1, batch, self.embed_dim)

    def _mix(self, probs: Tensor, v: Tensor) -> Tensor:
        """Weighted sums of values with per-sentence weights probs (B, h, T, S): one batched
        product over the B·h (sentence, head) pairs, the values read in place. v (S, B, E);
        returns (T, B, E)."""
        src_len, batch, _ = v.shape
        heads, head_dim = self.num_heads, self.head_dim
        values = v.view(src_len, batch * heads, head_dim).transpose(0, 1)  # (B·h, S, d), a view
        context = torch.bmm(probs.reshape(batch * heads, -1, src_len), values)
        return context.view(batch, heads, -1, head_dim).permute(2, 0, 1, 3).reshape(
            -1, batch, self.embed_dim)

    # ---- incremental decoding (the cache's layout: docs/benchmarks.md, "RAN's decoding step") --
    def _step(self, x: Tensor, padding: Optional[Tensor], incremental_state):
        """One decoding step: x (1, B, E) is the newest token's input (before v_proj)."""
        if not self.causal:
            raise ValueError("incremental decoding needs a causal (decoder) self-attention")
        if x.size(0) != 1:
            raise ValueError(f"incremental decoding takes one token per step, got {x.size(0)}")
        batch, heads, head_dim = x.size(1), self.num_heads, self.head_dim
        buffer = self._get_input_buffer(incremental_state)
        length = buffer.get("length", 0) + 1
        matrices = self.matrices
        matrices.check_length(length, "the decoded prefix")
        values = self._store_value(buffer, x[0], length)  # (B, h, C, d)
        table = matrices.step_table(self.layer, x.dtype)  # (h, n + 1, n + 2)
        if padding is None and buffer.get("key_columns") is None:
            # Every hypothesis reads row t - 1 (Eq. 2 for the newest token): (B, h, t + 1), a view
            # of a block of STEP_BLOCK rows copied out for all hypotheses once per block.
            weights = self._shared_weights(buffer, table, length, batch)
        else:
            weights = self._padded_weights(buffer, table, padding, length, batch)
        buffer["length"] = length
        self._set_input_buffer(incremental_state, buffer)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, p=self.dropout, training=True)
        context = torch.bmm(weights.reshape(batch * heads, 1, length + 1),
                            values[:, :, :length + 1].reshape(batch * heads, length + 1,
                                                              head_dim))
        return context.view(1, batch, self.embed_dim), weights[:, :, 1:].unsqueeze(2)

    def _shared_weights(self, buffer: Dict, table: Tensor, length: int, batch: int) -> Tensor:
        """Row ``length - 1`` of the table for every hypothesis, (B, h, t + 1): a view into
        ``weights`` (B0, h, R, cols), rows start..start + R - 1 of the table expanded over the
        hypotheses (B only shrinks during beam search; all hypotheses share the rows)."""
        block, start = buffer.get("weights"), buffer.get("weights_start", 0)
        row = length - 1
        if block is None or row >= start + block.size(2) or block.size(0) < batch:
            start, n = row, self.matrices.max_positions
            rows = min(STEP_BLOCK, n - start)
            cols = min(start + rows + 1, n + 2)
            block = table[:, start:start + rows, :cols].expand(batch, -1, -1, -1).contiguous()
            buffer["weights"], buffer["weights_start"] = block, start
        return block[:batch, :, row - start, :length + 1]

    def _store_value(self, buffer: Dict, x: Tensor, length: int) -> Tensor:
        """Write the value projection of ``x`` (B, E), bias-free, into slot ``length`` of the
        cache; returns the cache. While autograd records, the cache is concatenated instead (an
        ``out=`` write cannot be recorded), so earlier steps' graphs stay valid."""
        batch, heads, head_dim = x.size(0), self.num_heads, self.head_dim
        weight = self.v_proj.weight.view(heads, head_dim, -1).transpose(1, 2)  # (h, E, d)
        inputs = x.unsqueeze(0).expand(heads, -1, -1)  # (h, B, E), no copy
        values = buffer.get("values")
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            if values is None:
                values = self._bias_slot(x, batch)
            new = torch.bmm(inputs, weight).transpose(0, 1).unsqueeze(2)  # (B, h, 1, d)
            values = torch.cat([values[:, :, :length], new], dim=2)
        else:
            if values is None or values.size(2) <= length:
                slots = min(max(2 * length, 32), self.matrices.max_positions) + 1
                grown = x.new_empty(batch, heads, slots, head_dim)
                if values is None:
                    grown[:, :, :1] = self._bias_slot(x, batch)
                else:
                    grown[:, :, :length] = values[:, :, :length]
                values = grown
            torch.bmm(inputs, weight, out=values[:, :, length].transpose(0, 1))
        buffer["values"] = values
        return values

    def _bias_slot(self, x: Tensor, batch: int) -> Tensor:
        """Slot 0 of the cache: the value projection's bias per head, (B, h, 1, d)."""
        bias = self.v_proj.bias
        if bias is None:
            return x.new_zeros(batch, self.num_heads, 1, self.head_dim)
        return bias.to(x.dtype).view(1, self.num_heads, 1, self.head_dim).expand(batch, -1, -1, -1)

    def _padded_weights(self, buffer: Dict, table: Tensor, padding: Optional[Tensor],
                        length: int, batch: int) -> Tensor:
        """The step's weights (B, h, t + 1) gathered from the table by each hypothesis's positions;
        updates the buffer's ``key_columns`` (B, t + 1) and ``real_count`` (B,)."""
        n = self.matrices.max_positions
        scope = self.matrices.step_scope()
        key = ("padded step", length, id(padding))  # the same for every layer of a step
        shared = scope.get(key) if scope is not None else None
        if shared is None:
            columns, count = buffer.get("key_columns"), buffer.get("real_count")
            device = table.device
            if columns is None:  # the first padded step: the earlier tokens were all real
                columns = torch.arange(length, device=device).expand(batch, -1)
                count = torch.full((batch,), length - 1, dtype=torch.long, device=device)
            if padding is None:
                query, column = count, count + 1
                count = count + 1
            else:
                real = ~padding[:, -1].to(torch.bool)
                query = torch.where(real, count, n)  # the zero row for a padding query
                column = torch.where(real, count + 1, n + 1)
                count = count + real
            columns = torch.cat([columns, column.unsqueeze(1)], dim=1)
            index = (query.unsqueeze(1) * (n + 2) + columns).unsqueeze(1)  # (B, 1, t + 1)
            shared = (columns, count, index)
            if scope is not None:
                scope[key] = shared
        columns, count, index = shared
        buffer["key_columns"], buffer["real_count"] = columns, count
        heads = self.num_heads
        return torch.gather(table.reshape(1, heads, -1).expand(batch, -1, -1), 2,
                            index.expand(-1, heads, -1))

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Reorder each hypothesis's cached values (and padding bookkeeping) for beam search."""
        buffer = self._get_input_buffer(incremental_state)
        if buffer:
            for name in ("values", "key_columns", "real_count"):  # "weights": the same rows
                if buffer.get(name) is not None:
                    buffer[name] = buffer[name].index_select(0, new_order)
            incremental_state = self._set_input_buffer(incremental_state, buffer)
        return incremental_state

    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, "attn_state")
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state, buffer: Dict[str, Optional[Tensor]]):
        return self.set_incremental_state(incremental_state, "attn_state", buffer)
