"""Unit tests of ran_fairseq.modules.positional_attention on plain tensors, and of the
ran_transformer model's options (RAN: Zeng et al. 2021; HC-SA; Random Synthesizer)."""
import math

import pytest
import torch
import torch.nn.functional as F
from fairseq import options
from fairseq.data import Dictionary

from ran_fairseq.models.ran_transformer import RanTransformerConfig, RanTransformerModel
from ran_fairseq.modules.positional_attention import (
    FeedForwardTransition,
    GaussianAttentionMatrices,
    PositionalSelfAttention,
    RandomSynthesizerMatrices,
)
from ran_fairseq.modules.positional_attention import ran as ran_module
from ran_fairseq.modules.positional_attention import recurrence as recurrence_module
from ran_fairseq.modules.positional_attention.recurrence import paper_recurrence_eager

# the RAN options at ran_transformer's defaults (its config holds them)
RAN_DEFAULTS = {dest: getattr(RanTransformerConfig(), dest) for dest in
                ("ran_transition", "ran_decoder_initial", "ran_initial_init", "ran_ffn_dim")}


def RecurrentAttentionMatrices(*args, **options):
    """The RAN matrix source with ``options`` and otherwise the model's defaults."""
    return ran_module.RecurrentAttentionMatrices(*args, **{**RAN_DEFAULTS, **options})


N = 12  # positions
HEADS, LAYERS, DIM = 2, 3, 8


def randomize_(module, seed=0):
    """Random values in every parameter (LayerNorm gains and biases included)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module


def sources(causal):
    torch.manual_seed(0)
    return {
        "ran": randomize_(RecurrentAttentionMatrices(LAYERS, HEADS, N, causal)),
        "synthesizer": randomize_(RandomSynthesizerMatrices(LAYERS, HEADS, N, causal)),
        "gaussian": GaussianAttentionMatrices(LAYERS, HEADS, N, causal),
    }


def attention(matrices, layer=1, seed=0):
    torch.manual_seed(seed)
    module = PositionalSelfAttention(DIM, HEADS, matrices, layer)
    with torch.no_grad():
        module.out_proj.bias.normal_()
    return module.eval()


KINDS = ["ran", "synthesizer", "gaussian"]


# ---- the RAN recurrence (Eqs. 3-4) -----------------------------------------------------------


def naive_ran(matrices, layernorm_residual):
    """A_1..A_L by explicit loops over heads and rows, one matrix-vector product at a time."""
    weight, bias = matrices.transition.weight, matrices.transition.bias
    result = torch.zeros(LAYERS, HEADS, N, N)
    for k in range(HEADS):
        for i in range(N):
            row = matrices.initial[k, i]
            for layer in range(LAYERS):
                z = torch.tanh(weight @ row + bias)
                if layernorm_residual:
                    mean, var = z.mean(), z.var(unbiased=False)
                    z = (z - mean) / torch.sqrt(var + matrices.layer_norm.eps)
                    row = z * matrices.layer_norm.weight + matrices.layer_norm.bias + row
                else:
                    row = z
                result[layer, k, i] = row
    return result


@pytest.mark.parametrize("layernorm_residual", [True, False], ids=["ln-res", "no-ln-res"])
def test_ran_recurrence_matches_naive_loop(layernorm_residual):
    matrices = randomize_(RecurrentAttentionMatrices(
        LAYERS, HEADS, N, causal=False, layernorm_residual=layernorm_residual))
    with torch.no_grad():
        expected = naive_ran(matrices, layernorm_residual)
        for layer in range(LAYERS):
            torch.testing.assert_close(matrices.logits(layer, N), expected[layer],
                                       rtol=1e-5, atol=1e-5)
    # While autograd records, only the rows in use are computed: the same values.
    for layer in range(LAYERS):
        torch.testing.assert_close(matrices.logits(layer, 5).detach(), expected[layer, :, :5],
                                   rtol=1e-5, atol=1e-5)


def test_ran_weights_of_a_position_do_not_depend_on_sentence_length():
    matrices = sources(causal=False)["ran"]
    with torch.no_grad():
        logits = matrices.logits(2, N)
        short = matrices.probs(2, 4)
    # softmax over the first 4 keys of the full-width recurrence, not a recurrence over 4 columns
    torch.testing.assert_close(short, torch.softmax(logits[:, :4, :4], dim=-1))


def test_ran_gradients_reach_initial_matrices_and_transition_unless_fixed():
    for fixed in (False, True):
        matrices = RecurrentAttentionMatrices(LAYERS, HEADS, N, causal=True, freeze_initial=fixed)
        module = attention(matrices).train()
        module(torch.randn(6, 3, DIM))[0].pow(2).sum().backward()
        assert matrices.transition.weight.grad.abs().sum() > 0
        assert matrices.layer_norm.weight.grad.abs().sum() > 0
        assert (matrices.initial.grad is None) == fixed
        if not fixed:
            assert matrices.initial.grad[:, :6, :].abs().sum() > 0


# ---- the decoder's initial matrix (§2.2) and the feed-forward transition -------------------------

RAN_VARIANTS = {  # id: constructor options
    "paper": {},
    "no-ln-res": {"layernorm_residual": False},
    "ffn": {"ran_transition": "ffn"},
}


def ran_matrices(causal, seed=0, **options):
    torch.manual_seed(seed)
    return randomize_(RecurrentAttentionMatrices(LAYERS, HEADS, N, causal, **options), seed)


def whole_row_reference(matrices):
    """The decoder's recurrence as it was before --ran-decoder-initial (the same tensor operations
    in the same order): every row transitioned over all n keys, the future masked only later."""
    weight, bias = matrices.transition.weight.float(), matrices.transition.bias.float()
    a, layers = matrices.initial.float(), []
    for _ in range(LAYERS):
        a_hat = torch.tanh(F.linear(a, weight, bias))
        if matrices.layer_norm is None:
            a = a_hat
        else:
            norm = matrices.layer_norm
            a = F.layer_norm(a_hat, (N,), norm.weight.float(), norm.bias.float(), norm.eps) + a
        layers.append(a)
    return torch.stack(layers)


def naive_rows(matrices, lower_triangle):
    """A_1..A_L one row at a time from Eqs. 3-4 (or the feed-forward transition): row i of head k
    takes A_0[k, i, :m] with m = i + 1 under §2.2's lower triangle (m = n otherwise), transitions it
    with W[:m, :m], b[:m] (ffn: W_1[:, :m], W_2[:m], b_2[:m]), normalizes it over its m entries with
    the gain and bias [:m]; entries m..n-1 of the row are zero."""
    result = torch.zeros(LAYERS, HEADS, N, N)
    for k in range(HEADS):
        for i in range(N):
            m = i + 1 if lower_triangle else N
            row = matrices.initial[k, i, :m]
            for layer in range(LAYERS):
                if matrices.ran_transition == "ffn":
                    fc1, fc2 = matrices.transition.fc1, matrices.transition.fc2
                    hidden = torch.relu(fc1.weight[:, :m] @ row + fc1.bias)
                    row = fc2.weight[:m] @ hidden + fc2.bias[:m] + row
                else:
                    z = torch.tanh(matrices.transition.weight[:m, :m] @ row
                                   + matrices.transition.bias[:m])
                    if matrices.layer_norm is None:
                        row = z
                    else:
                        norm = matrices.layer_norm
                        z = (z - z.mean()) / torch.sqrt(z.var(unbiased=False) + norm.eps)
                        row = z * norm.weight[:m] + norm.bias[:m] + row
                result[layer, k, i, :m] = row
    return result


def all_logits(matrices, rows=N):
    return torch.stack([matrices.logits(layer, rows) for layer in range(LAYERS)])


@pytest.mark.parametrize("variant", ["paper", "no-ln-res"])
def test_ran_decoder_full_is_the_whole_row_recurrence_bit_for_bit(variant):
    matrices = ran_matrices(True, ran_decoder_initial="full", **RAN_VARIANTS[variant])
    with torch.no_grad():
        assert torch.equal(all_logits(matrices), whole_row_reference(matrices))
        expected = whole_row_reference(matrices)[1].masked_fill(
            torch.ones(N, N, dtype=torch.bool).triu(1), -1e9).softmax(-1)
        assert torch.equal(matrices.causal_probs(1, N, torch.float32), expected)


@pytest.mark.parametrize("variant", list(RAN_VARIANTS))
@pytest.mark.parametrize("side", ["decoder", "encoder"])
def test_ran_recurrence_matches_its_naive_per_row_definition(variant, side):
    """The decoder's default is the lower triangle (§2.2); the encoder always uses whole rows."""
    causal = side == "decoder"
    matrices = ran_matrices(causal, **RAN_VARIANTS[variant])
    assert matrices.masks_future == causal
    tol = 1e-4 if variant == "ffn" else 1e-5  # the 4n-wide sums round more
    with torch.no_grad():
        expected = naive_rows(matrices, lower_triangle=causal)
        torch.testing.assert_close(all_logits(matrices), expected, rtol=tol, atol=tol)
    # while autograd records, only the first rows are computed: the same values
    torch.testing.assert_close(all_logits(matrices, 5).detach(), expected[:, :, :5],
                               rtol=tol, atol=tol)
    if causal:  # the future stays exactly zero
        assert torch.all(all_logits(matrices)[..., torch.ones(N, N, dtype=torch.bool).triu(1)] == 0)


