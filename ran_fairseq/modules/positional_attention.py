"""Input-independent self-attention: Recurrent Attention (RAN), Random Synthesizer, HC-SA.

In all three the attention weights of a layer depend on token positions only, never on the tokens.
For one side (encoder or decoder) with L layers and h heads, a *matrix source*
(:class:`PositionalAttentionMatrices`) holds logits A_l of shape (h, n, n) over n absolute
positions, l = 1..L, and layer l of a sentence of T tokens mixes its value vectors with
softmax(A_l[:T, :T]) (causal in a decoder). :class:`PositionalSelfAttention` is that mixing step,
with fairseq's ``MultiheadAttention`` call signature (Zeng et al. 2021, Eq. 2):

    H = softmax(A_l[:T, :T]) · (x W_v),   output = H W_o        (no queries, keys or dot products)

The sources:

- :class:`RecurrentAttentionMatrices` (RAN, Zeng et al. 2021 §2.2-2.3): a learned initial matrix
  A_0 per head and one transition shared by all heads and layers,
  A_l = LN(tanh(A_{l-1} Wᵀ + b)) + A_{l-1} (Eqs. 3-4), W acting along the key axis of every row;
  in a decoder, only the lower triangle of each matrix takes part in the transition (§2.2) unless
  ``decoder_initial="full"``; ``transition="ffn"`` is the feed-forward transition of the authors'
  released code (theirs where its hidden width ``ffn_dim`` is 1,024), ``initial_init="xavier"``
  their initialization of A_0.
- :class:`RandomSynthesizerMatrices` (Tay et al. 2020): a learned (h, n, n) matrix per layer.
- :class:`GaussianAttentionMatrices` (HC-SA, You et al. 2020): fixed logits -(j - i - c_k)² / 2σ²,
  head k centred at offset c_k from the query position.

Positions are absolute within each sentence: in a padded batch, the weight between two tokens is
looked up at their positions counted from their sentence's first token (left or right padding
alike); padding keys are masked before the softmax and padding queries get a zero context. A
sentence longer than n is an error naming n and its flag.

The matrices depend on parameters only, so a source computes them once and serves every layer,
every sentence and every decoding step from a cache keyed on its parameters' version counters,
storage, dtype and device, and cleared by ``train()``/``eval()``. A forward pass wrapped in
:meth:`PositionalAttentionMatrices.forward_scope` checks that key once for all its layers (once per
decoded sequence). While autograd records, nothing is cached across calls; such a scoped pass computes
all L matrices once and shares them between its layers.

A full-sequence pass over a padded batch, or a training pass with attention dropout, is also
organized for few kernels (on a GPU a small model's step costs about one launch per kernel): the
first layer of a scoped pass computes the weights of all L layers at once (the tokens' positions,
one gather of every layer's rows and columns, one masked softmax, one dropout draw) and each layer
then costs its value projection, one batched product and its output projection. RAN's recurrence
with the paper's transition is one autograd node with a written-out backward
(:class:`_PaperRecurrence`). Tensors that depend on the sizes only (masks, index ranges) are built
once per device. A training step of RAN-ALL launches no more kernels than fairseq's transformer's
at the same sizes (tests/test_positional_attention.py).
"""
import contextlib
import itertools
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.incremental_decoding_utils import with_incremental_state

MAX_POSITIONS_FLAG = "--max-attention-positions"
# RAN's options (Zeng et al. 2021): the transition (§2.3) and the decoder's use of A_0 (§2.2)
RAN_TRANSITIONS = ("paper", "ffn")
RAN_DECODER_INITIAL = ("lower-triangle", "full")
# A_0's random initialization (§2.2 says only "randomly initialized"): N(0, n^-1/2) here before
# this option, or Xavier-uniform over the (h, n, n) tensor as in the authors' released code
RAN_INITIAL_INIT = ("normal", "xavier")
TRANSITION_FLAG = "--ran-transition"
DECODER_INITIAL_FLAG = "--ran-decoder-initial"
NO_LAYERNORM_RESIDUAL_FLAG = "--ran-no-layernorm-residual"
INITIAL_INIT_FLAG = "--ran-initial-init"
FFN_DIM_FLAG = "--ran-ffn-dim"

