"""The recurrent cross-attention's training Functions keep what their backward pass reads through
``ctx.save_for_backward`` only: under ``torch.autograd.graph.saved_tensors_hooks`` that replace
every saved tensor by a copy (as activation offloading does), the gradients are those of the plain
run; and the one internal operator has a public fallback that gives the same results."""
import types

import pytest
import torch

from ran_fairseq.modules import _torch_ops
from ran_fairseq.modules.recurrent_cross_attention import (
    ContinuousScan,
    FullContextRecurrence,
    HeadContextRecurrence,
    PrevContextRecurrence,
    WeightRecurrence,
    window_matrix,
)

B, H, T, S, D = 2, 2, 5, 4, 3


def _cases(with_masks):
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.double).requires_grad_()

    padding = torch.zeros(B, S, dtype=torch.bool)
    padding[1, 0] = True
    pad = padding[:, None, :]
    masks = None
    if with_masks:
        masks = (torch.rand(T, B, H, S + 1, generator=g, dtype=torch.double) > 0.3).double() / 0.7

    def masked(e):
        return e.masked_fill(padding[:, None, None, :], -1e9)

    power = window_matrix(padding, S, 1, scale=0.4).double().expand(B, -1, -1)
    source_masks = None if masks is None else masks[..., :S].contiguous()
    return {
        "weight": (lambda e, w: WeightRecurrence.apply(e, pad, w, 0.0, True),
                   (rand(T, B, H, S), rand(B, H, S))),
        "prev-context": (lambda e, r: PrevContextRecurrence.apply(e, pad, r, source_masks),
                         (rand(T, B, H, S), rand(B, H, S, S))),
        "head-context": (lambda e, v, q, wk, w, b: HeadContextRecurrence.apply(
            e, padding, v, q, wk, None, w, b, masks, True),
            (rand(B, H, T, S), rand(B, H, S, D), rand(B, H, T, D), rand(H, D, D),
             rand(H, D, D), rand(H, D))),
        "full-context": (lambda e, v, q, w, b: FullContextRecurrence.apply(
            masked(e), v, q, w, b, masks, True),
            (rand(B, H, T, S), rand(B, H, S, D), rand(T, B, H, D), rand(2 * H * D, H * D),
             rand(2 * H * D))),
        "continuous": (lambda e: ContinuousScan.apply(e, power, 0.3), (rand(B, H, T, S),)),
    }


def _grads(function, inputs):
    out = function(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    g = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
    return torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("with_masks", [False, True], ids=["no-dropout", "dropout"])
@pytest.mark.parametrize("name", ["weight", "prev-context", "head-context", "full-context",
                                  "continuous"])
def test_gradients_under_saved_tensor_hooks_equal_the_plain_run(name, with_masks):
    function, inputs = _cases(with_masks)[name]
    plain = _grads(function, inputs)
    packed = []

    def pack(tensor):
        packed.append(tensor.shape)
        return tensor.detach().clone()  # a copy, as offloading to another device makes

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t.clone()):
        hooked = _grads(function, inputs)
    assert packed  # the Function's saved tensors went through the hooks
    for a, b in zip(plain, hooked):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_sigmoid_times_fallback_matches_and_is_taken_when_the_operator_is_missing(monkeypatch):
    value = torch.randn(3, 4, dtype=torch.double)
    logit = torch.tensor([[25.0], [-3.0], [0.5]], dtype=torch.double)
    expected = value * torch.sigmoid(logit)
    assert _torch_ops.fused_sigmoid_times_available()  # this torch has it
    fused = _torch_ops.sigmoid_times(value, logit, torch.empty_like(value))
    torch.testing.assert_close(fused, expected)
    # without the internal operator: looked up as missing, and the public form runs
    missing = _torch_ops._lookup_softplus_backward(aten=types.SimpleNamespace())
    assert missing is None
    monkeypatch.setattr(_torch_ops, "_SOFTPLUS_BACKWARD", missing)
    assert not _torch_ops.fused_sigmoid_times_available()
    fallback = _torch_ops.sigmoid_times(value, logit, torch.empty_like(value))
    torch.testing.assert_close(fallback, expected)