@pytest.mark.parametrize("variant", list(RAN_VARIANTS))
def test_ran_decoder_future_of_a0_reaches_visible_logits_only_with_full(variant):
    future = torch.ones(N, N, dtype=torch.bool).triu(1)
    for decoder_initial in ("lower-triangle", "full"):
        matrices = ran_matrices(True, ran_decoder_initial=decoder_initial, **RAN_VARIANTS[variant])
        with torch.no_grad():
            before = all_logits(matrices).clone()
            probs = matrices.causal_probs(2, N, torch.float32).clone()
            matrices.initial.add_(torch.randn(HEADS, N, N).masked_fill(~future, 0))
            after = all_logits(matrices)
        visible_before, visible_after = before[..., ~future], after[..., ~future]
        if decoder_initial == "lower-triangle":
            assert torch.equal(visible_before, visible_after)
            assert torch.equal(matrices.causal_probs(2, N, torch.float32), probs)
        else:
            # every row but the last (which has no future) moves
            moved = (visible_before - visible_after).abs().amax(dim=(0, 1)) > 1e-4  # (N·(N+1)/2,)
            rows = torch.arange(N)[:, None].expand(N, N)[~future]
            assert moved[rows < N - 1].all() and not moved[rows == N - 1].any()


def test_ran_ffn_transition_parameters_and_gradients():
    matrices = RecurrentAttentionMatrices(LAYERS, HEADS, N, causal=True, ran_transition="ffn",
                                          freeze_initial=True)
    transition = matrices.transition
    assert isinstance(transition, FeedForwardTransition) and matrices.layer_norm is None
    assert (transition.fc1.weight.shape, transition.fc2.weight.shape) == ((4 * N, N), (N, 4 * N))
    assert sum(p.numel() for p in transition.parameters()) == 8 * N * N + 5 * N
    assert not transition.fc1.bias.any() and not transition.fc2.bias.any()  # authors' init
    module = attention(matrices).train()
    module(torch.randn(6, 3, DIM))[0].pow(2).sum().backward()
    assert transition.fc1.weight.grad.abs().sum() > 0 and transition.fc2.weight.grad.abs().sum() > 0
    assert matrices.initial.grad is None  # --ran-fixed-initial-matrices combines with ffn
    # a row's future columns get no gradient through the lower triangle
    assert transition.fc1.weight.grad[:, 6:].abs().sum() == 0