# Decoding steps whose weights are copied out for every hypothesis at once (PositionalSelfAttention)
STEP_BLOCK = 16

# Masked logits get a large finite value (softmax runs in float32): a fully masked row then yields
# uniform weights instead of NaN.
_MASKED = -1e9


def _too_long(length: int, max_positions: int, what: str) -> ValueError:
    return ValueError(
        f"{what} has {length} positions but the input-independent self-attention covers only "
        f"{max_positions} ({MAX_POSITIONS_FLAG}={max_positions}); raise {MAX_POSITIONS_FLAG}, or "
        f"leave longer sentences out with --max-source-positions/--max-target-positions and "
        f"--skip-invalid-size-inputs-valid-test"
    )


class _PassState:
    """The forward_scope under way: ``scope``, what its layers share (None outside one), and
    ``checked``, whether the persistent cache's key was checked in it."""
    __slots__ = ("scope", "checked")

    def __init__(self):
        self.scope: Optional[Dict] = None
        self.checked = False


class PositionalAttentionMatrices(nn.Module):
    """The attention logits of one side's L layers: tensors of shape (h, n, n) that depend on
    parameters only. Subclasses implement :meth:`_compute_logits`; layers read the results through
    :meth:`logits`, :meth:`probs` and :meth:`causal_probs`, which cache them (see the module
    docstring for when)."""

    def __init__(self, num_layers: int, num_heads: int, max_positions: int, causal: bool):
        super().__init__()
        if max_positions < 1:
            raise ValueError(f"{MAX_POSITIONS_FLAG} must be positive, got {max_positions}")
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.max_positions = max_positions
        self.causal = causal
        self._cache: Dict = {}
        self._cache_key: Optional[Tuple] = None
        # the current forward_scope, in a plain object: an attribute set on an nn.Module goes
        # through Module.__setattr__'s type checks, which every decoding step would pay
        self._pass = _PassState()
        self._state_key = f"positional_attention_matrices.{id(self)}.cache_key"
        self._constants: Dict = {}  # parameter-independent tensors per device, kept across modes

    def _compute_logits(self, rows: int) -> Tensor:
        """float32 logits of the first ``rows`` query positions, shape (L', h, rows, n), where L' is
        L, or 1 when all layers share one matrix."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return (f"layers={self.num_layers}, heads={self.num_heads}, "
                f"max_positions={self.max_positions}, causal={self.causal}")

    # ---- caching -------------------------------------------------------------------------------
    def train(self, mode: bool = True):
        # fairseq's optimizers update parameters through ``.data``, which leaves ``_version`` alone;
        # the trainer switches modes around every update and validation, which drops stale entries.
        self._cache, self._cache_key, self._pass.checked = {}, None, False
        return super().train(mode)

    @contextlib.contextmanager
    def forward_scope(self, incremental_state: Optional[Dict] = None):
        """One forward pass: while autograd records, its layers share one computation of the
        matrices; otherwise the persistent cache's key is checked once, not once per layer (the
        parameters cannot change within a pass). With a decoder's ``incremental_state``, once per
        decoded sequence: the state remembers the key its first step checked, and a later step
        whose cache still has that key skips the check (a sequence's parameters cannot change
        between its steps either: its cached values would be stale). The check walks every
        parameter and buffer, about a hundred Python calls, which a GPU bound by the host pays
        beside the step's launches."""
        outer = self._pass.scope, self._pass.checked
        if self._pass.scope is None:
            self._pass.scope, self._pass.checked = {}, False
            if (incremental_state is not None and self._cache_key is not None
                    and incremental_state.get(self._state_key) is self._cache_key):
                self._pass.checked = True
        try:
            yield
        finally:
            if incremental_state is not None and self._pass.checked:
                incremental_state[self._state_key] = self._cache_key
            self._pass.scope, self._pass.checked = outer


    def step_scope(self) -> Optional[Dict]:
        """The current forward_scope's dict (None outside one): what layers of one pass share."""
        return self._pass.scope

    def _version_key(self) -> Tuple:
        return tuple((t._version, t.data_ptr(), t.dtype, t.device)
                     for t in itertools.chain(self.parameters(), self.buffers()))

    def _store(self) -> Tuple[Dict, bool]:
        """The dict for this call's matrices and whether it is the persistent cache."""
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            return (self._pass.scope if self._pass.scope is not None else {}), False
        if not self._pass.checked:
            key = self._version_key()
            if key != self._cache_key:
                self._cache, self._cache_key = {}, key
            self._pass.checked = self._pass.scope is not None
        return self._cache, True

    def _get(self, name, rows: int, build):
        """``build(r)`` for ``r >= rows`` query rows, memoized under ``name``: the persistent cache
        holds all n rows; a recording pass computes only the rows it uses (rows are independent)."""
        store, persistent = self._store()
        entry = store.get(name)
        if entry is None or entry.size(-2) < rows:
            entry = build(self.max_positions if persistent else rows)
            store[name] = entry
        return entry

    # ---- the matrices layers read ----------------------------------------------------------------
    def check_length(self, length: int, what: str = "a sentence"):
        if length > self.max_positions:
            raise _too_long(length, self.max_positions, what)

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
            edge = probs.new_zeros(probs.shape[:2] + (n, 1))
            table = torch.cat([edge + 1, probs, edge], dim=-1)  # (L', h, n, n + 2)
            return torch.cat([table, table.new_zeros(table.shape[:2] + (1, n + 2))], dim=2)

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
        computed at once, for the first layer that asks, and shared: one gather, one softmax, one
        dropout draw and no position bookkeeping per layer."""
        self.check_length(length)
        scope = self._pass.scope
        key = ("batch probs", dtype, dropout)
        entry = scope.get(key) if scope is not None else None
        if entry is None or entry[0] is not padding or entry[1] != (batch, length):
            layers = None if scope is not None else layer
            entry = (padding, (batch, length)) + self._batch_probs(
                layers, padding, batch, length, dtype, dropout)
            if scope is not None:
                scope[key] = entry
        _, _, dropped, before = entry
        return dropped[layer if len(dropped) > 1 else 0], before[layer if len(before) > 1 else 0]

    def _batch_probs(self, layer: Optional[int], padding: Optional[Tensor], batch: int,
                     length: int, dtype: torch.dtype, dropout: float):
        """:meth:`batch_probs` for ``layer``, or for all layers (None): (dropped weights, one
        (B, h, T, T) tensor per layer; weights before dropout, (L', B, h, T, T))."""
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
        if dropout > 0:
            count = self.num_layers if layer is None else 1
            dropped = torch.native_dropout(probs.expand(count, -1, -1, -1, -1), dropout, True)[0]
        else:
            dropped = probs
        return dropped.unbind(0), probs


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
            raise ValueError(f"{FFN_DIM_FLAG} must be positive, got {hidden}")
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
    (Table 3 "w/o LN&RES"). ``transition="ffn"`` replaces the transition by the authors' released
    one, A_l = A_{l-1} + W_2 ReLU(W_1 A_{l-1} + b_1) + b_2 with W_1 (m×n), W_2 (n×m), m =
    ``ffn_dim`` (default 4n; :class:`FeedForwardTransition`; no tanh, no layer norm).

    A_0 is "randomly initialized" (§2.2): ``initial_init="normal"`` (the default) draws
    N(0, n^-1/2); ``"xavier"`` draws Xavier-uniform over the whole (h, n, n) tensor, as the
    authors' released code does (fan-in n·n, fan-out h·n: a standard deviation of about 0.0054 at
    h = 8, n = 256, against 0.0625).

    In a causal (decoder) source, ``decoder_initial="lower-triangle"`` (§2.2: "only the lower
    triangular matrix of each Initial Attention Matrix is leveraged") restricts row i of every A_l
    to its visible keys j <= i: the transition's input is zero at j > i, the layer norm's mean and
    variance are taken over j <= i only, and the entries j > i are set to zero after each layer.
    ``decoder_initial="full"`` transitions the whole row (the future is masked only at the softmax,
    as in the authors' code). An encoder always transitions whole rows. Either way row i of A_l
    depends on row i of A_0 only."""

    def __init__(self, num_layers, num_heads, max_positions, causal, freeze_initial=False,
                 layernorm_residual=True, transition="paper", decoder_initial="lower-triangle",
                 initial_init="normal", ffn_dim=None):
        super().__init__(num_layers, num_heads, max_positions, causal)
        if initial_init not in RAN_INITIAL_INIT:
            raise ValueError(f"{INITIAL_INIT_FLAG} must be one of {', '.join(RAN_INITIAL_INIT)}, "
                             f"got {initial_init!r}")
        if ffn_dim is not None and transition != "ffn":
            raise ValueError(f"{FFN_DIM_FLAG} sets the hidden width of {TRANSITION_FLAG} ffn; the "
                             f"transition is {transition!r}")
        if transition not in RAN_TRANSITIONS:
            raise ValueError(f"{TRANSITION_FLAG} must be one of {', '.join(RAN_TRANSITIONS)}, "
                             f"got {transition!r}")
        if decoder_initial not in RAN_DECODER_INITIAL:
            raise ValueError(f"{DECODER_INITIAL_FLAG} must be one of "
                             f"{', '.join(RAN_DECODER_INITIAL)}, got {decoder_initial!r}")
        if transition == "ffn" and not layernorm_residual:
            raise ValueError(f"{NO_LAYERNORM_RESIDUAL_FLAG} removes the layer norm and residual "
                             f"of the paper's transition (Eqs. 3-4); {TRANSITION_FLAG} ffn has no "
                             f"layer norm: use {TRANSITION_FLAG} paper with it")
        n = max_positions
        self.transition_type = transition
        self.decoder_initial = decoder_initial
        self.initial_init = initial_init
        self.initial = nn.Parameter(torch.empty(num_heads, n, n), requires_grad=not freeze_initial)
        # §2.2: the initial matrices are "randomly initialized"
        if initial_init == "xavier":
            nn.init.xavier_uniform_(self.initial)
        else:
            nn.init.normal_(self.initial, std=n ** -0.5)
        if transition == "paper":
            self.transition = nn.Linear(n, n)
            self.layer_norm = nn.LayerNorm(n) if layernorm_residual else None
        else:
            self.transition = FeedForwardTransition(n, ffn_dim)
            self.layer_norm = None
        self._consts(torch.device("cpu"))

    @property
    def masks_future(self) -> bool:
        """Whether each row's transition sees its visible keys only (a causal source under
        ``decoder_initial="lower-triangle"``)."""
        return self.causal and self.decoder_initial == "lower-triangle"

    def extra_repr(self) -> str:
        text = f"{super().extra_repr()}, transition={self.transition_type}"
        if self.transition_type == "ffn":
            text += f", ffn_dim={self.transition.fc1.out_features}"
        text += f", initial_init={self.initial_init}"
        return f"{text}, decoder_initial={self.decoder_initial}" if self.causal else text

    def _compute_logits(self, rows):
        # Each row of A_l depends on the same row of A_{l-1} only, so the first ``rows`` rows of the
        # full n×n recurrence are computed exactly from the first ``rows`` rows of A_0.
        a = self.initial[:, :rows].float()
        triangle = self._triangle(rows, a.device) if self.masks_future else None
        if self.transition_type == "paper" and self.layer_norm is not None:  # Eqs. 3-4
            norm = self.layer_norm
            return _PaperRecurrence.apply(
                a, self.transition.weight.float(), self.transition.bias.float(),
                norm.weight.float(), norm.bias.float(), self.num_layers, norm.eps, triangle)
        if triangle is not None:
            # §2.2: row i (query position i) keeps its keys j <= i; the rest is zero in every A_l
            a = a * triangle["visible"]
        if self.transition_type == "paper":
            weight, bias = self.transition.weight.float(), self.transition.bias.float()
        layers = []
        for _ in range(self.num_layers):
            if self.transition_type == "ffn":
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


class _PaperRecurrence(torch.autograd.Function):
    """RAN's recurrence with the paper's transition (Eqs. 3-4) over all L layers, as one autograd
    node: A_l = LN(tanh(A_{l-1} Wᵀ + b)) + A_{l-1}, l = 1..L, for a0 = the rows of A_0 in use
    (h, R, n); returns A_1..A_L (L, h, R, n). The backward is written out, for about half the
    kernels autograd would launch: the inputs of all layers are stored contiguously, so that the
    gradients of W and b (shared by all layers) are one product and one sum, and the residual's
    gradient is folded into the product with W.

    ``triangle`` (the lower triangle's constants, see RecurrentAttentionMatrices._build_constants)
    restricts row i to its keys j <= i (§2.2): A_0 is zero beyond, and the layer norm of each row
    takes the mean and biased variance of its i + 1 visible entries, with those positions' gain and
    bias, and gives zero beyond. One layer norm over whole rows computes it: with
    s = sqrt(n / (i + 1)), the row that holds s·x at j <= i and s times their mean beyond has that
    mean (times s) and, over n entries, exactly their variance; its normalized entries j <= i are s
    times the visible ones: the norm's gain, then a product with visible / s (zero beyond) and the
    shift of the visible keys give the row."""

    @staticmethod
    def forward(ctx, a0, weight, bias, gain, shift, num_layers, eps, triangle):
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
                y, mean, rstd = torch.native_layer_norm(t, (n,), gain, shift, eps)
                saved += [t, mean, rstd]
            else:
                filled = t.view(heads, rows, n) * triangle["s·visible"]
                filled.addcmul_(filled.sum(dim=-1, keepdim=True), triangle["beyond / count"])
                scaled, mean, rstd = torch.native_layer_norm(filled, (n,), gain, None, eps)
                y = torch.addcmul(row_shift, scaled, triangle["visible / s"]).view(-1, n)
                saved += [t, filled, mean, rstd]
            a = torch.add(y, a, out=flat[layer + 1])  # Eq. 4
        ctx.triangle, ctx.num_layers = triangle, num_layers
        ctx.save_for_backward(out, weight, gain, shift, *saved)
        return out[1:]

    @staticmethod
    def backward(ctx, grad):
        out, weight, gain, shift, *saved = ctx.saved_tensors
        triangle, num_layers = ctx.triangle, ctx.num_layers
        _, heads, rows, n = out.shape
        grad = grad.reshape(num_layers, heads * rows, n)
        grad_z = torch.empty_like(grad)  # tanh's input, every layer
        grad_a = grad[-1]  # with respect to A_l: from its consumers and from layer l + 1
        grad_gain = grad_shift = grad_first = None
        for layer in reversed(range(num_layers)):
            if triangle is None:
                t, mean, rstd = saved[3 * layer:3 * layer + 3]
                grad_t, g_gain, g_shift = torch.ops.aten.native_layer_norm_backward(
                    grad_a, t, (n,), mean, rstd, gain, shift, (True, True, True))
                grad_gain = g_gain if grad_gain is None else grad_gain.add_(g_gain)
                grad_shift = g_shift if grad_shift is None else grad_shift.add_(g_shift)
            else:
                t, filled, mean, rstd = saved[4 * layer:4 * layer + 4]
                grad_y = grad_a.view(heads, rows, n)
                # the shift's gradient: summed over layers here, over heads and rows below
                if grad_shift is None:
                    grad_shift = grad_y
                elif layer == num_layers - 2:
                    grad_shift = grad_shift + grad_y  # not in place: the first is the caller's
                else:
                    grad_shift.add_(grad_y)
                grad_filled, g_gain, _ = torch.ops.aten.native_layer_norm_backward(
                    grad_y * triangle["visible / s"], filled, (n,), mean, rstd, gain, None,
                    (True, True, False))
                grad_gain = g_gain if grad_gain is None else grad_gain.add_(g_gain)
                # through the fill of the entries beyond: each row's sum of s·x, times 1 / (i + 1)
                grad_sum = torch.bmm(grad_filled.transpose(0, 1),
                                     triangle["beyond / count"].unsqueeze(-1)).transpose(0, 1)
                grad_t = (grad_filled + grad_sum).mul_(triangle["s·visible"]).view(-1, n)
            grad_z_layer = torch.ops.aten.tanh_backward.grad_input(grad_t, t,
                                                                   grad_input=grad_z[layer])
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


class RandomSynthesizerMatrices(PositionalAttentionMatrices):
    """Random Synthesizer (Tay et al. 2020): an independent learned (h, n, n) logit matrix per
    layer, no transition."""

    def __init__(self, num_layers, num_heads, max_positions, causal):
        super().__init__(num_layers, num_heads, max_positions, causal)
        n = max_positions
        self.weight = nn.Parameter(torch.empty(num_layers, num_heads, n, n))
        nn.init.normal_(self.weight, std=n ** -0.5)
        self._consts(torch.device("cpu"))

    def _compute_logits(self, rows):
        return self.weight[:, :, :rows].float()


class GaussianAttentionMatrices(PositionalAttentionMatrices):
    """Hard-coded Gaussian self-attention (HC-SA, You et al. 2020): no parameters; head k's logits
    are -(j - i - c_k)² / (2σ²), a Gaussian of standard deviation σ centred c_k positions from the
    query i, shared by all layers. The first half of the heads are centred on i-1, the others on
    i+1 in an encoder and on i in a (causal) decoder."""

    def __init__(self, num_layers, num_heads, max_positions, causal, std=1.0):
        super().__init__(num_layers, num_heads, max_positions, causal)
        if std <= 0:
            raise ValueError(f"--gaussian-attention-std must be positive, got {std}")
        self.std = std
        later = 0.0 if causal else 1.0
        centres = [-1.0 if k < num_heads // 2 else later for k in range(num_heads)]
        self.register_buffer("centres", torch.tensor(centres), persistent=False)
        self._consts(torch.device("cpu"))

    def _compute_logits(self, rows):
        centres = self.centres.float()
        query = torch.arange(rows, device=centres.device, dtype=torch.float32)
        key = torch.arange(self.max_positions, device=centres.device, dtype=torch.float32)
        offset = key[None, None, :] - query[None, :, None] - centres[:, None, None]
        return (-offset.pow(2) / (2 * self.std ** 2)).unsqueeze(0)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, std={self.std}, centres={self.centres.tolist()}"


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

    # ---- incremental decoding --------------------------------------------------------------------
    # A step is four kernels (on a GPU a small model's step costs about one launch per kernel): the
    # newest value projection written straight into its slot of the cache, the step's weights
    # copied out for every hypothesis, one batched weighted sum, the output projection.
    # ``values`` (B, h, C, d) holds the value projection's bias in slot 0 (every hypothesis's
    # context takes it with weight 1, as its weights sum to 1) and the bias-free values of the
    # tokens in slots 1..t; C grows by doubling. The weights of step t come from the matrix
    # source's step table (PositionalAttentionMatrices.step_table): row t - 1 of the layer's causal
    # matrix with a 1 before it. Beam search reorders the cache, one index_select a layer.
    # Target padding: each hypothesis keeps the table column of each cached key (1 + its position
    # in the sentence, or the zero column of a padding key) and its count of real tokens; the step
    # then gathers its weights from the table, the query's row being its position (the zero row for
    # a padding query, whose context is zero). This bookkeeping is computed once per step and
    # shared by the layers of a forward_scope.
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


def build_positional_matrices(kind: str, num_layers: int, num_heads: int, max_positions: int,
                              causal: bool, freeze_initial: bool = False,
                              layernorm_residual: bool = True,
                              gaussian_std: float = 1.0, ran_transition: str = "paper",
                              ran_decoder_initial: str = "lower-triangle",
                              ran_initial_init: str = "normal", ran_ffn_dim: Optional[int] = None
                              ) -> PositionalAttentionMatrices:
    """The matrix source for ``kind`` in {"ran", "synthesizer", "gaussian"}."""
    if kind == "ran":
        return RecurrentAttentionMatrices(num_layers, num_heads, max_positions, causal,
                                          freeze_initial=freeze_initial,
                                          layernorm_residual=layernorm_residual,
                                          transition=ran_transition,
                                          decoder_initial=ran_decoder_initial,
                                          initial_init=ran_initial_init, ffn_dim=ran_ffn_dim)
    if kind == "synthesizer":
        return RandomSynthesizerMatrices(num_layers, num_heads, max_positions, causal)
    if kind == "gaussian":
        return GaussianAttentionMatrices(num_layers, num_heads, max_positions, causal,
                                         std=gaussian_std)
    raise ValueError(f"unknown input-independent attention {kind!r}; "
                     f"choose one of ran, synthesizer, gaussian")
