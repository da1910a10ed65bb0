"""A fault ends a command with one line: every ``ran-*`` command and its ``python -m`` form, given a
read-only folder, a full disk or a damaged input, ends with one line naming the file, what is
wrong and what to do, a non-zero exit status and no traceback; the inputs that were once accepted
silently (an empty corpus, one file for both sides) are refused. A read-only folder and a full
disk are a tmpfs in a private mount namespace (``unshare -m``, as root), or, without one, a folder
without write permission. A checkpoint that asks to run code, or is cut short:
tests/integration/test_checkpoint_loading.py and tests/integration/test_engine_store.py."""
import gzip
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import helpers
from helpers import REPO, SRC, TGT

BIN = Path(sys.executable).parent
CONFIG = REPO / "configs" / "ran" / "cpu.json"


def _can_unshare():
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


UNSHARE = _can_unshare()


def in_mount(folder, command, size="16m", readonly=False, env=None):
    """Run ``command`` (a list) with ``folder`` a fresh tmpfs of ``size`` (read-only after
    creating ``folder``/sub), in a private mount namespace: nothing outside the test sees it."""
    steps = [f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(folder))}",
             f"mkdir -p {shlex.quote(str(folder / 'sub'))}"]
    if readonly:
        steps.append(f"mount -o remount,ro {shlex.quote(str(folder))}")
    steps.append(shlex.join([str(c) for c in command]))
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["unshare", "-m", "sh", "-c", " && ".join(steps)],
                          env=env or helpers.fairseq_env(), capture_output=True, text=True,
                          timeout=600)


def read_only(folder, command):
    """``command`` with ``folder``/sub read-only (a read-only tmpfs as root, else chmod)."""
    if UNSHARE:
        return in_mount(folder, command, readonly=True)
    if os.geteuid() == 0:
        pytest.skip("as root without unshare -m, no folder is read-only")
    (folder / "sub").mkdir(parents=True)
    folder.chmod(0o555)
    (folder / "sub").chmod(0o555)
    try:
        return subprocess.run([str(c) for c in command], env=helpers.fairseq_env(),
                              capture_output=True, text=True, timeout=600)
    finally:
        (folder / "sub").chmod(0o755)
        folder.chmod(0o755)


def full_disk(folder, command, size="64k"):
    if not UNSHARE:
        pytest.skip("a full disk needs root and unshare -m (a small tmpfs in a private namespace)")
    return in_mount(folder, command, size=size)


def one_line(proc, *parts):
    """The command failed with one line (its last) holding ``parts``, and no traceback."""
    assert proc.returncode not in (0, None), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    last = proc.stderr.strip().split("\n")[-1]
    for part in parts:
        assert str(part) in last, (part, last)
    return last