def test_ran_options_are_checked():
    with pytest.raises(ValueError, match="layernorm_residual=False .* the ffn transition"):
        RecurrentAttentionMatrices(LAYERS, HEADS, N, True, layernorm_residual=False,
                                   ran_transition="ffn")
    with pytest.raises(ValueError, match="transition must be one of paper, ffn"):
        RecurrentAttentionMatrices(LAYERS, HEADS, N, True, ran_transition="gru")
    with pytest.raises(ValueError, match="decoder_initial must be one of"):
        RecurrentAttentionMatrices(LAYERS, HEADS, N, True, ran_decoder_initial="upper")


def test_ran_initial_matrices_normal_by_default_or_xavier_as_the_authors_code():
    """§2.2's "randomly initialized" A_0: N(0, n^-1/2) by default; with ran_initial_init="xavier",
    Xavier-uniform over the whole (h, n, n) tensor (fan-in n·n, fan-out h·n), as the authors'
    released code: a standard deviation of about 0.0054 at h = 8, n = 256."""
    heads, n = 8, 256
    torch.manual_seed(0)
    normal = RecurrentAttentionMatrices(1, heads, n, causal=False).initial
    assert normal.std().item() == pytest.approx(n ** -0.5, rel=0.02)
    for causal in (False, True):
        torch.manual_seed(0)
        xavier = RecurrentAttentionMatrices(1, heads, n, causal, ran_initial_init="xavier").initial
        torch.manual_seed(0)
        expected = torch.nn.init.xavier_uniform_(torch.empty(heads, n, n))
        assert torch.equal(xavier, expected)
        bound = math.sqrt(6 / (n * n + heads * n))
        assert xavier.abs().max().item() <= bound
        assert xavier.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.02)
        assert xavier.std().item() == pytest.approx(0.0054, abs=0.0001)
    # the initialization applies to frozen matrices too (Table 3's "fixed" rows keep it)
    fixed = RecurrentAttentionMatrices(1, heads, 32, False, freeze_initial=True,
                                       ran_initial_init="xavier").initial
    assert not fixed.requires_grad and fixed.abs().max() <= math.sqrt(6 / (32 * 32 + heads * 32))


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_ran_ffn_transition_width(causal):
    """ffn_dim sets the hidden width m of the feed-forward transition (default 4n); the
    recurrence is the same per-row definition at any width."""
    assert FeedForwardTransition(N).fc1.out_features == 4 * N
    matrices = ran_matrices(causal, ran_transition="ffn", ran_ffn_dim=7)
    transition = matrices.transition
    assert (transition.fc1.weight.shape, transition.fc2.weight.shape) == ((7, N), (N, 7))
    assert sum(p.numel() for p in transition.parameters()) == 2 * 7 * N + 7 + N
    assert "ffn_dim=7" in repr(matrices)
    with torch.no_grad():
        torch.testing.assert_close(all_logits(matrices), naive_rows(matrices, causal),
                                   rtol=1e-5, atol=1e-5)
    module = attention(matrices).train()
    module(torch.randn(6, 3, DIM))[0].pow(2).sum().backward()
    assert transition.fc1.weight.grad.abs().sum() > 0 and matrices.initial.grad.abs().sum() > 0


def test_ran_initialization_and_width_options_are_checked():
    with pytest.raises(ValueError, match="initial_init must be one of normal, xavier"):
        RecurrentAttentionMatrices(LAYERS, HEADS, N, True, ran_initial_init="uniform")
    with pytest.raises(ValueError, match="ffn_dim sets the hidden width of the ffn "
                                         "transition"):
        RecurrentAttentionMatrices(LAYERS, HEADS, N, True, ran_ffn_dim=16)
    with pytest.raises(ValueError, match="hidden width must be positive, got 0"):
        RecurrentAttentionMatrices(LAYERS, HEADS, N, True, ran_transition="ffn", ran_ffn_dim=0)


# ---- layers use softmax(A_l[:T, :T]) · V ------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("kind", KINDS)
def test_output_is_value_mix_with_the_layers_block(kind, causal):
    matrices = sources(causal)[kind]
    module = attention(matrices, layer=2)
    x = torch.randn(7, 3, DIM)
    with torch.no_grad():
        out, weights = module(x, x, x, need_head_weights=True)
        logits = matrices.logits(2, 7)[:, :, :7]
        if causal:
            logits = logits.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), -math.inf)
        probs = torch.softmax(logits, dim=-1)  # (h, T, T)
        values = module.v_proj(x).view(7, 3, HEADS, DIM // HEADS)
        context = torch.einsum("hts,sbhd->tbhd", probs, values).reshape(7, 3, DIM)
        expected = module.out_proj(context)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, probs[:, None].expand(-1, 3, -1, -1))


@pytest.mark.parametrize("kind", KINDS)
def test_decoder_weights_are_lower_triangular_and_outputs_ignore_the_future(kind):
    module = attention(sources(causal=True)[kind])
    x = torch.randn(6, 2, DIM)
    y = x.clone()
    y[4:] = torch.randn(2, 2, DIM)  # change positions 4 and 5 only
    with torch.no_grad():
        out_x, weights = module(x, x, x, need_head_weights=True)
        out_y, _ = module(y, y, y)
    assert torch.all(weights[..., torch.ones(6, 6, dtype=torch.bool).triu(1)] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(HEADS, 2, 6))
    torch.testing.assert_close(out_x[:4], out_y[:4], rtol=0, atol=0)
    assert not torch.allclose(out_x[4:], out_y[4:])


