"""The peer benchmark across processes (its workers, with a stand-in peer), and, opt-in, the
agreement of the plugin with the authors' own code: set ``ATTN2D_CLONE`` to a clone of
https://github.com/elbayadm/attn2d at the commit of ``ran_lab.bench.peers.PEERS`` (the paper's
code, ``nmt/``), ``ATTN2D_FAIRSEQ_CLONE`` to one at the commit of its fairseq port (the
repository's tip, ``examples/pervasive``), and ``THSEQ_CLONE`` to a clone of https://github.com/lemon0830/RAN at its commit
there (Zeng et al.'s thseq, for RAN); without them those tests skip and say how to get it. The
harness's logic in this process: tests/unit/test_bench_peers.py."""
import os
import sys

import pytest
import torch

from ran_fairseq.modules.densenet2d import DenseNet2d
from ran_lab.bench import peer_worker, peers
from ran_lab.common import LabError

TINY_PA = {"arch": "pervasive_attention", "peer": "stub", "sentences": 3, "source_length": 6,
           "target_length": 5, "vocab": 30, "seed": 1, "embed_dim": 8, "layers": 2,
           "growth_rate": 4, "kernel_size": 3}


def test_the_workers_run_a_case_in_processes_of_their_own(tmp_path):
    log = tmp_path / "workers.log"
    result = peers.run_case("tiny", dict(TINY_PA, padded=True), {}, reps=2, warmup=1, threads=1,
                            log=log, memory_steps=1)
    for phase in ("train", "decode"):
        assert all(len(v) == 2 and min(v) > 0 for v in result[phase]["seconds"].values())
    for side in ("plugin", "stub"):
        memory = result["memory"][side]
        assert memory["peak_mib"] >= memory["rss_before_mib"] > 0 and memory["saved_mib"] > 0
    assert result["torch"] == torch.__version__


def test_a_failing_worker_is_named_with_its_error(tmp_path):
    runner = peers.ProcessRunner("nope", log=tmp_path / "log")
    try:
        with pytest.raises(LabError, match="nope: ValueError: unknown side 'nope'"):
            runner.call(cmd="setup", side="nope", case=TINY_PA)
    finally:
        runner.close()


# ---- agreement with attn2d (opt-in) ---------------------------------------------------------------

CLONE = os.environ.get("ATTN2D_CLONE")
ATTN2D_MISSING = (peers.clone_problem("attn2d", CLONE) if CLONE else
                  "set ATTN2D_CLONE to a clone of attn2d to compare with the authors' code: "
                  + peers.clone_problem("attn2d", None))
needs_attn2d = pytest.mark.skipif(bool(ATTN2D_MISSING), reason=str(ATTN2D_MISSING))


def attn2d_block(*args):
    sys.path.insert(0, os.path.abspath(CLONE))
    from nmt.models.densenet import _DenseBlock

    return _DenseBlock(*args)


