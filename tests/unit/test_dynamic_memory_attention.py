"""Unit tests of ran_fairseq.modules.dynamic_memory_attention on plain tensors, and of the
rnnsearch_dynmem model's options (Yang et al. 2017)."""
import math

import pytest
import torch

import helpers
from ran_fairseq.modules.attention_entropy import AttentionEntropyRecorder
from ran_fairseq.modules.dynamic_memory_attention import (
    DynamicMemoryAttention,
    attention_windows,
)

B, QUERY, KEY, ATT, MEM = 3, 6, 8, 7, 5
LENGTHS = [6, 4, 1]  # one sentence of a single word: every window reaches past both edges
STEPS = 5


def randomize_(module, seed=0, bound=1.0):
    """Weights large enough that the memory visibly moves the attention."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
    return module


def attention(k=2, memory_dim=MEM, seed=0):
    torch.manual_seed(seed)
    return randomize_(DynamicMemoryAttention(QUERY, KEY, ATT, dynamic_memory_window=k,
                                             dynamic_memory_dim=memory_dim),
                      seed).eval()


def inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    sentences = [torch.randn(n, KEY, generator=g) for n in LENGTHS]
    queries = torch.randn(STEPS, B, QUERY, generator=g)
    return sentences, queries


def padded(sentences, left):
    """keys (B, S, KEY) with zero rows at padding, and the padding mask (B, S)."""
    srclen = max(len(s) for s in sentences)
    keys = torch.zeros(len(sentences), srclen, KEY)
    mask = torch.ones(len(sentences), srclen, dtype=torch.bool)
    for b, s in enumerate(sentences):
        start = srclen - len(s) if left else 0
        keys[b, start:start + len(s)] = s
        mask[b, start:start + len(s)] = False
    return keys, mask


def run_steps(module, keys, mask, queries):
    state = module.start(keys, mask)
    contexts, weights = [], []
    for query in queries:
        context, attn, state = module.step(query, keys, mask, state)
        contexts.append(context)
        weights.append(attn)
    return torch.stack(contexts), torch.stack(weights)  # (T, B, KEY), (T, B, S)


def real_columns(weights, mask, b):
    return weights[:, b][:, ~mask[b]]


# ---- window construction ---------------------------------------------------------------------


def test_windows_at_sentence_edges():
    attn = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    windows = attention_windows(attn, 1)
    assert windows.shape == (1, 4, 3)
    torch.testing.assert_close(windows[0], torch.tensor([
        [0.0, 0.1, 0.2], [0.1, 0.2, 0.3], [0.2, 0.3, 0.4], [0.3, 0.4, 0.0]]))
    # k larger than the sentence: everything beyond the edges is zero; k = 0 is the value itself.
    wide = attention_windows(attn, 5)
    assert wide.shape == (1, 4, 11)
    torch.testing.assert_close(wide[0, 0], torch.tensor([0.0] * 5 + [0.1, 0.2, 0.3, 0.4, 0.0, 0.0]))
    torch.testing.assert_close(attention_windows(attn, 0)[0, :, 0], attn[0])


def test_windows_of_padded_batch_equal_real_positions_windows():
    """Attention is zero at padding, so windows at real positions hold only the sentence's own
    values (zero past its edges), in a left- and a right-padded batch alike."""
    a = torch.tensor([0.5, 0.3, 0.2])
    left = attention_windows(torch.tensor([[0.0, 0.0, *a]]), 2)[0, 2:]
    right = attention_windows(torch.tensor([[*a, 0.0, 0.0]]), 2)[0, :3]
    alone = attention_windows(a.unsqueeze(0), 2)[0]
    torch.testing.assert_close(left, alone)
    torch.testing.assert_close(right, alone)
    assert alone[0].tolist()[:2] == [0.0, 0.0] and alone[2].tolist()[3:] == [0.0, 0.0]


# ---- the recurrence against a loop over words, one LSTM cell call per (sentence, word) -----


def naive_attention(module, sentence, queries, k):
    """Eqs. 5-7 / 11 and 13 for one unpadded sentence, one source word at a time."""
    n = len(sentence)
    W_h, U, v = module.key_proj.weight, module.query_proj.weight, module.score_proj.weight[0]
    prev = torch.zeros(n)  # α_{i,0} = 0
    memory = [(torch.zeros(1, MEM), torch.zeros(1, MEM)) for _ in range(n)]
    contexts, weights = [], []
    for query in queries:
        scores = []
        for i in range(n):
            feature = W_h @ sentence[i] + U @ query
            if module.has_memory:
                window = torch.tensor([[prev[i + o].item() if 0 <= i + o < n else 0.0
                                        for o in range(-k, k + 1)]])
                memory[i] = module.memory_cell(window, memory[i])
                feature = feature + module.memory_proj.weight @ memory[i][0][0]  # Eq. 11
            scores.append(v @ torch.tanh(feature))
        alpha = torch.softmax(torch.stack(scores), 0)
        contexts.append(sum(alpha[i] * sentence[i] for i in range(n)))  # Eq. 13
        weights.append(alpha)
        prev = alpha
    return torch.stack(contexts), torch.stack(weights)


@pytest.mark.parametrize("k,memory_dim", [(0, MEM), (2, MEM), (0, 0)],
                         ids=["k0", "k2", "no-memory"])
@pytest.mark.parametrize("left", [True, False], ids=["left-pad", "right-pad"])
@torch.no_grad()
def test_batched_steps_match_per_word_loop(k, memory_dim, left):
    module = attention(k, memory_dim)
    sentences, queries = inputs()
    keys, mask = padded(sentences, left)
    contexts, weights = run_steps(module, keys, mask, queries)
    for b, sentence in enumerate(sentences):
        expected_ctx, expected_w = naive_attention(module, sentence, queries[:, b], k)
        torch.testing.assert_close(contexts[:, b], expected_ctx, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(real_columns(weights, mask, b), expected_w, atol=1e-5,
                                   rtol=1e-5)
        assert not weights[:, b][:, mask[b]].any()  # zero at padding


@torch.no_grad()
def test_left_and_right_padding_give_identical_results():
    module = attention(k=2)
    sentences, queries = inputs(seed=3)
    results = {left: run_steps(module, *padded(sentences, left), queries) for left in (True, False)}
    _, mask_l = padded(sentences, True)
    _, mask_r = padded(sentences, False)
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-6, rtol=1e-6)
    for b in range(B):
        torch.testing.assert_close(real_columns(results[True][1], mask_l, b),
                                   real_columns(results[False][1], mask_r, b), atol=1e-6, rtol=1e-6)


# ---- Eq. 11 vs Eq. 13: the memory addresses, it is never read ---------------------------------


@torch.no_grad()
def test_memory_enters_the_scores_only():
    sentences, queries = inputs(seed=4)
    keys, mask = padded(sentences, left=False)
    with_memory = attention(k=2)
    without = attention(k=2, memory_dim=0)
    for name in ("key_proj", "query_proj", "score_proj"):
        getattr(without, name).load_state_dict(getattr(with_memory, name).state_dict())
    ctx_m, w_m = run_steps(with_memory, keys, mask, queries)
    ctx_0, w_0 = run_steps(without, keys, mask, queries)
    # The memory changes where the model attends (Eq. 11) ...
    assert (w_m - w_0).abs().max() > 1e-2
    # ... but the read is Σ α_ij h_i over the annotations alone (Eq. 13): no d_ij in c_j.
    assert ctx_m.shape == (STEPS, B, KEY)
    torch.testing.assert_close(ctx_m, torch.einsum("tbs,bsk->tbk", w_m, keys))
    # With W_a's memory columns at zero the model is exactly RNNSearch (Eq. 5).
    with_memory.memory_proj.weight.zero_()
    ctx_z, w_z = run_steps(with_memory, keys, mask, queries)
    torch.testing.assert_close(w_z, w_0)
    torch.testing.assert_close(ctx_z, ctx_0)


# ---- incremental state -------------------------------------------------------------------------


@torch.no_grad()
def test_incremental_state_and_reorder():
    """Steps split over calls through fairseq's incremental state, with a beam-style reorder in
    between, equal one continuous run over the reordered batch."""
    module = attention(k=2)
    sentences, queries = inputs(seed=6)
    keys, mask = padded(sentences, left=True)
    order = torch.tensor([2, 0, 0])
    expected_ctx, expected_w = run_steps(module, keys, mask, queries[:2])
    state = module.start(keys, mask)
    for query in queries[:2]:
        _, _, state = module.step(query, keys, mask, state)
    # the reordered continuation, run continuously
    state = {name: value.index_select(0, order) for name, value in state.items()}
    keys_r, mask_r = keys[order], mask[order]
    cont = []
    for query in queries[2:]:
        context, _, state = module.step(query[order], keys_r, mask_r, state)
        cont.append(context)
    # the same through incremental_state, one call per step
    incremental = {}
    for j, query in enumerate(queries):
        if j == 2:
            module.reorder_incremental_state(incremental, order)
            keys, mask = keys_r, mask_r
        q = query if j < 2 else query[order]
        state = module.start(keys, mask, incremental)
        context, attn, state = module.step(q, keys, mask, state)
        module.save(incremental, state)
        if j < 2:
            torch.testing.assert_close(context, expected_ctx[j])
            torch.testing.assert_close(attn, expected_w[j])
        else:
            torch.testing.assert_close(context, cont[j - 2])


def test_keys_are_projected_once_per_sentence():
    module = attention(k=1)
    sentences, queries = inputs()
    keys, mask = padded(sentences, left=False)
    calls = []
    module.key_proj.register_forward_hook(lambda *a: calls.append(1))
    incremental = {}
    for query in queries:
        state = module.start(keys, mask, incremental)
        _, _, state = module.step(query, keys, mask, state)
        module.save(incremental, state)
    assert len(calls) == 1


def test_bad_window_and_memory_size_name_the_flag():
    """The model's options name the flag; the module's arguments name the argument."""
    import argparse

    from ran_fairseq.models.rnnsearch_dynmem import RNNSearchDynamicMemoryModel

    for dest, flag in (("dynamic_memory_window", "--dynamic-memory-window"),
                       ("dynamic_memory_dim", "--dynamic-memory-dim")):
        with pytest.raises(ValueError, match=flag):
            RNNSearchDynamicMemoryModel.checked_args(argparse.Namespace(**{dest: -3}))
    with pytest.raises(ValueError, match=r"\(dynamic_memory_window\)"):
        DynamicMemoryAttention(QUERY, KEY, ATT, dynamic_memory_window=-1, dynamic_memory_dim=MEM)
    with pytest.raises(ValueError, match=r"\(dynamic_memory_dim\)"):
        DynamicMemoryAttention(QUERY, KEY, ATT, dynamic_memory_window=2, dynamic_memory_dim=-3)


# ---- the model --------------------------------------------------------------------------------

TINY = ("--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
        "--decoder-hidden-size", "8", "--decoder-out-embed-dim", "8", "--dynamic-memory-dim", "4",
        "--init-range", "1.0")


def batch(task, left_pad):
    from fairseq.data import data_utils

    d = task.source_dictionary
    src = [torch.tensor([5, 6, 7, 8, d.eos()]), torch.tensor([9, 10, d.eos()])]
    tgt = [torch.tensor([5, 6, 7, d.eos()]), torch.tensor([8, 9, 10, d.eos()])]
    src_tokens = data_utils.collate_tokens(src, d.pad(), d.eos(), left_pad)
    prev = data_utils.collate_tokens(tgt, d.pad(), d.eos(), False, move_eos_to_beginning=True)
    return src_tokens, torch.tensor([5, 3]), prev


def test_arch_sizes(synthetic_databin):
    from ran_fairseq.models.rnnsearch_dynmem import RNNSearchDynamicMemoryModel

    # the namespace the model builds from (the config class fills what the flags leave out)
    args = RNNSearchDynamicMemoryModel.resolve_args(
        helpers.parse_args("rnnsearch_dynmem", synthetic_databin))
    assert (args.encoder_embed_dim, args.encoder_hidden_size, args.decoder_hidden_size,
            args.decoder_out_embed_dim, args.dynamic_memory_dim, args.dynamic_memory_window,
            args.init_range) == (1000, 1000, 1000, 1000, 500, 5, 0.1)
    _, small = helpers.build_model("rnnsearch_dynmem_small", synthetic_databin)
    attn = small.decoder.attention
    assert attn.memory_cell.hidden_size == 128 and attn.memory_cell.input_size == 11
    assert small.encoder.output_units == 512 and small.decoder.hidden_size == 256
    bound = max(p.abs().max().item() for p in small.parameters())
    assert 0.09 < bound <= 0.1


def test_no_dynamic_memory_is_rnnsearch(synthetic_databin):
    _, model = helpers.build_model("rnnsearch_dynmem", synthetic_databin,
                                   (*TINY, "--no-dynamic-memory"))
    assert not model.decoder.attention.has_memory
    assert not any("memory" in name for name, _ in model.named_parameters())


@pytest.mark.parametrize("flags,match", [
    (("--dynamic-memory-window", "-1"), "--dynamic-memory-window"),
    (("--dynamic-memory-dim", "0"), "--dynamic-memory-dim"),
    (("--init-range", "0"), "--init-range"),
    (("--share-decoder-input-output-embed", "--decoder-out-embed-dim", "6"),
     "--decoder-out-embed-dim"),
], ids=["window", "memory-dim", "init-range", "share"])
def test_bad_flags_name_the_flag(synthetic_databin, flags, match):
    with pytest.raises(ValueError, match=match):
        helpers.build_model("rnnsearch_dynmem", synthetic_databin, (*TINY, *flags))


@torch.no_grad()
def test_returned_attention_indexes_src_tokens_columns(synthetic_databin):
    """The decoder's attention is in the column layout of src_tokens, so fairseq's alignment
    extraction indexes the right source token under left padding too."""
    task, model = helpers.build_model("rnnsearch_dynmem", synthetic_databin, TINY)
    out = {}
    for left in (True, False):
        src_tokens, lengths, prev = batch(task, left)
        logits, attn = model(src_tokens, lengths, prev)
        assert attn.shape == (2, 4, 5)
        pad = src_tokens.eq(task.source_dictionary.pad())
        assert attn.masked_select(pad.unsqueeze(1)).abs().max() == 0
        torch.testing.assert_close(attn.sum(-1), torch.ones(2, 4))
        out[left] = (logits, attn)
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[True][1][1, :, 2:], out[False][1][1, :, :3])
    torch.testing.assert_close(out[True][1][0], out[False][1][0])


@torch.no_grad()
def test_encoder_accepts_unsorted_batches(synthetic_databin):
    task, model = helpers.build_model("rnnsearch_dynmem", synthetic_databin, TINY)
    src_tokens, lengths, prev = batch(task, left_pad=False)
    flip = torch.tensor([1, 0])
    a, _ = model(src_tokens, lengths, prev)
    b, _ = model(src_tokens[flip], lengths[flip], prev[flip])
    torch.testing.assert_close(a[flip], b, atol=1e-5, rtol=1e-5)


def test_entropy_recorder_sees_the_attention(synthetic_databin):
    task, model = helpers.build_model("rnnsearch_dynmem", synthetic_databin, TINY)
    src_tokens, lengths, prev = batch(task, left_pad=True)
    target_mask = prev.ne(task.target_dictionary.pad())
    with torch.no_grad(), AttentionEntropyRecorder(model, target_mask, keep_weights=True) as rec:
        _, attn = model(src_tokens, lengths, prev)
    assert set(rec.sums) == {("crs", 0)}
    assert rec.counts[("crs", 0)] == int(target_mask.sum())
    p = attn.clamp_min(1e-12)
    expected = -(attn * p.log()).sum(-1).masked_select(target_mask).sum().item()
    assert math.isclose(rec.sums[("crs", 0)], expected, rel_tol=1e-5)


def test_paper_training_config(synthetic_databin):
    """configs/dynmem/paper-train.args: SGD 0.7, 128 sentences, clip 3, 12 epochs, the rate halved
    every epoch after epoch 8, training pairs of at most 50 words (+ </s>)."""
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim import lr_scheduler

    text = (helpers.REPO / "configs" / "dynmem" / "paper-train.args").read_text()
    flags = " ".join(line.split("#", 1)[0] for line in text.splitlines()).split()
    args = helpers.parse_args("rnnsearch_dynmem", synthetic_databin, flags)
    assert (args.arch, args.optimizer, args.lr, args.batch_size, args.clip_norm, args.max_epoch,
            args.max_source_positions, args.max_target_positions, args.init_range) == \
        ("rnnsearch_dynmem", "sgd", [0.7], 128, 3.0, 12, 51, 51, 0.1)
    cfg = convert_namespace_to_omegaconf(args)
    optimizer = optim.build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    scheduler = lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, optimizer)
    lrs = [scheduler.step_begin_epoch(epoch) for epoch in range(1, 13)]
    expected = [0.7] * 8 + [0.7 / 2 ** n for n in range(1, 5)]
    assert lrs == pytest.approx(expected)
