"""Pieces shared by the recurrent cross-attention module and its training Functions: the variant
names and their option checks, Eq. 9's windowed averaging, the step-by-step weight recurrence of
Eqs. 3, 4, 10 and a per-head linear map."""
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

CROSS_ATTENTION_VARIANTS = ("dot", "prev-context", "prev-weight", "prev-accum-weight",
                            "expand-kv", "continuous", "coverage")
KV_VARIANTS = (1, 2, 3, 4)

# Masked energies get a large finite value (energies are float32): a fully padded row then yields
# uniform weights instead of NaN, and masked positions get weights of exactly 0 otherwise.
MASKED = -1e9


def check_options(cross_attention: str, kv_variant: int, rescale_lambda: float,
                  rescale_window: int):
    """Raise a ValueError naming the argument for values no variant can use (the models check
    their options, by flag, before they build this module)."""
    variant = cross_attention
    if variant not in CROSS_ATTENTION_VARIANTS:
        raise ValueError(f"cross_attention must be one of {', '.join(CROSS_ATTENTION_VARIANTS)}, "
                         f"got {variant!r}")
    if kv_variant not in KV_VARIANTS:
        raise ValueError(f"kv_variant must be 1, 2, 3 or 4 (Eqs. 5-8), got {kv_variant!r}")
    if not math.isfinite(rescale_lambda):
        raise ValueError(f"rescale_lambda must be finite, got {rescale_lambda}")
    if variant == "continuous" and not 0 < rescale_lambda <= 1:
        raise ValueError(f"the continuous variant mixes new and previous energies with weights λ "
                         f"and 1-λ: rescale_lambda must be in (0, 1], got {rescale_lambda}")
    if variant == "coverage" and rescale_lambda < 0:
        raise ValueError(f"the coverage variant subtracts λ times the attention already paid: "
                         f"rescale_lambda must be >= 0, got {rescale_lambda}")
    if isinstance(rescale_window, bool) or not isinstance(rescale_window, int) \
            or rescale_window < 0:
        raise ValueError(f"rescale_window (k, the window j-k..j+k of Eq. 9) must be an integer "
                         f">= 0, got {rescale_window!r}")


# ---- Eq. 9: the windowed averaging ---------------------------------------------------------------


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


# ---- Eqs. 3, 4, 10 step by step (incremental decoding) -----------------------------------------


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
