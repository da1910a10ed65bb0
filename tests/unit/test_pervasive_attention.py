"""Unit tests of the Pervasive Attention modules (Elbayad et al. 2018) on plain tensors, and of the
pervasive_attention model's options: the masked convolution, padding-aware batch norm, the
DenseNet (causality, padding, cached steps, memory-efficient gradients), the aggregators against
naive loops, and the model's decoding, counts and errors."""
import math

import pytest
import torch
import torch.nn.functional as F
from fairseq import options
from fairseq.data import Dictionary

from ran_fairseq.models.pervasive_attention import PervasiveAttentionModel
from ran_fairseq.modules.aggregators import AGGREGATORS, SourceAggregator
from ran_fairseq.modules import densenet2d
from ran_fairseq.modules.densenet2d import DenseNet2d, MaskedBatchNorm2d
from ran_fairseq.modules.masked_conv2d import MaskedConv2d


def randomize_batch_norms_(module, seed=0):
    """Random affine parameters and running statistics in every batch norm of ``module``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, MaskedBatchNorm2d):
                m.weight.copy_(1 + 0.3 * torch.randn(m.num_features, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.num_features, generator=g))
                m.running_mean.copy_(0.2 * torch.randn(m.num_features, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=g))
    return module


def grid_padding(target_lengths, source_lengths, rows, columns, left_source=False):
    """(B, T, S) mask, True where the target row or the source column is padding; sources are
    padded on the left with ``left_source``, targets always on the right."""
    pad = torch.ones(len(target_lengths), rows, columns, dtype=torch.bool)
    for b, (t, s) in enumerate(zip(target_lengths, source_lengths)):
        first = columns - s if left_source else 0
        pad[b, :t, first:first + s] = False
    return pad


def source_padding(lengths, columns, left=False):
    pad = torch.ones(len(lengths), columns, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if left:
            pad[b, columns - n:] = False
        else:
            pad[b, :n] = False
    return pad


# ---- the masked convolution ------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 5])
def test_masked_conv_is_the_full_kernel_with_its_future_rows_zeroed(k):
    torch.manual_seed(0)
    conv = MaskedConv2d(3, 4, k)
    assert conv.weight.shape == (4, 3, (k + 1) // 2, k)  # cropped: no zero weights stored
    full = torch.zeros(4, 3, k, k)
    full[:, :, : (k + 1) // 2] = conv.weight.detach()  # rows i-k//2..i of a centred k×k kernel
    x = torch.randn(2, 3, 6, 7)
    expected = F.conv2d(x, full, padding=k // 2)
    torch.testing.assert_close(conv(x), expected, rtol=1e-5, atol=1e-5)
    assert conv.masked_weights == full.numel() - conv.weight.numel()


def test_masked_conv_steps_with_a_cache_equal_the_full_convolution_and_reorder():
    torch.manual_seed(0)
    conv = MaskedConv2d(3, 4, 5)
    x = torch.randn(3, 3, 6, 7)
    full = conv(x)
    state = {}
    rows = [conv(x[:, :, i:i + 1], incremental_state=state) for i in range(3)]
    order = torch.tensor([2, 2, 0])
    conv.reorder_incremental_state(state, order)
    x = x[order]
    rows += [conv(x[:, :, i:i + 1], incremental_state=state) for i in range(3, 6)]
    stepped = torch.cat(rows, dim=2)
    torch.testing.assert_close(stepped[:, :, :3], full[:, :, :3], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stepped[:, :, 3:], full[order][:, :, 3:], rtol=1e-5, atol=1e-5)
    cache = next(iter(state.values()))["rows"]
    assert cache.shape == (3, 3, 2, 7)  # only ⌊k/2⌋ rows are kept, whatever the step


def test_masked_conv_rejects_even_kernels_and_bad_inputs():
    with pytest.raises(ValueError, match="odd kernel size"):
        MaskedConv2d(3, 4, 4)
    with pytest.raises(ValueError, match="^--kernel-size must be odd"):  # the model's option
        build(*TINY, "--kernel-size", "4")
    with pytest.raises(ValueError, match=r"\(batch, 3, target, source\)"):
        MaskedConv2d(3, 4, 3)(torch.randn(2, 5, 4, 4))


# ---- padding-aware batch norm ------------------------------------------------------------------


def test_batch_norm_statistics_and_gradients_use_real_cells_only():
    torch.manual_seed(0)
    pad = grid_padding([3, 5], [4, 2], 5, 6).unsqueeze(1)
    x = torch.randn(2, 3, 5, 6).masked_fill(pad, 1e3)  # padding holds large garbage
    x.requires_grad_()
    norm = randomize_batch_norms_(MaskedBatchNorm2d(3)).train()
    reference = torch.nn.BatchNorm2d(3).train()
    reference.load_state_dict(norm.state_dict())

    out = norm(x, pad)
    real = x.permute(0, 2, 3, 1)[~pad.squeeze(1)]  # (N real, C)
    expected = reference(real.t().reshape(1, 3, -1, 1)).reshape(3, -1).t()
    torch.testing.assert_close(out.permute(0, 2, 3, 1)[~pad.squeeze(1)], expected)
    torch.testing.assert_close(norm.running_mean, reference.running_mean)
    torch.testing.assert_close(norm.running_var, reference.running_var)

    weights = torch.randn(out.shape)
    grad, = torch.autograd.grad((out * weights).masked_fill(pad, 0).sum(), x)
    ref_grad, = torch.autograd.grad((expected * weights.permute(0, 2, 3, 1)[~pad.squeeze(1)]).sum(),
                                    x)
    torch.testing.assert_close(grad, ref_grad)
    assert grad.masked_select(pad.expand_as(grad)).abs().max() == 0

    norm.eval()
    torch.testing.assert_close(norm(x, pad), F.batch_norm(
        x, norm.running_mean, norm.running_var, norm.weight, norm.bias, eps=norm.eps))


# ---- the DenseNet ------------------------------------------------------------------------------


def densenet(**kw):
    torch.manual_seed(0)
    args = dict(in_channels=6, num_layers=3, growth_rate=4, kernel_size=5, dropout=0.0,
                gated_convolutions="none", memory_efficient_densenet=False)
    args.update(kw)
    return randomize_batch_norms_(DenseNet2d(**args))


@pytest.mark.parametrize("gated", ["none", "masked", "both"])
def test_no_output_depends_on_a_future_target_row(gated):
    net = densenet(gated_convolutions=gated).eval()
    x = torch.randn(2, 6, 7, 5, requires_grad=True)
    out = net(x, torch.zeros(2, 7, 5, dtype=torch.bool))
    for i in range(7):
        grad, = torch.autograd.grad(out[:, :, i].sum(), x, retain_graph=True)
        assert grad[:, :, i + 1:].abs().sum() == 0
        # Row i sees the current row, and every source column through rows <= i.
        assert grad[:, :, i].abs().max() > 0
        assert (grad[:, :, : i + 1].abs().sum((0, 1, 2)) > 0).all()


@pytest.mark.parametrize("left_source", [False, True], ids=["right-pad", "left-pad"])
def test_padding_never_reaches_real_cells_in_training(left_source):
    """In training mode (batch statistics), the real cells of a padded batch do not change when
    the same sentences are padded to a larger grid on the other source side, with different
    garbage in the padded input cells: padding is zero at every layer and out of the statistics."""
    lengths_t, lengths_s = [4, 6], [5, 3]
    results = []
    for rows, columns, left, garbage in ((6, 5, left_source, 7.0), (8, 7, not left_source, -3.0)):
        torch.manual_seed(1)
        content = torch.randn(2, 6, 6, 5)
        x = torch.full((2, 6, rows, columns), garbage)
        for b, (t, s) in enumerate(zip(lengths_t, lengths_s)):
            first = columns - s if left else 0
            x[b, :, :t, first:first + s] = content[b, :, :t, :s]
        pad = grid_padding(lengths_t, lengths_s, rows, columns, left)
        net = densenet(dropout=0.0).train()
        layer_outputs = []
        for layer in net.layers:
            layer.register_forward_hook(lambda m, args, out: layer_outputs.append(out))
        out = net(x, pad)
        for h in (*layer_outputs, out):  # zero at padding after every layer
            assert h.masked_select(pad.unsqueeze(1).expand_as(h)).abs().max() == 0
        real = [out[b, :, :t, (columns - s if left else 0):][:, :, :s]
                for b, (t, s) in enumerate(zip(lengths_t, lengths_s))]
        results.append((real, net.norm.running_var.clone()))
    (real_a, var_a), (real_b, var_b) = results
    for a, b in zip(real_a, real_b):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(var_a, var_b)


def test_cached_rows_equal_the_full_grid():
    net = densenet().eval()
    x = torch.randn(3, 6, 6, 5)
    pad = grid_padding([6, 4, 6], [5, 3, 2], 6, 5)
    with torch.no_grad():
        full = net(x, pad)
        state = {}
        rows = [net(x[:, :, i:i + 1], pad[:, i:i + 1], incremental_state=state) for i in range(6)]
    torch.testing.assert_close(torch.cat(rows, dim=2), full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="evaluation mode"):
        net.train()(x[:, :, :1], pad[:, :1], incremental_state={})


@pytest.mark.parametrize("memory_efficient", [False, True], ids=["plain", "memory-efficient"])
@pytest.mark.parametrize("gated", ["none", "masked", "both"])
def test_training_forward_and_gradients_equal_torch_batch_norm_without_padding(gated,
                                                                              memory_efficient):
    """Without padding, the DenseNet (batch-norm statistics computed once per feature and shared
    by later layers) equals the layer list written out with torch's batch norm, which reduces over
    each layer's whole input: outputs, input and parameter gradients, running statistics."""
    net = densenet(gated_convolutions=gated, dropout=0.0,
                   memory_efficient_densenet=memory_efficient).train()
    x = torch.randn(3, 6, 5, 4)
    pad = torch.zeros(3, 5, 4, dtype=torch.bool)
    weights = torch.randn(3, net.out_channels, 5, 4)

    def bn(norm, h):
        return F.batch_norm(h, norm.running_mean, norm.running_var, norm.weight, norm.bias,
                            training=True, momentum=norm.momentum, eps=norm.eps)

    def reference(h):
        features = [h]
        for layer in net.layers:
            h = layer.conv1(bn(layer.norm1, torch.cat(features, dim=1)).relu())
            h = F.glu(h, dim=1) if gated == "both" else h
            h = layer.conv2(bn(layer.norm2, h).relu())
            features.append(F.glu(h, dim=1) if gated != "none" else h)
        return bn(net.norm, torch.cat(features, dim=1)).relu()

    results = []
    for forward in (net, lambda h, pad: reference(h)):
        randomize_batch_norms_(net)
        net.zero_grad()
        xi = x.clone().requires_grad_()
        out = forward(xi, pad)
        (out * weights).sum().backward()
        results.append((out.detach(), xi.grad, [p.grad.clone() for p in net.parameters()],
                        [b.clone() for b in net.buffers() if b.dtype != torch.long]))
    (out_n, gx_n, gp_n, buf_n), (out_r, gx_r, gp_r, buf_r) = results
    torch.testing.assert_close(out_n, out_r, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gx_n, gx_r, rtol=1e-4, atol=1e-5)
    for a, b in zip(gp_n + buf_n, gp_r + buf_r):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("memory_efficient", [False, True], ids=["plain", "memory-efficient"])
