"""Masked 2D convolution over the (target, source) grid (Elbayad et al. 2018, §3.1).

Input (B, C_in, T, S), channels first, rows i = target positions, columns j = source positions;
output (B, C_out, T, S). Output cell (i, j) sees input rows i-⌊k/2⌋..i (the current and past
target positions) and columns j-⌊k/2⌋..j+⌊k/2⌋: the paper's k×k kernel with its future rows
masked to zero. Those zero weights are neither stored nor multiplied: the kernel is cropped to
⌈k/2⌉ rows × k columns, and the target axis gets ⌊k/2⌋ zero rows on the past side only (the
source axis gets ⌊k/2⌋ zero columns on each side, a "same" convolution).

Incremental decoding: with ``incremental_state``, the input is the newest row(s) (B, C_in, n, S)
and the module keeps, per hypothesis, the last ⌊k/2⌋ input rows (zeros before the first step,
which is the top padding of the full grid), so a step costs the same at every target position.
:meth:`reorder_incremental_state` follows beam search's reordering of hypotheses.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.incremental_decoding_utils import with_incremental_state



@with_incremental_state
class MaskedConv2d(nn.Module):
    """Causal-in-target, centred-in-source 2D convolution with a cropped k×⌈k/2⌉ kernel.

    ``weight``: (C_out, C_in, ⌈k/2⌉, k); kernel row r applies to target row i - ⌊k/2⌋ + r, so the
    last kernel row is the current target position."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias: bool = False):
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"the masked convolution needs an odd kernel size (centred on the "
                             f"source axis), got {kernel_size}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.past_rows = kernel_size // 2  # ⌊k/2⌋: rows above the current one, and the cache size
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, self.past_rows + 1,
                                               kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        nn.init.kaiming_normal_(self.weight, nonlinearity="relu")

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel={self.kernel_size}x"
                f"{self.past_rows + 1} (source x target), bias={self.bias is not None}")

    @property
    def masked_weights(self) -> int:
        """Weights of the paper's full k×k kernel that the mask keeps at zero (not stored here)."""
        return self.out_channels * self.in_channels * self.kernel_size * self.past_rows

    def forward(self, x: Tensor,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None
                ) -> Tensor:
        if x.dim() != 4 or x.size(1) != self.in_channels:
            raise ValueError(f"MaskedConv2d expects (batch, {self.in_channels}, target, source), "
                             f"got {tuple(x.shape)}")
        if incremental_state is not None:
            return self._step(x, incremental_state)
        # ⌊k/2⌋ zero rows above the first target row: output row i covers input rows i-⌊k/2⌋..i
        if self.past_rows:
            x = F.pad(x, (0, 0, self.past_rows, 0))
        return F.conv2d(x, self.weight, self.bias, padding=(0, self.kernel_size // 2))

    def _step(self, x: Tensor, incremental_state) -> Tensor:
        if self.past_rows == 0:
            return F.conv2d(x, self.weight, self.bias, padding=(0, self.kernel_size // 2))
        state = self.get_incremental_state(incremental_state, "rows")
        past = state["rows"] if state is not None else None
        if past is None:
            past = x.new_zeros(x.size(0), x.size(1), self.past_rows, x.size(3))
        elif past.shape[0] != x.size(0) or past.shape[3] != x.size(3):
            raise ValueError(f"cached rows {tuple(past.shape)} do not match the new input "
                             f"{tuple(x.shape)}: batch and source length must stay the same "
                             f"between steps (reorder the state with reorder_incremental_state)")
        window = torch.cat([past, x], dim=2)
        out = F.conv2d(window, self.weight, self.bias, padding=(0, self.kernel_size // 2))
        self.set_incremental_state(incremental_state, "rows",
                                   {"rows": window[:, :, -self.past_rows:]})
        return out

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        state = self.get_incremental_state(incremental_state, "rows")
        if state is not None and state["rows"] is not None:
            self.set_incremental_state(incremental_state, "rows",
                                       {"rows": state["rows"].index_select(0, new_order)})
