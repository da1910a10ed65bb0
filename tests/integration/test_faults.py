"""The engine and the pipeline under faults (issue 43): committed results never replaced by a run
of other commands, two engines kept apart by locks, children that end with the engine, Unicode
line breaks inside sentences, damaged JSON, corpora and data-bins named, a full disk, a comma in a
path, private folders for the offline GPU script, and the smaller items (interactive's numbering,
byte-order marks, weights-only loading). The engine's own end-to-end checks of these are in
tests/system/test_reproduce.py (a training found at its budget on --resume)."""
import errno
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import helpers
from helpers import REPO, SRC, TGT, USER_DIR, run_cli, train
from systems import TINY_RAN

SCRIPT = REPO / "scripts" / "reproduce-ran.sh"
CONFIG = REPO / "configs" / "ran" / "cpu.json"
BREAKS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def engine_run(tmp_path, *extra, out=None):
    """scripts/reproduce-ran.sh on one system into ``out`` (default tmp_path/out), with a data-bin
    that need not exist: for what the engine decides before it trains."""
    return helpers.run_reproduction(
        SCRIPT, "--config", CONFIG, "--data", str(tmp_path / "bin.{src}-{tgt}"), "--pairs",
        "de-en", "--systems", "TransF", "--max-update", "3", "--out", out or tmp_path / "out",
        "--checkpoints", tmp_path / "ckpt", *extra, timeout=120)


# ---- 1. make clean, and results made by other commands --------------------------------------