def test_the_module_switch_selects_the_eager_batch_norm_with_the_same_results(
        memory_efficient, dtype, monkeypatch):
    """densenet2d.USE_EAGER computes the training statistics and BN → ReLU by autograd: with
    padding, the same outputs, input and parameter gradients and running statistics as the
    written-out backward passes."""
    x = torch.randn(2, 6, 5, 6, dtype=dtype)
    pad = grid_padding([5, 3], [6, 4], 5, 6)
    results = []
    for eager in (False, True):
        monkeypatch.setattr(densenet2d, "USE_EAGER", eager)
        net = densenet(gated_convolutions="masked", memory_efficient_densenet=memory_efficient)
        net = net.to(dtype).train()
        xi = x.clone().requires_grad_()
        out = net(xi, pad)
        (out * torch.linspace(-1, 1, out.numel(), dtype=dtype).view_as(out)).sum().backward()
        results.append([out.detach(), xi.grad] + [p.grad for p in net.parameters()]
                       + [b for b in net.buffers() if b.dtype != torch.long])
    tolerance = {} if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    for fused, eager in zip(*results):
        torch.testing.assert_close(fused, eager, **tolerance)


@pytest.mark.parametrize("gated", ["none", "masked", "both"])
def test_memory_efficient_mode_gives_the_plain_gradients(gated):
    plain = densenet(gated_convolutions=gated, dropout=0.3).train()
    efficient = densenet(gated_convolutions=gated, dropout=0.3,
                         memory_efficient_densenet=True).train()
    x = torch.randn(2, 6, 5, 6)
    pad = grid_padding([5, 3], [6, 4], 5, 6)
    weights = torch.randn(2, plain.out_channels, 5, 6)
    results = []
    for net in (plain, efficient):
        xi = x.clone().requires_grad_()
        torch.manual_seed(3)  # the same dropout masks
        out = net(xi, pad)
        (out * weights).sum().backward()
        results.append((out.detach(), xi.grad, {n: p.grad for n, p in net.named_parameters()},
                        {n: b.clone() for n, b in net.named_buffers()}))
    (out_p, gx_p, gp_p, buf_p), (out_e, gx_e, gp_e, buf_e) = results
    torch.testing.assert_close(out_e, out_p)
    torch.testing.assert_close(gx_e, gx_p)
    for name in gp_p:  # the plain mode's 1×1 convolutions of a padded batch sum over the real
        # cells' rows (COMPACT_BOTTLENECK), the memory-efficient one's over every cell: float32
        # rounding apart (in float64 they agree to 1e-14)
        torch.testing.assert_close(gp_e[name], gp_p[name], rtol=1e-5, atol=1e-4, msg=name)
    for name in buf_p:  # running statistics moved once, not again in the recomputation
        torch.testing.assert_close(buf_e[name], buf_p[name], msg=name)


