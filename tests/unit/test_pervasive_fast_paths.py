"""Pervasive Attention's fast training paths against their eager references, each chosen by a
module-level switch: the grid in channels-last memory (``CHANNELS_LAST_GRID`` of the model), the
fused batch norm's backward taking the normalized input from its output instead of concatenating
the features again (``NORMALIZED_FROM_OUTPUT``), torch's training-mode batch norm for the
unshared, unpadded one after each 1×1 convolution (``NATIVE_UNPADDED_NORM``), and one buffer of
batch-norm statistics per training pass (``SHARED_STATISTICS``). Logits, every gradient and the
running statistics agree (dropout included: its masks are drawn alike), and the concatenations and
aten operators of a training step are counted (deterministic: no timing here)."""
import pytest
import torch
import torch.nn.functional as F
from fairseq import options
from fairseq.data import Dictionary

import ran_fairseq.models.pervasive_attention as pervasive
import ran_fairseq.modules.densenet2d as densenet2d
from ran_fairseq.modules.aggregators import max_pool
from ran_fairseq.modules.densenet2d import (DenseNet2d, MaskedBatchNorm2d,
                                            batch_norm_relu_eager, dropout_channels_first,
                                            masked_moments_eager)
from ran_fairseq.modules.grid_cells import bottleneck_on_rows, real_cell_rows

VOCAB = 14
SWITCHES = [(pervasive, "CHANNELS_LAST_GRID"), (densenet2d, "NORMALIZED_FROM_OUTPUT"),
            (densenet2d, "NATIVE_UNPADDED_NORM"), (densenet2d, "SHARED_STATISTICS"),
            (densenet2d, "MASK_WITH_STATISTICS"), (densenet2d, "COMPACT_BOTTLENECK")]


class _Task:
    def __init__(self):
        self.source_dictionary, self.target_dictionary = Dictionary(), Dictionary()
        for i in range(VOCAB - 4):
            self.source_dictionary.add_symbol(f"s{i}")
            self.target_dictionary.add_symbol(f"t{i}")


def build(flags, layers=3):
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        ["unused-data", "--arch", "pervasive_attention", "--task", "translation",
         "--num-layers", str(layers), "--growth-rate", "4", "--encoder-embed-dim", "6",
         "--decoder-embed-dim", "5", "--max-source-positions", "50",
         "--max-target-positions", "50", *flags])
    torch.manual_seed(0)
    model = pervasive.PervasiveAttentionModel.build_model(args, _Task())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # batch norms away from their initial identity
        for m in model.modules():
            if isinstance(m, MaskedBatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.5, 0.5, generator=g)
    return model


def batch(padded):
    g = torch.Generator().manual_seed(2)
    src = torch.randint(4, VOCAB, (4, 7), generator=g)
    prev = torch.randint(4, VOCAB, (4, 6), generator=g)
    prev[:, 0] = 2
    if padded:
        for b, (s, t) in enumerate([(7, 6), (5, 4), (3, 6), (6, 2)]):
            src[b, s:] = 1
            prev[b, t:] = 1
    return src, src.ne(1).sum(1), prev


def training_outputs(model, padded):
    """Logits, every parameter's gradient and the running statistics of one training step."""
    model.train()
    src, src_lengths, prev = batch(padded)
    torch.manual_seed(3)
    logits, _ = model(src, src_lengths, prev)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(4))
    (logits * weights * prev.ne(1).unsqueeze(-1)).sum().backward()
    result = {"logits": logits.detach()}
    result.update({f"grad {n}": p.grad for n, p in model.named_parameters() if p.grad is not None})
    result.update({n: b.clone() for n, b in model.named_buffers() if "running" in n})
    return result


def assert_same(got, expected, tolerance=1e-5):
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        scale = max(1.0, value.abs().max().item())
        assert torch.isfinite(got[key]).all(), key
        assert (got[key] - value).abs().max().item() <= tolerance * scale, key


def reference(monkeypatch):
    for module, name in SWITCHES:
        monkeypatch.setattr(module, name, False)


