"""Unit tests of ran_fairseq.modules.recurrent_cross_attention on plain tensors (each variant of
Rosendahl et al. 2021 against a naive step-by-step reference), and of the
recurrent_cross_transformer model's options."""
import math

import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary

import ran_fairseq.modules.recurrent_cross_attention.module as rca_module
from ran_fairseq.models.recurrent_cross_transformer import RecurrentCrossTransformerModel
from ran_fairseq.modules.attention_entropy import AttentionEntropyRecorder
from ran_fairseq.modules.recurrent_cross_attention import (
    ContinuousScan,
    FullContextRecurrence,
    HeadContextRecurrence,
    PrevContextRecurrence,
    RecurrentCrossAttention,
    WeightRecurrence,
    check_options,
    continuous_scan,
    continuous_step,
    window_average,
    window_matrix,
)

E, HEADS, T = 8, 2, 6
SRC_LENGTHS = [9, 6, 4]  # one batch, padded to 9
VARIANTS = [("dot", 1), ("prev-context", 1), ("prev-weight", 1), ("prev-accum-weight", 1),
            ("expand-kv", 1), ("expand-kv", 2), ("expand-kv", 3), ("expand-kv", 4),
            ("continuous", 1), ("coverage", 1)]
VARIANT_IDS = [v if v != "expand-kv" else f"expand-kv{n}" for v, n in VARIANTS]
RECURRENT = [(v, n) for v, n in VARIANTS if v != "dot"]
RECURRENT_IDS = [i for i in VARIANT_IDS if i != "dot"]


def module_options(cross_attention="expand-kv", kv_variant=1, rescale_lambda=0.5,
                   rescale_window=5):
    """The module's option arguments (the model's defaults, here written out)."""
    return dict(cross_attention=cross_attention, kv_variant=kv_variant,
                rescale_lambda=rescale_lambda, rescale_window=rescale_window)


def make_module(variant, kv_variant=1, seed=0, dropout=0.0, window=2, lam=0.3):
    """A module with random values in every parameter (biases included), in eval mode."""
    torch.manual_seed(seed)
    module = RecurrentCrossAttention(E, HEADS, dropout=dropout, cross_attention=variant,
                                     kv_variant=kv_variant, rescale_lambda=lam,
                                     rescale_window=window)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape) * 0.6)
    return module.eval()


def make_batch(left_pad, seed=1, batch_lengths=SRC_LENGTHS):
    """Decoder states (T, B, E), padded encoder states (S, B, E) with random values at the pads,
    the padding mask (B, S), and each sentence's unpadded encoder states."""
    g = torch.Generator().manual_seed(seed)
    src_len = max(batch_lengths)
    states = torch.randn(T, len(batch_lengths), E, generator=g)
    encoder = torch.randn(src_len, len(batch_lengths), E, generator=g) * 3  # pads: garbage
    padding = torch.ones(len(batch_lengths), src_len, dtype=torch.bool)
    sentences = []
    for b, n in enumerate(batch_lengths):
        sentence = torch.randn(n, E, generator=g)
        span = slice(src_len - n, src_len) if left_pad else slice(0, n)
        encoder[span, b] = sentence
        padding[b, span] = False
        sentences.append((sentence, span))
    return states, encoder, padding, sentences


# ---- the naive reference: every equation, one head, step and source position at a time ----------


