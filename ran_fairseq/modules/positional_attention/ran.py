"""RAN's matrix source (Zeng et al. 2021, §2.2-2.3): initial matrices and their recurrence."""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .common import (
    RAN_DECODER_INITIAL,
    RAN_INITIAL_INIT,
    RAN_TRANSITIONS,
)
from .matrices import PositionalAttentionMatrices
from . import recurrence
from .recurrence import _PaperRecurrence, paper_recurrence_eager


class FeedForwardTransition(nn.Module):
    """The feed-forward transition of the authors' released code, Â = W_2 ReLU(W_1 a + b_1) + b_2
    with W_1 (m×n), W_2 (n×m), acting along the key axis of each row; Xavier-uniform weights,
    zero biases. The hidden width m is ``hidden`` (default 4n); the authors' is 1,024 whatever n,
    so this is their transition where m = 1,024 (with the default, at n = 256 only).
    :class:`RecurrentAttentionMatrices` adds the residual."""

    def __init__(self, n: int, hidden: Optional[int] = None):
        super().__init__()
        hidden = 4 * n if hidden is None else hidden
        if hidden < 1:
            raise ValueError(f"the hidden width must be positive, got {hidden}")
        self.fc1 = nn.Linear(n, hidden)
        self.fc2 = nn.Linear(hidden, n)
        for linear in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, a: Tensor) -> Tensor:
        """float32 computation for float32 ``a`` whatever the parameters' dtype."""
        hidden = F.relu(F.linear(a, self.fc1.weight.float(), self.fc1.bias.float()))
        return F.linear(hidden, self.fc2.weight.float(), self.fc2.bias.float())