def test_densenet_errors_name_the_problem():
    with pytest.raises(ValueError, match="at least one layer"):
        densenet(num_layers=0)
    with pytest.raises(ValueError, match="^--num-layers must be positive"):  # the model's option
        build(*TINY, "--num-layers", "0")
    with pytest.raises(ValueError, match="padding mask"):
        densenet()(torch.randn(2, 6, 4, 5), torch.zeros(2, 5, 4, dtype=torch.bool))


# ---- the aggregators ---------------------------------------------------------------------------


def naive_aggregate(kind, h, src_pad, score):
    """Pooled features and weights by loops over sentences, target rows and the real source
    columns only."""
    B, C, T, S = h.shape
    pooled, weights = torch.zeros(B, T, 2 * C if kind == "max-attn" else C), torch.zeros(B, T, S)
    for b in range(B):
        cols = [j for j in range(S) if not src_pad[b, j]]
        n = len(cols)
        for i in range(T):
            cells = torch.stack([h[b, :, i, j] for j in cols])  # (n, C)
            mx, arg = cells.max(0)  # Eq. 2
            mass = torch.zeros(S)  # Eq. 7: positive pooled mass supplied by each column
            for d in range(C):
                mass[cols[arg[d]]] += max(mx[d].item(), 0.0)
            w_max = torch.zeros(S)
            w_max[cols] = mass[cols] / mass.sum() if mass.sum() > 0 else 1.0 / n
            w_avg = torch.zeros(S)
            w_avg[cols] = 1.0 / n
            if score is not None:
                rho = torch.softmax(torch.stack([cells[m] @ score for m in range(n)]), 0)
                att = math.sqrt(n) * (rho[:, None] * cells).sum(0)  # Eq. 9
                w_att = torch.zeros(S)
                w_att[cols] = rho
            if kind == "max":
                pooled[b, i], weights[b, i] = mx, w_max
            elif kind == "avg":
                pooled[b, i], weights[b, i] = cells.sum(0) / math.sqrt(n), w_avg  # Eq. 3
            elif kind == "attn":
                pooled[b, i], weights[b, i] = att, w_att
            else:
                pooled[b, i], weights[b, i] = torch.cat([mx, att]), (w_max + w_att) / 2
    return pooled, weights


