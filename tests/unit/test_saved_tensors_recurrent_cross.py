"""The recurrent cross-attention's training Functions keep what their backward pass reads through
``ctx.save_for_backward`` only: under ``torch.autograd.graph.saved_tensors_hooks`` that replace
every saved tensor by a copy (as activation offloading does), and in recurrent_cross_transformer
trained with fairseq's --checkpoint-activations and --offload-activations, the gradients are those
of the plain run; and the one internal operator has a public fallback that gives the same
results."""
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


def _model_gradients(variant, flags, steps=2):
    """Gradients of every parameter after ``steps`` SGD steps of recurrent_cross_transformer on a
    fixed batch, in training mode with dropout, the model built with fairseq's ``flags``."""
    from fairseq import options
    from fairseq.data import Dictionary

    from ran_fairseq.models.recurrent_cross_transformer import RecurrentCrossTransformerModel

    class Task:
        source_dictionary = target_dictionary = Dictionary()

    for w in "abcdefgh":
        Task.source_dictionary.add_symbol(w)
    argv = ["unused-data", "--arch", "recurrent_cross_transformer", "--task", "translation",
            "--encoder-layers", "1", "--decoder-layers", "2", "--encoder-embed-dim", "16",
            "--decoder-embed-dim", "16", "--encoder-attention-heads", "2",
            "--decoder-attention-heads", "2", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--dropout", "0.1", "--attention-dropout", "0.2",
            "--cross-attention", *variant.split(), *flags]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    torch.manual_seed(0)
    model = RecurrentCrossTransformerModel.build_model(args, Task()).train()
    src = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 1, 5, 9, 6, 2]])
    prev = torch.tensor([[2, 5, 6, 7, 9, 10], [2, 7, 8, 1, 1, 1]])
    grads = []
    for step in range(steps):
        torch.manual_seed(10 + step)
        model.zero_grad()
        out, _ = model(src, torch.tensor([6, 4]), prev)
        out.log_softmax(-1)[..., 4].sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(0.1 * p.grad)
    return grads


@pytest.mark.parametrize("variant", ["prev-context", "prev-accum-weight", "expand-kv --kv-variant 1",
                                     "expand-kv --kv-variant 3"])
def test_checkpointed_and_offloaded_activations_give_the_plain_gradients(variant):
    """fairseq's --checkpoint-activations (the decoder layers' forward run again in the backward
    pass, the random state replayed) and --offload-activations (saved tensors through hooks) give
    the plain run's gradients, over two updates (up to float32 rounding, relative to the
    largest)."""
    plain = _model_gradients(variant, [])
    for flags in (["--checkpoint-activations"],
                  ["--checkpoint-activations", "--offload-activations"]):
        ours = _model_gradients(variant, flags)
        for step, (a, b) in enumerate(zip(plain, ours)):
            b = {n.replace("._checkpoint_wrapped_module", ""): g for n, g in b.items()}
            assert set(b) == set(a), flags
            scale = max(g.abs().max().item() for g in a.values())
            for name, grad in b.items():
                torch.testing.assert_close(grad / scale, a[name] / scale, rtol=0, atol=1e-6,
                                           msg=f"{flags} step {step} {name}")