class RecurrentAttentionMatrices(PositionalAttentionMatrices):
    """RAN (Zeng et al. 2021): a learned initial attention matrix A_0 of shape (h, n, n) and a
    recurrent transition shared by every head and layer (Eqs. 3-4)::

        Â_l = LN(tanh(A_{l-1} Wᵀ + b)),   A_l = Â_l + A_{l-1},   l = 1..L

    W (n×n) acts along the key axis of each row. ``freeze_initial`` keeps A_0 at its random
    initialization (Table 3 "fixed"); ``layernorm_residual=False`` uses A_l = tanh(A_{l-1} Wᵀ + b)
    (Table 3 "w/o LN&RES"). ``ran_transition="ffn"`` replaces the transition by the authors' released
    one, A_l = A_{l-1} + W_2 ReLU(W_1 A_{l-1} + b_1) + b_2 with W_1 (m×n), W_2 (n×m), m =
    ``ran_ffn_dim`` (default 4n; :class:`FeedForwardTransition`; no tanh, no layer norm).

    A_0 is "randomly initialized" (§2.2): ``ran_initial_init="normal"`` (the default) draws
    N(0, n^-1/2); ``"xavier"`` draws Xavier-uniform over the whole (h, n, n) tensor, as the
    authors' released code does (fan-in n·n, fan-out h·n: a standard deviation of about 0.0054 at
    h = 8, n = 256, against 0.0625).

    In a causal (decoder) source, ``ran_decoder_initial="lower-triangle"`` (§2.2: "only the lower
    triangular matrix of each Initial Attention Matrix is leveraged") restricts row i of every A_l
    to its visible keys j <= i: the transition's input is zero at j > i, the layer norm's mean and
    variance are taken over j <= i only, and the entries j > i are set to zero after each layer.
    ``ran_decoder_initial="full"`` transitions the whole row (the future is masked only at the softmax,
    as in the authors' code). An encoder always transitions whole rows. Either way row i of A_l
    depends on row i of A_0 only."""

    def __init__(self, num_layers, num_heads, max_positions, causal, *, ran_transition,
                 ran_decoder_initial, ran_initial_init, ran_ffn_dim=None, freeze_initial=False,
                 layernorm_residual=True):
        # the options keep their flags' names (--ran-transition, ...; defaults in the model's
        # config); ``self.transition`` is the transition's module (its state-dict key)
        super().__init__(num_layers, num_heads, max_positions, causal)
        if ran_initial_init not in RAN_INITIAL_INIT:
            raise ValueError(f"ran_initial_init must be one of {', '.join(RAN_INITIAL_INIT)}, "
                             f"got {ran_initial_init!r}")
        if ran_ffn_dim is not None and ran_transition != "ffn":
            raise ValueError(f"ran_ffn_dim sets the hidden width of the ffn transition; the "
                             f"transition is {ran_transition!r}")
        if ran_transition not in RAN_TRANSITIONS:
            raise ValueError(f"ran_transition must be one of {', '.join(RAN_TRANSITIONS)}, "
                             f"got {ran_transition!r}")
        if ran_decoder_initial not in RAN_DECODER_INITIAL:
            raise ValueError(f"ran_decoder_initial must be one of "
                             f"{', '.join(RAN_DECODER_INITIAL)}, got {ran_decoder_initial!r}")
        if ran_transition == "ffn" and not layernorm_residual:
            raise ValueError("layernorm_residual=False removes the layer norm and residual of "
                             "the paper's transition (Eqs. 3-4); the ffn transition has no layer "
                             "norm")
        n = max_positions
        self.ran_transition = ran_transition
        self.ran_decoder_initial = ran_decoder_initial
        self.ran_initial_init = ran_initial_init
        self.initial = nn.Parameter(torch.empty(num_heads, n, n), requires_grad=not freeze_initial)
        # §2.2: the initial matrices are "randomly initialized"
        if ran_initial_init == "xavier":
            nn.init.xavier_uniform_(self.initial)
        else:
            nn.init.normal_(self.initial, std=n ** -0.5)
        if ran_transition == "paper":
            self.transition = nn.Linear(n, n)
            self.layer_norm = nn.LayerNorm(n) if layernorm_residual else None
        else:
            self.transition = FeedForwardTransition(n, ran_ffn_dim)
            self.layer_norm = None
        self._consts(torch.device("cpu"))

    @property
    def masks_future(self) -> bool:
        """Whether each row's transition sees its visible keys only (a causal source under
        ``ran_decoder_initial="lower-triangle"``)."""
        return self.causal and self.ran_decoder_initial == "lower-triangle"

    def extra_repr(self) -> str:
        text = f"{super().extra_repr()}, ran_transition={self.ran_transition}"
        if self.ran_transition == "ffn":
            text += f", ran_ffn_dim={self.transition.fc1.out_features}"
        text += f", ran_initial_init={self.ran_initial_init}"
        return f"{text}, ran_decoder_initial={self.ran_decoder_initial}" if self.causal else text

    def _compute_logits(self, rows):
        # Each row of A_l depends on the same row of A_{l-1} only, so the first ``rows`` rows of the
        # full n×n recurrence are computed exactly from the first ``rows`` rows of A_0.
        a = self.initial[:, :rows].float()
        triangle = self._triangle(rows, a.device) if self.masks_future else None
        if self.ran_transition == "paper" and self.layer_norm is not None:  # Eqs. 3-4
            norm = self.layer_norm
            inputs = (a, self.transition.weight.float(), self.transition.bias.float(),
                      norm.weight.float(), norm.bias.float(), self.num_layers, norm.eps)
            if recurrence.USE_EAGER:
                return paper_recurrence_eager(*inputs, None if triangle is None else triangle["future"])
            return _PaperRecurrence.apply(*inputs, triangle)
        if triangle is not None:
            # §2.2: row i (query position i) keeps its keys j <= i; the rest is zero in every A_l
            a = a * triangle["visible"]
        if self.ran_transition == "paper":
            weight, bias = self.transition.weight.float(), self.transition.bias.float()
        layers = []
        for _ in range(self.num_layers):
            if self.ran_transition == "ffn":
                a = self.transition(a) + a
            else:
                a = torch.tanh(F.linear(a, weight, bias))  # w/o LN&RES
            if triangle is not None:
                a = a.masked_fill(triangle["future"], 0.0)
            layers.append(a)
        return torch.stack(layers)

    def _build_constants(self, device: torch.device) -> Dict[str, Tensor]:
        consts = super()._build_constants(device)
        if self.masks_future:
            # the lower triangle, (n, n) each: 1.0 at j <= i, and with s_i = sqrt(n / (i + 1)),
            # s·visible, visible / s and beyond / (i + 1) (see _PaperRecurrence)
            n = self.max_positions
            visible = (~consts["future"]).float()
            count = torch.arange(1, n + 1, device=device, dtype=torch.float32)[:, None]
            s = (n / count).sqrt()
            consts.update({"visible": visible, "s·visible": s * visible,
                           "visible / s": visible / s, "beyond / count": (1 - visible) / count})
        return consts

    def _triangle(self, rows: int, device: torch.device) -> Dict[str, Tensor]:
        """The lower triangle's constants (see _build_constants) for the first ``rows`` rows."""
        consts = self._consts(device)
        return {k: consts[k][:rows] for k in
                ("future", "visible", "s·visible", "visible / s", "beyond / count")}