@pytest.mark.parametrize("kind", ["synthesizer", "ran"])
def test_weights_do_not_depend_on_the_input(kind):
    module = attention(sources(causal=False)[kind])
    with torch.no_grad():
        _, first = module(torch.randn(5, 2, DIM), need_head_weights=True)
        _, second = module(10 * torch.randn(5, 2, DIM), need_head_weights=True)
    torch.testing.assert_close(first, second, rtol=0, atol=0)


# ---- HC-SA -----------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_gaussian_heads_centres_and_std(causal):
    std = 1.0
    matrices = GaussianAttentionMatrices(LAYERS, 4, N, causal, std=std)
    probs = matrices.probs(0, N)  # (h, N, N)
    centres = [-1, -1, 0, 0] if causal else [-1, -1, 1, 1]
    i = torch.arange(N).float()
    for head, c in enumerate(centres):
        density = torch.exp(-(i[None, :] - i[:, None] - c) ** 2 / (2 * std ** 2))
        if causal:
            density = density.tril()
        torch.testing.assert_close(probs[head], density / density.sum(-1, keepdim=True))
        inside = [q for q in range(N) if 0 <= q + c < N]
        assert probs[head, inside].argmax(-1).tolist() == [q + c for q in inside]
    # std 1: one step from the centre weighs exp(-1/2) as much as the centre
    assert probs[0, 5, 3] / probs[0, 5, 4] == pytest.approx(math.exp(-0.5), rel=1e-5)
    assert not list(matrices.parameters())
    if causal:
        assert probs[0, 0, 0] == 1  # centred on i-1 at i=0: only key 0 is visible


def test_gaussian_std_flag_sets_width():
    wide = GaussianAttentionMatrices(1, 2, N, causal=False, std=2.0).probs(0, N)
    assert wide[0, 5, 2] / wide[0, 5, 4] == pytest.approx(math.exp(-4 / 8), rel=1e-5)


# ---- padding ---------------------------------------------------------------------------------


def columns(width, length, left):
    return slice(width - length, width) if left else slice(0, length)


def pad_batch(sentences, left):
    """(T, B, E) batch and (B, T) padding mask of the given (L_b, E) sentences."""
    length = max(s.size(0) for s in sentences)
    x = torch.zeros(length, len(sentences), DIM)
    padding = torch.ones(len(sentences), length, dtype=torch.bool)
    for b, s in enumerate(sentences):
        cols = columns(length, len(s), left)
        x[cols, b] = s
        padding[b, cols] = False
    return x, padding


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("kind", KINDS)
def test_left_and_right_padding_give_each_sentence_its_unpadded_result(kind, causal):
    module = attention(sources(causal)[kind])
    torch.manual_seed(1)
    sentences = [torch.randn(n, DIM) for n in (7, 3, 5, 1)]
    with torch.no_grad():
        alone = [module(s[:, None], s[:, None], s[:, None])[0][:, 0] for s in sentences]
        for left in (True, False):
            x, padding = pad_batch(sentences, left)
            out, weights = module(x, x, x, key_padding_mask=padding, need_head_weights=True)
            for b, s in enumerate(sentences):
                torch.testing.assert_close(out[columns(x.size(0), len(s), left), b], alone[b],
                                           rtol=1e-5, atol=1e-6)
            assert torch.all(weights.transpose(0, 1)[padding[:, None, None, :].expand(
                -1, HEADS, x.size(0), -1)] == 0), "padding keys get weight"
            # a padding query has a zero context, so its output is the output projection's bias
            torch.testing.assert_close(out[padding.t()],
                                       module.out_proj.bias.expand(int(padding.sum()), -1))


def test_fully_padded_sentence_stays_finite():
    module = attention(sources(causal=False)["ran"])
    x = torch.randn(4, 2, DIM)
    padding = torch.tensor([[False] * 4, [True] * 4])
    with torch.no_grad():
        out, _ = module(x, x, x, key_padding_mask=padding)
    assert torch.isfinite(out).all()


# ---- incremental decoding ----------------------------------------------------------------------


@pytest.mark.parametrize("left", [False, True], ids=["right-pad", "left-pad"])
@pytest.mark.parametrize("kind", KINDS)
def test_incremental_steps_equal_full_forward(kind, left):
    module = attention(sources(causal=True)[kind])
    torch.manual_seed(2)
    x, padding = pad_batch([torch.randn(n, DIM) for n in (6, 4, 2)], left)
    with torch.no_grad():
        full, _ = module(x, x, x, key_padding_mask=padding)
        state = {}
        steps = [module(x[t:t + 1], x[t:t + 1], x[t:t + 1], key_padding_mask=padding[:, t:t + 1],
                        incremental_state=state)[0] for t in range(x.size(0))]
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-5, atol=1e-6)


def test_reorder_incremental_state_reorders_the_cached_values():
    module = attention(sources(causal=True)["ran"])
    torch.manual_seed(3)
    x = torch.randn(5, 3, DIM)
    order = torch.tensor([2, 2, 0])
    with torch.no_grad():
        state = {}
        for t in range(3):
            module(x[t:t + 1], incremental_state=state)
        before = module._get_input_buffer(state)["values"].clone()
        module.reorder_incremental_state(state, order)
        buffer = module._get_input_buffer(state)
        torch.testing.assert_close(buffer["values"][:, :, :4], before[order, :, :4])
        steps = [module(x[t:t + 1, order], incremental_state=state)[0] for t in (3, 4)]
        expected, _ = module(x[:, order])
    assert set(buffer) == {"values", "length", "weights", "weights_start"}  # no padding bookkeeping
    torch.testing.assert_close(torch.cat(steps), expected[3:], rtol=1e-5, atol=1e-6)