FLAGS = {
    "max": ["--aggregator", "max", "--share-decoder-input-output-embed"],
    "max k5 gated both": ["--kernel-size", "5", "--aggregator", "max", "--gated-convolutions",
                          "both"],
    "max-attn gated": ["--kernel-size", "3", "--aggregator", "max-attn",
                       "--gated-convolutions", "masked"],
    "avg memory-efficient": ["--kernel-size", "3", "--aggregator", "avg",
                             "--memory-efficient-densenet"],
}


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("name", list(FLAGS))
def test_fast_paths_equal_the_eager_reference(name, padded, monkeypatch):
    flags = FLAGS[name] + ([] if "k5" in name or "kernel" in FLAGS[name] else
                           ["--kernel-size", "3"])
    fast = training_outputs(build(flags), padded)
    reference(monkeypatch)
    assert_same(fast, training_outputs(build(flags), padded))


@pytest.mark.parametrize("module, name", SWITCHES, ids=[name for _, name in SWITCHES])
def test_each_fast_path_alone_equals_the_reference(module, name, monkeypatch):
    flags = FLAGS["max"] + ["--kernel-size", "3"]
    reference(monkeypatch)
    expected = training_outputs(build(flags), padded=False)
    monkeypatch.setattr(module, name, True)
    assert_same(training_outputs(build(flags), padded=False), expected)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("name", ["max", "max-attn gated"])
