"""The plugin's custom autograd Functions of RAN and Pervasive Attention (``_PaperRecurrence``,
densenet2d's ``_MaskedMoments`` and ``_BatchNormReLU``): ``gradcheck`` in float64, with padding and fixed dropout masks;
every tensor their backward reads goes through ``ctx.save_for_backward``, so saved-tensor hooks
see them all (here: each is packed to a CPU clone and the original is then overwritten); and
RAN-ALL trained with fairseq's ``--checkpoint-activations`` and ``--offload-activations`` gets
the gradients of the plain run."""
import pytest
import torch
from torch.autograd.graph import saved_tensors_hooks

import helpers
from ran_fairseq.modules.densenet2d import _MaskedMoments
from ran_fairseq.modules.positional_attention import _PaperRecurrence
from ran_fairseq.modules.positional_attention.recurrence import TRIANGLE_KEYS

HEADS, N, LAYERS = 2, 5, 3


def triangle_constants(n, dtype=torch.float64, device="cpu"):
    """RecurrentAttentionMatrices._build_constants's lower triangle, in ``dtype``."""
    visible = torch.ones(n, n, dtype=dtype, device=device).tril()
    count = torch.arange(1, n + 1, dtype=dtype, device=device)[:, None]
    s = (n / count).sqrt()
    return {"visible": visible, "s·visible": s * visible, "visible / s": visible / s,
            "beyond / count": (1 - visible) / count}