def matched_pair(kernel_size, seed=0):
    """The plugin's DenseNet and attn2d's ``_DenseBlock`` (the paper's layer: BN → ReLU → 1×1
    conv → BN → ReLU → masked k×k conv) with the same weights: attn2d's full k×k kernels hold the
    plugin's cropped ones in their first ⌈k/2⌉ rows (the rest are masked to zero in its forward
    pass)."""
    torch.manual_seed(seed)
    ours = DenseNet2d(12, 3, 4, kernel_size, dropout=0.0, gated_convolutions="none",
                      memory_efficient_densenet=False).train()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in ours.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.5, 0.5, generator=g)
    # (num_layers, input features, k, bn_size, growth, dropout, gated, bias, init, weight norm,
    #  norm, version)
    theirs = attn2d_block(3, 12, kernel_size, 4, 4, 0.0, False, False, True, False, "batch", 1)
    theirs.train()
    with torch.no_grad():
        for i, layer in enumerate(ours.layers):
            peer = getattr(theirs, f"denselayer{i + 1}")
            for name in ("norm1", "norm2"):
                getattr(peer, name).load_state_dict(getattr(layer, name).state_dict())
            peer.conv1.weight.copy_(layer.conv1.weight)
            peer.conv2.weight.zero_()
            peer.conv2.weight[:, :, :kernel_size // 2 + 1].copy_(layer.conv2.weight)
    return ours, theirs


def our_features(net, x, padding):
    """[x, h_1, ..., h_L]: what attn2d's block returns (concatenated), from the plugin's layers."""
    outputs = []
    hooks = [layer.register_forward_hook(lambda m, a, out: outputs.append(out))
             for layer in net.layers]
    net(x, padding)
    for h in hooks:
        h.remove()
    return torch.cat([x * (~padding).unsqueeze(1)] + outputs, dim=1)


@needs_attn2d
@pytest.mark.parametrize("kernel_size", [3, 5])
def test_attn2d_dense_layers_equal_the_plugins_without_padding(kernel_size):
    """Training mode (batch statistics, running statistics updated), then evaluation mode: the
    features, and the gradients of the input and of every weight, equal attn2d's to 1e-5."""
    ours, theirs = matched_pair(kernel_size)
    x = torch.randn(3, 12, 6, 5)
    padding = torch.zeros(3, 6, 5, dtype=torch.bool)
    weights = torch.randn(3, 24, 6, 5)
    xo, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours, out_theirs = our_features(ours, xo, padding), theirs(xt)
    torch.testing.assert_close(out_ours, out_theirs, rtol=1e-5, atol=1e-5)
    (out_ours * weights).sum().backward()
    (out_theirs * weights).sum().backward()
    torch.testing.assert_close(xo.grad, xt.grad, rtol=1e-5, atol=1e-5)
    p = kernel_size // 2 + 1
    for i, layer in enumerate(ours.layers):
        peer = getattr(theirs, f"denselayer{i + 1}")
        pairs = [(layer.conv1.weight.grad, peer.conv1.weight.grad),
                 (layer.conv2.weight.grad, peer.conv2.weight.grad[:, :, :p])]
        for name in ("norm1", "norm2"):
            a, b = getattr(layer, name), getattr(peer, name)
            pairs += [(a.weight.grad, b.weight.grad), (a.bias.grad, b.bias.grad)]
            torch.testing.assert_close(a.running_mean, b.running_mean)
            torch.testing.assert_close(a.running_var, b.running_var)
        for a, b in pairs:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        torch.testing.assert_close(our_features(ours, x, padding), theirs(x), rtol=1e-5,
                                   atol=1e-5)


@needs_attn2d
@pytest.mark.parametrize("training", [True, False], ids=["training", "evaluation"])
def test_attn2d_leaks_padding_into_real_cells_where_the_plugin_does_not(training):
    """A short sentence padded in a batch beside a long one, its padded cells holding one value
    and then another (attn2d's grid holds the padding token's embedding there, which its
    initialization does not zero): attn2d's real cells change, as its convolutions read the padded
    neighbours and, in training, its batch statistics count the padded cells; the plugin's real
    cells do not change at all."""
    ours, theirs = matched_pair(3, seed=2)
    ours.train(training)
    theirs.train(training)
    torch.manual_seed(3)
    x = torch.randn(2, 12, 6, 5)
    padding = torch.zeros(2, 6, 5, dtype=torch.bool)
    padding[1, 4:] = True  # sentence 2: 4 target and 3 source tokens
    padding[1, :, 3:] = True
    runs = []
    for value in (0.7, -3.0):
        xv = x.masked_fill(padding.unsqueeze(1), value)
        with torch.no_grad():
            runs.append((our_features(ours, xv, padding), theirs(xv)))
    (ours_a, theirs_a), (ours_b, theirs_b) = runs
    real = ~padding.unsqueeze(1).expand_as(ours_a)
    assert torch.equal(ours_a[real], ours_b[real])
    assert (theirs_a[real] - theirs_b[real]).abs().max() > 1e-2


@needs_attn2d
def test_attn2d_side_trains_and_decodes_from_the_clone():
    case = dict(TINY_PA, peer="attn2d")
    side = peer_worker.Attn2dSide(case, CLONE)
    first = side.train_step()
    assert first > 0 and side.train_step() < first * 1.5
    assert side.decode() == case["sentences"] * case["target_length"]


# ---- agreement with attn2d's fairseq port (opt-in) ------------------------------------------------

PORT = os.environ.get("ATTN2D_FAIRSEQ_CLONE")
PORT_MISSING = (peers.clone_problem("attn2d-fairseq", PORT) if PORT else
                "set ATTN2D_FAIRSEQ_CLONE to a clone of attn2d's fairseq port to compare with it: "
                + peers.clone_problem("attn2d-fairseq", None))
needs_port = pytest.mark.skipif(bool(PORT_MISSING), reason=str(PORT_MISSING))


def matched_port_pair(kernel_size, seed=0):
    """The plugin's DenseNet and the port's archive DenseNet (the benchmark's options: one block,
    no channel reduction, no transition, no biases, dropout 0) with the same weights, the port's
    full k×k kernels holding the plugin's cropped ones in their first ⌈k/2⌉ rows."""
    from ran_lab.bench.peer_attn2d_fairseq import densenet_args, load_port

    torch.manual_seed(seed)
    ours = DenseNet2d(12, 3, 4, kernel_size, dropout=0.0, gated_convolutions="none",
                      memory_efficient_densenet=False).train()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in ours.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.5, 0.5, generator=g)
    densenet, _ = load_port(PORT)
    args = densenet_args({"layers": 3, "kernel_size": kernel_size, "growth_rate": 4,
                          "dropout": 0.0})
    theirs = densenet(12, args).train()
    with torch.no_grad():
        for i, layer in enumerate(ours.layers):
            peer = getattr(theirs.features.denseblock1, f"denselayer{i + 1}")
            peer.bn1.load_state_dict(layer.norm1.state_dict())
            peer.layer2.bn2.load_state_dict(layer.norm2.state_dict())
            peer.conv1.weight.copy_(layer.conv1.weight)
            peer.layer2.mconv2.weight.zero_()
            peer.layer2.mconv2.weight[:, :, :kernel_size // 2 + 1].copy_(layer.conv2.weight)
        theirs.features.final_norm.load_state_dict(ours.norm.state_dict())
    return ours, theirs


@needs_port
@pytest.mark.parametrize("kernel_size", [3, 5])
def test_the_fairseq_ports_densenet_equals_the_plugins(kernel_size):
    """Training mode on a channels-last grid without padding, as the benchmark runs both: the
    closing features, the input's gradient and every weight's gradient equal the port's to 1e-5,
    and so do the running statistics."""
    ours, theirs = matched_port_pair(kernel_size)
    x = torch.randn(3, 12, 6, 5).contiguous(memory_format=torch.channels_last)
    padding = torch.zeros(3, 6, 5, dtype=torch.bool)
    weights = torch.randn(3, 24, 6, 5)
    xo, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours, out_theirs = ours(xo, padding), theirs(xt)
    torch.testing.assert_close(out_ours, out_theirs, rtol=1e-5, atol=1e-5)
    (out_ours * weights).sum().backward()
    (out_theirs * weights).sum().backward()
    torch.testing.assert_close(xo.grad, xt.grad, rtol=1e-5, atol=1e-5)
    p = kernel_size // 2 + 1
    for i, layer in enumerate(ours.layers):
        peer = getattr(theirs.features.denseblock1, f"denselayer{i + 1}")
        pairs = [(layer.conv1.weight.grad, peer.conv1.weight.grad),
                 (layer.conv2.weight.grad, peer.layer2.mconv2.weight.grad[:, :, :p])]
        for a, b in ((layer.norm1, peer.bn1), (layer.norm2, peer.layer2.bn2)):
            pairs += [(a.weight.grad, b.weight.grad), (a.bias.grad, b.bias.grad),
                      (a.running_mean, b.running_mean), (a.running_var, b.running_var)]
        for a, b in pairs:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@needs_port
def test_the_fairseq_port_side_trains_and_decodes_from_the_clone():
    case = dict(TINY_PA, peer="attn2d-fairseq", dropout=0.0)
    side = peer_worker.build_side("attn2d-fairseq", case, PORT)
    first = side.train_step()
    assert first > 0 and side.train_step() < first
    assert side.decode() == case["sentences"] * case["target_length"]


# ---- agreement with thseq (opt-in) ----------------------------------------------------------------

THSEQ = os.environ.get("THSEQ_CLONE")
THSEQ_MISSING = (peers.clone_problem("thseq", THSEQ) if THSEQ else
                 "set THSEQ_CLONE to a clone of RAN to compare with the authors' code: "
                 + peers.clone_problem("thseq", None))
needs_thseq = pytest.mark.skipif(bool(THSEQ_MISSING), reason=str(THSEQ_MISSING))

# the RAN-ALL of the ran- cases at a tiny size; thseq pads its vocabulary to a multiple of 8
TINY_RAN = dict(peers.CASES["ran-cpu"], sentences=3, source_length=6, target_length=5, vocab=32,
                embed_dim=16, layers=2, ffn_dim=32, heads=2)


def thseq_names(name):
    """thseq's name of a parameter of the plugin's RAN-ALL as the authors' code (post-norm
    layers: self-attention, [cross-attention,] FFN, each followed by its layer norm)."""
    renames = [
        ("embed_tokens", "embedding"), ("decoder.output_projection", "decoder.logit"),
        ("encoder.self_attn_matrices.initial", "encoder.randatt"),
        ("encoder.self_attn_matrices.transition.fc1", "encoder.rnn.linear_i"),
        ("encoder.self_attn_matrices.transition.fc2", "encoder.rnn.linear_o"),
        ("decoder.self_attn_matrices.initial", "decoder.dec_randatt"),
        ("decoder.self_attn_matrices.transition.fc1", "decoder.dec_rnn.linear_i"),
        ("decoder.self_attn_matrices.transition.fc2", "decoder.dec_rnn.linear_o"),
        ("encoder_attn.q_proj", "encoder_decoder_attention.linear_q"),
        ("encoder_attn.k_proj", "encoder_decoder_attention.linear_k"),
        ("encoder_attn.v_proj", "encoder_decoder_attention.linear_v"),
        ("encoder_attn.out_proj", "encoder_decoder_attention.linear_o"),
        ("encoder_attn_layer_norm", "ln1"), ("self_attn_layer_norm", "ln0"),
        ("fc1", "ffn.linear_i"), ("fc2", "ffn.linear_o"),
        ("self_attn.v_proj", "ATTN.linear_v"), ("self_attn.out_proj", "ATTN.linear_o")]
    for ours, theirs in renames:
        name = name.replace(ours, theirs)
    if name.startswith("encoder."):
        return name.replace("ATTN", "self_attention").replace("final_layer_norm", "ln1")
    return name.replace("ATTN", "masked_self_attention").replace("final_layer_norm", "ln2")


def matched_ran_pair(case):
    """The plugin's RAN-ALL and thseq's with the plugin's weights (thseq's output bias, which the
    plugin has not, at zero)."""
    from ran_lab.bench.peer_thseq import ThseqSide

    ours, theirs = peer_worker.PluginSide(case), ThseqSide(case, THSEQ)
    target = dict(theirs.model.named_parameters(remove_duplicate=False))
    copied = set()
    with torch.no_grad():
        for name, weight in ours.model.named_parameters(remove_duplicate=False):
            target[thseq_names(name)].copy_(weight)
            copied.add(thseq_names(name))
        target["decoder.logit.bias"].zero_()
    assert set(target) - copied == {"decoder.logit.bias"}
    return ours, theirs


@needs_thseq
def test_thseq_side_trains_and_decodes_from_the_clone():
    """Its loss falls, and its greedy decoding (thseq's incremental decoder) gives the argmax of its
    teacher-forced pass over its own output at every position."""
    from ran_lab.bench.peer_thseq import ThseqSide

    case = dict(TINY_RAN, peer="thseq")
    side = ThseqSide(case, THSEQ)
    first = side.train_step()
    assert first > 0 and side.train_step() < first
    assert side.decode() == case["sentences"] * case["target_length"]
    side.model.eval()
    with torch.no_grad():
        tokens = side.greedy(side.batch, 5)
        prev = torch.cat([torch.full((3, 1), peer_worker.BOS), tokens[:, :-1]], dim=1)
        log_probs = side.log_probs(dict(side.batch, prev=prev))
        log_probs[:, :, peer_worker.PAD] = float("-inf")
    assert torch.equal(tokens, log_probs.argmax(-1))
    # a stand-in for a missing numba does not stay behind (a module of its own has a file)
    assert "numba" not in sys.modules or getattr(sys.modules["numba"], "__file__", None)


@needs_thseq
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_thseq_ran_all_equals_the_plugins_with_copied_weights(padded):
    """The plugin's 'RAN-ALL as the authors' code' and thseq's RAN-ALL map weight for weight (and
    thseq's output bias, zero): without dropout their log-probabilities of every target position
    agree to 1e-5, and so do the gradients of the loss for every weight, A_0 and the transition
    included; with padding, at the real target tokens (thseq gives padded positions positional
    embeddings, fairseq does not: only padding differs). Greedy decoding gives the same tokens."""
    case = dict(TINY_RAN, dropout=0.0, padded=padded)
    ours, theirs = matched_ran_pair(case)
    batch = ours.batch
    real = batch["tgt"].ne(peer_worker.PAD)
    assert bool((~real).any()) == padded
    ours.model.train()
    theirs.model.train()
    lp_ours, lp_theirs = ours.log_probs(batch), theirs.log_probs(batch)
    torch.testing.assert_close(lp_ours[real], lp_theirs[real][:, :case["vocab"]], rtol=1e-5,
                               atol=1e-5)
    peer_worker.nll(lp_ours, batch["tgt"]).backward()
    peer_worker.nll(lp_theirs, batch["tgt"]).backward()
    grads = dict(theirs.model.named_parameters(remove_duplicate=False))
    for name, weight in ours.model.named_parameters():
        torch.testing.assert_close(weight.grad, grads[thseq_names(name)].grad, rtol=1e-4,
                                   atol=1e-5, msg=name)
    ours.model.eval()
    theirs.model.eval()
    with torch.no_grad():
        assert torch.equal(ours.greedy(batch, 5), theirs.greedy(batch, 5))


@needs_thseq
def test_a_ran_case_runs_against_thseq_in_worker_processes(tmp_path):
    case = dict(TINY_RAN, padded=True)
    result = peers.run_case("tiny-ran", case, {"thseq": THSEQ}, reps=1, warmup=1, threads=1,
                            log=tmp_path / "workers.log", memory_steps=1)
    assert set(result["train"]["seconds"]) == {"plugin", "thseq"}
    assert result["info"]["thseq"]["flags"][-2:] == ["--ffn-dropout", "0"]
    assert result["memory"]["thseq"]["saved_mib"] > 0