def naive(module, s, h):
    """Rosendahl et al. (2021) §3 computed literally for one unpadded sentence: decoder states s
    (T, E), encoder states h (J, E). Returns the outputs (T, E) and weights (H, T, J)."""
    variant, kv = module.cross_attention, module.kv_variant
    lam, k = module.rescale_lambda, module.rescale_window
    d = module.head_dim
    steps, src_len = s.size(0), h.size(0)
    Q, K, V = module.q_proj(s), module.k_proj(h), module.v_proj(h)

    def head(x, n):
        return x[..., n * d:(n + 1) * d]

    prev_context = None  # c_{i-1} of every head
    prev_weights = [None] * HEADS  # α_{i-1}
    accumulated = [torch.zeros(src_len) for _ in range(HEADS)]  # Σ_{i'<i} α_{i'}
    prev_rescaled = [None] * HEADS  # α̊_{i-1}
    outputs, weights = [], torch.zeros(HEADS, steps, src_len)
    for i in range(steps):
        contexts = []
        for n in range(HEADS):
            q = head(Q[i], n)
            keys = [head(K[j], n) for j in range(src_len)]
            values = [head(V[j], n) for j in range(src_len)]
            if variant == "prev-context" and prev_context is not None:
                q = q + module.context_query.weight[n] @ prev_context[n]  # Eq. 2
            if variant == "expand-kv" and prev_context is not None:  # Eqs. 5-8
                # §3.1: the full context is every head's context concatenated, followed by the
                # output projection W_o (with its bias): the attention's output of step i-1
                full = module.out_proj(torch.cat(prev_context))
                if kv == 1:
                    extra = head(module.k_proj(full), n), head(module.v_proj(full), n)
                elif kv == 2:
                    extra = head(module.extra_k_proj(full), n), head(module.extra_v_proj(full), n)
                else:
                    c = prev_context[n]
                    key = module.extra_key.weight[n] @ c + module.extra_key.bias[n]
                    value = (module.extra_value.weight[n] @ c + module.extra_value.bias[n]
                             if kv == 3 else c)
                    extra = key, value
                keys.append(extra[0])
                values.append(extra[1])
            energies = []
            for j, key in enumerate(keys):
                query = q  # Eqs. 3, 4: the query of source position j gets one more input
                if variant == "prev-weight" and prev_weights[n] is not None:
                    query = q + module.weight_query[n] * prev_weights[n][j]
                if variant == "prev-accum-weight":
                    query = q + module.weight_query[n] * accumulated[n][j]
                energies.append(query @ key / math.sqrt(d))
            energies = torch.stack(energies)
            if variant == "coverage":  # Eq. 10
                energies = energies - lam / math.sqrt(d) * accumulated[n]
            if variant == "continuous":  # Eq. 9
                if prev_rescaled[n] is not None:
                    energies = torch.stack([
                        lam * energies[j] + (1 - lam) / (2 * k + 1) * sum(
                            prev_rescaled[n][jj] for jj in range(j - k, j + k + 1)
                            if 0 <= jj < src_len)
                        for j in range(src_len)])
                prev_rescaled[n] = energies
            alpha = torch.softmax(energies, dim=0)
            weights[n, i] = alpha[:src_len]
            contexts.append(sum(a * v for a, v in zip(alpha, values)))
            prev_weights[n] = alpha[:src_len]
            accumulated[n] = accumulated[n] + alpha[:src_len]
        prev_context = contexts
        outputs.append(module.out_proj(torch.cat(contexts)))
    return torch.stack(outputs), weights


def output_atol(variant, kv_variant, expected):
    """Absolute tolerance on outputs. A full pass of Eqs. 5, 6 multiplies W_g W_o once (one product
    per step) where the reference and incremental decoding apply W_o, then W_g: float32 rounding
    then grows with the largest output (up to ~300 with these random weights)."""
    if variant == "expand-kv" and kv_variant in (1, 2):
        return max(1e-5, 2e-6 * expected.abs().max().item())
    return 1e-5


@pytest.mark.parametrize("left_pad", [True, False], ids=["left-pad", "right-pad"])
@pytest.mark.parametrize("variant,kv_variant", VARIANTS, ids=VARIANT_IDS)
def test_padded_batch_matches_naive_reference(variant, kv_variant, left_pad):
    module = make_module(variant, kv_variant)
    states, encoder, padding, sentences = make_batch(left_pad)
    with torch.no_grad():
        out, weights = module(states, encoder, encoder, padding, need_head_weights=True)
        for b, (sentence, span) in enumerate(sentences):
            expected_out, expected_weights = naive(module, states[:, b], sentence)
            torch.testing.assert_close(out[:, b], expected_out, rtol=1e-5,
                                       atol=output_atol(variant, kv_variant, expected_out))
            torch.testing.assert_close(weights[:, b, :, span], expected_weights, atol=1e-6,
                                       rtol=1e-5)
    assert (weights.masked_select(padding[None, :, None, :]) == 0).all(), "pads got weight"