def test_make_clean_keeps_results_and_every_tracked_file(tmp_path):
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    files = {"results/ran/TABLE.md": "committed", "results/quickstart/curve.csv": "committed",
             "results/ran/new-run/result.json": "not committed yet",
             "checkpoints/x/checkpoint_last.pt": "", "data-bin/multi30k.de-en/dict.de.txt": "",
             "bench-out/foundation/bench.json": "", "runs/try/TABLE.md": "",
             "demo-out/quickstart.de-en/demo.json": "the demo's output"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "Makefile", "results/ran/TABLE.md",
                          "results/quickstart/curve.csv"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    proc = subprocess.run(["make", "-C", str(tmp_path), "clean"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    status = subprocess.run(git + ["status", "--porcelain"], capture_output=True, text=True).stdout
    assert " D " not in status and "D " not in status.split("\n")[0], status  # no tracked file gone
    for kept in ("results/ran/TABLE.md", "results/quickstart/curve.csv",
                 "results/ran/new-run/result.json"):
        assert (tmp_path / kept).is_file(), kept
    for gone in ("checkpoints", "data-bin", "bench-out", "runs", "demo-out"):
        assert not (tmp_path / gone).exists(), gone


def test_a_run_of_other_commands_does_not_replace_a_stored_result(tmp_path):
    """A stored result made by other commands (here: fewer updates) is neither replaced nor left
    out of the table without --force; the error names it, what differs and what to do."""
    from ran_lab.reproduce.cli import parse_cli
    from ran_lab.reproduce.config import load_config
    from ran_lab.reproduce.errors import ReproError
    from ran_lab.reproduce.runs import Run
    from ran_lab.reproduce.store import check_stored

    run_dir = tmp_path / "out" / "de-en" / "TransF" / "seed1"
    run_dir.mkdir(parents=True)
    args = parse_cli(reproduce_paper(), [
        "--config", str(CONFIG), "--data", str(tmp_path / "bin.{src}-{tgt}"), "--pairs", "de-en",
        "--systems", "TransF", "--max-update", "300", "--out", str(tmp_path / "out"),
        "--checkpoints", str(tmp_path / "ckpt")])
    config = load_config(CONFIG)
    args.out, args.checkpoints = (tmp_path / "out").resolve(), (tmp_path / "ckpt").resolve()
    run = Run(args, config, ("de", "en"), config["systems"]["TransF"],
                        (tmp_path / "bin.de-en").resolve(), 1)
    stored = {"commands": run.recorded(), "repo": str(REPO), "sacrebleu": 30.0, "pair": "de-en",
              "system": "TransF", "seed": 1, "tok_bleu": 30.0, "chrf": 50.0, "ter": 60.0,
              "subsets": {}}
    (run_dir / "result.json").write_text(json.dumps(stored))
    before = (run_dir / "result.json").read_bytes()

    proc = engine_run(tmp_path)  # --max-update 3: other commands
    assert proc.returncode == 1, proc.stderr[-2000:]
    error = proc.stderr.strip().split("\n")[-1]
    assert error.startswith("reproduce-ran: error: nothing was changed: ")
    assert f"{run_dir / 'result.json'} was made with other settings (training: --max-update " \
           f"300 → 3) and would be replaced" in error
    assert "--force" in error and "--out" in error
    assert (run_dir / "result.json").read_bytes() == before
    assert not list((tmp_path / "ckpt").rglob("*.pt"))  # nothing trained

    # --force lets it through (and says what it replaces)
    args.force, args.max_update = True, 3
    runs = [Run(args, config, ("de", "en"), config["systems"]["TransF"],
                          (tmp_path / "bin.de-en").resolve(), 1)]
    check_stored(args, config, runs, str(tmp_path / "bin.{src}-{tgt}"), "x")
    args.force = False
    with pytest.raises(ReproError, match="was made with other settings"):
        check_stored(args, config, runs, str(tmp_path / "bin.{src}-{tgt}"), "x")


def test_the_engine_prepares_the_pairs_of_the_stored_runs_it_tabulates(tmp_path, monkeypatch,
                                                                         capsys):
    """A folder holding en-de runs, remade with --pairs de-en (results/REMAKE.json's commands name
    the pairs they train): the engine prepares en-de too, or a fresh checkout's table would lose
    those runs' p-values; a table without a pair's references says so instead of leaving them
    empty in silence."""
    from ran_lab.reproduce import cli, scores
    from ran_lab.reproduce.config import load_config
    from ran_lab.reproduce.runs import Run

    args = cli.parse_cli(reproduce_paper(), [
        "--config", str(CONFIG), "--pairs", "de-en", "--systems", "TransF", "--resume",
        "--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ckpt")])
    config = load_config(CONFIG)
    data = str(REPO / config["data"])
    stored = Run(args, config, ("en", "de"), config["systems"]["RAN-ALL"],
                 Path(data.format(src="en", tgt="de")).resolve(), 1)
    stored.dir.mkdir(parents=True)
    (stored.dir / "result.json").write_text(json.dumps(
        {"pair": "en-de", "system": "RAN-ALL", "seed": 1, "tok_bleu": 1.0, "sacrebleu": 1.0,
         "chrf": 1.0, "ter": 1.0, "subsets": {}, "commands": stored.recorded()}))
    prepared = []

    class Prepared(Exception):
        pass

    def make_all(*_):
        raise Prepared
    monkeypatch.setattr(cli, "prepare", lambda config, pair, log, env: prepared.append(pair))
    monkeypatch.setattr(cli, "make_all", make_all)
    with pytest.raises(Prepared):
        cli.run_all(reproduce_paper(), args)
    assert prepared == [("de", "en"), ("en", "de")]

    # the bootstrap of a run whose references are not here: empty p-values, said once
    systems = ("TransF", "RAN-ALL", "HC-SA")
    for system in systems:
        run_dir = tmp_path / "sig" / "en-de" / system / "seed1"
        run_dir.mkdir(parents=True)
        (run_dir / "hyp.txt").write_text("ein Hund\n")
    results = [{"pair": "en-de", "system": system, "seed": 1,
                "subsets": {"test": {"hyp_file": "hyp.txt", "sacrebleu": 1.0, "ter": 1.0,
                                     "raw_ref": str(tmp_path / "absent.de")}}}
               for system in systems]
    scores.add_significance(results, "TransF", {"samples": 100}, tmp_path / "sig")
    assert [r["subsets"]["test"]["p_value"] for r in results] == [None, None, None]
    err = capsys.readouterr().err
    assert err.count("en-de test: no references at") == 1 and "absent.de" in err


def reproduce_paper():
    from ran_lab.reproduce.papers import paper_of

    return paper_of(SCRIPT)


def test_documented_small_runs_write_to_a_scratch_folder():
    """A documented reproduction with a shortened budget or another data-bin would replace a
    config's committed results: each passes --out (under runs/, git-ignored)."""
    texts = {p: p.read_text(encoding="utf-8") for p in [*(REPO / "docs").glob("*.md"),
                                                        REPO / "README.md",
                                                        *(REPO / "scripts").glob("reproduce-*.sh")]}
    small = []
    for path, text in texts.items():
        for line in re.sub(r"\\+\n\s*", " ", text).split("\n"):  # continued lines joined
            if re.search(r"reproduce-\w+\.sh|ran-reproduce \w+", line) and re.search(r"--max-update|--data ", line) \
                    and "--dry-run" not in line:
                small.append((path.name, line))
                assert re.search(r"--out runs/", line), (path.name, line)
    assert len(small) >= 4, small


# ---- 2. two engines, one folder ---------------------------------------------------------------

HOLD = """
import sys, time
sys.path.insert(0, {repo!r})
from ran_text.textio import FolderLock
from pathlib import Path
folder = Path(sys.argv[1])
lock = FolderLock(folder, "the run folder", lock_file=folder.parent / f".{{folder.name}}.lock").acquire()
print("locked", flush=True)
time.sleep(120)
"""


def hold_lock(folder):
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(repo=str(REPO)), str(folder)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_engine_refuses_a_run_another_one_holds(tmp_path):
    run_dir = tmp_path / "out" / "de-en" / "TransF" / "seed1"
    holder = hold_lock(run_dir)
    try:
        proc = engine_run(tmp_path)
        assert proc.returncode == 1
        error = proc.stderr.strip().split("\n")[-1]
        assert f"the run folder {run_dir} is in use by process {holder.pid} on " in error, error
        assert "running: " in error
    finally:
        holder.kill()
        holder.wait()
    # a dead holder's lock is free: the engine gets past it (to the missing data-bin)
    from ran_text.textio import FolderLock

    with FolderLock(run_dir, lock_file=run_dir.parent / ".seed1.lock"):
        pass


def test_checkpoint_writes_use_temporary_names_unique_to_the_writer(tmp_path, monkeypatch):
    import ran_fairseq  # noqa: F401  (applies compat)
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    renamed = []
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(str(a)), replace(a, b)))
    src = tmp_path / "checkpoint_1_2.pt"
    src.write_bytes(b"x" * 100)
    for _ in range(2):
        PathManager.copy(str(src), str(tmp_path / "checkpoint_last.pt"), overwrite=True)
        checkpoint_utils.torch_persistent_save({"a": 1}, str(tmp_path / "checkpoint_best.pt"))
    assert len(renamed) == 4 and len(set(renamed)) == 4, renamed
    for name in renamed:
        assert re.fullmatch(rf".*\.pt\.tmp-{os.getpid()}-[0-9a-f]{{8}}", name), name
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint_1_2.pt", "checkpoint_best.pt", "checkpoint_last.pt"]


