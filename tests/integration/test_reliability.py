"""Reliability (issue 19): no sentence lost in decoding, checkpoints that survive a kill during a
save, multi-process training on CPUs, errors that name the flag to change.

The fairseq behaviours the plugin corrects live in ``ran_fairseq/compat.py``; these tests run the
real CLIs on the tiny synthetic corpus of tests/helpers.py.
"""
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers import (
    REPO,
    SRC,
    TGT,
    USER_DIR,
    binarize,
    fairseq_env,
    generate,
    make_synthetic_corpus,
    run_cli,
    train,
    train_args,
)
from systems import TINY_DYNMEM, TINY_RAN, TINY_TRANSFORMER

N_TEST = 21  # not a multiple of fairseq's default --required-batch-size-multiple (8)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    raw = make_synthetic_corpus(root / "raw", n_test=N_TEST)
    return binarize(raw, root / "bin")


# ---- item 3: every sentence is translated ----------------------------------------------------


@pytest.mark.parametrize("n, multiple, batch", [(21, 8, 8), (1014, 8, 128), (13, 8, 100),
                                                 (16, 8, 8), (5, 8, 8), (30, 1, 7)])
def test_batch_by_size_keeps_every_index_and_the_multiple(n, multiple, batch):
    import ran_fairseq  # noqa: F401  (applies compat.keep_last_batch)
    from fairseq.data import data_utils

    batches = data_utils.batch_by_size(np.arange(n), lambda i: 5, max_sentences=batch,
                                       required_batch_size_multiple=multiple)
    assert np.concatenate(batches).tolist() == list(range(n))
    assert all(len(b) <= batch and (len(b) < multiple or len(b) % multiple == 0)
               for b in batches)


def test_generate_translates_every_sentence(data, tmp_path):
    """fairseq 0.12 alone decodes 16 of these 21 sentences (the last batch of 5 is dropped)."""
    train(data, tmp_path / "ckpt", "ran_transformer", TINY_RAN, max_update=2)
    out = generate(data, tmp_path / "ckpt" / "checkpoint_last.pt").stdout
    ids = sorted(int(m) for m in re.findall(r"^H-(\d+)\t", out, re.M))
    assert ids == list(range(N_TEST))


# ---- item 7: two-process data parallel training on CPUs --------------------------------------

TINY_PA = ("--num-layers", "3", "--growth-rate", "4", "--kernel-size", "3",
           "--encoder-embed-dim", "8", "--decoder-embed-dim", "8")
DDP_SYSTEMS = {
    "ran_transformer": TINY_RAN,
    "recurrent_cross_transformer": TINY_TRANSFORMER,
    "rnnsearch_dynmem": TINY_DYNMEM,
    "pervasive_attention": TINY_PA,
}


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("arch", sorted(DDP_SYSTEMS))
def test_two_ranks_train_to_identical_parameters(data, tmp_path, arch):
    """torchrun with fairseq's defaults (--ddp-backend pytorch_ddp, no --distributed-world-size)
    on CPUs: both ranks join one group and hold the same parameters after a few updates."""
    import torch

    args = train_args(data, tmp_path / "ckpt", arch, DDP_SYSTEMS[arch], max_update=3)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(_free_port()), str(REPO / "tests" / "ddp_worker.py"),
           str(tmp_path), *map(str, args)]
    proc = subprocess.run(cmd, env=fairseq_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["updates"] for r in ranks] == [3, 3]
    states = [r["state"] for r in ranks]
    params = [name for name, _ in _named_parameters(arch, data)]
    assert params and set(params) <= set(states[0])
    for name in params:
        assert torch.equal(states[0][name], states[1][name]), name
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()
    if arch == "pervasive_attention":
        # Batch-norm running statistics are per rank (fairseq's --broadcast-buffers is off by
        # default); checkpoint_last.pt holds rank 0's (docs/distributed.md).
        stats = [k for k in states[0] if k.endswith("running_mean")]
        assert stats and any(not torch.equal(states[0][k], states[1][k]) for k in stats)