def test_the_fast_paths_equal_the_reference_in_float64(name, padded, monkeypatch):
    """In float64 the statistics buffer's gradients (accumulated per channel, applied once per
    feature) equal autograd's through the reference to rounding."""
    flags = FLAGS[name] + ["--kernel-size", "3"]
    fast = training_outputs(build(flags).double(), padded)
    reference(monkeypatch)
    assert_same(fast, training_outputs(build(flags).double(), padded), tolerance=1e-12)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_the_shared_statistics_pass_gradcheck(padded):
    """The DenseNet in training through _FeatureStatistics and _SharedBatchNormReLU (gradients
    through every batch norm's statistics): finite differences in float64."""
    torch.manual_seed(0)
    net = DenseNet2d(3, 2, 2, 3, dropout=0.0, gated_convolutions="none",
                     memory_efficient_densenet=False).double().train()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, MaskedBatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    padding = torch.zeros(2, 3, 4, dtype=torch.bool)
    if padded:
        padding[1, 2:] = True
        padding[1, :, 3:] = True
    x = torch.randn(2, 3, 3, 4, dtype=torch.float64, requires_grad=True)
    assert densenet2d.SHARED_STATISTICS
    assert torch.autograd.gradcheck(lambda grid: net(grid, padding), (x,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("gate", [False, True], ids=["plain", "gated"])
def test_the_bottleneck_on_the_real_rows_equals_the_masked_one(gate):
    """COMPACT_BOTTLENECK: the 1×1 convolution (and GLU) and the batch norm → ReLU after it on
    the real cells' rows only (as many rows as real cells), scattered into zeros, give the masked
    computation's values and gradients over the whole grid (float64)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 5, 4, 6, dtype=torch.float64, generator=g)
    x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    weight = torch.randn(8 if gate else 4, 5, 1, 1, dtype=torch.float64, generator=g,
                         requires_grad=True)
    norm_w = torch.rand(4, dtype=torch.float64, generator=g).add_(0.5).requires_grad_()
    norm_b = torch.rand(4, dtype=torch.float64, generator=g).sub_(0.5).requires_grad_()
    pad = torch.zeros(3, 1, 4, 6, dtype=torch.bool)
    pad[1, :, 3:] = True
    pad[2, :, :, 2:] = True
    keep = (~pad).double()
    count = int(keep.sum())
    seen = []

    def norm_relu(h):
        seen.append(h.size(0))
        return F.batch_norm(h, None, None, norm_w, norm_b, True, 0.0, 1e-5).relu()

    rows = real_cell_rows(keep)
    got = bottleneck_on_rows(x, weight, rows, gate, norm_relu)
    assert seen == [count] and rows.numel() == count
    h = F.conv2d(x, weight)
    h = (F.glu(h, dim=1) if gate else h) * keep
    mean, meansq = masked_moments_eager(h, pad, count)
    expected = batch_norm_relu_eager(mean, meansq, norm_w, norm_b, 1e-5, keep, h)
    assert torch.allclose(got, expected, atol=1e-12)
    inputs = (x, weight, norm_w, norm_b)
    out_grad = torch.randn(got.shape, dtype=torch.float64, generator=g)
    for a, b in zip(torch.autograd.grad(got, inputs, out_grad),
                    torch.autograd.grad(expected, inputs, out_grad)):
        assert torch.allclose(a, b, atol=1e-12)


def test_the_normalized_input_is_not_taken_from_the_output_where_a_weight_is_zero():
    """|b| < 8|w| fails for a zero weight: the backward concatenates, and stays finite."""
    flags = FLAGS["max"] + ["--kernel-size", "3"]
    model = build(flags)
    with torch.no_grad():
        model.decoder.densenet.layers[1].norm1.weight[2] = 0.0
    norms = model.decoder.densenet._batch_norms
    assert not densenet2d._normalized_from_output(norms)
    assert densenet2d._normalized_from_output(build(flags).decoder.densenet._batch_norms)
    grads = training_outputs(model, padded=True)
    assert all(torch.isfinite(v).all() for v in grads.values())


def cat_calls(net, x, padding):
    """aten::cat calls of a training forward pass of ``net`` and of its backward pass."""
    from torch.profiler import ProfilerActivity, profile

    net.train()
    with profile(activities=[ProfilerActivity.CPU]) as forward:
        out = net(x, padding)
    with profile(activities=[ProfilerActivity.CPU]) as backward:
        out.sum().backward()
    return tuple(sum(e.name == "aten::cat" for e in p.events()) for p in (forward, backward))


@pytest.mark.parametrize("layers", [2, 5])
def test_the_backward_pass_concatenates_no_features(layers, monkeypatch):
    """Forward: each layer after the first and the closing norm concatenate their input
    features (L) and one check of the batch norms' parameters concatenates them (2); the
    statistics are columns of one buffer. Backward: nothing. The reference also concatenates
    each reading layer's statistics (2 (L + 1)) and, in the backward pass, the features of those
    L batch norms again."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 4, 5).contiguous(memory_format=torch.channels_last)
    padding = torch.zeros(2, 4, 5, dtype=torch.bool)
    net = DenseNet2d(6, layers, 3, 3, dropout=0.0, gated_convolutions="none",
                     memory_efficient_densenet=False)
    assert cat_calls(net, x, padding) == (layers + 2, 0)
    reference(monkeypatch)
    assert cat_calls(net, x, padding) == (layers + 2 * (layers + 1), layers)


def test_a_channels_last_grid_keeps_its_layout_and_its_dropout_masks():
    """The DenseNet's output and the gradient that max pooling sends back are channels last for
    a channels-last grid; the values and the gradient equal those of the channels-first grid,
    with dropout from the same seed."""
    torch.manual_seed(0)
    net = DenseNet2d(6, 2, 3, 3, dropout=0.3, gated_convolutions="none",
                     memory_efficient_densenet=False).train()
    x = torch.randn(2, 6, 4, 5)
    padding = torch.zeros(2, 4, 5, dtype=torch.bool)
    source = torch.zeros(2, 5, dtype=torch.bool)
    results = []
    for grid in (x.clone(), x.contiguous(memory_format=torch.channels_last)):
        grid.requires_grad_()
        torch.manual_seed(1)
        features = net(grid, padding)
        incoming = []
        features.register_hook(incoming.append)
        pooled, _ = max_pool(features, source, need_weights=False)
        (pooled * torch.arange(pooled.numel()).view_as(pooled)).sum().backward()
        results.append((features, grid.grad))
    (first, first_grad), (last, last_grad) = results
    assert last.is_contiguous(memory_format=torch.channels_last)
    assert incoming[0].is_contiguous(memory_format=torch.channels_last)
    assert_same({"features": last, "grid's gradient": last_grad},
                {"features": first, "grid's gradient": first_grad})


def test_dropout_channels_first_draws_the_mask_of_a_channels_first_tensor():
    x = torch.randn(2, 3, 4, 5)
    torch.manual_seed(7)
    expected = F.dropout(x, 0.4, True)
    torch.manual_seed(7)
    got = dropout_channels_first(x.contiguous(memory_format=torch.channels_last), 0.4, True)
    assert torch.equal(got, expected)
    assert torch.equal(dropout_channels_first(x, 0.4, False), x)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("kind", ["max", "avg", "max-attn"])
def test_pooling_rectified_features_needs_no_mask(kind, left):
    """Features ≥ 0 and 0 at padded columns (with ties at 0 in real columns too): pooled values,
    weights and the gradients through the ReLU that made them equal the masked pooling's."""
    from ran_fairseq.modules.aggregators import SourceAggregator

    torch.manual_seed(0)
    columns, lengths = 5, torch.tensor([[5], [3], [1]])
    position = torch.arange(columns).expand(3, -1)
    padding = position < columns - lengths if left else position >= lengths
    pre = torch.randn(3, 4, 2, columns) - 0.5
    pre[:, 0] = -1.0  # a channel with every real cell cut by the ReLU: ties at 0
    aggregator = SourceAggregator(kind, 4)
    results = []
    for rectified in (False, True):
        x = pre.clone().requires_grad_()
        features = torch.relu(x) * (~padding)[:, None, None, :]
        pooled, weights = aggregator(features, padding, need_weights=True, rectified=rectified)
        (pooled * torch.randn(pooled.shape, generator=torch.Generator().manual_seed(1))).sum() \
            .backward()
        results.append((pooled.detach(), weights, x.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


# aten operators that return a view of their input, and conversions that copy only when they must
# (counted where they call a copying operator): neither launches a kernel when it does not copy
VIEWS = frozenset({"alias", "as_strided", "detach", "expand", "expand_as", "lift_fresh", "narrow",
                   "permute", "select", "slice", "split", "split_with_sizes", "squeeze", "t",
                   "transpose", "unbind", "unflatten", "unsqueeze", "view", "view_as",
                   "_reshape_alias", "_unsafe_view"})
MAY_COPY = frozenset({"contiguous", "flatten", "reshape", "to", "type_as"})


def kernels_per_step(model, padded):
    """aten operators of a training forward and backward pass that no other aten operator called,
    views and conversions that copy nothing left out (about a GPU step's kernel launches;
    deterministic for a model, a batch's padding and a torch version)."""
    from torch.profiler import ProfilerActivity, profile

    model.train()
    src, src_lengths, prev = batch(padded)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        logits, _ = model(src, src_lengths, prev)
        logits.sum().backward()

    def aten(event):
        return event.name.startswith("aten::")

    def top(event):
        parent = event.cpu_parent
        while parent is not None:
            if aten(parent):
                return False
            parent = parent.cpu_parent
        return True

    def launches(event):
        name = event.name[len("aten::"):]
        if name in MAY_COPY:
            return any(aten(c) and launches(c) for c in event.cpu_children)
        return name not in VIEWS

    return sum(aten(e) and top(e) and launches(e) for e in p.events())


# The DenseNet of pervasive_attention_small, the peer benchmark's pa-cpu case (8 layers, g = 16,
# k = 3; the embedding sizes do not change the count): aten operators of a training step without
# and with padding, at most. With SHARED_STATISTICS alone off the step ran 701 and 1,077, with
# every switch off 962 and 1,010; before the padded features' masks were taken with their
# statistics and the bottleneck on the real cells only, 649 with padding (torch 2.13).
KERNELS_SMALL = {False: 425, True: 498}


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_the_kernels_of_a_training_step_stay_within_their_bound(padded, monkeypatch):
    flags = ["--kernel-size", "3", "--growth-rate", "16", "--aggregator", "max",
             "--share-decoder-input-output-embed", "--dropout", "0", "--embedding-dropout", "0",
             "--output-dropout", "0"]
    fast = kernels_per_step(build(flags, layers=8), padded)
    assert fast <= KERNELS_SMALL[padded]
    monkeypatch.setattr(densenet2d, "SHARED_STATISTICS", False)
    assert kernels_per_step(build(flags, layers=8), padded) > fast