# ---- 3. signals ------------------------------------------------------------------------------

ENGINE = """
import os, sys, time
sys.path.insert(0, {repo!r})
from ran_lab.reproduce import process
from ran_lab.reproduce.runguard import Stopped
process.CHILDREN.install()
child = "import os, time; open({pidfile!r}, 'w').write(str(os.getpid())); time.sleep(120)"
try:
    process.run_logged(["-c", child], {log!r}, dict(os.environ), "a child")
except Stopped as e:
    print("stopped by", e, flush=True)
    sys.exit(143)
"""


def start_engine(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = ENGINE.format(repo=str(REPO), pidfile=str(pidfile), log=str(tmp_path / "child.log"))
    engine = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (pidfile.is_file() and pidfile.read_text()):
        assert time.monotonic() < deadline and engine.poll() is None, "the child did not start"
        time.sleep(0.1)
    return engine, int(pidfile.read_text())


def gone(pid, within=15):
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:  # a zombie has ended (not yet reaped)
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_engines_signal_reaches_its_child_in_its_own_group(tmp_path, sig):
    engine, child = start_engine(tmp_path)
    try:
        assert os.getpgid(child) == child != os.getpgid(engine.pid)
        engine.send_signal(sig)
        out, _ = engine.communicate(timeout=30)
        assert engine.returncode == 143 and f"stopped by {signal.Signals(sig).name}" in out
        assert gone(child)
    finally:
        engine.kill()
        if not gone(child, 0):
            os.kill(child, signal.SIGKILL)


FORKED = """
import multiprocessing, os, signal, sys, time
sys.path.insert(0, {repo!r})
from ran_lab.reproduce import process
from ran_text.prepare.parallel import _pool, _tokenize_chunk, _run_jobs
process.CHILDREN.install()
child = "import os, time; open({pidfile!r}, 'w').write(str(os.getpid())); time.sleep(120)"
import threading
threading.Thread(target=process.run_logged, daemon=True,
                 args=(["-c", child], {log!r}, dict(os.environ), "a child")).start()
while not os.path.exists({pidfile!r}) or not open({pidfile!r}).read():
    time.sleep(0.05)
# a copy of the engine made by fork, stopped by SIGTERM, as a pool stops its workers
worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
worker.start()
time.sleep(0.5)
os.kill(worker.pid, signal.SIGTERM)
worker.join(20)
print("worker exit", worker.exitcode, flush=True)
pid = int(open({pidfile!r}).read())
state = open(f"/proc/{{pid}}/stat").read().split(")")[-1].split()[0]
print("child", "ended" if state == "Z" else "alive", flush=True)
# the data preparation's pool under the engine's handlers: ends when its work is done
jobs = iter([("en", False, False, False, ["a b c"] * 2000)] * 8)
def defaults(_):
    return tuple(signal.getsignal(s) is signal.SIG_DFL for s in (signal.SIGTERM, signal.SIGINT))
with _pool(2) as pool:
    print("tokenized", sum(len(x) for x in _run_jobs(pool, _tokenize_chunk, jobs)), flush=True)
    print("worker signals default", sorted(set(pool.map(defaults, range(8)))), flush=True)
print("pool ended", flush=True)
"""


def test_a_forked_copy_of_the_engine_ends_by_the_signal_and_leaves_the_children(tmp_path):
    """A process forked from the engine (the data preparation's pool workers) inherits its signal
    handlers: SIGTERM there must end that process, neither stop the engine's trainings nor raise
    in it (a pool that ends its workers then waited forever on one, hanging the engine)."""
    pidfile = tmp_path / "child.pid"
    code = FORKED.format(repo=str(REPO), pidfile=str(pidfile), log=str(tmp_path / "child.log"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    child = int(pidfile.read_text())
    try:
        assert f"worker exit {-signal.SIGTERM}" in proc.stdout, proc.stdout + proc.stderr[-2000:]
        assert "child alive" in proc.stdout, proc.stdout
        assert "tokenized 16000" in proc.stdout and "pool ended" in proc.stdout, proc.stderr[-2000:]
        # the pool's workers drop the engine's Python handlers: a SIGTERM that comes as a worker
        # enters its blocking wait for a job would wait with it, and the pool on the worker
        assert "worker signals default [(True, True)]" in proc.stdout, proc.stdout
        assert "Stopped" not in proc.stderr, proc.stderr[-2000:]
    finally:
        if not gone(child, 0):
            os.kill(child, signal.SIGKILL)


def test_a_killed_engine_takes_its_child_with_it(tmp_path):
    engine, child = start_engine(tmp_path)
    try:
        engine.kill()  # SIGKILL: no handler runs; PR_SET_PDEATHSIG ends the child
        engine.wait()
        assert gone(child)
    finally:
        if not gone(child, 0):
            os.kill(child, signal.SIGKILL)


def fake_checkpoint(path, updates, seconds=12.5):
    import torch

    torch.save({"optimizer_history": [{"num_updates": updates}],
                "extra_state": {"previous_training_time": seconds}}, path)


def test_resume_compares_a_checkpoints_updates_with_the_budget(tmp_path):
    """A training whose engine died as it ended (no train_finished.json) is found finished by its
    checkpoint's update count; fairseq-train would take one more update."""
    from ran_lab.reproduce.errors import ReproError
    from ran_lab.reproduce.training import finished_at_budget

    run = SimpleNamespace(save_dir=tmp_path, train_argv=["data", "--max-update", "20"])
    assert finished_at_budget(run, "x") is None  # no checkpoint: train
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 19)
    assert finished_at_budget(run, "x") is None  # short of the budget: train on
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 20)
    assert finished_at_budget(run, "x") == 12.5  # at the budget: finished
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 21)
    with pytest.raises(ReproError, match=r"at update 21, past this run's --max-update 20"):
        finished_at_budget(run, "x")