def _named_parameters(arch, data):
    from helpers import build_model

    _, model = build_model(arch, data, DDP_SYSTEMS[arch])
    return list(model.named_parameters())


# ---- item 4: every probability and size flag is checked when the model is built ---------------

TINY_RCT = TINY_TRANSFORMER
BAD_FLAGS = [
    # (arch, base flags, bad flag, bad value)
    *[("ran_transformer", TINY_RAN, flag, value) for flag, value in [
        ("--positional-attention-dropout", "1.5"), ("--positional-attention-dropout", "-0.1"),
        ("--dropout", "1.5"), ("--dropout", "-0.1"), ("--attention-dropout", "1.0"),
        ("--activation-dropout", "-0.5"), ("--encoder-layerdrop", "1.2"),
        ("--max-attention-positions", "0"), ("--gaussian-attention-std", "0"),
        ("--encoder-embed-dim", "15"), ("--decoder-attention-heads", "0"),
        ("--encoder-layers", "-1"), ("--max-source-positions", "0"),
        ("--quant-noise-pq", "1.5")]],
    # RAN option combinations that make no sense: the base flags hold the other half
    ("ran_transformer", (*TINY_RAN, "--ran-no-layernorm-residual"), "--ran-transition", "ffn"),
    ("ran_transformer", (*TINY_RAN, "--encoder-self-attention", "dot",
                         "--decoder-self-attention", "gaussian"), "--ran-transition", "ffn"),
    ("ran_transformer", (*TINY_RAN, "--decoder-self-attention", "dot"),
     "--ran-decoder-initial", "full"),
    *[("recurrent_cross_transformer", TINY_RCT, flag, value) for flag, value in [
        ("--dropout", "1.5"), ("--attention-dropout", "-0.1"), ("--activation-dropout", "2"),
        ("--decoder-ffn-embed-dim", "0"), ("--rescale-window", "-1"),
        ("--max-target-positions", "-5")]],
    *[("rnnsearch_dynmem", TINY_DYNMEM, flag, value) for flag, value in [
        ("--dropout", "1.5"), ("--dropout", "-0.1"), ("--dynamic-memory-window", "-1"),
        ("--dynamic-memory-dim", "0"), ("--init-range", "0"), ("--encoder-hidden-size", "0"),
        ("--decoder-layers", "0")]],
    *[("pervasive_attention", TINY_PA, flag, value) for flag, value in [
        ("--dropout", "1.5"), ("--embedding-dropout", "-0.1"), ("--output-dropout", "1"),
        ("--num-layers", "0"), ("--growth-rate", "-1"), ("--kernel-size", "0"),
        ("--max-source-positions", "0")]],
]


@pytest.mark.parametrize("arch, base, flag, value", BAD_FLAGS,
                         ids=[f"{a}{f}={v}" for a, _, f, v in BAD_FLAGS])
def test_out_of_range_flag_is_refused_at_build_time_naming_it(data, arch, base, flag, value):
    from helpers import build_model

    with pytest.raises(ValueError, match=re.escape(flag)):
        build_model(arch, data, (*base, flag, value))


def test_cli_refuses_out_of_range_dropout_before_training(data, tmp_path):
    """fairseq alone builds the model, crashes at the first update with torch's message (the
    flag unnamed), exits 134 and writes crash.pt."""
    proc = train(data, tmp_path / "ckpt", "rnnsearch_dynmem", (*TINY_DYNMEM, "--dropout", "1.5"),
                 check=False)
    assert proc.returncode != 0
    assert "--dropout must be in [0, 1), got 1.5" in proc.stderr + proc.stdout
    assert not list((tmp_path / "ckpt").glob("*.pt"))


# ---- item 5: a kill during a checkpoint save leaves a checkpoint to resume from ---------------