def run(*command, env=None):
    return subprocess.run([str(c) for c in command], env=env or helpers.fairseq_env(),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return helpers.make_synthetic_corpus(tmp_path_factory.mktemp("raw") / "raw")


def prepare(raw, out, *extra, module=False):
    head = ([sys.executable, "-m", "ran_text.prepare"] if module
            else [BIN / "ran-prepare"])
    return [*head, "custom", "--src", "de", "--tgt", "en", "--out", out, "--train-prefix",
            raw / "train", "--valid-prefix", raw / "valid", "--test-prefix", raw / "test",
            "--bpe-merges", "20", "--workers", "1", *extra]


def evaluate(*args):
    return subprocess.run([sys.executable, "-m", "ran_text.evaluate", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


# ---- read-only folders and full disks ------------------------------------------------------------

@pytest.mark.parametrize("module", [False, True], ids=["ran-prepare", "python-m"])
def test_prepare_on_a_read_only_folder(raw, tmp_path, module):
    folder = tmp_path / "mnt"
    one_line(read_only(folder, prepare(raw, folder / "sub" / "bin", module=module)),
             "prepare: error:", folder / "sub")


def test_prepare_on_a_full_disk_names_it_and_removes_its_work_folder(raw, tmp_path):
    folder = tmp_path / "mnt"
    out = folder / "sub" / "bin"
    proc = full_disk(folder, ["sh", "-c", shlex.join(map(str, prepare(raw, out)))
                              + f"; s=$?; ls -a {shlex.quote(str(out))} >&2; exit $s"])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert "No space left on device" in proc.stderr and "free space" in proc.stderr
    assert "\nprep\n" not in proc.stdout + proc.stderr, proc.stderr[-2000:]  # the work folder


@pytest.mark.parametrize("module", [False, True], ids=["ran-reproduce", "python-m"])
def test_reproduce_on_a_read_only_folder(tmp_path, module):
    folder = tmp_path / "mnt"
    head = ([sys.executable, "-m", "ran_lab.reproduce"] if module
            else [BIN / "ran-reproduce"])
    proc = read_only(folder, [*head, "ran", "--config", CONFIG, "--data",
                              tmp_path / "bin.{src}-{tgt}", "--pairs", "de-en", "--systems",
                              "TransF", "--max-update", "2", "--out", folder / "sub" / "out",
                              "--checkpoints", tmp_path / "ckpt"])
    one_line(proc, "error:", "cannot lock", folder / "sub")


def test_checkpoint_average_on_a_full_disk(tmp_path):
    good = helpers.bad_checkpoints(tmp_path / "ckpt") / "good.pt"
    folder = tmp_path / "mnt"
    proc = full_disk(folder, [sys.executable, "-m", "ran_fairseq.checkpoint_average",
                              good, "--output", folder / "sub" / "avg.pt"],
                     size="8k")
    one_line(proc, "checkpoint_average: error:", "No space left", "free space")


def test_evaluate_and_claims_on_a_full_disk_or_read_only_folder(tmp_path):
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a b\n")
    one_line(run(BIN / "ran-evaluate", "--hyp", tmp_path, "--ref", hyp), "evaluate: error:",
             tmp_path)
    folder = tmp_path / "mnt"
    one_line(read_only(folder, [BIN / "ran-claims", "--fill", folder / "sub" / "page.md"]),
             "claims: error:", folder / "sub" / "page.md")


# ---- damaged inputs --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ['{"settings": {', "[]"])
def test_claims_analyze_bench_and_remake_name_a_damaged_json(tmp_path, text):
    (tmp_path / "results.json").write_text(text)
    results = tmp_path / "results.json"
    one_line(run(BIN / "ran-claims", "--results", tmp_path), "claims: error:", results)
    one_line(run(BIN / "ran-analyze", "ran", "length-bleu", "--results", tmp_path, "--pair",
                 "de-en", "--out", tmp_path / "a"), "length-bleu:", results)
    one_line(run(BIN / "ran-bench", "--data", tmp_path, "--systems", results, "--out",
                 tmp_path / "b"), "error:", results)
    if text != "[]":  # an empty list is an empty manifest
        one_line(run(BIN / "ran-remake", "--manifest", results), "error:", results)


def test_claims_fill_names_a_missing_page(tmp_path):
    one_line(run(BIN / "ran-claims", "--fill", tmp_path / "no" / "page.md"), "claims: error:",
             tmp_path / "no" / "page.md", "does not exist")


def test_invalid_utf8_in_a_corpus_is_named_with_its_line(tmp_path):
    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=40, n_valid=5, n_test=5)
    lines = (raw / "train.de").read_bytes().split(b"\n")
    lines[2] = b"w1 \xe9t\xe9 w2"  # Latin-1
    (raw / "train.de").write_bytes(b"\n".join(lines))
    one_line(run(*prepare(raw, tmp_path / "bin")), f"{raw / 'train.de'}: line 3 is not valid "
                   f"UTF-8 (byte 0xe9 at column 4)",
             "convert the file to UTF-8")


def test_a_truncated_gzip_corpus_is_named(tmp_path):
    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=400, n_valid=5, n_test=5)
    for lang in (SRC, TGT):
        data = gzip.compress((raw / f"train.{lang}").read_bytes())
        (raw / f"train.{lang}").unlink()
        (raw / f"train.{lang}.gz").write_bytes(data[: len(data) // 2])
    proc = run(sys.executable, "-m", "ran_text.prepare", "custom", "--src", "de", "--tgt", "en",
               "--out", tmp_path / "bin", "--train", raw / "train.de.gz", raw / "train.en.gz",
               "--valid-prefix", raw / "valid", "--test-prefix", raw / "test", "--workers", "1")
    one_line(proc, f"{raw / 'train.de.gz'}: the gzip file is truncated or damaged (after line ",
             "download or copy it again")


def test_evaluate_names_empty_and_non_utf8_files(tmp_path):
    (tmp_path / "hyp").write_text("")
    (tmp_path / "ref").write_text("")
    one_line(evaluate("--hyp", tmp_path / "hyp", "--ref", tmp_path / "ref"),
             "are empty: nothing to score")
    (tmp_path / "hyp").write_bytes(b"ok\nbad \xff here\n")
    (tmp_path / "ref").write_text("ok\nfine\n")
    one_line(evaluate("--hyp", tmp_path / "hyp", "--ref", tmp_path / "ref"),
             f"{tmp_path / 'hyp'}: line 2 is not valid UTF-8")


# ---- inputs once accepted silently ---------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ("empty-train", "is empty"), ("empty-test", "is empty"), ("same-file", "is both the source"),
])
def test_prepare_refuses_empty_and_same_file_inputs(raw, tmp_path, change, message):
    work = tmp_path / "raw"
    work.mkdir()
    for name in os.listdir(raw):
        (work / name).write_bytes((raw / name).read_bytes())
    if change == "empty-train":
        (work / "train.de").write_text("")
        bad = work / "train.de"
    elif change == "empty-test":
        (work / "test.en").write_text("\n\n")
        bad = work / "test.en"
    else:
        (work / "valid.en").unlink()
        os.symlink(work / "valid.de", work / "valid.en")
        bad = work / "valid.de"
    flag = "--" + bad.name.split(".")[0]
    one_line(run(*prepare(work, tmp_path / "bin")), "prepare: error:", bad, flag, message)
    assert not (tmp_path / "bin" / "prep").exists()
