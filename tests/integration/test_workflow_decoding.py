"""fairseq's decoding and training workflows that work with every architecture, kept so: generate's
``--nbest``, ``--prefix-size``, ``--match-source-len``, ``--sampling`` and ``--score-reference``,
``fairseq-validate``, training with ``--patience``, ``--keep-last-epochs`` and
``--reset-optimizer``, and the checkpoint-averaging commands of docs/averaging.md as written.

One tiny model per architecture is trained once for the file (interval checkpoints kept for the
averaging). The CLIs run through tests/helpers.run_cli (forked from a process that has imported
fairseq); the reference scores are computed in this process from the checkpoint.
(``fairseq-interactive --buffer-size`` > 1 is checked for every architecture in
tests/integration/test_hub.py.)
"""
import math
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import helpers
from systems import TINY_DYNMEM, TINY_PA, TINY_RAN, TINY_TRANSFORMER

ARCHS = {
    "ran_transformer": TINY_RAN,
    "recurrent_cross_transformer": (*TINY_TRANSFORMER, "--cross-attention", "coverage"),
    "rnnsearch_dynmem": TINY_DYNMEM,
    "pervasive_attention": TINY_PA,
}
PARAMS = pytest.mark.parametrize("arch", list(ARCHS))
BATCH_NORM_STATISTICS = {"running_mean", "running_var", "num_batches_tracked"}


AVERAGING = helpers.REPO / "docs" / "averaging.md"


def averaging_block():
    """The command block of docs/averaging.md: its command lines (continuations joined), the
    number of checkpoints it averages and the folder it reads, checked against its training
    line's flags."""
    found = [code for _, tag, code, _ in helpers.blocks(AVERAGING)
             if tag == "bash" and "ran_fairseq.checkpoint_average" in code]
    assert len(found) == 1, "docs/averaging.md shows checkpoint averaging in one command block"
    lines = [line for line in found[0].replace("\\\n", " ").splitlines() if line.strip()]
    average = next(line for line in lines if "ran_fairseq.checkpoint_average" in line)
    last = re.search(r"--last (\d+) (\S+)", average)
    assert last, f"the averaging command names no --last N DIR: {average}"
    n, folder = int(last.group(1)), last.group(2)
    train = next(line for line in lines if line.startswith("fairseq-train "))
    kept = re.search(r"--keep-interval-updates (\d+)", train)
    assert "--save-interval-updates" in train and kept and int(kept.group(1)) >= n, train
    assert f"--save-dir {folder}" in train, train
    return lines, n, folder


@pytest.fixture(scope="module")
def trained(synthetic_databin, tmp_path_factory):
    """Per architecture: a save dir trained for N + 1 updates, a checkpoint saved after each
    update and the newest N kept (N: docs/averaging.md's ``--last N``)."""
    _, n, _ = averaging_block()
    root = tmp_path_factory.mktemp("workflow")
    for arch, flags in ARCHS.items():
        helpers.train(synthetic_databin, root / arch, arch,
                      (*flags, "--save-interval-updates", "1", "--keep-interval-updates", str(n)),
                      max_update=n + 1)
    return root


def generate(data, checkpoint, *extra):
    return helpers.generate(data, checkpoint, list(extra)).stdout


def lines(out, kind):
    """``{id: [fields after the id, one list per line]}`` of the ``kind-`` lines (S, T, H, P)."""
    found = {}
    for line in out.splitlines():
        m = re.match(rf"^{kind}-(\d+)\t(.*)$", line)
        if m:
            found.setdefault(int(m.group(1)), []).append(m.group(2).split("\t"))
    return found


def n_test(data):
    return len((data.parent / "raw" / "test.de").read_text().splitlines())


@PARAMS
def test_nbest_gives_n_distinct_hypotheses_per_sentence(arch, trained, synthetic_databin):
    out = generate(synthetic_databin, trained / arch / "checkpoint_last.pt", "--beam", "4",
                   "--nbest", "3")
    hyps, positional = lines(out, "H"), lines(out, "P")
    assert len(hyps) == n_test(synthetic_databin)
    for i, found in hyps.items():
        assert len(found) == 3, f"sentence {i}: {len(found)} hypotheses"
        # three sequences (an untrained model also emits <s>, which the H- text leaves out)
        assert len({(tokens, scores[0]) for (_, tokens), scores in zip(found, positional[i])}) \
            == 3, f"sentence {i}: repeated hypotheses"
        scores = [float(score) for score, _ in found]
        assert scores == sorted(scores, reverse=True), f"sentence {i}: not best first: {scores}"


@PARAMS
def test_prefix_size_keeps_the_reference_prefix(arch, trained, synthetic_databin):
    out = generate(synthetic_databin, trained / arch / "checkpoint_last.pt", "--prefix-size", "2",
                   "--nbest", "2")
    targets, hyps = lines(out, "T"), lines(out, "H")
    assert len(hyps) == n_test(synthetic_databin)
    for i, found in hyps.items():
        prefix = targets[i][0][0].split()[:2]
        for _, tokens in found:
            assert tokens.split()[:2] == prefix, f"sentence {i}: {tokens!r} vs prefix {prefix}"


