"""One line per fault (issue 56, items 3 and 5-13): every ``ran-*`` command and its ``python -m``
form, given a read-only folder, a full disk or a damaged input, ends with one line naming the
file, what is wrong and what to do, a non-zero exit status and no traceback; a checkpoint that
asks to run code, or is cut short, is named on every path that loads one; the inputs that were
accepted silently are refused. A read-only folder and a full disk are a tmpfs in a private mount
namespace (``unshare -m``, as root), or, without one, a folder without write permission."""
import os
import pickle
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import helpers
from helpers import REPO

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


class Evil:
    def __reduce__(self):
        return (os.system, ("echo ran-code",))


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return helpers.make_synthetic_corpus(tmp_path_factory.mktemp("raw") / "raw")


@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory):
    """A checkpoint that asks to run code, and one cut short."""
    import torch

    root = tmp_path_factory.mktemp("ckpt")
    torch.save({"model": {}, "args": None, "evil": Evil()}, root / "evil.pt")
    torch.save({"model": {"w": torch.zeros(10000)}}, root / "good.pt")  # 40 kB
    data = (root / "good.pt").read_bytes()
    (root / "cut.pt").write_bytes(data[:len(data) // 2])
    return root


def prepare(raw, out, *extra, module=False):
    head = ([sys.executable, "-m", "ran_text.prepare"] if module
            else [BIN / "ran-prepare"])
    return [*head, "custom", "--src", "de", "--tgt", "en", "--out", out, "--train-prefix",
            raw / "train", "--valid-prefix", raw / "valid", "--test-prefix", raw / "test",
            "--bpe-merges", "20", "--workers", "1", *extra]


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


def test_checkpoint_average_on_a_full_disk(bad_checkpoints, tmp_path):
    folder = tmp_path / "mnt"
    proc = full_disk(folder, [sys.executable, "-m", "ran_fairseq.checkpoint_average",
                              bad_checkpoints / "good.pt", "--output", folder / "sub" / "avg.pt"],
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


@pytest.mark.parametrize("name, what", [("evil.pt", "is not a plain checkpoint"),
                                        ("cut.pt", "truncated")])
def test_a_refused_or_cut_checkpoint_is_one_line_on_every_path(bad_checkpoints, tmp_path,
                                                               synthetic_databin, name, what):
    path = bad_checkpoints / name
    one_line(run(sys.executable, "-m", "ran_fairseq.checkpoint_average", path, "--output",
                 tmp_path / "avg.pt"), "checkpoint_average: error:", path, what)
    # fairseq's own command, the plugin loaded through --user-dir
    one_line(run(sys.executable, "-m", "ran_lab.run_fairseq", "generate", synthetic_databin,
                 "--user-dir", helpers.USER_DIR, "--path", path, "--cpu"), "error:", path, what)
    # the engine (--resume reads checkpoint_last.pt), the hub and the analyses load the same way
    from fairseq import checkpoint_utils

    from ran_fairseq.safe_checkpoints import BadCheckpoint
    from ran_lab.reproduce.checkpoints import checkpoint_updates

    for load in (checkpoint_updates, checkpoint_utils.load_checkpoint_to_cpu):
        with pytest.raises(BadCheckpoint, match=what) as caught:
            load(str(path))
        assert str(path) in str(caught.value)
    assert "ran-code" not in str(caught.value)


def test_weights_only_loading_cannot_be_turned_off(bad_checkpoints, monkeypatch):
    """TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 would let fairseq's loader unpickle freely: the plugin's
    loader refuses, naming the variable (docs/guarantees.md)."""
    from fairseq import checkpoint_utils

    from ran_fairseq.safe_checkpoints import BadCheckpoint

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(BadCheckpoint, match="unset TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"):
        checkpoint_utils.load_checkpoint_to_cpu(str(bad_checkpoints / "evil.pt"))


# ---- inputs accepted silently ----------------------------------------------------------------------

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


def test_curve_splits_a_log_on_newline_only(tmp_path):
    sys.path.insert(0, str(REPO / "scripts" / "quickstart"))
    import curve

    log = tmp_path / "train.log"
    # a U+2028 inside a line (a sentence fairseq logged, say) is no line break
    line = 'x | INFO | train_inner | epoch 001:  1 / 9 loss=1.0,\u2028 wpb=10, num_updates={u}'

    log.write_text("\n".join(line.format(u=u) for u in (1, 2)) + "\n")
    assert curve.tokens_by_update(log) == {1: 10.0, 2: 20.0}


def test_the_hub_takes_a_sentence_or_a_list_of_them():
    from ran_fairseq.hub import checked_sentences

    assert checked_sentences("w1 w2") == "w1 w2"
    assert checked_sentences(("a", "b")) == ["a", "b"]
    for bad, error, message in [(b"w1 w2", TypeError, "not bytes (decode bytes first"),
                                (None, TypeError, "not NoneType"),
                                ("", ValueError, "empty sentence"),
                                (["a", " "], ValueError, "empty sentence"),
                                ([b"a"], TypeError, "not bytes")]:
        with pytest.raises(error, match=message.replace("(", r"\(")):
            checked_sentences(bad)


def test_pickle_is_what_the_refused_checkpoint_would_run(bad_checkpoints):
    """The malicious checkpoint of these tests would run code if unpickled freely (so a refusal
    is a refusal of that)."""
    import torch

    with pytest.raises(pickle.UnpicklingError):
        torch.load(bad_checkpoints / "evil.pt", weights_only=True)
