"""The engine's store as a user meets it through scripts/reproduce-ran.sh, before anything is
trained: committed results are never replaced by a run of other commands or removed by `make
clean`, two engines are kept apart by locks, a damaged or wrongly shaped result is named with what
to do, a checkpoint that asks to run code is refused on the engine's paths, and the documented
small runs write to a scratch folder. The store's logic in this process: tests/unit/test_engine.py;
an engine that finished meanwhile: tests/system/test_reproduce.py."""
import json
import re
import shutil
import subprocess
import sys

import pytest

import helpers
from helpers import REPO

SCRIPT = REPO / "scripts" / "reproduce-ran.sh"
CONFIG = REPO / "configs" / "ran" / "cpu.json"


def engine_run(tmp_path, *extra, out=None):
    """scripts/reproduce-ran.sh on one system into ``out`` (default tmp_path/out), with a data-bin
    that need not exist: for what the engine decides before it trains."""
    return helpers.run_reproduction(
        SCRIPT, "--config", CONFIG, "--data", str(tmp_path / "bin.{src}-{tgt}"), "--pairs",
        "de-en", "--systems", "TransF", "--max-update", "3", "--out", out or tmp_path / "out",
        "--checkpoints", tmp_path / "ckpt", *extra, timeout=120, fork_server=False)


def reproduce_paper():
    from ran_lab.reproduce.papers import paper_of

    return paper_of(SCRIPT)


# ---- results kept ----------------------------------------------------------------------------

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
    from ran_lab.common import LabError
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
    stored = {"commands": run.recorded(), "sacrebleu": 30.0, "pair": "de-en",
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
    with pytest.raises(LabError, match="was made with other settings"):
        check_stored(args, config, runs, str(tmp_path / "bin.{src}-{tgt}"), "x")


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


# ---- two engines, one folder -------------------------------------------------------------------

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


# ---- damaged or wrongly shaped results, bad checkpoints ------------------------------------------

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


@pytest.mark.parametrize("file, text", [
    ("results.json", "[]"), ("results.json", '{"results": [5]}'),
    ("results.json", '{"results": {"a": 1}}'), ("result.json", "[]"), ("result.json", "5"),
])
def test_stored_results_of_the_wrong_shape_are_named(tmp_path, file, text):
    out = tmp_path / "out"
    folder = out if file == "results.json" else out / "de-en" / "TransF" / "seed1"
    folder.mkdir(parents=True)
    (folder / file).write_text(text)
    proc = engine_run(tmp_path, out=out)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().split("\n")
    assert str(folder / file) in lines[-1] and "delete it" in lines[-1], proc.stderr


@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory):
    return helpers.bad_checkpoints(tmp_path_factory.mktemp("bad-checkpoints"))


@pytest.mark.parametrize("name, what", [("evil.pt", "is not a plain checkpoint"),
                                        ("cut.pt", "truncated")])
def test_the_engines_loads_refuse_a_bad_checkpoint_naming_it(bad_checkpoints, synthetic_databin,
                                                             name, what):
    """A checkpoint that asks to run code, or is cut short, on the engine's paths: its fairseq
    commands (``python -m ran_lab.run_fairseq``) and its own reading of a checkpoint's updates
    (--resume reads checkpoint_last.pt). The plugin's paths: test_checkpoint_loading.py."""
    from ran_fairseq.safe_checkpoints import BadCheckpoint
    from ran_lab.reproduce.checkpoints import checkpoint_updates

    path = bad_checkpoints / name
    proc = subprocess.run([sys.executable, "-m", "ran_lab.run_fairseq", "generate",
                           str(synthetic_databin), "--user-dir", helpers.USER_DIR, "--path",
                           str(path), "--cpu"], env=helpers.fairseq_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    last = proc.stderr.strip().split("\n")[-1]
    assert "error:" in last and str(path) in last and what in last, last
    with pytest.raises(BadCheckpoint, match=what) as caught:
        checkpoint_updates(str(path))
    assert str(path) in str(caught.value) and "ran-code" not in str(caught.value)