# ---- 4, 11. line breaks, byte-order marks -----------------------------------------------------

def test_lines_split_on_newline_only_with_a_bom_dropped(tmp_path):
    from ran_text.evaluate import read_generate_output
    from ran_text.textio import read_lines

    lines = [f"a{b}b" for b in BREAKS]
    path = tmp_path / "ref.txt"
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\n").encode())
    assert read_lines(path) == lines
    gen = tmp_path / "gen.txt"
    gen.write_text("".join(f"D-{i}\t-0.5\t{line}\n" for i, line in enumerate(lines)),
                   encoding="utf-8")
    assert read_generate_output(gen) == lines


def test_significance_reads_references_holding_unicode_line_breaks(tmp_path):
    """The engine split text files with str.splitlines(): a reference holding U+2028 counted as two
    sentences, and the bootstrap against the baseline failed on the count."""
    from ran_lab.reproduce.scores import add_significance

    refs = ["a b c d", "e\u2028f g h", "i j k\x1cl", "m n o p"]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    results = []
    for system, hyps in (("base", ["a b c d", "e f", "i j", "m"]), ("sys", refs)):
        run_dir = tmp_path / "de-en" / system / "seed1"
        run_dir.mkdir(parents=True)
        (run_dir / "hyp.detok.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        results.append({"pair": "de-en", "system": system, "seed": 1, "subsets": {"test": {
            "hyp_file": "hyp.detok.txt", "raw_ref": str(tmp_path / "ref.txt"),
            "sacrebleu": 10.0 if system == "base" else 100.0, "ter": 50.0 if system == "base"
            else 0.0}}})
    add_significance(results, "base", {"samples": 100}, tmp_path)
    assert 0 < results[1]["subsets"]["test"]["p_value"] <= 1


