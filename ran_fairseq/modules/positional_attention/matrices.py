"""The matrix source's base class: the (h, n, n) logits of one side's L layers, once a pass."""
import contextlib
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .common import _MASKED, _too_long


class PassState:
    """The forward_scope under way (all None outside one): ``scope``, what its layers share;
    ``matrices``, where its matrices are kept (the scope's dict, or a decoded sequence's);
    ``full_rows``, whether they are computed for all n positions (a decoded sequence)."""
    __slots__ = ("scope", "matrices", "full_rows")

    def __init__(self):
        self.scope: Optional[Dict] = None
        self.matrices: Optional[Dict] = None
        self.full_rows = False


class PositionalAttentionMatrices(nn.Module):
    """The attention logits of one side's L layers: tensors of shape (h, n, n) that depend on
    parameters only. Subclasses implement :meth:`_compute_logits`; layers read the results through
    :meth:`logits`, :meth:`probs` and :meth:`causal_probs`, which compute them once per
    forward pass or decoded sequence (:meth:`forward_scope`)."""

    def __init__(self, num_layers: int, num_heads: int, max_positions: int, causal: bool):
        super().__init__()
        if max_positions < 1:
            raise ValueError(f"max_positions must be positive, got {max_positions}")
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.max_positions = max_positions
        self.causal = causal
        # how the too-long error names n, and what else it advises (set by the model)
        self.limit_name = ("max_positions", "")
        # the current forward_scope, in a plain object: an attribute set on an nn.Module goes
        # through Module.__setattr__'s type checks, which every decoding step would pay
        self._pass = PassState()
        self._state_key = f"positional_attention_matrices.{id(self)}"
        self._constants: Dict = {}  # parameter-independent tensors per device, kept across modes

    def _compute_logits(self, rows: int) -> Tensor:
        """float32 logits of the first ``rows`` query positions, shape (L', h, rows, n), where L' is
        L, or 1 when all layers share one matrix."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return (f"layers={self.num_layers}, heads={self.num_heads}, "
                f"max_positions={self.max_positions}, causal={self.causal}")

    # ---- what a pass (or a decoded sequence) shares ---------------------------------------------
    @contextlib.contextmanager
    def forward_scope(self, incremental_state: Optional[Dict] = None):
        """One forward pass: its layers share one computation of the matrices (and what
        :meth:`batch_probs` derives from them). Given a decoder's ``incremental_state`` outside a
        recording pass, the matrices belong to the decoded sequence: its first step computes them
        for all n positions and keeps them in the state, its later steps read them. Nothing is kept
        across passes or sequences, so a change of the parameters (an optimizer step, a loaded
        checkpoint, an edit in place) is seen by the next pass or sequence, whatever made it."""
        outer = self._pass.scope, self._pass.matrices, self._pass.full_rows
        if self._pass.scope is None:
            self._pass.scope = {}
            sequence = None
            if incremental_state is not None and not self._recording():
                sequence = incremental_state.get(self._state_key)
                if sequence is None:
                    sequence = incremental_state[self._state_key] = {}
            self._pass.matrices = self._pass.scope if sequence is None else sequence
            self._pass.full_rows = sequence is not None
        try:
            yield
        finally:
            self._pass.scope, self._pass.matrices, self._pass.full_rows = outer

    def step_scope(self) -> Optional[Dict]:
        """The current forward_scope's dict (None outside one): what layers of one pass share."""
        return self._pass.scope

    def _recording(self) -> bool:
        return torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())

    def _get(self, name, rows: int, build):
        """``build(r)`` for ``r >= rows`` query rows, memoized under ``name`` for the current pass
        (or decoded sequence, whose store holds all n rows: its length is not known in advance);
        a single call outside a scope computes what it needs. Rows are independent."""
        store = self._pass.matrices
        if store is None:
            return build(rows)
        entry = store.get(name)
        if entry is None or entry.size(-2) < rows:
            entry = build(self.max_positions if self._pass.full_rows else rows)
            store[name] = entry
        return entry

    # ---- the matrices layers read ----------------------------------------------------------------
    def check_length(self, length: int, what: str = "a sentence"):
        if length > self.max_positions:
            raise _too_long(length, self.max_positions, what, *self.limit_name)

    def logits(self, layer: int, rows: int) -> Tensor:
        """float32 logits of ``layer`` (0-based) for query positions < ``rows``: (h, rows, n)."""
        self.check_length(rows)
        stacked = self._get("logits", rows, self._compute_logits)
        return stacked[layer if stacked.size(0) > 1 else 0, :, :rows]

    def _causal_build(self, dtype: torch.dtype):
        def build(r):
            stacked = self._get("logits", r, self._compute_logits)[:, :, :r, :r]
            future = self._consts(stacked.device)["future"][:r, :r]
            return torch.softmax(stacked.masked_fill(future, _MASKED), dim=-1).to(dtype)
        return build

    def causal_probs(self, layer: int, rows: int, dtype: torch.dtype) -> Tensor:
        """Row i: softmax of the layer's logits over keys 0..i, zero beyond; (h, rows, rows)."""
        self.check_length(rows)
        stacked = self._get(("causal_probs", dtype), rows, self._causal_build(dtype))
        return stacked[layer if stacked.size(0) > 1 else 0, :, :rows, :rows]

    def step_table(self, layer: int, dtype: torch.dtype) -> Tensor:
        """The weights one decoding step reads, (h, n + 1, n + 2) for the layer: row i < n is
        ``[1, causal_probs[i, 0..n-1], 0]`` (column 0 weights the value projection's bias, columns
        1..n the keys at positions 0..n-1, column n + 1 a padding key), row n is all zero (a
        padding query). Causal sources only."""
        if not self.causal:
            raise ValueError("incremental decoding needs a causal (decoder) self-attention")
        n = self.max_positions

        def build(_):
            probs = self._get(("causal_probs", dtype), n, self._causal_build(dtype))  # (L', h, n, n)
            table = F.pad(probs, (1, 1, 0, 1))  # (L', h, n + 1, n + 2), zero around
            table[:, :, :n, 0] = 1
            return table

        stacked = self._get(("step_table", dtype), n, build)
        return stacked[layer if stacked.size(0) > 1 else 0]

    def probs(self, layer: int, length: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """The weights of ``layer`` for a sentence of ``length`` tokens: (h, length, length)."""
        if self.causal:
            return self.causal_probs(layer, length, dtype)
        return torch.softmax(self.logits(layer, length)[:, :, :length], dim=-1).to(dtype)

    def _consts(self, device: torch.device) -> Dict[str, Tensor]:
        """Tensors that depend on the sizes only, built once per device (for the CPU as the source
        is constructed, so that no step pays for them)."""
        consts = self._constants.get(device)
        if consts is None:
            consts = self._constants[device] = self._build_constants(device)
        return consts

    def _build_constants(self, device: torch.device) -> Dict[str, Tensor]:
        n = self.max_positions
        return {"future": torch.ones(n, n, dtype=torch.bool, device=device).triu(1),
                "arange": torch.arange(n, device=device),
                "layers": torch.arange(self.num_layers, device=device).view(-1, 1, 1, 1, 1),
                "heads": torch.arange(self.num_heads, device=device).view(1, 1, -1, 1, 1)}

    def batch_probs(self, layer: int, padding: Optional[Tensor], batch: int, length: int,
                    dtype: torch.dtype, dropout: float = 0.0) -> Tuple[Tensor, Tensor]:
        """The weights of ``layer`` for a batch of ``batch`` sentences of ``length`` tokens,
        (B, h, T, T), after attention dropout ``dropout`` (drawn per sentence), and before it.

        ``padding`` (B, T), True at padding, or None: row t of sentence b is the layer's row at
        the token's position within its sentence, over the sentence's real keys (padding keys get
        no weight, a padding query none at all). Inside a forward_scope all layers' weights are
        computed at once, for the first layer that asks, and shared: one gather, one softmax and
        no position bookkeeping per layer. Each layer draws its own dropout mask, so that a layer
        recomputed alone in the backward pass (activation checkpointing) draws the same one."""
        self.check_length(length)
        scope = self._pass.scope
        key = ("batch probs", dtype)
        entry = scope.get(key) if scope is not None else None
        if entry is None or entry[0] is not padding or entry[1] != (batch, length):
            layers = None if scope is not None else layer
            entry = (padding, (batch, length),
                     self._batch_probs(layers, padding, batch, length, dtype))
            if scope is not None:
                scope[key] = entry
        before = entry[2]
        before = before[layer if len(before) > 1 else 0]
        dropped = F.dropout(before, dropout, True) if dropout > 0 else before
        return dropped, before

    def _batch_probs(self, layer: Optional[int], padding: Optional[Tensor], batch: int,
                     length: int, dtype: torch.dtype) -> Tensor:
        """The weights of :meth:`batch_probs` before dropout for ``layer``, or for all layers
        (None): (L', B, h, T, T)."""
        stacked = self._get("logits", length, self._compute_logits)  # (L', h, R, n) float32
        if layer is not None and stacked.size(0) > 1:
            stacked = stacked[layer:layer + 1]
        consts = self._consts(stacked.device)
        if padding is None:
            if self.causal:
                probs = self._get(("causal_probs", dtype), length, self._causal_build(dtype))
                if layer is not None and probs.size(0) > 1:
                    probs = probs[layer:layer + 1]
                probs = probs[:, :, :length, :length]
            else:
                probs = torch.softmax(stacked[:, :, :length, :length], dim=-1).to(dtype)
            probs = probs.unsqueeze(1).expand(-1, batch, -1, -1, -1)
        else:
            # Each token's position within its sentence, whichever side the padding is on: t minus
            # the padding up to t. A padding token before the first real one gets -1, which indexes
            # the last row and column: any value does, as padding is masked below.
            position = consts["arange"][:length] - padding.cumsum(dim=1)  # (B, T)
            logits = stacked[consts["layers"][:stacked.size(0)], consts["heads"],
                             position[None, :, None, :, None],
                             position[None, :, None, None, :]]  # (L', B, h, T, T)
            # Padding keys (and in a decoder the keys after the query) are masked before the
            # softmax; padding queries get no weight.
            masked = padding[:, None, :]
            if self.causal:
                masked = consts["future"][:length, :length] | masked  # (B, T, T)
            logits = logits.add(masked.unsqueeze(1), alpha=_MASKED)
            probs = torch.softmax(logits, dim=-1).to(dtype).masked_fill(
                padding[None, :, None, :, None], 0.0)
        return probs