def recurrence_inputs(rows, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        x = scale * torch.randn(*shape, generator=g, dtype=torch.float64)
        return x.to(device).requires_grad_()

    return (rand(HEADS, rows, N), rand(N, N, scale=N ** -0.5), rand(N, scale=0.1),
            (1 + rand(N, scale=0.1)).detach().requires_grad_(), rand(N, scale=0.1))


def recurrence(masked, rows, device="cpu"):
    """_PaperRecurrence as a function of its differentiable inputs (a0, W, b, gain, shift): over
    the first ``rows`` < n query positions (a shorter sentence), with or without the lower
    triangle (§2.2's decoder, whose future keys are the recurrence's padding)."""
    def run(a0, weight, bias, gain, shift):
        triangle = None
        if masked:
            triangle = {k: v[:rows] for k, v in triangle_constants(N, device=device).items()}
        return _PaperRecurrence.apply(a0, weight, bias, gain, shift, LAYERS, 1e-5, triangle)
    return run


@pytest.mark.parametrize("rows", [N, 3], ids=["all-rows", "3-rows"])
@pytest.mark.parametrize("masked", [False, True], ids=["encoder", "decoder-lower-triangle"])
def test_paper_recurrence_passes_gradcheck(masked, rows, device):
    assert torch.autograd.gradcheck(recurrence(masked, rows, device),
                                    recurrence_inputs(rows, device=device), eps=1e-6, atol=1e-6)


def moments(zero_padding, keep):
    """_MaskedMoments of x after a fixed dropout mask ``keep`` (scaled by 1 / (1 - p), p = 0.25),
    zeroed at padded cells when ``zero_padding`` (as the DenseNet feeds it)."""
    def run(x, pad):
        dropped = x * keep / 0.75
        if zero_padding:
            dropped = dropped.masked_fill(pad, 0)
        return _MaskedMoments.apply(dropped, pad, int(pad.numel() - pad.sum()), zero_padding)
    return run


def grid(seed=0, device="cpu"):
    """x (B = 2, C = 3, T = 4, S = 5) in float64 with a padding mask: sentence 1 has 3 target
    rows and 2 source columns of padding... (B, 1, T, S)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64).to(device).requires_grad_()
    pad = torch.zeros(2, 1, 4, 5, dtype=torch.bool)
    pad[1, :, 3:] = True
    pad[1, :, :, 3:] = True
    keep = (torch.rand(2, 3, 4, 5, generator=g) > 0.25).double()
    return x, pad.to(device), keep.to(device)


@pytest.mark.parametrize("zero_padding", [False, True])
def test_masked_moments_pass_gradcheck(zero_padding, device):
    x, pad, keep = grid(device=device)
    run = moments(zero_padding, keep)
    assert torch.autograd.gradcheck(lambda x: run(x, pad), (x,), eps=1e-6, atol=1e-7)


# ---- saved-tensor hooks --------------------------------------------------------------------------


def gradients(run, inputs, upstream, hooked, overwrite=()):
    """Gradients of sum(upstream · run(*inputs)) with respect to ``inputs``; with ``hooked``, under
    saved-tensor hooks that pack each saved tensor to a CPU clone (counted) and unpack the clone,
    after which the tensors of ``overwrite`` (read by the backward only if it keeps them aside)
    are filled with NaN."""
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    packed = []

    def pack(t):
        packed.append(t)
        return t.detach().to("cpu", copy=True)

    if hooked:
        with saved_tensors_hooks(pack, lambda t: t):
            outputs = run(*inputs)
    else:
        outputs = run(*inputs)
    for t in overwrite:
        t.fill_(float("nan"))
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    loss = sum((o * u).sum() for o, u in zip(outputs, upstream))
    loss.backward()
    return [t.grad for t in inputs if t.requires_grad], len(packed)


@pytest.mark.parametrize("masked", [False, True], ids=["encoder", "decoder-lower-triangle"])
def test_paper_recurrence_saves_every_tensor_it_reads_through_the_hooks(masked):
    rows = 3
    inputs = recurrence_inputs(rows)
    upstream = [torch.randn(LAYERS, HEADS, rows, N, dtype=torch.float64)]
    plain, _ = gradients(recurrence(masked, rows), inputs, upstream, hooked=False)
    constants = {k: v[:rows] for k, v in triangle_constants(N).items()}

    def run(*args):
        return _PaperRecurrence.apply(*args, LAYERS, 1e-5, constants if masked else None)

    hooked, packed = gradients(run, inputs, upstream, hooked=True,
                               overwrite=list(constants.values()) if masked else ())
    # A_0..A_L, W, gain, shift, the triangle's constants, and per layer tanh's output (and the
    # filled row under the triangle)
    assert packed == 4 + (len(TRIANGLE_KEYS) + 2 * LAYERS if masked else LAYERS)
    for p, h in zip(plain, hooked):
        torch.testing.assert_close(h, p, rtol=0, atol=0)


@pytest.mark.parametrize("zero_padding", [False, True])
def test_masked_moments_save_every_tensor_they_read_through_the_hooks(zero_padding):
    x, pad, keep = grid()
    upstream = [torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
    run = moments(zero_padding, keep)
    plain, _ = gradients(lambda x: run(x, pad), [x], upstream, hooked=False)
    hooked, packed = gradients(lambda x: run(x, pad), [x], upstream, hooked=True)
    assert packed >= 2  # x and the mask (beside what the dropout's product saves)
    torch.testing.assert_close(hooked[0], plain[0], rtol=0, atol=0)


# ---- fairseq's activation checkpointing and offloading ------------------------------------------


TINY = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--max-attention-positions", "32"]


def model_gradients(databin, extra):
    """Gradients of RAN-ALL's label-smoothed loss over four padded validation sentences, in
    training mode (dropout, attention dropout 0.2), the same seed before building and before the
    forward pass."""
    task, model = helpers.build_model("ran_transformer", databin, TINY + list(extra), seed=3)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(4)])
    model.train()
    torch.manual_seed(11)
    out = model(**sample["net_input"])
    loss = torch.nn.functional.cross_entropy(
        out[0].view(-1, out[0].size(-1)), sample["target"].view(-1),
        ignore_index=task.target_dictionary.pad())
    loss.backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("flag", ["--checkpoint-activations", "--offload-activations"])
def test_ran_all_gradients_with_checkpointed_or_offloaded_activations(synthetic_databin, flag):
    plain = model_gradients(synthetic_databin, [])
    other = model_gradients(synthetic_databin, [flag])
    assert other.keys() == plain.keys()
    assert any("self_attn_matrices" in name for name in plain)
    for name, grad in plain.items():
        torch.testing.assert_close(other[name], grad, rtol=1e-5, atol=1e-6, msg=name)


# ---- Pervasive Attention's fused batch norm and ReLU ---------------------------------------------


def pervasive_bn_relu_inputs(seed=0, device="cpu"):
    """Two features (C = 2 and 3) of a (B = 2, T = 4, S = 5) grid in float64, zero at the padding
    of ``grid``, with batch-norm parameters and the real-cell mask."""
    x, pad, _ = grid(seed, device)
    g = torch.Generator().manual_seed(seed + 1)
    keep = (~pad).double()
    extra = (torch.randn(2, 2, 4, 5, generator=g, dtype=torch.float64).to(device) * keep)
    weight = (1 + 0.2 * torch.randn(5, generator=g, dtype=torch.float64)).to(device)
    bias = (0.3 * torch.randn(5, generator=g, dtype=torch.float64)).to(device)
    return [(x * keep).detach().requires_grad_(), extra.requires_grad_(),
            weight.requires_grad_(), bias.requires_grad_()], pad, keep


def pervasive_bn_relu(pad, keep, masked_output, from_output=False):
    """ReLU(BN(x)) of the two features' concatenation through _MaskedMoments (statistics over
    the real cells, each feature's once) and _BatchNormReLU, as the DenseNet composes them;
    ``from_output``: its backward takes the normalized input from its output."""
    from ran_fairseq.modules.densenet2d import _BatchNormReLU

    count = int(pad.numel() - pad.sum())

    def run(a, b, weight, bias):
        # the features as the DenseNet holds them: products with the real-cell mask
        a, b = a * keep, b * keep
        stats = [_MaskedMoments.apply(f, pad, count, True) for f in (a, b)]
        mean, meansq = (torch.cat(parts) for parts in zip(*stats))
        return _BatchNormReLU.apply(mean, meansq, weight, bias, 1e-5,
                                    keep if masked_output else None, from_output, a, b)
    return run


@pytest.mark.parametrize("from_output", [False, True], ids=["concatenated", "from-output"])
@pytest.mark.parametrize("masked_output", [False, True], ids=["unmasked", "masked-output"])
def test_pervasive_fused_batch_norm_relu_passes_gradcheck(masked_output, from_output, device):
    inputs, pad, keep = pervasive_bn_relu_inputs(device=device)
    run = pervasive_bn_relu(pad, keep, masked_output, from_output)
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("from_output", [False, True], ids=["concatenated", "from-output"])
def test_pervasive_fused_batch_norm_relu_equals_torch_batch_norm_on_real_cells(from_output):
    """Without the mask on the output, at real cells: torch's training-mode batch norm of the real
    cells alone, then ReLU; gradients likewise."""
    inputs, pad, keep = pervasive_bn_relu_inputs()
    out = pervasive_bn_relu(pad, keep, False, from_output)(*inputs)
    real = ~pad.squeeze(1)
    upstream = torch.randn(out.shape, dtype=torch.float64) * keep
    grads = torch.autograd.grad((out * upstream).sum(), inputs)
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    x = torch.cat(copies[:2], dim=1).permute(0, 2, 3, 1)[real]  # (N real, C)
    expected = torch.nn.functional.batch_norm(x, None, None, copies[2], copies[3], training=True,
                                              eps=1e-5).relu()
    torch.testing.assert_close(out.permute(0, 2, 3, 1)[real], expected)
    expected_grads = torch.autograd.grad(
        (expected * upstream.permute(0, 2, 3, 1)[real]).sum(), copies)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got * (keep if got.dim() == 4 else 1),
                                   want * (keep if want.dim() == 4 else 1))


def test_pervasive_fused_batch_norm_relu_saves_every_tensor_it_reads_through_the_hooks():
    inputs, pad, keep = pervasive_bn_relu_inputs()
    run = pervasive_bn_relu(pad, keep, True)
    upstream = [torch.randn(2, 5, 4, 5, dtype=torch.float64)]
    plain, _ = gradients(run, inputs, upstream, hooked=False)
    hooked, packed = gradients(run, inputs, upstream, hooked=True)
    # the output, weight, mean, variance, the clamp's mask and the two features (beside what the
    # masks' products and the moments save)
    assert packed >= 7
    for p, h in zip(plain, hooked):
        torch.testing.assert_close(h, p, rtol=0, atol=0)