def test_prepare_strips_a_byte_order_mark(tmp_path):
    from ran_text.corpora import read_text

    path = tmp_path / "train.de"
    path.write_bytes("\ufeffEin Satz.\nNoch\u2028einer.\n".encode())
    with gzip.open(tmp_path / "train.de.gz", "wb") as f:
        f.write(path.read_bytes())
    for p in (path, tmp_path / "train.de.gz"):
        assert list(read_text(p)) == ["Ein Satz.", "Noch\u2028einer."]


# ---- 5. JSON ----------------------------------------------------------------------------------

def test_a_truncated_result_json_is_named_with_what_to_do(tmp_path):
    run_dir = tmp_path / "out" / "de-en" / "TransF" / "seed1"
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text('{"pair": "de-en", "sys')
    proc = engine_run(tmp_path, "--resume")
    assert proc.returncode == 1
    error = proc.stderr.strip().split("\n")
    assert "Traceback" not in proc.stderr and len(error[-1]) > 40
    assert error[-1].startswith(f"reproduce-ran: error: {run_dir / 'result.json'} (a run's "
                                f"result) is not valid JSON (line 1 column ")
    assert "delete it: --resume then decodes and scores the run again" in error[-1]


def test_json_is_written_through_a_unique_temporary_file(tmp_path, monkeypatch):
    from ran_text import textio

    renamed = []
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append((a, b)), replace(a, b)))
    textio.write_json(tmp_path / "result.json", {"a": 1})
    assert json.loads((tmp_path / "result.json").read_text()) == {"a": 1}
    assert len(renamed) == 1 and str(renamed[0][0]).startswith(str(tmp_path / "result.json.tmp-"))
    # a write that fails leaves the old file whole and no temporary one
    monkeypatch.setattr(textio.json, "dumps", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        textio.write_json(tmp_path / "result.json", {"a": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


# ---- 6. architecture flags on resume -----------------------------------------------------------

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    raw = helpers.make_synthetic_corpus(root / "raw", n_test=6)
    return helpers.binarize(raw, root / "bin")


@pytest.fixture(scope="module")
def ran_checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("faults-ckpt")
    train(data, save, "ran_transformer", TINY_RAN, max_update=2)
    return save / "checkpoint_last.pt"


@pytest.mark.parametrize("change, named", [
    (("--no-encoder-positional-embeddings",),
     "--no-encoder-positional-embeddings (checkpoint: not set, this run: set)"),
    (("--ran-decoder-initial", "full"), "--ran-decoder-initial (checkpoint: 'lower-triangle', "
                                        "this run: 'full')"),
])
def test_resuming_with_other_architecture_flags_stops_naming_them(ran_checkpoint, data, tmp_path,
                                                                  change, named):
    save = tmp_path / "ckpt"
    save.mkdir()
    shutil.copy(ran_checkpoint, save / "checkpoint_last.pt")
    proc = train(data, save, "ran_transformer", (*TINY_RAN, *change), max_update=3, check=False)
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr[-3000:]
    assert "num_updates=3" not in proc.stdout + proc.stderr  # stopped before an update


def test_resuming_with_the_same_flags_or_another_dropout_goes_on(ran_checkpoint, data, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    shutil.copy(ran_checkpoint, save / "checkpoint_last.pt")
    proc = train(data, save, "ran_transformer", (*TINY_RAN, "--dropout", "0.3"), max_update=3)
    assert re.search(r"Loaded checkpoint \S+ \(epoch \d+ @ 2 updates\)", proc.stdout + proc.stderr)


def test_every_plugin_model_names_its_architecture_flags():
    import argparse

    import ran_fairseq  # noqa: F401
    from fairseq.models import MODEL_REGISTRY
    from ran_fairseq.models._common import architecture_flags, changed_flags

    ours = {n: c for n, c in MODEL_REGISTRY.items() if c.__module__.startswith("ran_fairseq.")}
    assert set(ours) == {"ran_transformer", "recurrent_cross_transformer", "rnnsearch_dynmem",
                         "pervasive_attention"}
    expect = {"ran_transformer": "ran_decoder_initial", "recurrent_cross_transformer":
              "cross_attention", "rnnsearch_dynmem": "dynamic_memory_window",
              "pervasive_attention": "aggregator"}
    for name, cls in ours.items():
        flags = architecture_flags(cls)
        assert expect[name] in flags and not any("dropout" in d for d in flags), name
        dest = expect[name]
        assert changed_flags(cls, argparse.Namespace(**{dest: "a"}),
                             argparse.Namespace(**{dest: "b"})) == [(flags[dest][0], "a", "b")]
        assert changed_flags(cls, argparse.Namespace(), argparse.Namespace()) == []


def test_a_checkpoint_older_than_an_option_is_compared_as_it_loads():
    """A RAN checkpoint saved before --ran-decoder-initial existed loads as 'full' (its arch
    function says so): resuming it needs --ran-decoder-initial full, and the default is refused."""
    import argparse

    import ran_fairseq  # noqa: F401
    from fairseq.models import MODEL_REGISTRY
    from ran_fairseq.models._common import changed_flags
    from ran_fairseq.models.ran_transformer import ran_transformer_small

    cls = MODEL_REGISTRY["ran_transformer"]
    old = argparse.Namespace(arch="ran_transformer_small", _name="ran_transformer_small")
    for flags, changed in (({}, [("--ran-decoder-initial", "full", "lower-triangle")]),
                           ({"ran_decoder_initial": "full"}, [])):
        now = argparse.Namespace(arch="ran_transformer_small", **flags)
        ran_transformer_small(now)
        assert changed_flags(cls, old, now) == changed


# ---- 7. damaged input: one line naming the file -------------------------------------------------

def prepare_custom(tmp_path, raw, *extra):
    return subprocess.run(
        [sys.executable, "-m", "ran_text.prepare", "custom", "--src", "de", "--tgt", "en",
         "--out", str(tmp_path / "bin"), "--train-prefix", str(raw / "train"), "--valid-prefix",
         str(raw / "valid"), "--test-prefix", str(raw / "test"), "--bpe-merges", "20",
         "--workers", "1", *extra], env=helpers.fairseq_env(), capture_output=True, text=True,
        timeout=300)


def one_line_error(proc, *parts):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().split("\n")[-1]
    for part in parts:
        assert part in last, (part, last)


def test_invalid_utf8_in_a_corpus_is_named_with_its_line(tmp_path):
    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=40, n_valid=5, n_test=5)
    lines = (raw / "train.de").read_bytes().split(b"\n")
    lines[2] = b"w1 \xe9t\xe9 w2"  # Latin-1
    (raw / "train.de").write_bytes(b"\n".join(lines))
    one_line_error(prepare_custom(tmp_path, raw), f"{raw / 'train.de'}: line 3 is not valid "
                   f"UTF-8 (byte 0xe9 at column 4)", "convert the file to UTF-8")


def test_a_truncated_gzip_corpus_is_named(tmp_path):
    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=400, n_valid=5, n_test=5)
    for lang in (SRC, TGT):
        data = gzip.compress((raw / f"train.{lang}").read_bytes())
        (raw / f"train.{lang}").unlink()
        (raw / f"train.{lang}.gz").write_bytes(data[: len(data) // 2])
    proc = subprocess.run(
        [sys.executable, "-m", "ran_text.prepare", "custom", "--src", "de", "--tgt", "en",
         "--out", str(tmp_path / "bin"), "--train", str(raw / "train.de.gz"),
         str(raw / "train.en.gz"), "--valid-prefix", str(raw / "valid"), "--test-prefix",
         str(raw / "test"), "--workers", "1"], env=helpers.fairseq_env(), capture_output=True,
        text=True, timeout=300)
    one_line_error(proc, f"{raw / 'train.de.gz'}: the gzip file is truncated or damaged (after "
                   f"line ", "download or copy it again")


@pytest.mark.parametrize("part, cut, message", [
    ("bin", 0.5, "is truncated: "), ("idx", 0.5, "it is truncated or damaged"),
    ("idx", 0.1, "it is truncated or damaged")])
def test_a_truncated_data_bin_file_is_named(synthetic_databin, tmp_path, part, cut, message):
    import ran_fairseq  # noqa: F401  (applies compat)
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    data = tmp_path / "bin"
    shutil.copytree(synthetic_databin, data)
    path = data / f"train.de-en.de.{part}"
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * cut)])
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        MMapIndexedDataset(str(data / "train.de-en.de"))
    assert str(path) in str(error.value) and "rebuild the data-bin" in str(error.value)


def evaluate(*args):
    return subprocess.run([sys.executable, "-m", "ran_text.evaluate", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_evaluate_names_empty_and_non_utf8_files(tmp_path):
    (tmp_path / "hyp").write_text("")
    (tmp_path / "ref").write_text("")
    one_line_error(evaluate("--hyp", tmp_path / "hyp", "--ref", tmp_path / "ref"),
                   "are empty: nothing to score")
    (tmp_path / "hyp").write_bytes(b"ok\nbad \xff here\n")
    (tmp_path / "ref").write_text("ok\nfine\n")
    one_line_error(evaluate("--hyp", tmp_path / "hyp", "--ref", tmp_path / "ref"),
                   f"{tmp_path / 'hyp'}: line 2 is not valid UTF-8")


# ---- 8. a full disk ---------------------------------------------------------------------------

def test_a_failed_checkpoint_write_leaves_no_partial_file(tmp_path, monkeypatch):
    import ran_fairseq  # noqa: F401
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    def full_disk(*args, **kwargs):
        target = args[1]
        if isinstance(target, (str, Path)):
            Path(target).write_bytes(b"half a checkpoint")
        else:
            target.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    src = tmp_path / "checkpoint_1_2.pt"
    src.write_bytes(b"x" * 100)
    monkeypatch.setattr(shutil, "copyfileobj", full_disk)
    with pytest.raises(OSError, match="No space left"):
        PathManager.copy(str(src), str(tmp_path / "checkpoint_last.pt"), overwrite=True)
    monkeypatch.setattr(checkpoint_utils, "_torch_persistent_save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        checkpoint_utils.torch_persistent_save({"a": 1}, str(tmp_path / "checkpoint_2_4.pt"))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_1_2.pt"]


def test_the_engine_removes_partial_checkpoints_a_killed_training_left(tmp_path):
    from ran_lab.reproduce.checkpoints import remove_partial_files

    for name in ("checkpoint_last.pt", "checkpoint_1_4.pt.tmp", "checkpoint_last.pt.tmp-12-0a1b2c3d",
                 "train_argv.json"):
        (tmp_path / name).write_text("x")
    remove_partial_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt", "train_argv.json"]


# ---- 9. a comma in --out ----------------------------------------------------------------------

def test_prepare_takes_an_out_folder_with_a_comma(tmp_path):
    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=60, n_valid=5, n_test=5)
    out = tmp_path / "a,b"
    proc = prepare_custom(out, raw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "bin" / "test.de-en.de.bin").is_file() and (out / "bin" / "dict.de.txt").is_file()


# ---- 10. offline-gpu.sh: private folders --------------------------------------------------------

def offline_run(tmp_path, env_extra, command):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho fake-python\n")
    fake.chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    (wheels / "fairseq_fixed-0.12.3.1-cp312-cp312-linux_x86_64.whl").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k not in ("SITE", "WHEEL_CACHE", "MULTI30K_DIR",
                                                            "XDG_CACHE_HOME")}
    env.update(PYTHON=str(fake), HOME=str(tmp_path / "home"), **env_extra)
    return subprocess.run(["bash", str(REPO / "scripts" / "offline-gpu.sh"), "run", str(wheels),
                           "--", "bash", "-c", command], capture_output=True, text=True,
                          timeout=60, env=env)


def test_offline_gpu_uses_private_folders(tmp_path):
    show = 'site=${PYTHONPATH%%:*}; echo "site=$site mode=$(stat -c %a "$site")"'
    proc = offline_run(tmp_path, {}, show)
    assert proc.returncode == 0, proc.stderr
    site = re.search(r"site=(\S+) mode=(\d+)", proc.stdout)
    assert site and site.group(1) != "/tmp/site" and site.group(2) == "700", proc.stdout
    assert not Path(site.group(1)).exists()  # removed after the command
    cache = tmp_path / "home" / ".cache" / "ran_fairseq" / "offline-gpu-wheels"
    assert cache.is_dir() and oct(cache.stat().st_mode & 0o777) == "0o700"
    # a wheel cache others can write is not taken
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "fairseq_fixed-0.12.3.1-cp312-cp312-linux_x86_64.whl").write_bytes(b"planted")
    proc = offline_run(tmp_path, {"WHEEL_CACHE": str(shared)}, "echo ran")
    assert proc.returncode == 1 and "ran" not in proc.stdout
    assert f"{shared} is not a folder of yours that only you can write" in proc.stderr