@pytest.mark.parametrize("variant,kv_variant", RECURRENT, ids=RECURRENT_IDS)
def test_first_step_is_plain_attention_and_later_steps_are_not(variant, kv_variant):
    module = make_module(variant, kv_variant)
    plain = make_module("dot")
    plain.load_state_dict(module.state_dict(), strict=False)
    states, encoder, padding, _ = make_batch(left_pad=True)
    with torch.no_grad():
        out, _ = module(states, encoder, encoder, padding)
        expected, _ = plain(states, encoder, encoder, padding)
    torch.testing.assert_close(out[0], expected[0])
    assert (out[1:] - expected[1:]).abs().max() > 1e-3


# ---- Eq. 9: window and scan ----------------------------------------------------------------------


@pytest.mark.parametrize("window", [0, 1, 5])
@pytest.mark.parametrize("steps", [1, 2, 8, 37])
def test_continuous_scan_equals_step_by_step_recurrence(steps, window):
    g = torch.Generator().manual_seed(steps + window)
    energies = torch.randn(3, 2, steps, 11, generator=g) * 4
    padding = torch.zeros(3, 11, dtype=torch.bool)
    padding[1, :4] = True  # left padding
    padding[2, 7:] = True  # right padding
    for lam in (0.5, 0.05, 1.0):
        scanned = continuous_scan(energies, padding, lam, window)
        previous, expected = None, []
        for i in range(steps):
            previous = continuous_step(previous, energies[:, :, i], padding, lam, window)
            expected.append(previous)
        expected = torch.stack(expected, dim=2)
        real = ~padding[:, None, None, :].expand_as(scanned)
        torch.testing.assert_close(scanned[real], expected[real], atol=1e-5, rtol=1e-5)


def test_window_average_and_matrix_use_real_positions_only():
    x = torch.randn(2, 3, 8)
    padding = torch.tensor([[False] * 8, [True, True, True, False, False, False, False, False]])
    x[1, :, :3] = 1e6  # pads must neither give nor receive
    averaged = window_average(x, padding, 1)
    assert (averaged[1, :, :3] == 0).all()
    alone = window_average(x[1:, :, 3:], None, 1)  # the same sentence, unpadded
    torch.testing.assert_close(averaged[1:, :, 3:], alone)
    expected = torch.stack([x[1, :, 3:5].sum(-1), x[1, :, 3:6].sum(-1)], dim=-1) / 3
    torch.testing.assert_close(averaged[1, :, 3:5], expected)  # edges keep the divisor 2k+1
    matrix = window_matrix(padding, 8, 1)
    torch.testing.assert_close(torch.matmul(x.masked_fill(padding[:, None], 0), matrix),
                               averaged)
    torch.testing.assert_close(matrix, matrix.transpose(1, 2))


# ---- incremental decoding ------------------------------------------------------------------------


def decode(module, states, encoder, padding, state=None, order_at=None, order=None):
    """Step-by-step outputs, a list of T tensors (1, B, E); with ``order_at``, the state is
    reordered by ``order`` before that step and the later steps use the reordered rows."""
    state = {} if state is None else state
    outputs = []
    for t in range(states.size(0)):
        if t == order_at:
            order = torch.as_tensor(order)
            module.reorder_incremental_state(state, order)
            states, encoder, padding = states[:, order], encoder[:, order], padding[order]
        out, _ = module(states[t:t + 1], encoder, encoder, padding, incremental_state=state)
        outputs.append(out)
    return outputs


@pytest.mark.parametrize("left_pad", [True, False], ids=["left-pad", "right-pad"])
@pytest.mark.parametrize("variant,kv_variant", VARIANTS, ids=VARIANT_IDS)
def test_incremental_steps_equal_full_forward(variant, kv_variant, left_pad):
    module = make_module(variant, kv_variant)
    states, encoder, padding, _ = make_batch(left_pad)
    with torch.no_grad():
        full, _ = module(states, encoder, encoder, padding)
        steps = torch.cat(decode(module, states, encoder, padding))
    torch.testing.assert_close(steps, full, rtol=1e-5,
                               atol=output_atol(variant, kv_variant, full))


@pytest.mark.parametrize("variant,kv_variant", [("prev-context", 1), ("expand-kv", 1),
                                                ("expand-kv", 3)],
                         ids=["prev-context", "expand-kv1", "expand-kv3"])