@pytest.mark.parametrize("left", [False, True], ids=["right-pad", "left-pad"])
@pytest.mark.parametrize("kind", AGGREGATORS)
def test_aggregators_match_naive_loops_with_padding(kind, left):
    torch.manual_seed(0)
    agg = SourceAggregator(kind, 5)
    h = torch.randn(3, 5, 4, 6)
    h[0, :, 1] = -torch.rand(5, 6)  # a row whose maxima are all negative: uniform max weights
    src_pad = source_padding([6, 4, 1], 6, left)
    h = h.masked_fill(src_pad[:, None, None, :], 1e4)  # padded columns hold large values
    pooled, weights = agg(h, src_pad)
    expected, expected_weights = naive_aggregate(
        kind, h, src_pad, agg.score.detach() if agg.score is not None else None)
    assert pooled.shape == (3, 4, agg.out_channels)
    torch.testing.assert_close(pooled, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4))
    head, head_weights = agg(h, src_pad, need_weights=False, need_head_weights=True)
    assert head_weights.shape == (1, 3, 4, 6)
    assert agg(h, src_pad, need_weights=False)[1] is None


def test_aggregator_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown aggregator 'mean'"):
        SourceAggregator("mean", 4)
    with pytest.raises(ValueError, match="no real tokens"):
        SourceAggregator("max", 4)(torch.randn(1, 4, 2, 3), torch.ones(1, 3, dtype=torch.bool))


