"""The peer benchmark's own logic (ran_lab/bench/peers.py, peer_worker.py), in this process with a
stand-in peer: the rounds alternate who goes first, the ratios and spreads are those of the times,
the batch is the same for both sides and padded as asked, a case runs end to end into its report,
the RAN cases are the recipe's RAN-ALL at its sizes, a clone's commit is its own git tree's, and a
missing clone of the authors' code is one line that says how to get it. The worker processes
and the agreement with the authors' code: tests/system/test_bench_peers_workers.py."""
import json
import subprocess

import pytest
import torch

from ran_lab.bench import peer_worker, peers
from ran_lab.common.paths import REPO

TINY_PA = {"arch": "pervasive_attention", "peer": "stub", "sentences": 3, "source_length": 6,
           "target_length": 5, "vocab": 30, "seed": 1, "embed_dim": 8, "layers": 2,
           "growth_rate": 4, "kernel_size": 3}
TINY_RAN = dict(peers.CASES["ran-cpu"], peer="stub", sentences=3, source_length=6,
                target_length=5, vocab=32, embed_dim=16, layers=2, ffn_dim=32, heads=2)


class FakeRunner:
    """A side whose n-th call takes ``times[n]`` seconds; records the order of the calls."""

    def __init__(self, name, times, log):
        self.name, self.times, self.log = name, list(times), log

    def call(self, cmd, **unused):
        self.log.append((self.name, cmd))
        return {"seconds": self.times.pop(0)}


def test_rounds_alternate_who_goes_first_after_the_warmup():
    log = []
    a = FakeRunner("plugin", [9, 9, 1, 2, 3, 4], log)
    b = FakeRunner("attn2d", [9, 9, 2, 2, 6, 8], log)
    times = peers.interleaved([a, b], "train", reps=4, warmup=2)
    assert log[:4] == [("plugin", "train")] * 2 + [("attn2d", "train")] * 2
    assert [name for name, _ in log[4:]] == ["plugin", "attn2d", "attn2d", "plugin"] * 2
    assert times == {"plugin": [1, 2, 3, 4], "attn2d": [2, 2, 6, 8]}
    result = peers.compare(times)
    assert result["ratio_of_medians"] == pytest.approx(2.5 / 4)
    assert result["round_ratios"]["min"] == pytest.approx(0.5)
    assert result["round_ratios"]["max"] == pytest.approx(1.0)
    assert result["sides"]["plugin"]["median"] == 2.5
    assert result["sides"]["attn2d"]["relative_iqr"] == pytest.approx((6.5 - 2) / 4)


def test_summary_of_one_value():
    s = peers.summary([0.5])
    assert (s["median"], s["min"], s["max"], s["relative_iqr"]) == (0.5, 0.5, 0.5, 0)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_the_batch_is_seeded_and_padded_as_asked(padded):
    case = dict(TINY_PA, sentences=8, source_length=10, target_length=9, padded=padded)
    a, b = peer_worker.make_batch(case), peer_worker.make_batch(case)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    src, tgt, prev = a["src"], a["tgt"], a["prev"]
    assert src.shape == (8, 10) and tgt.shape == (8, 9)
    assert torch.equal(src.ne(peer_worker.PAD).sum(1), a["src_lengths"])
    assert torch.equal(tgt.ne(peer_worker.PAD).sum(1), a["tgt_lengths"])
    assert (prev[:, 0] == peer_worker.BOS).all()
    assert torch.equal(prev[:, 1:].ne(peer_worker.PAD), tgt[:, 1:].ne(peer_worker.PAD))
    assert bool(src.eq(peer_worker.PAD).any()) == padded
    assert bool(tgt.eq(peer_worker.PAD).any()) == padded
    if padded:  # the grid is as long as its longest sentences, each at least half of it
        assert a["src_lengths"].max() == 10 and a["src_lengths"].min() >= 5