def test_recurrent_context_is_the_dropped_out_one(variant, kv_variant):
    """With attention dropout, Eqs. 2 and 5-8 feed back the context the layer produced: the full
    pass (Eq. 2 as a recurrence on weights) equals step-by-step decoding with the same masks. The
    masks the full pass draws are captured and handed to the steps one at a time, so the test does
    not depend on how torch's random stream splits one draw into several."""
    module = make_module(variant, kv_variant, dropout=0.4).train()
    states, encoder, padding, _ = make_batch(left_pad=True)
    drawn = []
    draw = module._dropout_masks

    def capture(steps, batch, width, like):
        masks = draw(steps, batch, width, like)
        drawn.append(masks)
        return masks

    def replay(steps, batch, width, like):
        assert steps == 1
        return drawn.pop(0)

    with torch.no_grad():
        torch.manual_seed(5)
        module._dropout_masks = capture
        full, _ = module(states, encoder, encoder, padding)
        assert len(drawn) == 1 and drawn[0].size(0) == T
        drawn = list(drawn[0].split(1))
        module._dropout_masks = replay
        steps = torch.cat(decode(module, states, encoder, padding))
        assert not drawn  # every step took its mask
        module._dropout_masks = draw
        torch.manual_seed(6)
        other, _ = module(states, encoder, encoder, padding)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
    assert (other - full).abs().max() > 1e-3  # dropout is active


BEAM_ORDERS = {"within-beam": [1, 1, 2, 2], "across-beams": [2, 3, 0, 1], "shrink": [3, 0]}


