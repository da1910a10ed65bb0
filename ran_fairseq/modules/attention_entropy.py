"""Attention entropy per layer and side (Zeng et al. 2021, Eq. 5), recorded from a model's forward.

    H(a_i) = -sum_j a_ij * log a_ij                                        (Eq. 5)

:class:`AttentionEntropyRecorder` sums it per ``(side, layer)`` over heads, sentences and real
query positions, with the number of terms, so that sums from several batches or workers add up.
Sides: ``enc`` (encoder self-attention), ``dec`` (decoder self-attention), ``crs``
(encoder-decoder attention).
"""
import re
from collections import defaultdict

import torch
from fairseq.modules import MultiheadAttention

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def attention_kind(name, module=None):
    """``(side, layer)`` of the attention module called ``name`` in ``model.named_modules()``, or
    None for modules outside the encoder/decoder layer stacks that name no ``attention_side``."""
    layer = _LAYER.search(name)
    side = getattr(module, "attention_side", None)
    if side is not None:
        if side not in ("enc", "dec", "crs"):
            raise ValueError(f"{name}.attention_side must be 'enc', 'dec' or 'crs', not {side!r}")
        return side, int(layer.group(1)) if layer else 0
    if layer is None:
        return None
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "encoder_attn":
        return "crs", int(layer.group(1))
    if leaf == "self_attn":
        if name.startswith("encoder.") or ".encoder." in name:
            return "enc", int(layer.group(1))
        if name.startswith("decoder.") or ".decoder." in name:
            return "dec", int(layer.group(1))
    return None


def entropy_sum(weights, query_mask=None):
    """Sum over heads and real queries of the entropy of each attention row, and the count.
    weights: (heads, B, T, S); query_mask: (B, T), True at real queries (None: all are real)."""
    w = weights.float()
    ent = -(w * torch.log(w.clamp_min(1e-12))).sum(-1)  # (heads, B, T)
    if query_mask is None:
        return ent.sum(), ent.numel()
    mask = query_mask.to(ent.device).unsqueeze(0).expand_as(ent)
    return ent.masked_select(mask).sum(), int(mask.sum())


class AttentionEntropyRecorder:
    """Record attention entropies of ``model`` during the forward passes run inside ``with``.

    ``target_mask`` (B, T), True at real target positions, marks the real queries of decoder-side
    attention; encoder self-attention takes its real queries from the key padding mask.
    After the block, ``sums[(side, layer)]`` and ``counts[(side, layer)]`` hold the totals.
    With ``keep_weights``, ``weights[(side, layer)]`` is ``(weights, query_mask)`` of the latest
    call: the detached per-head weights (heads, B, T, S) and the (B, T) mask of real queries
    (None: all are real).

    Recorded: fairseq's ``MultiheadAttention`` and any module with ``records_attention = True``
    that follows its calling convention (``need_weights``/``need_head_weights``, returns
    ``(output, weights)``). Side and layer come from the module's name (``layers.N.self_attn``,
    ``layers.N.encoder_attn``); a module outside such a stack names its side in
    ``attention_side`` and is layer 0 unless its name holds ``layers.N``.
    """

    def __init__(self, model, target_mask=None, keep_weights=False):
        self.model = model
        self.target_mask = target_mask
        self.keep_weights = keep_weights
        self.sums = defaultdict(float)
        self.counts = defaultdict(int)
        self.weights = {}
        self._handles = []
        self._restore = []

    def modules(self):
        for name, module in self.model.named_modules():
            if isinstance(module, MultiheadAttention) or getattr(module, "records_attention", False):
                kind = attention_kind(name, module)
                if kind is not None:
                    yield kind, module

    def __enter__(self):
        for kind, module in self.modules():
            self._handles.append(module.register_forward_pre_hook(self._ask_for_weights, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._hook(kind), with_kwargs=True))
            if isinstance(module, MultiheadAttention):
                # fairseq's fused path returns head-averaged weights; this flag (whose only other
                # effect is to skip a shape assertion) routes the call through its per-head path.
                self._restore.append((module, module.skip_embed_dim_check))
                module.skip_embed_dim_check = True
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        for module, value in self._restore:
            module.skip_embed_dim_check = value
        self._handles, self._restore = [], []
        return False

    @staticmethod
    def _ask_for_weights(module, args, kwargs):
        return args, {**kwargs, "need_weights": True, "need_head_weights": True}

    def _hook(self, kind):
        def record(module, args, kwargs, output):
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None or weights.dim() != 4:
                return
            if kind[0] == "enc":
                pad = kwargs.get("key_padding_mask")
                query_mask = None if pad is None else ~pad.bool()
            else:
                query_mask = self.target_mask
                if query_mask is not None and query_mask.shape != weights.shape[1:3]:
                    raise ValueError(
                        f"attention entropy: target mask {tuple(query_mask.shape)} does not match the "
                        f"decoder's attention queries {tuple(weights.shape[1:3])}; record full "
                        "teacher-forced forward passes only")
            total, count = entropy_sum(weights.detach(), query_mask)
            if self.keep_weights:
                self.weights[kind] = (weights.detach(), query_mask)
            self.sums[kind] += float(total)
            self.counts[kind] += count

        return record