def test_a_case_runs_end_to_end_with_a_stand_in_peer():
    result = peers.run_case("tiny", dict(TINY_PA, padded=True), {}, reps=2, warmup=1, threads=1,
                            runner_class=peers.InProcessRunner, memory_steps=1)
    for phase in ("train", "decode"):
        times = result[phase]["seconds"]
        assert set(times) == {"plugin", "stub"} and all(len(v) == 2 for v in times.values())
        assert result[phase]["ratio_of_medians"] > 0
    assert result["info"]["plugin"]["parameters"] > 0 and result["info"]["stub"]["stub"]
    assert "--share-decoder-input-output-embed" in result["info"]["plugin"]["flags"]
    for side in ("plugin", "stub"):
        assert result["memory"][side]["saved_mib"] > 0
    machine = {"cpu": "a CPU", "cores": 2, "threads": 1, "torch": torch.__version__,
               "load_before": 0.1, "load_after": 0.2, "date": "today", "commit": "abc",
               "reps": 2, "warmup": 1, "memory_steps": 1, "peers": {}}
    table = peers.report({"tiny": result}, machine)
    row = next(line for line in table.splitlines() if line.startswith("| tiny "))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:2] == ["tiny", "stub"]
    assert row.count("×") == 4  # training, decoding, memory and saved-tensor ratios
    assert cells[-1] == (f"{result['memory']['plugin']['kernels']:,} / "
                         f"{result['memory']['stub']['kernels']:,}")
    assert "load average 0.1 before, 0.2 after" in table


def test_a_ran_case_runs_end_to_end_with_a_stand_in_peer():
    result = peers.run_case("tiny-ran", dict(TINY_RAN, padded=True), {}, reps=2, warmup=1,
                            threads=1, runner_class=peers.InProcessRunner, memory_steps=1)
    assert all(len(v) == 2 for v in result["decode"]["seconds"].values())
    flags = result["info"]["plugin"]["flags"]
    assert flags[:2] == ["--arch", "ran_transformer"] and "--share-all-embeddings" in flags


def _system_flags(name):
    systems = json.loads((REPO / "configs/ran/systems.json").read_text())["systems"]
    return next(s["flags"] for s in systems if s["name"] == name)


def test_the_ran_cases_are_the_recipes_ran_all_at_its_sizes():
    """The plugin's side of a ran- case is a system of configs/ran/systems.json ('RAN-ALL as the
    authors' code' without attention dropout, as the authors' command; or the plugin's RAN-ALL) at
    the sizes of ran_transformer_small (ran-cpu) or ran_transformer (ran-paper); every case has
    a padded twin and a peer with a clone spec."""
    from fairseq import options
    from fairseq.models import MODEL_REGISTRY

    from ran_lab import plugin

    plugin.load()
    as_authors = _system_flags("RAN-ALL as the authors' code")
    assert peers.AS_THE_AUTHORS_CODE == as_authors
    for name in ("ran-cpu", "ran-paper"):
        assert peers.CASES[name]["plugin_flags"] == as_authors + [
            "--positional-attention-dropout", "0"]
    assert peers.CASES["ran-cpu-paper"]["plugin_flags"] == _system_flags("RAN-ALL") == []
    for name, arch in (("ran-cpu", "ran_transformer_small"), ("ran-paper", "ran_transformer")):
        case = peers.CASES[name]
        args = options.parse_args_and_arch(options.get_training_parser(),
                                           ["unused-data", "--task", "translation", "--arch", arch])
        args = MODEL_REGISTRY["ran_transformer"].resolve_args(args)  # as the model builds
        for side in ("encoder", "decoder"):
            assert (getattr(args, f"{side}_layers"), getattr(args, f"{side}_embed_dim"),
                    getattr(args, f"{side}_ffn_embed_dim"),
                    getattr(args, f"{side}_attention_heads")) == (
                case["layers"], case["embed_dim"], case["ffn_dim"], case["heads"]), name
        assert (case["sentences"], case["source_length"], case["target_length"]) == (32, 25, 25)
    for name, case in peers.CASES.items():
        assert case["peer"] in peers.PEERS, name
        if not name.endswith("-padded"):
            assert peers.CASES[name + "-padded"] == dict(case, padded=True)


def test_the_plugin_builds_ran_all_with_the_authors_choices_from_a_ran_case():
    model = peer_worker.PluginSide(dict(TINY_RAN)).model
    assert model.encoder.embed_tokens is model.decoder.embed_tokens  # --share-all-embeddings
    for side in (model.encoder, model.decoder):
        matrices = side.self_attn_matrices
        assert type(matrices).__name__ == "RecurrentAttentionMatrices"
        assert matrices.ran_transition == "ffn" and matrices.ran_initial_init == "xavier"
        assert matrices.transition.fc1.out_features == 1024 and matrices.max_positions == 256
        assert side.layers[0].self_attn.dropout == 0
    assert model.decoder.self_attn_matrices.ran_decoder_initial == "full"