@pytest.mark.parametrize("beam_size", [1, 2])
@pytest.mark.parametrize("order", BEAM_ORDERS.values(), ids=BEAM_ORDERS.keys())
@pytest.mark.parametrize("variant,kv_variant", VARIANTS, ids=VARIANT_IDS)
def test_reorder_incremental_state(variant, kv_variant, order, beam_size):
    """Reordering after 3 steps equals decoding the reordered rows from the start. Rows (0, 1) and
    (2, 3) are the beams of two sentences (shared source, different hypotheses)."""
    module = make_module(variant, kv_variant)
    module.set_beam_size(beam_size)
    states, encoder, padding, _ = make_batch(left_pad=True, batch_lengths=[9, 5])
    rows = torch.tensor([0, 0, 1, 1])
    encoder, padding = encoder[:, rows], padding[rows]
    states = torch.randn(T, 4, E, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reordered = decode(module, states, encoder, padding, order_at=3, order=order)
        plain = decode(module, states[:, order], encoder[:, order], padding[order])
    torch.testing.assert_close(torch.cat(reordered[3:]), torch.cat(plain[3:]), atol=1e-5,
                               rtol=1e-5)


def test_reorder_keeps_keys_within_beams_and_moves_the_recurrent_state():
    module = make_module("coverage")
    module.set_beam_size(2)
    states, encoder, padding, _ = make_batch(left_pad=False, batch_lengths=[9, 9, 5, 5])
    state = {}
    with torch.no_grad():
        module(states[:1], encoder, encoder, padding, incremental_state=state)
    buffer = module._get_input_buffer(state)
    key, accumulated = buffer["key"], buffer["accum_weights"].clone()
    module.reorder_incremental_state(state, torch.tensor([1, 0, 3, 2]))
    buffer = module._get_input_buffer(state)
    assert buffer["key"] is key  # within each beam: no copy
    torch.testing.assert_close(buffer["accum_weights"], accumulated[[1, 0, 3, 2]])


# ---- training ------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant,kv_variant", RECURRENT, ids=RECURRENT_IDS)
def test_gradients_reach_every_parameter(variant, kv_variant):
    module = make_module(variant, kv_variant, dropout=0.1).train()
    states, encoder, padding, _ = make_batch(left_pad=True)
    states.requires_grad_(True)
    out, _ = module(states, encoder, encoder, padding)
    out.pow(2).sum().backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"no gradient reaches {name}"
    assert torch.isfinite(states.grad).all()


@pytest.mark.parametrize("left_pad", [True, False], ids=["left-pad", "right-pad"])
@pytest.mark.parametrize("variant,kv_variant", VARIANTS, ids=VARIANT_IDS)
def test_gradients_match_naive_reference(variant, kv_variant, left_pad):
    """The hand-written backward passes of the training recurrences give the gradients autograd
    computes through the naive reference, for every input and parameter, with a loss on the
    outputs and on the returned weights."""
    module = make_module(variant, kv_variant)
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(0.5)
    states, encoder, padding, sentences = make_batch(left_pad)
    states.requires_grad_(True)
    encoder.requires_grad_(True)
    inputs = [states, encoder] + list(module.parameters())
    out, weights = module(states, encoder, encoder, padding, need_head_weights=True)
    g = torch.Generator().manual_seed(7)
    grad_out, grad_weights = (torch.randn(out.shape, generator=g),
                              torch.randn(weights.shape, generator=g))
    ours = torch.autograd.grad((out * grad_out).sum() + (weights * grad_weights).sum(), inputs)
    loss = 0
    for b, (sentence, span) in enumerate(sentences):
        expected_out, expected_weights = naive(module, states[:, b], encoder[span, b])
        loss = loss + (expected_out * grad_out[:, b]).sum()
        loss = loss + (expected_weights * grad_weights[:, b, :, span]).sum()
    theirs = torch.autograd.grad(loss, inputs, allow_unused=True)
    names = ["states", "encoder"] + [name for name, _ in module.named_parameters()]
    for name, a, e in zip(names, ours, theirs):
        e = torch.zeros_like(a) if e is None else e
        scale = max(e.abs().max().item(), 1.0)
        torch.testing.assert_close(a / scale, e / scale, atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("left_pad", [True, False], ids=["left-pad", "right-pad"])
@pytest.mark.parametrize("variant,kv_variant", VARIANTS, ids=VARIANT_IDS)
def test_the_module_switch_selects_the_eager_reference_with_the_same_results(
        variant, kv_variant, left_pad, monkeypatch):
    """USE_EAGER runs a teacher-forced pass step by step through autograd: the same outputs,
    weights and gradients (of every input and parameter) as the training Functions."""
    module = make_module(variant, kv_variant)
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(0.5)
    states, encoder, padding, _ = make_batch(left_pad)
    states.requires_grad_(True)
    encoder.requires_grad_(True)
    inputs = [states, encoder] + list(module.parameters())
    g = torch.Generator().manual_seed(7)
    results = []
    for eager in (False, True):
        monkeypatch.setattr(rca_module, "USE_EAGER", eager)
        out, weights = module(states, encoder, encoder, padding, need_head_weights=True)
        if not results:
            grad_out, grad_weights = (torch.randn(out.shape, generator=g),
                                      torch.randn(weights.shape, generator=g))
        loss = (out * grad_out).sum() + (weights * grad_weights).sum()
        results.append((out, weights, torch.autograd.grad(loss, inputs, allow_unused=True)))
    (fused_out, fused_weights, ours), (eager_out, eager_weights, theirs) = results
    torch.testing.assert_close(fused_out, eager_out, rtol=1e-5,
                               atol=output_atol(variant, kv_variant, eager_out))
    torch.testing.assert_close(fused_weights, eager_weights, atol=1e-6, rtol=1e-5)
    names = ["states", "encoder"] + [name for name, _ in module.named_parameters()]
    for name, a, e in zip(names, ours, theirs):
        a = torch.zeros_like(e) if a is None else a
        e = torch.zeros_like(a) if e is None else e
        scale = max(e.abs().max().item(), 1.0)
        torch.testing.assert_close(a / scale, e / scale, atol=1e-5, rtol=0, msg=name)


def _gradcheck_inputs(seed=0, batch=2, heads=2, steps=4, src_len=3, dim=2, device="cpu"):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        x = torch.randn(*shape, generator=g, dtype=torch.double) * scale
        return x.to(device).requires_grad_()

    padding = torch.zeros(batch, src_len, dtype=torch.bool)
    padding[1, 0] = True
    masks = (torch.rand(steps, batch, heads, src_len + 1, generator=g, dtype=torch.double)
             > 0.3).double() / 0.7
    return rand, padding.to(device), masks.to(device)


@pytest.mark.parametrize("with_masks", [False, True], ids=["no-dropout", "dropout"])
def test_training_kernels_pass_gradcheck(with_masks, device):
    """Each training recurrence's backward pass against finite differences (float64), with
    source padding, and with attention-dropout masks where the variant takes them (on pytest's
    --device: scripts/gpu-check.sh runs it on a GPU)."""
    rand, padding, masks = _gradcheck_inputs(device=device)
    batch, heads, steps, src_len, dim = 2, 2, 4, 3, 2
    masks = masks if with_masks else None
    pad = padding[:, None, :]

    def masked_energies():
        return rand(batch, heads, steps, src_len, scale=2.0)

    def masking(e):
        return e.masked_fill(padding[:, None, None, :], -1e9)

    gain = rand(batch, heads, src_len)
    for accumulate in (False, True):
        energies = rand(steps, batch, heads, src_len)
        assert torch.autograd.gradcheck(
            lambda e, w: WeightRecurrence.apply(e, pad, w, 0.0, accumulate),
            (energies, gain))
        assert torch.autograd.gradcheck(
            lambda e: WeightRecurrence.apply(e, pad, None, -0.7, accumulate), (energies,))
    relation = rand(batch, heads, src_len, src_len)
    source_masks = None if masks is None else masks[..., :src_len].contiguous()
    assert torch.autograd.gradcheck(
        lambda e, r: PrevContextRecurrence.apply(e, pad, r, source_masks),
        (rand(steps, batch, heads, src_len), relation))
    values, query = rand(batch, heads, src_len, dim), rand(batch, heads, steps, dim)
    key_weight, key_bias = rand(heads, dim, dim), rand(heads, dim)
    weight, bias = rand(heads, dim, dim), rand(heads, dim)
    energies = masked_energies()
    for need_weights in (False, True):
        def head(e, v, q, wk, kb, w, b):  # Eq. 7
            return HeadContextRecurrence.apply(e, padding, v, q, wk, kb, w, b, masks,
                                               need_weights)

        def head8(e, v, q, wk):  # Eq. 8, without a key bias
            return HeadContextRecurrence.apply(masking(e), None, v, q, wk, None, None, None,
                                               masks, need_weights)

        assert torch.autograd.gradcheck(
            head, (energies, values, query, key_weight, key_bias, weight, bias))
        assert torch.autograd.gradcheck(head8, (energies, values, query, key_weight))
        full_weight, full_bias = rand(2 * heads * dim, heads * dim), rand(2 * heads * dim)
        query_t = rand(steps, batch, heads, dim)

        def full(e, v, q, w, b):  # Eqs. 5, 6
            return FullContextRecurrence.apply(masking(e), v, q, w, b, masks, need_weights)

        assert torch.autograd.gradcheck(full, (energies, values, query_t, full_weight, full_bias))
    power = window_matrix(padding, src_len, 1, scale=0.4).double().expand(batch, -1, -1)
    for steps_ in (1, 3, 5):
        assert torch.autograd.gradcheck(lambda e: ContinuousScan.apply(e, power, 0.3),
                                        (rand(batch, heads, steps_, src_len),))


@pytest.mark.parametrize("variant,kv_variant", VARIANTS, ids=VARIANT_IDS)
def test_half_precision_and_a_fully_padded_row_stay_finite(variant, kv_variant):
    module = make_module(variant, kv_variant).half()
    states, encoder, padding, _ = make_batch(left_pad=True)
    padding[2] = True
    with torch.no_grad():
        out, weights = module(states.half(), encoder.half(), encoder.half(), padding)
    assert out.dtype == torch.half and torch.isfinite(out).all() and torch.isfinite(weights).all()


def test_bad_options_name_their_flag():
    """The model's options name the flag; the module's arguments name the argument."""
    import argparse

    from ran_fairseq.models.recurrent_cross_transformer import RecurrentCrossTransformerModel

    checked = RecurrentCrossTransformerModel.checked_args

    cases = [
        (("sum", 1, 0.5, 5), "--cross-attention", "cross_attention"),
        (("expand-kv", 5, 0.5, 5), "--kv-variant", "kv_variant"),
        (("continuous", 1, 0.0, 5), "--rescale-lambda", "rescale_lambda"),
        (("continuous", 1, 1.5, 5), "--rescale-lambda", "rescale_lambda"),
        (("coverage", 1, -1.0, 5), "--rescale-lambda", "rescale_lambda"),
        (("coverage", 1, float("nan"), 5), "--rescale-lambda", "rescale_lambda"),
        (("continuous", 1, 0.5, -1), "--rescale-window", "rescale_window"),
    ]
    for arguments, flag, name in cases:
        args = argparse.Namespace(**dict(zip(("cross_attention", "kv_variant", "rescale_lambda",
                                              "rescale_window"), arguments)))
        with pytest.raises(ValueError, match=flag):
            checked(args)
        with pytest.raises(ValueError, match=name):
            check_options(*arguments)
    check_options("coverage", 1, 2.0, 0)  # λ > 1 is fine for coverage
    sizes = argparse.Namespace(cross_attention="expand-kv", kv_variant=1, encoder_embed_dim=12,
                               decoder_embed_dim=8)
    with pytest.raises(ValueError, match="--kv-variant 1 .* --encoder-embed-dim equal to"):
        checked(sizes)
    with pytest.raises(ValueError, match="kv_variant 1"):
        RecurrentCrossAttention(E, HEADS, kdim=12, vdim=12, **module_options(kv_variant=1))
    RecurrentCrossAttention(E, HEADS, kdim=12, vdim=12, **module_options(kv_variant=2))


# ---- the fairseq model ---------------------------------------------------------------------------


class FakeTask:
    def __init__(self):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for w in "abcdefgh":
            self.source_dictionary.add_symbol(w)


SMALL = ("--encoder-layers", "2", "--decoder-layers", "3", "--encoder-embed-dim", "16",
         "--decoder-embed-dim", "16", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--encoder-ffn-embed-dim", "32",
         "--decoder-ffn-embed-dim", "32")


def parse(arch, *flags):
    return options.parse_args_and_arch(options.get_training_parser(),
                                       ["unused-data", "--arch", arch, "--task", "translation",
                                        *flags])


def build(arch, *flags):
    torch.manual_seed(0)
    return RecurrentCrossTransformerModel.build_model(parse(arch, *flags), FakeTask()).eval()


def cross_attentions(model):
    return [layer.encoder_attn for layer in model.decoder.layers]


def test_flags_select_variant_layers_and_hyper_parameters():
    model = build("recurrent_cross_transformer", *SMALL)
    assert [m.cross_attention for m in cross_attentions(model)] == ["prev-weight"] * 3
    model = build("recurrent_cross_transformer", *SMALL, "--cross-attention", "continuous",
                  "--rescale-lambda", "0.25", "--rescale-window", "3",
                  "--recurrent-cross-layers", "0,2")
    attentions = cross_attentions(model)
    assert [m.cross_attention for m in attentions] == ["continuous", "dot", "continuous"]
    assert (attentions[0].rescale_lambda, attentions[0].rescale_window) == (0.25, 3)
    model = build("recurrent_cross_transformer", *SMALL, "--cross-attention", "expand-kv",
                  "--kv-variant", "3")
    assert all(m.kv_variant == 3 and hasattr(m, "extra_value") for m in cross_attentions(model))


def test_bad_model_flags_name_their_flag():
    for flags, message in [
        (("--recurrent-cross-layers", "3"), "--recurrent-cross-layers"),
        (("--recurrent-cross-layers", "first"), "--recurrent-cross-layers"),
        (("--cross-attention", "continuous", "--rescale-lambda", "2"), "--rescale-lambda"),
        (("--cross-attention", "expand-kv", "--kv-variant", "1", "--encoder-embed-dim", "24"),
         "--kv-variant 1"),
        (("--left-pad-target",), "--left-pad-target"),
    ]:
        with pytest.raises(ValueError, match=message):
            build("recurrent_cross_transformer", *SMALL, *flags)


@pytest.mark.parametrize("recurrence", ["eager", "compile"])
def test_checkpoints_with_the_removed_recurrence_option_load(recurrence, caplog):
    """Arguments saved with --cross-attention-recurrence (removed) still build the model: eager
    silently, compile with a one-line notice."""
    args = parse("recurrent_cross_transformer", *SMALL)
    args.cross_attention_recurrence = recurrence
    del args.options_version  # saved before the options had a version (options version 1)
    with caplog.at_level("WARNING"):
        torch.manual_seed(0)
        model = RecurrentCrossTransformerModel.build_model(args, FakeTask())
    assert [m.cross_attention for m in cross_attentions(model)] == ["prev-weight"] * 3
    notices = [r for r in caplog.records if "--cross-attention-recurrence" in r.getMessage()]
    assert len(notices) == (recurrence == "compile")


def test_dot_variant_is_fairseqs_transformer():
    from fairseq.models.transformer import TransformerModel

    ours = build("recurrent_cross_transformer", *SMALL, "--cross-attention", "dot")
    torch.manual_seed(1)
    theirs = TransformerModel.build_model(parse("transformer", *SMALL), FakeTask()).eval()
    ours.load_state_dict(theirs.state_dict())
    src, lengths = torch.tensor([[1, 5, 6, 7, 2], [5, 6, 7, 8, 2]]), torch.tensor([4, 5])
    prev = torch.tensor([[2, 5, 6], [2, 7, 1]])
    with torch.no_grad():
        (a, extra_a), (b, extra_b) = ours(src, lengths, prev), theirs(src, lengths, prev)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(extra_a["attn"][0], extra_b["attn"][0])


def test_beam_search_reaches_the_modules_and_keeps_its_results():
    """fairseq's generator tells the model its beam size (the cached keys then stay in place
    through reorders within a beam); the hypotheses equal those of a search that copies them."""
    from fairseq.sequence_generator import SequenceGenerator

    model = build("recurrent_cross_transformer", *SMALL, "--cross-attention", "prev-context")
    generator = SequenceGenerator([model], FakeTask().target_dictionary, beam_size=3,
                                  max_len_a=0, max_len_b=8)
    assert all(m.beam_size == 3 for m in cross_attentions(model))
    sample = {"net_input": {"src_tokens": torch.tensor([[5, 6, 7, 8, 9, 2], [1, 1, 10, 6, 5, 2]]),
                            "src_lengths": torch.tensor([6, 4])}}
    with torch.no_grad():
        shortcut = generator.generate([model], sample)
        model.decoder.set_beam_size(1)
        assert all(m.beam_size == 1 for m in cross_attentions(model))
        copied = generator.generate([model], sample)
    for ours, theirs in zip(shortcut, copied):
        assert [h["tokens"].tolist() for h in ours] == [h["tokens"].tolist() for h in theirs]
        torch.testing.assert_close(torch.stack([h["score"] for h in ours]),
                                   torch.stack([h["score"] for h in theirs]))


def test_entropy_recorder_sees_every_cross_attention_layer():
    model = build("recurrent_cross_transformer", *SMALL, "--cross-attention", "coverage")
    src, lengths = torch.tensor([[1, 5, 6, 7, 2], [5, 6, 7, 8, 2]]), torch.tensor([4, 5])
    prev = torch.tensor([[2, 5, 6], [2, 7, 1]])
    with AttentionEntropyRecorder(model) as recorder, torch.no_grad():
        model(src, lengths, prev)
    assert {("crs", i) for i in range(3)} <= set(recorder.counts)
    assert all(recorder.counts[("crs", i)] == 2 * 2 * 3 for i in range(3))  # heads × B × T
    assert all(0 < recorder.sums[("crs", i)] for i in range(3))


def test_named_archs_sizes():
    sizes = ("encoder_layers", "decoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim",
             "encoder_attention_heads", "decoder_attention_heads")
    # the namespaces the model builds from (the config class fills what the flags leave out)
    small, iwslt, base = (RecurrentCrossTransformerModel.resolve_args(
        parse(f"recurrent_cross_transformer{suffix}"))
        for suffix in ("_small", "_iwslt_de_en", ""))
    assert [getattr(small, k) for k in sizes] == [3, 3, 256, 1024, 4, 4]
    assert [getattr(iwslt, k) for k in sizes] == [6, 6, 512, 1024, 4, 4]
    assert [getattr(base, k) for k in sizes] == [6, 6, 512, 2048, 8, 8]
    for args in (small, iwslt, base):
        assert (args.cross_attention, args.kv_variant, args.rescale_lambda, args.rescale_window,
                args.recurrent_cross_layers) == ("prev-weight", 1, 0.5, 5, "all")
