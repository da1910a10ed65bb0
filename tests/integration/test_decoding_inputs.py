"""Decoding input as it comes: every sentence of a test set translated (the opt-in keep_last_batch),
an empty line and unknown words translated, a sentence longer than the model takes named with the
flag that sets the limit (fairseq-generate, fairseq-interactive, the hub) and the next lines
translated, interactive's line numbers as the user counts them, a byte-order mark dropped, and a
truncated checkpoint named; for every architecture where it differs. The tiny synthetic corpus of
tests/helpers.py through fairseq's own commands."""
import re

import pytest

import helpers
from helpers import (
    SRC,
    TGT,
    USER_DIR,
    binarize,
    generate,
    make_synthetic_corpus,
    run_cli,
    train,
)
from systems import TINY_DYNMEM, TINY_PA, TINY_RAN, TINY_TRANSFORMER


N_TEST = 21  # not a multiple of fairseq's default --required-batch-size-multiple (8)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    raw = make_synthetic_corpus(root / "raw", n_test=N_TEST)
    return binarize(raw, root / "bin")


def test_generate_translates_every_sentence(data, tmp_path, monkeypatch):
    """fairseq 0.12 alone decodes 16 of these 21 sentences (the last batch of 5 is dropped); the
    opt-in keep_last_batch decodes all."""
    helpers.opt_in_fixes(monkeypatch, "keep_last_batch")
    train(data, tmp_path / "ckpt", "ran_transformer", TINY_RAN, max_update=2)
    out = generate(data, tmp_path / "ckpt" / "checkpoint_last.pt").stdout
    ids = sorted(int(m) for m in re.findall(r"^H-(\d+)\t", out, re.M))
    assert ids == list(range(N_TEST))


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


def test_interactive_numbers_a_too_long_line_as_the_user_counts(ran_checkpoint, data, tmp_path):
    """...and goes on with the next lines (fairseq's loop ended the session at the first)."""
    lines = ["w1 w2"] * 5 + [LONG, "w3 w4", LONG, "w5"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    for buffer in ("1", "4"):
        proc = run_cli("interactive", [data, "--user-dir", USER_DIR, "--path", ran_checkpoint,
                                       "-s", SRC, "-t", TGT, "--cpu", "--beam", "2", "--input",
                                       tmp_path / "in.txt", "--buffer-size", buffer,
                                       "--batch-size", buffer])
        log = proc.stdout + proc.stderr  # where fairseq-interactive's logging writes
        for line in (6, 8):
            assert re.search(rf"input line {line} \(id {line - 1} in the S-/H- lines\) is too "
                             rf"long: 41 source tokens .* left untranslated", log), log[-2000:]
        assert "sentence 0 is too long" not in log
        translated = sorted(int(line.split("\t")[0][2:]) for line in proc.stdout.splitlines()
                            if line.startswith("H-"))
        assert translated == [0, 1, 2, 3, 4, 6, 8], (buffer, translated)


def test_interactive_drops_a_leading_byte_order_mark(ran_checkpoint, data, tmp_path):
    """fairseq's buffered_read keeps a BOM at the start of the input; it would become <unk>."""
    outputs = []
    for text in ("w1 w2 w3\n", "\ufeffw1 w2 w3\n"):
        (tmp_path / "in.txt").write_text(text, encoding="utf-8")
        proc = run_cli("interactive", [data, "--user-dir", USER_DIR, "--path", ran_checkpoint,
                                       "-s", SRC, "-t", TGT, "--cpu", "--beam", "2", "--input",
                                       tmp_path / "in.txt"])
        outputs.append([line for line in proc.stdout.split("\n") if line[:2] in ("S-", "H-")])
    assert outputs[1] == outputs[0] and "<unk>" not in outputs[1][0], outputs


# ---- per architecture: an empty line, unknown words, a truncated checkpoint, too long ---------

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
def test_bad_input_per_architecture(data, tmp_path, arch):
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

    # Too long: an error naming the length and the flag, and the next lines translated; with
    # the documented --skip-invalid-size-inputs-valid-test (docs/pitfalls.md), skipped.
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
    if arch == "ran_transformer":  # the skipped line is logged naming the flag
        assert f"({length_flag})" in proc.stdout + proc.stderr