def test_the_commit_of_a_clone_is_that_of_its_own_git_tree(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path / "repo"), *args], check=True,
                       capture_output=True)

    (tmp_path / "repo" / "sub").mkdir(parents=True)
    (tmp_path / "repo" / "sub" / "f").write_text("x")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = subprocess.run(["git", "-C", str(tmp_path / "repo"), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    assert peers.clone_commit(tmp_path / "repo") == head
    assert peers.clone_commit(tmp_path / "repo" / "sub") is None  # inside another repository
    (tmp_path / "copy").mkdir()
    assert peers.clone_commit(tmp_path / "copy") is None
    machine = {"cpu": "a CPU", "cores": 2, "threads": 1, "torch": "t", "load_before": 0,
               "load_after": 0, "date": "today", "commit": "abc", "reps": 1, "warmup": 1,
               "memory_steps": 1, "peers": {"thseq": None}}
    table = peers.report({}, machine)
    assert (f"thseq: {peers.PEERS['thseq']['url']} from a copy outside git (the pinned commit is "
            f"{peers.PEERS['thseq']['commit']}; the copy's is not checked)") in table


@pytest.mark.parametrize("case", [TINY_PA, TINY_RAN], ids=["pervasive", "ran"])
def test_plugin_decoding_is_greedy_with_its_incremental_state(case):
    """The plugin's greedy loop gives the argmax of a full teacher-forced forward pass over its
    own output at every position."""
    side = peer_worker.PluginSide(dict(case))
    side.model.eval()
    batch = side.batch
    with torch.no_grad():
        tokens = side.greedy(batch, 5)
        prev = torch.cat([torch.full((3, 1), 2), tokens[:, :-1]], dim=1)
        logits, _ = side.model(batch["src"], batch["src_lengths"], prev)
        logits[:, :, peer_worker.PAD] = float("-inf")
    assert torch.equal(tokens, logits.argmax(-1))


def test_a_missing_clone_is_one_line_that_says_how_to_get_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--out", str(tmp_path / "out")])
    message = str(exit_.value)
    assert "\n" not in message and message.startswith("bench-peers: error:")
    for spec in peers.PEERS.values():
        assert f"git clone {spec['url']}" in message and spec["commit"] in message
    with pytest.raises(SystemExit) as exit_:  # a clone at another commit (no paper code there)
        peers.main(["--attn2d", str(tmp_path), "--out", str(tmp_path / "out")])
    message = str(exit_.value)
    assert "\n" not in message and "nmt/models/densenet.py" in message
    assert f"git -C {tmp_path} checkout {peers.PEERS['attn2d']['commit']}" in message
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--thseq", str(tmp_path), "--cases", "ran-cpu", "--out", str(tmp_path / "out")])
    message = str(exit_.value)
    assert "\n" not in message and "code_RAN/thseq/models/transformer/model.py" in message
    assert f"git -C {tmp_path} checkout {peers.PEERS['thseq']['commit']}" in message
    with pytest.raises(SystemExit) as exit_:  # a ran- case without its clone
        peers.main(["--attn2d", str(tmp_path), "--cases", "ran-cpu", "--out", str(tmp_path)])
    assert "thseq: no clone of Zeng et al. 2021" in str(exit_.value)
    with pytest.raises(SystemExit, match="unknown case"):
        peers.main(["--attn2d", str(tmp_path), "--cases", "nope", "--out", str(tmp_path)])
    assert not (tmp_path / "out").exists()


# ---- attn2d's fairseq port, from a hand-made stand-in of its two files ---------------------------

STAND_IN_DENSENET = '''
import torch
import torch.nn as nn

from fairseq.modules import MaskedConvolution


class DenseNet(nn.Module):
    """The archive DenseNet's interface: one batch-normalized masked convolution, concatenated."""

    def __init__(self, num_init_features, args):
        super().__init__()
        k = args.kernel_size
        mask = torch.ones(args.growth_rate, num_init_features, k, k)
        mask[:, :, k // 2 + 1:] = 0
        self.norm = nn.BatchNorm2d(num_init_features)
        self.conv = MaskedConvolution(mask, num_init_features, args.growth_rate, k,
                                      (k - 1) // 2, bias=False)
        self.output_channels = num_init_features + args.growth_rate

    def forward(self, x):
        return torch.cat([x, self.conv(torch.relu(self.norm(x)))], 1)
'''

STAND_IN_AGGREGATORS = '''
import torch.nn as nn

from . import register_aggregator


@register_aggregator("max")
class MAX(nn.Module):
    def __init__(self, args, num_features):
        super().__init__()

    def forward(self, x, need_attention_weights=False):
        return x.max(dim=2)[0], None
'''


@pytest.fixture
def port_stand_in(tmp_path):
    """A folder with the two files of attn2d's port that the benchmark reads, hand-made."""
    from ran_lab.bench import peer_attn2d_fairseq

    for path, text in ((peer_attn2d_fairseq.DENSENET, STAND_IN_DENSENET),
                       (peer_attn2d_fairseq.AGGREGATORS, STAND_IN_AGGREGATORS)):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


def test_the_fairseq_port_cases_are_the_pa_cases_without_dropout():
    for size in ("cpu", "d128", "paper"):
        for suffix in ("", "-padded"):
            case = peers.CASES[f"pa-fairseq-{size}{suffix}"]
            assert case["peer"] == "attn2d-fairseq" and case["dropout"] == 0.0
            same = {k: v for k, v in peers.CASES[f"pa-{size}{suffix}"].items()
                    if k not in ("peer", "dropout")}
            assert {k: case[k] for k in same} == same
            flags = peer_worker.plugin_flags(case)
            for flag in ("--dropout", "--embedding-dropout", "--output-dropout"):
                assert flags[flags.index(flag) + 1] == "0.0"
    assert peer_worker.plugin_flags(peers.CASES["pa-d128"])[
        peer_worker.plugin_flags(peers.CASES["pa-d128"]).index("--dropout") + 1] == "0.2"


def test_the_fairseq_port_side_runs_from_its_two_files(port_stand_in):
    """The port's files load through the adapter (its masked convolution stands in for the
    fork's ``fairseq.modules.MaskedConvolution`` during the import only), and the side trains and
    decodes in a case end to end."""
    import fairseq.modules

    from ran_lab.bench import peer_attn2d_fairseq

    case = dict(TINY_PA, peer="attn2d-fairseq", dropout=0.0)
    side = peer_worker.build_side("attn2d-fairseq", case, str(port_stand_in))
    conv = side.model.net.conv
    assert isinstance(conv, peer_attn2d_fairseq.MaskedConvolution)
    assert not hasattr(fairseq.modules, "MaskedConvolution")
    first = side.train_step()
    assert first > 0 and side.train_step() < first
    with torch.no_grad():  # the optimizer moved the future row; a forward pass zeroes it again
        side.log_probs(side.batch)
    assert torch.all(conv.weight[:, :, 2:] == 0) and conv.weight[:, :, :2].abs().sum() > 0
    assert side.decode() == case["sentences"] * case["target_length"]
    result = peers.run_case("tiny", case, {"attn2d-fairseq": str(port_stand_in)}, reps=1,
                            warmup=1, threads=1, runner_class=peers.InProcessRunner,
                            memory_steps=1)
    assert set(result["train"]["seconds"]) == {"plugin", "attn2d-fairseq"}
    assert result["info"]["attn2d-fairseq"]["densenet"]["divide_channels"] == 1


def test_the_fairseq_port_clone_is_asked_for_by_its_own_option(tmp_path, port_stand_in):
    with pytest.raises(SystemExit) as exit_:
        peers.main(["--attn2d", str(tmp_path), "--cases", "pa-fairseq-cpu", "--out",
                    str(tmp_path / "out")])
    message = str(exit_.value)
    assert "attn2d-fairseq: no clone" in message and peers.PEERS["attn2d-fairseq"]["commit"] in message
    args = peers.parser().parse_args(["--attn2d-fairseq", str(port_stand_in), "--out", "x"])
    names, clones = peers.selected_cases(args)
    assert names == [n for n in peers.CASES if n.startswith("pa-fairseq-")]
    assert clones == {"attn2d-fairseq": str(port_stand_in)}