# ---- 11. interactive's numbering, weights-only loading ---------------------------------------

def test_interactive_numbers_a_too_long_line_as_the_user_counts(ran_checkpoint, data, tmp_path):
    """...and goes on with the next lines (fairseq's loop ended the session at the first)."""
    long = " ".join(f"w{i % 24}" for i in range(40))  # TINY_RAN takes 32 positions
    lines = ["w1 w2"] * 5 + [long, "w3 w4", long, "w5"]
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


def test_the_plugins_own_loads_ask_for_weights_only(tmp_path, monkeypatch):
    import torch

    from ran_fairseq import checkpoint_average
    from ran_lab.reproduce import checkpoints, logs

    fake_checkpoint(tmp_path / "checkpoint_last.pt", 5)
    calls = []
    load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: (calls.append(k), load(*a, **k))[1])
    checkpoint_average._updates(tmp_path / "checkpoint_last.pt")
    checkpoints.checkpoint_updates(tmp_path / "checkpoint_last.pt")
    checkpoints.selected_checkpoint(tmp_path / "checkpoint_last.pt")
    logs.training_seconds(tmp_path, [], 1.0)
    assert len(calls) == 4 and all(k.get("weights_only") is True for k in calls), calls


def test_a_slurm_table_whose_jobs_all_failed_is_an_error(tmp_path, monkeypatch):
    """--launcher slurm with every job failed: the engine said "no run finished yet" and exited
    0, so a failed job went unseen (it now names the runs and their jobs' errors, as it does
    when some runs finished)."""
    from ran_lab.reproduce import cli
    from ran_lab.reproduce.errors import ReproError

    args = cli.parse_cli(reproduce_paper(), [
        "--config", str(CONFIG), "--pairs", "de-en", "--systems", "TransF",
        "--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ckpt"),
        "--launcher", "slurm"])
    reason = "de-en TransF seed 1 (Slurm job 7 ended FAILED: ValueError: boom; --resume ...)"

    from ran_lab.reproduce.schedule import Made

    monkeypatch.setattr(cli, "prepare", lambda *_: None)
    monkeypatch.setattr(cli, "check_jobs", lambda *_: None)
    monkeypatch.setattr(cli, "make_all", lambda *_: Made([], [reason], [reason]))
    with pytest.raises(ReproError, match=r"1 run\(s\) without a result: .*ValueError: boom"):
        cli.run_all(reproduce_paper(), args)
    # jobs still under way (none failed): collected later, no error
    monkeypatch.setattr(cli, "make_all", lambda *_: Made([], ["under way"], []))
    assert cli.run_all(reproduce_paper(), args) is None