# ---- the fairseq model -------------------------------------------------------------------------


class FakeTask:
    def __init__(self):
        self.source_dictionary, self.target_dictionary = Dictionary(), Dictionary()
        for w in "abcdefgh":
            self.source_dictionary.add_symbol(w)
            self.target_dictionary.add_symbol(w.upper())


TINY = ("--num-layers", "2", "--growth-rate", "4", "--kernel-size", "5",
        "--encoder-embed-dim", "6", "--decoder-embed-dim", "5")


def parse(arch, *flags):
    return options.parse_args_and_arch(
        options.get_training_parser(), ["unused-data", "--arch", arch, "--task", "translation",
                                        *flags])


def build(*flags, arch="pervasive_attention"):
    args = parse(arch, *flags)
    torch.manual_seed(0)
    return randomize_batch_norms_(PervasiveAttentionModel.build_model(args, FakeTask()))


SRC = torch.tensor([[1, 5, 6, 7, 2], [9, 8, 6, 7, 2]])  # the first is left-padded (pad = 1)
SRC_LENGTHS = torch.tensor([4, 5])
PREV = torch.tensor([[2, 5, 6, 7, 8], [2, 9, 10, 1, 1]])  # eos first; the second right-padded


def test_named_archs_have_the_paper_defaults_and_a_cpu_size():
    keys = ("num_layers", "growth_rate", "kernel_size", "encoder_embed_dim", "decoder_embed_dim",
            "aggregator", "dropout")
    def resolved(arch):  # the namespace the model builds from
        return PervasiveAttentionModel.resolve_args(parse(arch))

    assert [getattr(resolved("pervasive_attention"), k) for k in keys] == [24, 32, 5, 128, 128,
                                                                            "max", 0.2]
    assert [getattr(resolved("pervasive_attention_small"), k) for k in keys] == [
        8, 16, 3, 64, 64, "max", 0.2]


@pytest.mark.parametrize("flags", [(), ("--share-decoder-input-output-embed",
                                        "--aggregator", "max-attn", "--gated-convolutions",
                                        "--positional-embeddings", "learned")],
                         ids=["default", "tied-gated-max-attn"])
def test_later_target_tokens_never_change_earlier_outputs(flags):
    model = build(*TINY, *flags).eval()
    changed = PREV.clone()
    changed[0, 3:] = torch.tensor([3, 4])
    with torch.no_grad():
        out, extra = model(SRC, SRC_LENGTHS, PREV)
        out2, _ = model(SRC, SRC_LENGTHS, changed)
    torch.testing.assert_close(out[0, :3], out2[0, :3])
    assert (out[0, 3:] - out2[0, 3:]).abs().max() > 1e-3
    attn = extra["attn"][0]
    assert attn.shape == (2, 5, 5)
    assert attn[0, :, 0].abs().max() == 0  # the left padding of the first source
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 5))