@PARAMS
def test_match_source_len_gives_hypotheses_of_the_source_length(arch, trained, synthetic_databin):
    """fairseq counts the source's </s>: a hypothesis has as many tokens before its own </s> as
    the source has with its </s>, one more than the source's words (its P- line, which scores
    every token and the </s>, has the source's word count + 2 entries)."""
    out = generate(synthetic_databin, trained / arch / "checkpoint_last.pt", "--match-source-len")
    sources, positional = lines(out, "S"), lines(out, "P")
    assert len(positional) == n_test(synthetic_databin)
    lengths = {len(src[0][0].split()) for src in sources.values()}
    assert len(lengths) > 3  # sources of many lengths
    for i, found in positional.items():
        assert len(found[0][0].split()) == len(sources[i][0][0].split()) + 2, f"sentence {i}"


@PARAMS
def test_sampling_follows_the_seed(arch, trained, synthetic_databin):
    path = trained / arch / "checkpoint_last.pt"

    def sample(seed):
        out = generate(synthetic_databin, path, "--sampling", "--beam", "1", "--seed", str(seed))
        hyps = lines(out, "H")
        assert len(hyps) == n_test(synthetic_databin)
        return {i: found[0] for i, found in hyps.items()}

    first = sample(1)
    assert sample(1) == first, "two samplings with one seed differ"
    other = sample(2)
    assert sum(other[i][1] != first[i][1] for i in first) >= len(first) // 2, \
        "samplings with two seeds give mostly the same hypotheses"


@pytest.fixture(scope="module")
def reference_scores(trained, synthetic_databin):
    """Per architecture, ``{id: log2-probabilities of the test target's tokens and </s>}``, each
    sentence scored alone by the checkpoint's model in this process (teacher forcing)."""
    from fairseq import checkpoint_utils

    import ran_fairseq  # noqa: F401  (the models and the checkpoint allow-list, as --user-dir)

    scores = {}
    for arch in ARCHS:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(trained / arch / "checkpoint_last.pt")],
            arg_overrides={"data": str(synthetic_databin)})
        model = models[0].eval()
        task.load_dataset("test")
        data, eos = task.dataset("test"), task.target_dictionary.eos()
        scores[arch] = {}
        with torch.no_grad():
            for i in range(len(data)):
                src, tgt = data[i]["source"].unsqueeze(0), data[i]["target"].unsqueeze(0)
                prev = torch.cat([torch.tensor([[eos]]), tgt[:, :-1]], 1)
                out = model(src, torch.tensor([src.size(1)]), prev)
                lprobs = model.get_normalized_probs(out, log_probs=True)
                token = lprobs[0].gather(-1, tgt[0].unsqueeze(-1)).squeeze(-1)
                scores[arch][i] = (token / math.log(2)).tolist()
    return scores


@PARAMS
def test_score_reference_gives_the_models_log_probabilities(arch, trained, synthetic_databin,
                                                            reference_scores):
    out = generate(synthetic_databin, trained / arch / "checkpoint_last.pt", "--score-reference")
    targets, hyps, positional = lines(out, "T"), lines(out, "H"), lines(out, "P")
    expected = reference_scores[arch]
    assert len(positional) == len(expected) == n_test(synthetic_databin)
    for i, want in expected.items():
        assert hyps[i][0][1] == targets[i][0][0], f"sentence {i}: scored another target"
        got = [float(x) for x in positional[i][0][0].split()]
        assert len(got) == len(want), f"sentence {i}"
        assert max(abs(g - w) for g, w in zip(got, want)) < 2e-4, f"sentence {i}: {got} {want}"
        assert float(hyps[i][0][0]) == pytest.approx(sum(want) / len(want), abs=2e-4)


@PARAMS
def test_validate_gives_the_models_loss(arch, trained, synthetic_databin, reference_scores):
    proc = helpers.run_cli("validate", [
        synthetic_databin, "--user-dir", helpers.USER_DIR, "--path",
        trained / arch / "checkpoint_last.pt", "--task", "translation", "--source-lang",
        helpers.SRC, "--target-lang", helpers.TGT, "--valid-subset", "test", "--cpu",
        "--num-workers", "0", "--max-tokens", "400"])
    log = proc.stdout + proc.stderr
    found = re.search(r"valid on 'test' subset \| .*\bnll_loss ([-0-9.]+)", log)
    assert found, log[-2000:]
    tokens = [x for sentence in reference_scores[arch].values() for x in sentence]
    assert float(found.group(1)) == pytest.approx(-sum(tokens) / len(tokens), abs=2e-3)