def test_value_cache_grows_across_steps_while_the_beam_shrinks():
    """Many steps (the value cache is reallocated by doubling) with beam search's reorders,
    shrinking from 6 hypotheses to 2; every step equals the full forward of the chosen histories."""
    positions = 80
    matrices = randomize_(RecurrentAttentionMatrices(LAYERS, HEADS, positions, causal=True))
    module = attention(matrices)
    torch.manual_seed(4)
    generator = torch.Generator().manual_seed(5)
    history = torch.empty(0, 6, DIM)  # the inputs of each live hypothesis so far
    state, sizes = {}, []
    with torch.no_grad():
        for t in range(positions):
            batch = history.size(1)
            x = torch.randn(1, batch, DIM)
            out, _ = module(x, incremental_state=state)
            history = torch.cat([history, x])
            sizes.append(module._get_input_buffer(state)["values"].size(2))
            expected, _ = module(history)
            torch.testing.assert_close(out[0], expected[-1], rtol=1e-5, atol=1e-5)
            order = torch.randint(0, batch, (max(2, batch - 1),), generator=generator)
            module.reorder_incremental_state(state, order)
            history = history[:, order]
    # slot 0 holds the bias; room for 32 tokens first, then twice the length, never past n
    assert sorted(set(sizes)) == [33, 67, positions + 1]


def test_gradients_flow_through_incremental_steps():
    module = attention(sources(causal=True)["ran"])
    torch.manual_seed(6)
    x = torch.randn(4, 2, DIM, requires_grad=True)
    state = {}
    steps = [module(x[t:t + 1], incremental_state=state)[0] for t in range(4)]
    torch.cat(steps).pow(2).sum().backward()
    incremental_grad = x.grad.clone()
    x.grad = None
    module(x)[0].pow(2).sum().backward()
    torch.testing.assert_close(incremental_grad, x.grad, rtol=1e-5, atol=1e-6)


# ---- training: the written-out recurrence, per-sentence weights, dropout ------------------------


def autograd_recurrence(matrices, rows):
    """A_1..A_L of the paper's transition by autograd in float64 (the module's eager
    reference)."""
    norm = matrices.layer_norm
    future = torch.ones(N, N, dtype=torch.bool).triu(1)[:rows] if matrices.masks_future else None
    return paper_recurrence_eager(
        matrices.initial[:, :rows].double(), matrices.transition.weight.double(),
        matrices.transition.bias.double(), norm.weight.double(), norm.bias.double(), LAYERS,
        norm.eps, future)