def test_cached_and_recomputed_decoding_equal_the_full_forward():
    cached = build(*TINY, "--aggregator", "attn").eval()
    recompute = build(*TINY, "--aggregator", "attn", "--recompute-grid").eval()
    recompute.load_state_dict(cached.state_dict())
    with torch.no_grad():
        full, extra = cached(SRC, SRC_LENGTHS, PREV)
        for model in (cached, recompute):
            enc = model.encoder(SRC, SRC_LENGTHS)
            state, grid_rows = {}, []
            model.decoder.densenet.register_forward_pre_hook(
                lambda m, args: grid_rows.append(args[0].size(2)))
            steps = [model.decoder(PREV[:, : t + 1], enc, incremental_state=state)
                     for t in range(PREV.size(1))]
            # A cached step computes one grid row, whatever the step; recomputing, all of them.
            assert grid_rows == ([1] * 5 if model is cached else [1, 2, 3, 4, 5])
            logits = torch.cat([s[0] for s in steps], dim=1)
            attn = torch.cat([s[1]["attn"][0] for s in steps], dim=1)
            torch.testing.assert_close(logits[0], full[0], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(logits[1, :3], full[1, :3], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(attn[0], extra["attn"][0][0], rtol=1e-4, atol=1e-4)
            # One cache of ⌊k/2⌋ rows per masked convolution, or none when recomputing.
            assert len(state) == (0 if model is recompute else 2)


def test_training_returns_no_weights_and_incremental_training_is_an_error():
    model = build(*TINY).train()
    out, extra = model(SRC, SRC_LENGTHS, PREV)
    assert extra["attn"] == [None] and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="evaluation mode"):
        model.decoder(PREV[:, :1], model.encoder(SRC, SRC_LENGTHS), incremental_state={})


def test_model_memory_efficient_gradients_equal_plain_ones():
    plain = build(*TINY, "--aggregator", "max-attn").train()
    efficient = build(*TINY, "--aggregator", "max-attn", "--memory-efficient-densenet").train()
    efficient.load_state_dict(plain.state_dict())
    grads = []
    for model in (plain, efficient):
        torch.manual_seed(5)
        out, _ = model(SRC, SRC_LENGTHS, PREV)
        out.log_softmax(-1).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    # the memory-efficient DenseNet keeps the reference statistics (densenet2d.SHARED_STATISTICS
    # is off under checkpointing): float32 sums in another order, equal to 1e-5 of each scale
    for name, grad in grads[0].items():
        scale = max(1.0, grad.abs().max().item())
        torch.testing.assert_close(grads[1][name], grad, rtol=0, atol=1e-5 * scale, msg=name)


def test_complexity_counts_parameters_and_multiply_adds():
    model = build(*TINY, "--aggregator", "attn")
    counts = model.complexity(source_length=7, target_length=3)
    assert counts["parameters"] == sum(p.numel() for p in model.parameters())
    f0, g, k, vocab = 11, 4, 5, len(model.decoder.dictionary)
    convs = sum((f0 + i * g) * 4 * g + 4 * g * g * 3 * k for i in range(2))  # 1x1 + cropped k×3
    f = f0 + 2 * g
    assert counts["multiply_adds"] == 21 * convs + 2 * 21 * f + 3 * f * vocab
    assert counts["flops"] == 2 * counts["multiply_adds"]
    full = model.complexity(7, 3, include_masked_weights=True)
    masked = 2 * (4 * g * g * 2 * k)  # the future ⌊k/2⌋ = 2 rows of each k×k kernel
    assert full["parameters"] - counts["parameters"] == masked
    assert full["multiply_adds"] - counts["multiply_adds"] == 21 * masked


def test_bad_options_give_errors_that_name_the_flag():
    with pytest.raises(ValueError, match="--kernel-size"):
        build(*TINY, "--kernel-size", "4")
    with pytest.raises(ValueError, match="--growth-rate"):
        build(*TINY, "--growth-rate", "0")
    with pytest.raises(ValueError, match="--dropout"):
        build(*TINY, "--dropout", "1.5")


def test_gating_the_masked_convolution_alone_matches_the_papers_table_1_count():
    """Table 1 (L = 24, g = 32, d_s = d_t = 128, k = 5): 'Max, gated' has 9.64M parameters against
    7.18M for 'Max', counting full k×k kernels. Gating only the masked convolution adds
    L·4g·g·k² = 2.46M, which is that difference; gating the 1×1 convolutions too adds 1.92M more."""
    def full_count(gated):
        net = DenseNet2d(256, 24, 32, 5, dropout=0.0, gated_convolutions=gated,
                         memory_efficient_densenet=False)
        return sum(p.numel() for p in net.parameters()) + net.masked_weights()

    plain, masked, both = (full_count(g) for g in ("none", "masked", "both"))
    assert masked - plain == 24 * 128 * 32 * 5 * 5 == 2_457_600
    assert round((masked - plain) / 1e6, 2) == round(9.64 - 7.18, 2)
    assert both - masked == sum((256 + 32 * i) * 128 for i in range(24)) == 1_916_928


def test_gated_convolutions_flag_values_and_old_checkpoints():
    assert parse("pervasive_attention").gated_convolutions == "none"
    assert parse("pervasive_attention", "--gated-convolutions").gated_convolutions == "masked"
    assert parse("pervasive_attention", "--gated-convolutions", "both").gated_convolutions \
        == "both"
    widths = {}
    for flags in [(), ("--gated-convolutions",), ("--gated-convolutions", "both")]:
        layer = build(*TINY, *flags).decoder.densenet.layers[0]
        widths[flags[-1] if flags else "none"] = (layer.conv1.out_channels,
                                                   layer.conv2.out_channels)
    assert widths == {"none": (16, 4), "--gated-convolutions": (16, 8), "both": (32, 8)}
    # Before the flag took a value, True gated both convolutions: old checkpoints keep that.
    args = parse("pervasive_attention", *TINY)
    args.gated_convolutions = True
    del args.options_version  # such checkpoints are of options version 1
    torch.manual_seed(0)
    model = PervasiveAttentionModel.build_model(args, FakeTask())
    assert model.decoder.densenet.layers[0].conv1.out_channels == 32
    with pytest.raises(ValueError, match="gated_convolutions must be one of"):
        densenet(gated_convolutions="all")


def test_eq7_contributions_match_a_naive_loop_and_sum_to_the_pooled_logit():
    from ran_fairseq.modules.aggregators import eq7_contributions

    torch.manual_seed(0)
    B, C, T, S = 2, 5, 3, 4
    h = torch.randn(B, C, T, S)
    src_pad = source_padding([3, 4], S, left=True)
    rows = torch.randn(B, T, C)
    alpha = eq7_contributions(h, src_pad, rows)
    expected = torch.zeros(B, T, S)
    for b in range(B):
        cols = [j for j in range(S) if not src_pad[b, j]]
        for i in range(T):
            for d in range(C):  # B_ij: the channels whose max over real columns is at j
                j = max(cols, key=lambda c: h[b, d, i, c].item())
                expected[b, i, j] += rows[b, i, d] * h[b, d, i, j]
    torch.testing.assert_close(alpha, expected)
    assert alpha[0, :, 0].abs().max() == 0  # padding
    pooled, _ = SourceAggregator("max", C)(h, src_pad)
    torch.testing.assert_close(alpha.sum(-1), (rows * pooled).sum(-1))  # Eqs. 5-6
    with pytest.raises(ValueError, match="one output row per target position"):
        eq7_contributions(h, src_pad, rows[:, :2])


@pytest.mark.parametrize("memory_efficient", [False, True], ids=["plain", "memory-efficient"])
def test_half_precision_keeps_the_elementwise_path_and_the_padding_rules(memory_efficient):
    """bfloat16 takes the composition of elementwise operations (statistics in float32) instead of
    the fused float32 Function; in training and evaluation, with gradients, its outputs are the
    float32 ones to bfloat16's precision and zero at padding."""
    net = densenet(dropout=0.0, memory_efficient_densenet=memory_efficient).train()
    half = densenet(dropout=0.0, memory_efficient_densenet=memory_efficient).train()
    half.load_state_dict(net.state_dict())
    half = half.to(torch.bfloat16)
    x = torch.randn(2, 6, 5, 4)
    pad = grid_padding([5, 3], [4, 2], 5, 4)
    for training in (True, False):
        net.train(training)
        half.train(training)
        xh = x.to(torch.bfloat16).requires_grad_()
        out = half(xh, pad)
        out.float().sum().backward()
        assert out.masked_select(pad.unsqueeze(1).expand_as(out)).abs().max() == 0
        assert xh.grad.masked_select(pad.unsqueeze(1).expand_as(xh)).abs().max() == 0
        torch.testing.assert_close(out.float(), net(x, pad), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("cap, warns", [((), True), (("--max-source-positions", "100",
                                                      "--max-target-positions", "100"), False)])
def test_the_model_warns_once_when_nothing_caps_its_training_lengths(synthetic_databin, caplog,
                                                                     cap, warns):
    """Training memory grows with source length × target length: when the longest pair allowed
    (--max-source-positions × --max-target-positions) makes a large grid, the model says so once,
    when it is first put in training mode."""
    from helpers import build_model
    from systems import TINY_PA

    _, model = build_model("pervasive_attention", synthetic_databin, (*TINY_PA, *cap))
    with caplog.at_level("WARNING"):
        model.eval()
        model.train()
        model.train()
    found = [r for r in caplog.records if "--max-source-positions" in r.getMessage()]
    assert len(found) == (1 if warns else 0)