def parameters(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


@PARAMS
def test_averaging_commands_as_written(arch, trained, synthetic_databin, tmp_path):
    """docs/averaging.md's block on this architecture's checkpoints (copied to the folder it names,
    in place of its training line): the average is the mean of the N newest checkpoints, and
    fairseq-generate translates with it. ``$DATA`` and ``$GEN`` are the test corpus and the
    tests' generate flags."""
    commands, n, folder = averaging_block()
    save = tmp_path / folder
    shutil.copytree(trained / arch, save)
    newest = sorted(save.glob("checkpoint_*_*.pt"),
                    key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    assert len(newest) == n
    env = dict(helpers.fairseq_env(), DATA=str(synthetic_databin), GEN=" ".join([
        "--user-dir", helpers.USER_DIR, "-s", helpers.SRC, "-t", helpers.TGT,
        "--gen-subset", "test", "--beam", "3", "--batch-size", "8", "--cpu",
        "--max-len-b", "20", "--num-workers", "0"]))
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(helpers.REPO), env.get("PYTHONPATH")]))
    outputs = []
    for command in commands:
        if command.startswith("fairseq-train "):
            continue  # the fixture trained
        if command.startswith("fairseq-generate "):
            # through the fork server, with the arguments as bash expands them
            args, _, target = command[len("fairseq-generate "):].partition(" > ")
            expand = subprocess.run(["bash", "-c", f"printf '%s\\0' {args}"], env=env,
                                    capture_output=True, text=True, check=True)
            proc = helpers.run_cli("generate", expand.stdout.split("\0")[:-1], cwd=tmp_path)
            (tmp_path / target.strip()).write_text(proc.stdout)
            outputs.append(proc.stdout)
        else:
            proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
    average = re.search(r"--output (\S+)",
                        next(c for c in commands if "checkpoint_average" in c)).group(1)
    averaged = parameters(tmp_path / average)
    inputs = [parameters(p) for p in newest]
    floats = [name for name, value in averaged.items() if value.is_floating_point()]
    for name in floats:
        mean = sum(p[name].double() for p in inputs) / n
        assert torch.allclose(averaged[name].double(), mean, atol=1e-6), name
    # the checkpoints differ, so the mean is not any one of them
    assert sum(not torch.equal(inputs[0][k], inputs[-1][k]) for k in floats) > len(floats) // 2
    assert outputs, "docs/averaging.md's block translates with the average"
    assert len(lines(outputs[-1], "H")) == n_test(synthetic_databin)


def train_log(data, save, arch, *extra, max_update=1000):
    """fairseq-train with validation and epoch checkpoints (the helpers' flags turn both off)."""
    args = helpers.train_args(data, save, arch, (*ARCHS[arch], *extra), max_update)
    for flag in ("--disable-validation", "--no-epoch-checkpoints"):
        args.remove(flag)
    proc = helpers.run_cli("train", args)
    return proc.stdout + proc.stderr


@PARAMS
def test_patience_stops_and_keep_last_epochs_keeps(arch, synthetic_databin, tmp_path):
    """Judged by a metric that never improves (the validation's words per batch, the same every
    epoch), --patience 2 stops training after the third epoch of ten; --keep-last-epochs 2 leaves
    the last two epochs' checkpoints."""
    log = train_log(synthetic_databin, tmp_path, arch, "--max-epoch", "10", "--max-tokens", "2000",
                    "--best-checkpoint-metric", "wpb", "--patience", "2",
                    "--keep-last-epochs", "2")
    assert "early stop since valid performance hasn't improved for last 2 runs" in log
    assert re.search(r"end of epoch 3 ", log) and not re.search(r"end of epoch 4 ", log), \
        log[-2000:]
    epochs = sorted(p.name for p in tmp_path.glob("checkpoint[0-9]*.pt"))
    assert epochs == ["checkpoint2.pt", "checkpoint3.pt"]


@PARAMS
def test_reset_optimizer_trains_on_from_the_weights(arch, trained, synthetic_databin, tmp_path):
    """A checkpoint trained with Adam goes on with SGD under --reset-optimizer: the update count
    starts again and the weights are the checkpoint's (learning rate 0 keeps them); without the
    flag fairseq refuses the other optimizer."""
    start = trained / arch / "checkpoint_last.pt"
    flags = ("--restore-file", start, "--optimizer", "sgd", "--lr", "0")
    refused = helpers.run_cli("train", helpers.train_args(
        synthetic_databin, tmp_path / "refused", arch, (*ARCHS[arch], *flags), 1), check=False)
    assert refused.returncode != 0
    assert "Optimizer does not match" in refused.stdout + refused.stderr
    helpers.train(synthetic_databin, tmp_path / "reset", arch,
                  (*ARCHS[arch], *flags, "--reset-optimizer"), max_update=1)
    state = torch.load(tmp_path / "reset" / "checkpoint_last.pt", map_location="cpu",
                       weights_only=False)
    assert state["optimizer_history"][-1]["optimizer_name"] == "SGD"
    assert state["optimizer_history"][-1]["num_updates"] == 1
    before = parameters(start)
    assert state["model"].keys() == before.keys()
    changed = [k for k in before if not torch.equal(state["model"][k], before[k])]
    # batch normalization's running statistics (Pervasive Attention's DenseNet) move in training
    assert all(k.rsplit(".", 1)[1] in BATCH_NORM_STATISTICS for k in changed), changed