def test_kill_during_checkpoint_copy_leaves_checkpoint_last_intact(data, tmp_path):
    """Interval checkpoints make fairseq write checkpoint_1_N.pt and copy it to
    checkpoint_last.pt; fairseq alone leaves half a checkpoint_last.pt after this kill and the
    next run fails ("failed reading zip archive")."""
    save = tmp_path / "ckpt"
    extra = (*TINY_RAN, "--save-interval-updates", "2")
    train(data, save, "ran_transformer", extra, max_update=2)
    args = train_args(data, save, "ran_transformer", extra, max_update=4)
    killed = subprocess.run([sys.executable, str(REPO / "tests" / "kill_during_copy.py"),
                             *map(str, args)], env=fairseq_env(), capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert (save / "checkpoint_1_4.pt").exists()  # the save was under way
    resumed = train(data, save, "ran_transformer", extra, max_update=6)
    log = resumed.stdout + resumed.stderr
    assert re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", log), \
        log[-3000:]
    assert "num_updates=6" in log


# ---- item 6: a sentence longer than the model takes gets an error naming the flag -------------

LONG = " ".join(f"w{i % 24}" for i in range(40))  # TINY_RAN: --max-attention-positions 32


@pytest.fixture(scope="module")
def ran_checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("ran-ckpt")
    train(data, save, "ran_transformer", TINY_RAN, max_update=2)
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def long_test_set(tmp_path_factory):
    """The tiny corpus with one 40-word sentence in the middle of its 5-sentence test set."""
    root = tmp_path_factory.mktemp("long")
    raw = make_synthetic_corpus(root / "raw", n_test=4)
    for lang, prefix in ((SRC, "w"), (TGT, "v")):
        lines = (raw / f"test.{lang}").read_text().splitlines()
        lines.insert(2, LONG.replace("w", prefix))
        (raw / f"test.{lang}").write_text("\n".join(lines) + "\n")
    binarize(raw, root / "bin")
    return root


def test_generate_names_max_attention_positions(ran_checkpoint, long_test_set):
    proc = generate(long_test_set / "bin", ran_checkpoint, check=False)
    assert proc.returncode != 0
    assert re.search(r"sentence 2 is too long: 41 source tokens .* more than the 32 this model "
                     r"takes \(--max-attention-positions\)", proc.stderr), proc.stderr[-2000:]
    assert "--skip-invalid-size-inputs-valid-test" in proc.stderr
    assert "Size of sample" not in proc.stderr.splitlines()[-1]


def test_interactive_goes_on_after_a_too_long_line(ran_checkpoint, data, tmp_path):
    """With --skip-invalid-size-inputs-valid-test (docs/pitfalls.md) the long line is reported,
    naming the flag, and every other line is translated."""
    lines = ["w1 w2 w3", LONG, "w4 w5"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    args = [data, "--user-dir", USER_DIR, "--path", ran_checkpoint, "-s", SRC, "-t", TGT,
            "--cpu", "--beam", "2", "--input", tmp_path / "in.txt", "--buffer-size", "1",
            "--skip-invalid-size-inputs-valid-test"]
    proc = run_cli("interactive", args)
    assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", proc.stdout, re.M)) == [0, 2]
    assert "(--max-attention-positions)" in proc.stdout + proc.stderr  # fairseq's log


def test_hub_translate_names_max_attention_positions(ran_checkpoint, data):
    from fairseq.models.transformer import TransformerModel

    import ran_fairseq  # noqa: F401

    hub = TransformerModel.from_pretrained(str(ran_checkpoint.parent),
                                           checkpoint_file=ran_checkpoint.name,
                                           data_name_or_path=str(data), source_lang=SRC,
                                           target_lang=TGT, user_dir=USER_DIR)
    assert hub.translate("w1 w2 w3", beam=2)  # a short sentence translates
    with pytest.raises(ValueError, match=r"41 source tokens.*\(--max-attention-positions\)"):
        hub.translate(LONG, beam=2)


# ---- item 8: Pervasive Attention warns when nothing caps the training grid --------------------


@pytest.mark.parametrize("cap, warns", [((), True), (("--max-source-positions", "100",
                                                      "--max-target-positions", "100"), False)])
def test_pervasive_attention_warns_about_uncapped_training_lengths(data, caplog, cap, warns):
    from helpers import build_model

    _, model = build_model("pervasive_attention", data, (*TINY_PA, *cap))
    with caplog.at_level("WARNING"):
        model.eval()
        model.train()
        model.train()
    found = [r for r in caplog.records if "--max-source-positions" in r.getMessage()]
    assert len(found) == (1 if warns else 0)


# ---- bad input, per architecture: empty line, unknown words, too long, corrupt checkpoint ----

CAPPED = ("--max-source-positions", "32", "--max-target-positions", "32")
BAD_INPUT_SYSTEMS = {  # (model flags, the flag a too-long sentence must name)
    "ran_transformer": (TINY_RAN, "--max-attention-positions"),
    "recurrent_cross_transformer": ((*TINY_TRANSFORMER, *CAPPED), "--max-source-positions"),
    # an RNN has no length limit: --max-source-positions only filters its training data
    "rnnsearch_dynmem": ((*TINY_DYNMEM, *CAPPED), None),
    "pervasive_attention": ((*TINY_PA, *CAPPED), "--max-source-positions"),
}


def _interactive(data, checkpoint, lines, tmp_path, extra=()):
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    args = [data, "--user-dir", USER_DIR, "--path", checkpoint, "-s", SRC, "-t", TGT, "--cpu",
            "--beam", "2", "--max-len-b", "20", "--input", tmp_path / "in.txt", *extra]
    return run_cli("interactive", args, check=False)


@pytest.mark.parametrize("arch", sorted(BAD_INPUT_SYSTEMS))
def test_bad_input_table(data, tmp_path, arch):
    flags, length_flag = BAD_INPUT_SYSTEMS[arch]
    train(data, tmp_path / "ckpt", arch, flags, max_update=2)
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"

    # An empty line and unknown words are translated (<unk> in the source), each line once.
    proc = _interactive(data, checkpoint, ["w1 w2 w3", "", "zzz qqq w4", "w5"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hyps = re.findall(r"^H-(\d+)\t", proc.stdout, re.M)
    assert sorted(map(int, hyps)) == [0, 1, 2, 3]
    assert re.search(r"^S-2\t<unk> <unk> w4$", proc.stdout, re.M)

    # A truncated checkpoint: an error naming the file; the intact one beside it still loads.
    whole = checkpoint.read_bytes()
    broken = tmp_path / "ckpt" / "broken.pt"
    broken.write_bytes(whole[: len(whole) // 3])
    proc = generate(data, broken, check=False)
    assert proc.returncode != 0
    assert f"cannot read the checkpoint {broken}: it is truncated" in proc.stderr
    assert generate(data, checkpoint).returncode == 0

    # Too long: an error naming the length and the flag, and the next lines translated;
    # skipped without a word with the documented flag.
    proc = _interactive(data, checkpoint, ["w1 w2", LONG, "w3"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if length_flag is None:
        assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", proc.stdout, re.M)) == [0, 1, 2]
        return
    log = proc.stdout + proc.stderr  # fairseq-interactive logs where its logging is set up
    assert re.search(rf"41 source tokens .*\({length_flag}\)", log), log[-2000:]
    assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", proc.stdout, re.M)) == [0, 2]
    proc = _interactive(data, checkpoint, ["w1 w2", LONG, "w3"], tmp_path,
                        ["--skip-invalid-size-inputs-valid-test", "--buffer-size", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", proc.stdout, re.M)) == [0, 2]