def test_the_eager_recurrence_is_the_paper_s_equations_row_by_row():
    """The eager reference against Eqs. 3-4 written per row (naive_rows), so that the written-out
    recurrence is checked against the equations, not only against the reference."""
    for causal in (False, True):
        matrices = ran_matrices(causal)
        with torch.no_grad():
            torch.testing.assert_close(autograd_recurrence(matrices, N).float(),
                                       naive_rows(matrices, lower_triangle=causal),
                                       rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("side", ["encoder", "decoder-lower-triangle"])
def test_the_module_switch_selects_the_eager_recurrence(side, monkeypatch):
    matrices = ran_matrices(side != "encoder")
    fast = matrices._compute_logits(N)
    calls = []
    monkeypatch.setattr(ran_module, "paper_recurrence_eager",
                        lambda *a: calls.append(1) or paper_recurrence_eager(*a))
    monkeypatch.setattr(recurrence_module, "USE_EAGER", True)
    eager = matrices._compute_logits(N)
    assert calls and eager.grad_fn is not None
    assert "PaperRecurrence" not in type(eager.grad_fn).__name__
    torch.testing.assert_close(eager, fast, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [N, 5], ids=["all-rows", "5-rows"])
@pytest.mark.parametrize("side", ["encoder", "decoder-lower-triangle", "decoder-full"])
def test_ran_recurrence_gradients_equal_autograds(side, rows):
    """The recurrence's backward is written out (one autograd node for all layers): its
    gradients are those of the plain autograd computation, for every parameter."""
    options = {"ran_decoder_initial": "full"} if side == "decoder-full" else {}
    matrices = ran_matrices(side != "encoder", **options)
    upstream = torch.randn(LAYERS, HEADS, rows, N, dtype=torch.float64)
    (autograd_recurrence(matrices, rows) * upstream).sum().backward()
    expected = {name: p.grad.clone() for name, p in matrices.named_parameters()}
    matrices.zero_grad()
    logits = matrices._compute_logits(rows)
    torch.testing.assert_close(logits.double(), autograd_recurrence(matrices, rows).detach(),
                               rtol=1e-5, atol=1e-5)
    (logits.double() * upstream).sum().backward()
    for name, p in matrices.named_parameters():  # float32 against float64
        error = (p.grad.double() - expected[name]).abs().max()
        assert error <= 1e-5 * expected[name].abs().max(), (name, error)
    if matrices.masks_future:  # A_0's future entries take no part, and get no gradient
        assert torch.all(matrices.initial.grad[:, torch.ones(N, N, dtype=torch.bool).triu(1)] == 0)


def loss_weights(length, batch, seed=7):
    return torch.randn(length, batch, DIM, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("left", [False, True], ids=["right-pad", "left-pad"])
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("kind", KINDS)
def test_padded_training_pass_gives_each_sentence_its_outputs_and_gradients(kind, causal, left):
    """A recording pass over a padded batch, all layers in one forward_scope (one gather of all
    layers' weights): each sentence's outputs, and the parameters' gradients, are those of the
    sentences passed alone (the batch-shared path)."""
    matrices = sources(causal)[kind]
    modules = [attention(matrices, layer, seed=layer).train() for layer in range(LAYERS)]
    for module in modules:
        module.dropout = 0.0
    params = [p for m in [matrices, *modules] for p in m.parameters()]
    torch.manual_seed(3)
    sentences = [torch.randn(n, DIM) for n in (7, 3, 5, 1)]

    def run(x, padding=None):
        with matrices.forward_scope():
            for module in modules:
                x = module(x, key_padding_mask=padding)[0]
        return x

    alone, grads = [], [torch.zeros_like(p) for p in params]
    for b, s in enumerate(sentences):
        out = run(s[:, None])
        (out * loss_weights(len(s), 1, seed=b)).sum().backward()
        alone.append(out.detach()[:, 0])
        for total, p in zip(grads, params):
            total += p.grad if p.grad is not None else 0
            p.grad = None
    x, padding = pad_batch(sentences, left)
    out = run(x, padding)
    weights = torch.zeros_like(out)
    for b, s in enumerate(sentences):
        cols = columns(x.size(0), len(s), left)
        torch.testing.assert_close(out[cols, b].detach(), alone[b], rtol=1e-5, atol=1e-5)
        weights[cols, b] = loss_weights(len(s), 1, seed=b)[:, 0]
    (out * weights).sum().backward()
    for total, p in zip(grads, params):
        torch.testing.assert_close(p.grad if p.grad is not None else torch.zeros_like(p), total,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_attention_dropout_is_drawn_per_sentence_and_weights_are_returned_before_it(padded):
    matrices = sources(causal=True)["ran"]
    modules = [attention(matrices, layer).train() for layer in range(LAYERS)]
    for module in modules:
        module.dropout = 0.5
    x = torch.randn(6, 1, DIM).expand(-1, 4, -1)  # four copies of one sentence
    padding = torch.zeros(4, 6, dtype=torch.bool) if padded else None
    torch.manual_seed(0)
    with matrices.forward_scope():
        outs = [module(x, key_padding_mask=padding, need_head_weights=True) for module in modules]
    for out, weights in outs:
        assert weights.shape == (HEADS, 4, 6, 6)
        torch.testing.assert_close(weights.sum(-1), torch.ones(HEADS, 4, 6))  # before dropout
        for b in range(1, 4):
            assert not torch.allclose(out[:, b], out[:, 0])  # each copy its own draw
    # and each layer its own (layers 1 and 2 see the same input here)
    with matrices.forward_scope():
        first, second = (module(x, key_padding_mask=padding)[0] for module in modules[1:])
    with torch.no_grad():
        modules[1].eval(), modules[2].eval()
        reference = [module(x)[0] for module in modules[1:]]
    assert not torch.allclose(first - reference[0], second - reference[1])


# ---- too-long inputs -----------------------------------------------------------------------------


def test_too_long_input_names_the_limit_and_its_flag():
    """The module names n by its argument; a model's matrices by the flag, with fairseq's way
    of leaving long sentences out."""
    module = attention(sources(causal=True)["ran"])
    with pytest.raises(ValueError, match=r"covers only 12 \(max_positions=12\)"):
        module(torch.randn(N + 1, 1, DIM))
    state = {}
    with torch.no_grad():
        for _ in range(N):
            module(torch.randn(1, 1, DIM), incremental_state=state)
        with pytest.raises(ValueError, match="max_positions"):
            module(torch.randn(1, 1, DIM), incremental_state=state)
    model = build("ran_transformer", *SMALL, "--max-attention-positions", "12")
    tokens = torch.full((1, 13), 5)
    with pytest.raises(ValueError, match=r"covers only 12 \(--max-attention-positions=12\).*"
                                         r"--skip-invalid-size-inputs-valid-test"):
        model.encoder(tokens, torch.tensor([13]))


# ---- caching -------------------------------------------------------------------------------------


def count_computations(matrices):
    calls = []
    compute = matrices._compute_logits
    matrices._compute_logits = lambda rows: calls.append(rows) or compute(rows)
    return calls


def test_a_pass_computes_the_matrices_once_for_all_its_layers():
    matrices = sources(causal=False)["ran"].eval()
    modules = [attention(matrices, layer) for layer in range(LAYERS)]
    calls = count_computations(matrices)
    x = torch.randn(5, 2, DIM)
    with torch.no_grad(), matrices.forward_scope():
        for module in modules:
            module(x)
    assert calls == [5]  # all layers' matrices, the 5 rows in use, once
    with torch.no_grad(), matrices.forward_scope():
        modules[0](x)
    assert calls == [5, 5]  # nothing kept from the previous pass


def test_recording_passes_share_one_computation_per_forward_scope():
    matrices = sources(causal=False)["ran"]
    modules = [attention(matrices, layer) for layer in range(LAYERS)]
    calls = count_computations(matrices)
    x = torch.randn(5, 2, DIM)
    with matrices.forward_scope():
        for module in modules:
            x = module(x)[0]
    assert calls == [5]  # all layers' matrices, the 5 rows in use, once
    x.sum().backward()  # the graph is intact
    with matrices.forward_scope():
        modules[0](x.detach())
    assert calls == [5, 5]  # nothing kept from the previous pass


@pytest.mark.parametrize("edit", ["data", "in-place", "optimizer", "load_state_dict"])
def test_a_decoded_sequence_computes_the_matrices_once_and_sees_every_change(edit):
    """A decoded sequence computes all n rows of its matrices at its first step and keeps them in
    its incremental state; the next sequence computes them again, so a change of the parameters
    made between two sequences is seen however it was made (through ``.data`` without a mode
    switch, in place under no_grad, by an optimizer step, by loading a state dict)."""
    matrices = sources(causal=True)["ran"].eval()
    modules = [attention(matrices, layer).eval() for layer in range(LAYERS)]
    calls = count_computations(matrices)
    xs = torch.randn(3, 2, DIM)

    def decode():
        """Each layer decodes the 3 tokens step by step, all layers of a step in one
        forward_scope; returns the last step's outputs."""
        state = {}
        for t in range(len(xs)):
            with matrices.forward_scope(state):
                outs = [module(xs[t:t + 1], incremental_state=state)[0] for module in modules]
        return outs

    with torch.no_grad():
        before = decode()
    assert calls == [N]  # once for the sequence, every position's row
    if edit == "data":
        matrices.transition.weight.data.mul_(-1)
    elif edit == "in-place":
        with torch.no_grad():
            matrices.initial.add_(torch.randn_like(matrices.initial))
    elif edit == "optimizer":
        optimizer = torch.optim.SGD(matrices.parameters(), lr=0.5)
        with matrices.forward_scope():
            modules[0](xs)[0].sum().backward()
        optimizer.step()
    else:
        state = {k: torch.randn_like(v) for k, v in matrices.state_dict().items()}
        matrices.load_state_dict(state)
    with torch.no_grad():
        after = decode()
        full = [module(xs)[0][-1:] for module in modules]
    for old, new, reference in zip(before, after, full):
        assert not torch.allclose(old, new)  # the change was seen
        torch.testing.assert_close(new, reference)


def test_a_recording_pass_keeps_nothing_in_the_incremental_state():
    matrices = sources(causal=True)["ran"].train()
    module = attention(matrices)
    state = {}
    with matrices.forward_scope(state):
        module(torch.randn(1, 2, DIM), incremental_state=state)
    assert not any(k.startswith("positional_attention_matrices") for k in state)


# ---- half precision ----------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("kind", KINDS)
def test_half_precision_is_finite(kind, causal):
    matrices = sources(causal)[kind].half()
    module = attention(matrices).half()
    x = torch.randn(6, 3, DIM).half()
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[1, :2] = True
    padding[2, :] = True  # a fully padded row
    with torch.no_grad():
        out, _ = module(x, x, x, key_padding_mask=padding)
        plain, _ = module(x)
    assert out.dtype == torch.half
    assert torch.isfinite(out).all() and torch.isfinite(plain).all()


# ---- the fairseq model ---------------------------------------------------------------------------


class FakeTask:
    def __init__(self):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for w in "abcdefgh":
            self.source_dictionary.add_symbol(w)


def build(arch, *flags):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["unused-data", "--arch", arch, "--task", "translation", *flags])
    torch.manual_seed(0)
    return RanTransformerModel.build_model(args, FakeTask())


SMALL = ("--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16",
         "--decoder-embed-dim", "16", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--max-attention-positions", "20")


def test_default_arch_is_ran_all_with_its_limits():
    model = build("ran_transformer", *SMALL)
    for side in (model.encoder, model.decoder):
        assert isinstance(side.self_attn_matrices, ran_module.RecurrentAttentionMatrices)
        assert all(isinstance(layer.self_attn, PositionalSelfAttention) for layer in side.layers)
        assert all(layer.self_attn.dropout == 0.2 for layer in side.layers)
    assert model.decoder.self_attn_matrices.causal and not model.encoder.self_attn_matrices.causal
    assert model.max_positions() == (20, 20)
    with torch.no_grad():
        out, _ = model.eval()(torch.tensor([[5, 6, 7, 2], [1, 5, 6, 2]]), torch.tensor([4, 3]),
                              torch.tensor([[2, 5, 6], [2, 7, 1]]))
    assert torch.isfinite(out).all()
    names = [n for n, _ in model.named_parameters()]
    assert not [n for n in names if "q_proj" in n and "self_attn" in n]
    assert sum("self_attn_matrices.initial" in n for n in names) == 2  # registered once per side


def test_variant_flags_select_each_sides_attention():
    model = build("ran_transformer", *SMALL, "--encoder-self-attention", "gaussian",
                  "--decoder-self-attention", "dot", "--no-decoder-positional-embeddings",
                  "--max-target-positions", "50")
    assert isinstance(model.encoder.self_attn_matrices, GaussianAttentionMatrices)
    assert model.decoder.self_attn_matrices is None
    assert type(model.decoder.layers[0].self_attn).__name__ == "MultiheadAttention"
    assert model.encoder.embed_positions is not None and model.decoder.embed_positions is None
    assert model.max_positions() == (20, 50)
    synth = build("ran_transformer", *SMALL, "--encoder-self-attention", "synthesizer",
                  "--ran-fixed-initial-matrices", "--ran-no-layernorm-residual")
    assert synth.encoder.self_attn_matrices.weight.shape == (2, 2, 20, 20)
    assert not synth.decoder.self_attn_matrices.initial.requires_grad
    assert synth.decoder.self_attn_matrices.layer_norm is None


def test_named_archs_sizes():
    def parse(arch):  # the namespace the model builds from
        return RanTransformerModel.resolve_args(options.parse_args_and_arch(
            options.get_training_parser(), ["unused-data", "--arch", arch, "--task", "translation"]))

    small, iwslt, base = (parse(f"ran_transformer{suffix}")
                          for suffix in ("_small", "_iwslt_de_en", ""))
    sizes = ("encoder_layers", "decoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim",
             "encoder_attention_heads", "decoder_attention_heads")
    assert [getattr(small, k) for k in sizes] == [3, 3, 256, 1024, 4, 4]
    assert [getattr(iwslt, k) for k in sizes] == [6, 6, 512, 1024, 4, 4]
    assert [getattr(base, k) for k in sizes] == [6, 6, 512, 2048, 8, 8]
    for args in (small, iwslt, base):
        assert (args.encoder_self_attention, args.decoder_self_attention) == ("ran", "ran")
        assert (args.max_attention_positions, args.positional_attention_dropout) == (256, 0.2)


def test_ran_initialization_and_width_flags_reach_the_matrices_and_are_checked():
    model = build("ran_transformer", *SMALL, "--ran-transition", "ffn", "--ran-ffn-dim", "24",
                  "--ran-initial-init", "xavier")
    for side in (model.encoder, model.decoder):
        matrices = side.self_attn_matrices
        assert matrices.transition.fc1.weight.shape == (24, 20)
        assert matrices.ran_initial_init == "xavier"
        assert matrices.initial.abs().max() <= math.sqrt(6 / (20 * 20 + 2 * 20))
    default = build("ran_transformer", *SMALL, "--ran-transition", "ffn")
    assert default.encoder.self_attn_matrices.transition.fc1.weight.shape == (80, 20)  # 4n
    assert default.decoder.self_attn_matrices.ran_initial_init == "normal"
    with pytest.raises(ValueError, match="--ran-ffn-dim sets the hidden width of "
                                         "--ran-transition ffn; --ran-transition is paper"):
        build("ran_transformer", *SMALL, "--ran-ffn-dim", "24")
    with pytest.raises(ValueError, match="--ran-ffn-dim must be positive"):
        build("ran_transformer", *SMALL, "--ran-transition", "ffn", "--ran-ffn-dim", "-1")
    with pytest.raises(ValueError, match="--ran-initial-init xavier needs RAN on a side"):
        build("ran_transformer", *SMALL, "--encoder-self-attention", "dot",
              "--decoder-self-attention", "dot", "--ran-initial-init", "xavier")
    with pytest.raises(SystemExit):  # argparse names the flag and its choices
        build("ran_transformer", *SMALL, "--ran-initial-init", "uniform")


def test_checkpoints_from_before_the_initialization_and_width_options_load_as_trained():
    """A saved namespace without ran_initial_init and ran_ffn_dim builds the model it was trained
    as (N(0, n^-1/2) and the 4n-wide ffn transition), and its weights load into it."""
    trained = build("ran_transformer", *SMALL, "--ran-transition", "ffn")
    args = RanTransformerModel.resolve_args(options.parse_args_and_arch(
        options.get_training_parser(), ["unused-data", "--arch", "ran_transformer", "--task",
                                        "translation", *SMALL, "--ran-transition", "ffn"]))
    for dest in ("ran_initial_init", "ran_ffn_dim", "options_version"):  # options version 1
        args.__dict__.pop(dest, None)
    old = RanTransformerModel.build_model(args, FakeTask())
    assert (args.ran_initial_init, args.ran_ffn_dim) == ("normal", None)
    old.load_state_dict(trained.state_dict())  # strict: every shape as trained
    tokens = torch.tensor([[5, 6, 7, 2]])
    with torch.no_grad():
        expected = trained.eval()(tokens, torch.tensor([4]), tokens)[0]
        torch.testing.assert_close(old.eval()(tokens, torch.tensor([4]), tokens)[0], expected)
    # resuming such a training with today's defaults changes no architecture flag (fairseq-train
    # refuses a resumed run whose flags differ from its checkpoint's)
    from ran_fairseq.models._common import changed_flags

    def parsed(*flags):
        return options.parse_args_and_arch(options.get_training_parser(),
                                           ["unused-data", "--arch", "ran_transformer", "--task",
                                            "translation", *SMALL, *flags])

    saved = RanTransformerModel.resolve_args(parsed())  # every option, as a checkpoint saves them
    for dest in ("ran_initial_init", "ran_ffn_dim", "ran_transition"):
        saved.__dict__.pop(dest, None)
    assert changed_flags(RanTransformerModel, saved, parsed()) == []
    assert changed_flags(RanTransformerModel, saved, parsed("--ran-initial-init", "xavier")) == [
        ("--ran-initial-init", "normal", "xavier")]


def test_ran_options_reach_the_matrices_and_old_checkpoints_keep_whole_rows():
    model = build("ran_transformer", *SMALL, "--ran-transition", "ffn")
    encoder, decoder = model.encoder.self_attn_matrices, model.decoder.self_attn_matrices
    assert (encoder.ran_transition, decoder.ran_transition) == ("ffn", "ffn")
    assert decoder.ran_decoder_initial == "lower-triangle" and decoder.masks_future
    assert not encoder.masks_future
    full = build("ran_transformer", *SMALL, "--ran-decoder-initial", "full")
    assert full.decoder.self_attn_matrices.ran_decoder_initial == "full"
    assert full.encoder.self_attn_matrices.ran_transition == "paper"

    def saved(*flags):
        """A model namespace as a checkpoint stores it, from before --ran-decoder-initial (options
        version 1), as building the model reads it."""
        args = options.parse_args_and_arch(options.get_training_parser(),
                                           ["unused-data", "--arch", "ran_transformer",
                                            "--task", "translation", *flags])
        for dest in ("ran_decoder_initial", "ran_transition", "options_version"):
            args.__dict__.pop(dest, None)
        return RanTransformerModel.resolve_args(args)

    old = saved()
    assert (old.ran_decoder_initial, old.ran_transition) == ("full", "paper")
    assert saved("--decoder-self-attention", "dot").ran_decoder_initial == "lower-triangle"
    new = saved()
    new.ran_decoder_initial = "lower-triangle"  # saved after the option existed: kept
    assert RanTransformerModel.resolve_args(new).ran_decoder_initial == "lower-triangle"
