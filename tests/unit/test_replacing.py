"""A finished run is never deleted before its replacement is whole: the same command again
without --resume is refused (naming --resume and --force); with --force the finished run's
folders stay, set aside in one step, until the new result.json is written, and an error, a
SIGTERM or a SIGKILL in between leaves (or, at the next engine, puts back) the finished run and
the table's row. The engine runs with the stand-in for fairseq of tests/unit/test_engine.py."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_engine import FakeFairseq, argv, data, engine  # noqa: F401  (data: a fixture)

HERE = Path(__file__).resolve().parent  # tests/unit, beside test_engine.py

# an engine in its own process whose stand-in training of RAN-ALL writes MARKER and then waits,
# as a long training would, until the engine is told to stop (its child then ends with -SIGNAL)
DRIVER = """
import sys, time
sys.path[:0] = [{here!r}, {tests!r}]
from test_engine import FakeFairseq, engine
from ran_lab.reproduce.process import CHILDREN

class Slow(FakeFairseq):
    def train(self, flags, log):
        if "/RAN-ALL/" in flags["--save-dir"]:
            open({marker!r}, "w").close()
            while CHILDREN.stopped_by is None:
                time.sleep(0.05)
            return -CHILDREN.stopped_by
        return super().train(flags, log)

sys.exit(engine(sys.argv[1:], Slow()))
"""


def snapshot(folder):
    """{relative path: bytes} of every file under ``folder`` but logs and locks."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith((".lock", ".log"))}


def without_transf(files):
    """The files but TransF's (which the replacing engines make again before RAN-ALL) and the
    table's (written again from the runs by --resume)."""
    return {k: v for k, v in files.items() if "TransF" not in k and "/" in k}


def finished(tmp_path, data):  # noqa: F811
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    return snapshot(tmp_path / "out")


def test_the_same_command_again_is_refused_naming_resume_and_force(tmp_path, data):  # noqa: F811
    before = finished(tmp_path, data)
    fake = FakeFairseq()
    err = engine(argv(tmp_path, data), fake)
    assert isinstance(err, str) and "\n" not in err
    assert "--resume" in err and "--force" in err and "RAN-ALL/seed1/result.json" in err
    assert fake.calls == [] and snapshot(tmp_path / "out") == before


def test_a_failed_replacement_puts_the_finished_run_back(tmp_path, data):  # noqa: F811
    before = finished(tmp_path, data)
    assert engine(argv(tmp_path, data, "--force"), FakeFairseq(fail="RAN-ALL")) != 0
    # TransF was made again (its new result replaced it whole); RAN-ALL and the table are as
    # they were
    after = snapshot(tmp_path / "out")
    assert {k: v for k, v in after.items() if "TransF" not in k} == \
        {k: v for k, v in before.items() if "TransF" not in k}
    assert not list((tmp_path / "out").rglob(".*.replaced"))


def test_force_replaces_the_run_and_leaves_nothing_aside(tmp_path, data):  # noqa: F811
    finished(tmp_path, data)
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data, "--force"), fake) == 0
    assert [m for m, _ in fake.calls] == ["train", "generate", "train", "generate"]
    assert not list(tmp_path.rglob(".*.replaced"))
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["results"]
    assert len(rows) == 2


def start_slow_engine(tmp_path, data):  # noqa: F811
    marker = tmp_path / "training"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(here=str(HERE), tests=str(HERE.parent), marker=str(marker)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, str(script),
                             *map(str, argv(tmp_path, data, "--force"))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def rows(tmp_path):
    return {(r["system"], r["seed"]): r["sacrebleu"] for r in
            json.loads((tmp_path / "out" / "results.json").read_text())["results"]}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_kill_while_a_finished_run_is_made_again_loses_nothing(tmp_path, data, sig):  # noqa: F811
    """Killed while the replacement of RAN-ALL trains: the table keeps both rows and, at once
    (SIGTERM) or when the next engine selects the run (SIGKILL), every file of the finished
    run is back in its folder; --resume then makes nothing."""
    before = finished(tmp_path, data)
    table = rows(tmp_path)
    proc = start_slow_engine(tmp_path, data)
    run = tmp_path / "out" / "de-en" / "RAN-ALL" / "seed1"
    # in the window the finished run is whole, in its folder or set aside beside it
    aside = run.with_name(".seed1.replaced")
    assert (aside / "result.json").is_file() and not (run / "result.json").exists()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == (128 + sig if sig == signal.SIGTERM else -sig), out
    assert rows(tmp_path) == table  # the table was not rewritten
    if sig == signal.SIGTERM:
        assert without_transf(snapshot(tmp_path / "out")) == without_transf(before), out
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data, "--resume"), fake) == 0
    assert fake.calls == []  # nothing made again: both runs were found finished
    assert without_transf(snapshot(tmp_path / "out")) == without_transf(before)
    assert rows(tmp_path) == table
    assert not list(tmp_path.rglob(".*.replaced"))


def test_one_folder_for_results_and_checkpoints_is_not_a_collision_with_itself(tmp_path, data):  # noqa: F811
    """--out and --checkpoints the same folder: the engine locks each run's folder once (it
    refused its own run as 'in use by process N', N being itself)."""
    args = argv(tmp_path, data)
    args[args.index("--checkpoints") + 1] = tmp_path / "out"
    assert engine(args, FakeFairseq()) == 0
    assert engine([*args, "--resume"], FakeFairseq()) == 0
    assert engine([*args, "--force"], FakeFairseq()) == 0
    assert not list(tmp_path.rglob(".*.replaced"))
    assert (tmp_path / "out" / "de-en" / "RAN-ALL" / "seed1" / "checkpoint_best.pt").is_file()


def test_a_pair_named_twice_is_refused(tmp_path, data):  # noqa: F811
    args = argv(tmp_path, data)
    args[args.index("--pairs") + 1] = "de-en,de-en"
    message = engine(args, FakeFairseq())
    assert message == "reproduce-ran: error: --pairs: de-en appears twice"
