"""The reproduction engine's own logic in this process: its runs' commands go to a stand-in for
fairseq (``ran_lab.reproduce.process.runner``) that writes what fairseq-train and
fairseq-generate would (a log, checkpoints, hypotheses), so the scheduler, the store, ``--resume``,
the table and the errors run without a fairseq process: the store, which replaces a finished run
only once its replacement is whole and keeps a table's rows; what the engine checks before it runs
anything; and the Slurm jobs it collects, read as text, never unpickled. The store through
scripts/reproduce-ran.sh: tests/integration/test_engine_store.py; end-to-end runs with fairseq
itself: tests/system/test_reproduce*.py."""
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import helpers
from helpers import REPO

SYSTEMS = ("TransF", "RAN-ALL")


class FakeFairseq:
    """fairseq-train and fairseq-generate as the engine sees them: a training writes its log
    lines and checkpoints at --max-update; a decoding writes S-/T-/H- lines (the reference, one
    word shorter for every system but the first) and its timing line. ``fail`` names a system
    whose training exits 1."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def run(self, cmd, log, env, pass_fds):
        module, argv = cmd[3], cmd[4:]
        flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
        self.calls.append((module, flags.get("--save-dir") or flags.get("--path")))
        if module == "train":
            if "--eval-bleu" in argv:
                flags["--eval-bleu"] = True
            return self.train(flags, log)
        return self.generate(argv[0], flags, log)

    def train(self, flags, log):
        save_dir = flags["--save-dir"]
        if self.fail and f"/{self.fail}/" in save_dir + "/":
            log.write("Traceback (most recent call last):\nRuntimeError: out of memory\n")
            return 1
        updates = int(flags["--max-update"])
        log.write("num. shared model params: 1,234 (num. trained: 1,234)\n"
                  f"| train | epoch 001 | loss 5.0 | wps 1000.0 | num_updates {updates} "
                  "| train_wall 3 | wall 4\n"
                  f"| valid | epoch 001 | valid on 'valid' subset | loss 4.5 | "
                  + ("bleu 12.5 | " if flags.get("--eval-bleu") else "")
                  + f"num_updates {updates}\n")
        state = {"optimizer_history": [{"num_updates": updates}],
                 "extra_state": {"train_iterator": {"epoch": 1}, "val_loss": 4.5,
                                 "previous_training_time": 3.0}}
        for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
            torch.save(state, f"{save_dir}/{name}")
        return 0

    def generate(self, data, flags, log):
        subset, tgt = flags["--gen-subset"], flags["--target-lang"]
        refs = open(f"{data}/{subset}.tok.{tgt}", encoding="utf-8").read().splitlines()
        first = f"/{SYSTEMS[0]}/" in flags["--path"]
        for i, ref in enumerate(refs):
            hyp = ref if first else " ".join(ref.split()[:-1])
            log.write(f"S-{i}\tsource {i}\nT-{i}\t{ref}\nH-{i}\t-0.5\t{hyp}\n")
        log.write(f"Translated {len(refs)} sentences ({len(refs) * 5} tokens) in 0.5s "
                  f"({2 * len(refs):.2f} sentences/s, {10 * len(refs):.2f} tokens/s)\n")
        return 0


@pytest.fixture
def data(tmp_path):
    """A data-bin folder as far as the engine reads it itself: raw and tokenized text."""
    folder = tmp_path / "bin.de-en"
    folder.mkdir()
    words = "a man is riding a bike down the street in the city today".split()
    for subset in ("test", "valid"):
        refs = [" ".join(words[i % 5:i % 5 + 6]) + f" {i}" for i in range(12)]
        for name in (f"{subset}.raw.en", f"{subset}.tok.en"):
            (folder / name).write_text("".join(r + "\n" for r in refs))
        (folder / f"{subset}.raw.de").write_text("".join(f"quelle {i}\n" for i in range(12)))
    # what fairseq reads (the stand-in reads none of it): the engine checks it is there
    for name in ["dict.de.txt", "dict.en.txt"] + [f"{split}.de-en.{lang}.{ext}"
                                                  for split in ("train", "valid", "test")
                                                  for lang in ("de", "en")
                                                  for ext in ("bin", "idx")]:
        (folder / name).touch()
    return str(tmp_path / "bin.{src}-{tgt}")


def engine(argv, fake, paper="ran"):
    """scripts/reproduce-PAPER.sh's engine in this process, fairseq replaced by ``fake``: its exit
    status (0, or the error)."""
    from ran_lab.reproduce import process
    from ran_lab.reproduce.cli import run_paper
    from ran_lab.reproduce.papers import PAPERS

    with process.runner(fake):
        try:
            run_paper(PAPERS[paper], [str(a) for a in argv])
        except SystemExit as e:
            return e.code
    return 0


def argv(tmp_path, data, *more):
    return ["--config", REPO / "configs" / "ran" / "cpu.json", "--data", data, "--pairs",
            "de-en", "--systems", ",".join(SYSTEMS), "--max-update", "3", "--threads", "1",
            "--out", tmp_path / "out", "--checkpoints", tmp_path / "ckpt", *more]


def test_runs_make_a_table_and_resume_skips_them(tmp_path, data, capsys):
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data), fake) == 0
    assert [m for m, _ in fake.calls] == ["train", "generate", "train", "generate"]  # --jobs 1
    table = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {r["system"]: r for r in table["results"]}
    assert set(rows) == set(SYSTEMS)
    assert rows["TransF"]["sacrebleu"] == pytest.approx(100.0)
    assert rows["RAN-ALL"]["sacrebleu"] < 100.0 and rows["RAN-ALL"]["params"] == 1234
    assert rows["TransF"]["selected"]["num_updates"] == 3
    text = (tmp_path / "out" / "TABLE.md").read_text()
    assert set(helpers.table_rows(text)) == {"TransF", "RAN-ALL"}
    # --resume: every run is done, nothing is run again, the table is the same
    again = FakeFairseq()
    assert engine(argv(tmp_path, data, "--resume"), again) == 0
    assert again.calls == []
    assert json.loads((tmp_path / "out" / "results.json").read_text())["results"] == \
        table["results"]
    assert "done before, skipped (--resume)" in capsys.readouterr().err


def test_a_failed_training_names_its_log_and_keeps_the_other_run(tmp_path, data, capsys):
    status = engine(argv(tmp_path, data, "--jobs", "1"), FakeFairseq(fail="RAN-ALL"))
    message = str(status)
    assert status not in (0, None)
    assert "fairseq-train" in message and "failed with exit code 1" in message, message
    assert "RuntimeError: out of memory" in message
    assert (tmp_path / "out" / "de-en" / "TransF" / "seed1" / "result.json").is_file()
    # the failed run is made by the next --resume, the finished one is not made again
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data, "--resume"), fake) == 0
    assert [m for m, _ in fake.calls] == ["train", "generate"]
    assert all("/RAN-ALL/" in path for _, path in fake.calls)


def test_the_runner_seam_is_where_every_command_goes(tmp_path):
    """Every command of a run goes through process.RUNNER (the engine starts no process of its
    own past it), and the seam is restored after the block."""
    from ran_lab.reproduce import process

    fake = FakeFairseq()
    before = process.RUNNER
    log = tmp_path / "log"
    with process.runner(fake):
        process.run_logged(["-m", "ran_lab.run_fairseq", "train", "data", "--save-dir",
                            str(tmp_path), "--max-update", "2"], log, {}, "fairseq-train")
    assert fake.calls == [("train", str(tmp_path))] and process.RUNNER is before
    assert "num_updates 2" in log.read_text()


def test_a_launcher_in_the_environment_runs_the_python_m_commands_only(tmp_path):
    """RAN_LAB_MODULE_LAUNCHER (which the tests set, to fork the commands from a server that has
    imported fairseq) takes the place of ``python -m``; without it, as for users, and for any
    other command, the command runs as given."""
    from ran_lab.reproduce import process

    cmd = [sys.executable, "-m", "ran_lab.run_fairseq", "train", "data dir"]
    env = {process.LAUNCHER: "/bin/py '/a b/client.py' /s.sock"}
    assert process.launched(cmd, env) == [
        "/bin/py", "/a b/client.py", "/s.sock", "ran_lab.run_fairseq", "train", "data dir"]
    assert process.launched(cmd, {}) == cmd
    assert process.launched([sys.executable, "-c", "pass"], env) == [sys.executable, "-c", "pass"]
    assert process.launched(["scripts/prepare.sh", "-m"], env) == ["scripts/prepare.sh", "-m"]
    # the runner: its output reaches the log through the launcher (here a shell's echo)
    log = tmp_path / "log"
    with open(log, "w") as out:
        assert process.Processes().run(cmd[:4], out, {process.LAUNCHER: "echo launched"}, ()) == 0
    assert log.read_text() == "launched ran_lab.run_fairseq train\n"


@pytest.mark.parametrize("live_memory", [False, True])
def test_the_benchmarks_workers_go_through_the_launcher_but_under_live_memory(
        tmp_path, monkeypatch, live_memory):
    """The benchmark's workers (``python -m ran_lab.bench.worker``) go through the same launcher,
    except under --live-memory, whose mmap threshold glibc reads only in a new interpreter."""
    from ran_lab.bench import harness
    from ran_lab.common.launcher import LAUNCHER

    monkeypatch.setenv(LAUNCHER, "/bin/py /client.py /s.sock")
    ran = []

    def run(cmd, env, **kwargs):
        ran.append((cmd, env))
        spec = json.loads(Path(cmd[-1]).read_text())
        Path(spec["result_path"]).write_text('{"name": "x"}')
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(harness.subprocess, "run", run)
    spec = {"name": "x", "arch": "transformer", "argv": [], "threads": 1,
            "live_memory": live_memory}
    assert harness.run_worker_process(spec, tmp_path) == {"name": "x"}
    (cmd, env), = ran
    worker = ["ran_lab.bench.worker", cmd[-1]]
    if live_memory:
        assert cmd == [sys.executable, "-m", *worker] and "MALLOC_MMAP_THRESHOLD_" in env
    else:
        assert cmd == ["/bin/py", "/client.py", "/s.sock", *worker]


# ---- the store: a finished run is never deleted before its replacement is whole -------------
# The same command again without --resume is refused (naming --resume and --force); with --force
# the finished run's folders stay, set aside in one step, until the new result.json is written,
# and an error, a SIGTERM or a SIGKILL in between leaves (or, at the next engine, puts back) the
# finished run and the table's row.

HERE = Path(__file__).resolve().parent

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


def finished(tmp_path, data):
    assert engine(argv(tmp_path, data), FakeFairseq()) == 0
    return snapshot(tmp_path / "out")


def test_the_same_command_again_is_refused_naming_resume_and_force(tmp_path, data):
    before = finished(tmp_path, data)
    fake = FakeFairseq()
    err = engine(argv(tmp_path, data), fake)
    assert isinstance(err, str) and "\n" not in err
    assert "--resume" in err and "--force" in err and "RAN-ALL/seed1/result.json" in err
    assert fake.calls == [] and snapshot(tmp_path / "out") == before


def test_a_failed_replacement_puts_the_finished_run_back(tmp_path, data):
    before = finished(tmp_path, data)
    assert engine(argv(tmp_path, data, "--force"), FakeFairseq(fail="RAN-ALL")) != 0
    # TransF was made again (its new result replaced it whole); RAN-ALL and the table are as
    # they were
    after = snapshot(tmp_path / "out")
    assert {k: v for k, v in after.items() if "TransF" not in k} == \
        {k: v for k, v in before.items() if "TransF" not in k}
    assert not list((tmp_path / "out").rglob(".*.replaced"))


def test_force_replaces_the_run_and_leaves_nothing_aside(tmp_path, data):
    finished(tmp_path, data)
    fake = FakeFairseq()
    assert engine(argv(tmp_path, data, "--force"), fake) == 0
    assert [m for m, _ in fake.calls] == ["train", "generate", "train", "generate"]
    assert not list(tmp_path.rglob(".*.replaced"))
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["results"]
    assert len(rows) == 2


def start_slow_engine(tmp_path, data):
    marker = tmp_path / "training"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(here=str(HERE), tests=str(HERE.parent), marker=str(marker)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]))
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
def test_a_kill_while_a_finished_run_is_made_again_loses_nothing(tmp_path, data, sig):
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


def test_one_folder_for_results_and_checkpoints_is_not_a_collision_with_itself(tmp_path, data):
    """--out and --checkpoints the same folder: the engine locks each run's folder once (it
    refused its own run as 'in use by process N', N being itself)."""
    args = argv(tmp_path, data)
    args[args.index("--checkpoints") + 1] = tmp_path / "out"
    assert engine(args, FakeFairseq()) == 0
    assert engine([*args, "--resume"], FakeFairseq()) == 0
    assert engine([*args, "--force"], FakeFairseq()) == 0
    assert not list(tmp_path.rglob(".*.replaced"))
    assert (tmp_path / "out" / "de-en" / "RAN-ALL" / "seed1" / "checkpoint_best.pt").is_file()


def test_a_pair_named_twice_is_refused(tmp_path, data):
    args = argv(tmp_path, data)
    args[args.index("--pairs") + 1] = "de-en,de-en"
    message = engine(args, FakeFairseq())
    assert message == "reproduce-ran: error: --pairs: de-en appears twice"


# ---- what the engine decides before it runs anything ----------------------------------------

CONFIG = REPO / "configs" / "ran" / "cpu.json"
SCRIPT = REPO / "scripts" / "reproduce-ran.sh"


def reproduce_paper():
    from ran_lab.reproduce.papers import paper_of

    return paper_of(SCRIPT)


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
         "chrf": 1.0, "ter": 1.0, "subsets": {},
         "commands": stored.recorded()}))
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


@pytest.mark.parametrize("name", ["...", "", "/", "&&", " _ "])
def test_a_system_name_that_gives_no_folder_is_refused_with_the_name(tmp_path, name):
    """A name that slugs to nothing would put its runs in OUT/PAIR/seedN, the folder of a system
    named 'seed1' (whose results the run would delete)."""
    from ran_lab.common.paths import slug
    from ran_lab.reproduce.config import load_systems
    from ran_lab.common import LabError

    with pytest.raises(ValueError, match=re.escape(repr(name))):
        slug(name)
    if not name:
        return  # a systems file refuses an empty name before (it needs a string 'name')
    systems = json.loads((REPO / "configs" / "ran" / "systems.json").read_text())
    systems["systems"] += [{"name": name, "arch": "ran_transformer_small"},
                           {"name": "seed1", "arch": "ran_transformer_small"}]
    path = tmp_path / "systems.json"
    path.write_text(json.dumps(systems))
    with pytest.raises(LabError, match=re.escape(f"system name {name!r} gives no folder name")):
        load_systems(path)


def fake_checkpoint(path, updates, seconds=12.5):
    import torch

    torch.save({"optimizer_history": [{"num_updates": updates}],
                "extra_state": {"previous_training_time": seconds}}, path)


def test_resume_compares_a_checkpoints_updates_with_the_budget(tmp_path):
    """A training whose engine died as it ended (no train_finished.json) is found finished by its
    checkpoint's update count; fairseq-train would take one more update."""
    from ran_lab.common import LabError
    from ran_lab.reproduce.training import finished_at_budget

    run = SimpleNamespace(save_dir=tmp_path, train_argv=["data", "--max-update", "20"])
    assert finished_at_budget(run, "x") is None  # no checkpoint: train
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 19)
    assert finished_at_budget(run, "x") is None  # short of the budget: train on
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 20)
    assert finished_at_budget(run, "x") == 12.5  # at the budget: finished
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 21)
    with pytest.raises(LabError, match=r"at update 21, past this run's --max-update 20"):
        finished_at_budget(run, "x")


def test_the_engines_own_loads_ask_for_weights_only(tmp_path, monkeypatch):
    """The engine reads a checkpoint's updates, its selected checkpoint and its training time with
    torch's weights-only unpickler (the plugin's own loads: test_checkpoint_loading.py)."""
    from ran_lab.reproduce import checkpoints, logs

    fake_checkpoint(tmp_path / "checkpoint_last.pt", 5)
    calls = []
    load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: (calls.append(k), load(*a, **k))[1])
    checkpoints.checkpoint_updates(tmp_path / "checkpoint_last.pt")
    checkpoints.selected_checkpoint(tmp_path / "checkpoint_last.pt")
    logs.training_seconds(tmp_path, [], 1.0)
    assert len(calls) == 3 and all(k.get("weights_only") is True for k in calls), calls


def test_the_engine_removes_partial_checkpoints_a_killed_training_left(tmp_path):
    from ran_lab.reproduce.checkpoints import remove_partial_files

    for name in ("checkpoint_last.pt", "checkpoint_1_4.pt.tmp", "checkpoint_last.pt.tmp-12-0a1b2c3d",
                 "train_argv.json"):
        (tmp_path / name).write_text("x")
    remove_partial_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt", "train_argv.json"]


# ---- Slurm jobs, collected -------------------------------------------------------------------

def test_a_slurm_table_whose_jobs_all_failed_is_an_error(tmp_path, monkeypatch):
    """--launcher slurm with every job failed: the engine said "no run finished yet" and exited
    0, so a failed job went unseen (it now names the runs and their jobs' errors, as it does
    when some runs finished)."""
    from ran_lab.reproduce import cli
    from ran_lab.common import LabError

    args = cli.parse_cli(reproduce_paper(), [
        "--config", str(CONFIG), "--pairs", "de-en", "--systems", "TransF",
        "--out", str(tmp_path / "out"), "--checkpoints", str(tmp_path / "ckpt"),
        "--launcher", "slurm"])
    reason = "de-en TransF seed 1 (Slurm job 7 ended FAILED: ValueError: boom; --resume ...)"

    from ran_lab.reproduce.schedule import Made

    monkeypatch.setattr(cli, "prepare", lambda *_: None)
    monkeypatch.setattr(cli, "check_jobs", lambda *_: None)
    monkeypatch.setattr(cli, "make_all", lambda *_: Made([], [reason], [reason]))
    with pytest.raises(LabError, match=r"1 run\(s\) without a result: .*ValueError: boom"):
        cli.run_all(reproduce_paper(), args)
    # jobs still under way (none failed): collected later, no error
    monkeypatch.setattr(cli, "make_all", lambda *_: Made([], ["under way"], []))
    assert cli.run_all(reproduce_paper(), args) is None


MARKER = "foreign-code-ran"


class RunsCode:
    """A pickle that runs code when loaded: it creates ``MARKER`` in the working directory."""

    def __reduce__(self):
        return (open, (MARKER, "w"))


def test_a_slurm_failure_is_read_from_text_never_from_a_pickle(tmp_path, monkeypatch):
    """A result pickle in ``slurm/`` of a run folder must not run its code when the engine
    collects the failed job (``--launcher slurm --resume``), even with no cluster running."""
    pytest.importorskip("submitit")
    from types import SimpleNamespace

    from ran_lab.reproduce.launch import slurm

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "run" / "slurm"
    folder.mkdir(parents=True)
    job_id = "4242"
    (folder / f"{job_id}_0_result.pkl").write_bytes(pickle.dumps(("error", RunsCode())))
    (folder / f"{job_id}_0_log.err").write_text(
        "Traceback (most recent call last):\n  File \"x\", line 1\n"
        "ValueError: --max-tokens must be positive\nsrun: error: task 0 exited\n")
    why = slurm.failure(SimpleNamespace(dir=tmp_path / "run"), job_id, "FAILED")
    assert not (tmp_path / MARKER).exists()
    assert why.startswith("ended FAILED: ValueError: --max-tokens must be positive")
    assert f"{job_id}_0_log.out" in why
    (folder / f"{job_id}_0_log.err").unlink()  # no log: the state alone
    assert slurm.failure(SimpleNamespace(dir=tmp_path / "run"), job_id, None).startswith(
        "ended without a result (cancelled or killed; gone from Slurm); log ")
    assert not (tmp_path / MARKER).exists()


def test_a_job_the_accounting_does_not_know_yet_is_pending_only_just_after_its_submission(
        tmp_path, monkeypatch):
    """sacct learns of a job moments after sbatch returns: until then a run whose slurm.json says
    it was just submitted is in use (pending), so a second engine leaves it alone; later, a job
    the accounting does not know has ended."""
    from types import SimpleNamespace

    from ran_lab.reproduce.launch import jobs

    states = {"4242": None}
    monkeypatch.setattr(jobs, "job_of", lambda run, job_id: job_id)
    monkeypatch.setattr(jobs, "job_state", lambda job: states[job])
    run = SimpleNamespace(dir=tmp_path)
    now = time.time()
    assert jobs.recorded_state(run, {"job_id": "4242", "submitted": now - 2}) == "PENDING"
    late = now - jobs.JUST_SUBMITTED_SECONDS - 1
    assert jobs.recorded_state(run, {"job_id": "4242", "submitted": late}) is None
    assert jobs.recorded_state(run, {"job_id": "4242"}) is None  # a record without its time
    states["4242"] = "COMPLETED"
    assert jobs.recorded_state(run, {"job_id": "4242", "submitted": now - 2}) == "COMPLETED"


# ---- the table: seeds, subsets, runs missing from it, speed ratios under the same conditions -

def test_seeds_subsets_and_bleu_selection(tmp_path, data):
    """Two seeds, the test and valid subsets, and the best checkpoint by validation BLEU
    (fairseq's --eval-bleu): one result per seed, mean ± std in the table, a section per subset;
    then a system run with one seed only, and its other seed on more threads."""
    cfg = json.loads((REPO / "configs" / "ran" / "cpu.json").read_text())
    cfg.update(select="bleu", gen_subset=["test", "valid"],
               systems=str(REPO / "configs" / "ran" / "systems.json"),
               paper=str(REPO / "configs" / "ran" / "paper.json"))
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "out"

    def run(systems, seeds, *more):
        return engine(["--config", path, "--data", data, "--pairs", "de-en", "--systems", systems,
                       "--seeds", seeds, "--max-update", "2", "--out", out, "--checkpoints",
                       tmp_path / "ckpt", *more], FakeFairseq())

    assert run("TransF", "3,4", "--threads", "1") == 0
    report = json.loads((out / "results.json").read_text())
    assert [(r["system"], r["seed"]) for r in report["results"]] == [("TransF", 3), ("TransF", 4)]
    for r in report["results"]:
        assert r["train_argv"][r["train_argv"].index("--seed") + 1] == str(r["seed"])
        assert "--eval-bleu" in r["train_argv"] and r["valid_curve"][-1]["bleu"] == 12.5
        assert set(r["subsets"]) == {"test", "valid"}
        assert (out / "de-en" / "TransF" / f"seed{r['seed']}" / "hyp.detok.valid.txt").is_file()
    table = (out / "TABLE.md").read_text()
    assert "## de-en (test)" in table and "## de-en (valid)" in table
    rows = helpers.table_rows(table.split("## de-en (valid)")[0])
    values = [r["subsets"]["test"]["sacrebleu"] for r in report["results"]]
    mean, std = sum(values) / 2, abs(values[0] - values[1]) / 2 ** 0.5
    assert rows["TransF"]["sacreBLEU"] == f"{mean:.2f} ± {std:.2f}"
    assert rows["TransF"]["seeds"] == "3, 4"

    # a system run with seed 3 only, tabulated with both seeds: its row says so, and its speed
    # ratios are against TransF's seed 3, not the mean over TransF's two seeds
    assert run("RAN-ALL", "3", "--threads", "1") == 0
    assert run("TransF,RAN-ALL", "3,4", "--threads", "1", "--resume", "--stop-after", "0") == 0
    report = json.loads((out / "results.json").read_text())
    runs = {(r["system"], r["seed"]): r for r in report["results"]}
    assert set(runs) == {("TransF", 3), ("TransF", 4), ("RAN-ALL", 3)}
    assert report["settings"]["not_run"] == ["de-en RAN-ALL seed 4"]
    table = (out / "TABLE.md").read_text()
    assert "rerun with --resume): de-en, seed 4: RAN-ALL." in table
    rows = helpers.table_rows(table.split("## de-en (valid)")[0])
    assert rows["RAN-ALL"]["seeds"] == "3"
    time_ratio = runs["RAN-ALL", 3]["train_seconds"] / runs["TransF", 3]["train_seconds"]
    assert rows["RAN-ALL"]["train time ×TransF"] == f"{time_ratio:.2f}"

    def speed(r):
        return r["subsets"]["test"]["decode"]["sentences_per_s"]

    speed_ratio = f"{speed(runs['RAN-ALL', 3]) / speed(runs['TransF', 3]):.2f}"
    assert rows["RAN-ALL"]["sent/s ×TransF"] == speed_ratio

    # its seed 4 on two threads, where TransF's ran on one: tabulated, but left out of the
    # ratios (no TransF run under its conditions), which stay seed 3's
    assert run("RAN-ALL", "4", "--threads", "2", "--resume") == 0
    assert run("TransF,RAN-ALL", "3,4", "--threads", "1", "--resume", "--stop-after", "0") == 0
    table = (out / "TABLE.md").read_text()
    rows = helpers.table_rows(table.split("## de-en (valid)")[0])
    assert rows["RAN-ALL"]["seeds"] == "3, 4"
    assert rows["RAN-ALL"]["train time ×TransF"] == f"{time_ratio:.2f}"
    assert rows["RAN-ALL"]["sent/s ×TransF"] == speed_ratio
    assert "1/2 (each run's in results.json) thread(s)" in table


def test_an_engine_that_finished_meanwhile_keeps_its_row(tmp_path, data, monkeypatch):
    """Engine B (TransF, 2 updates) passes its start checks on an empty --out; engine A (RAN-ALL,
    3 updates: other settings) starts after them and finishes, table written, before B's table.
    B's table would drop A's row: B refuses naming A's result, A's table stays, and B's result
    is kept on disk."""
    from ran_lab.reproduce import cli

    out = tmp_path / "out"
    common = ["--config", REPO / "configs" / "ran" / "cpu.json", "--data", data, "--pairs",
              "de-en", "--threads", "1", "--out", out, "--checkpoints", tmp_path / "ckpt"]
    real = cli.make_all
    other = {}

    def a_finishes_meanwhile(*args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(cli, "make_all", real)
            other["status"] = engine(common + ["--systems", "RAN-ALL", "--max-update", "3"],
                                     FakeFairseq())
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "make_all", a_finishes_meanwhile)
    status = engine(common + ["--systems", "TransF", "--max-update", "2"], FakeFairseq())
    assert other["status"] == 0
    table_of_a = json.loads((out / "results.json").read_text())
    assert [r["system"] for r in table_of_a["results"]] == ["RAN-ALL"]
    assert status not in (0, None), "the second table dropped the first engine's row"
    message = str(status)
    assert "the table was not written" in message and "RAN-ALL/seed1/result.json was made with " \
        "other settings (training: --max-update 3 → 2)" in message, message
    assert (out / "de-en" / "TransF" / "seed1" / "result.json").is_file()  # kept
    assert json.loads((out / "results.json").read_text()) == table_of_a  # A's table as it was


def test_the_engine_writes_claims_beside_the_table(tmp_path, data):
    """The engine writes CLAIMS.md and CLAIMS.json beside TABLE.md, from the paper's claims file:
    a claim whose systems ran is judged, one whose systems did not is "not run"."""
    from ran_lab import claims as lab
    from ran_lab.claims import rule

    out = tmp_path / "out"
    assert engine(["--config", REPO / "configs" / "recurrent_cross" / "cpu.json", "--data", data,
                   "--pairs", "de-en", "--systems", "baseline,coverage", "--max-update", "2",
                   "--out", out, "--checkpoints", tmp_path / "ckpt"], FakeFairseq(),
                  "recurrent_cross") == 0
    assert (out / "TABLE.md").is_file() and (out / "CLAIMS.json").is_file()
    text = (out / "CLAIMS.md").read_text(encoding="utf-8")
    claims_, results, verdicts = lab.compute(out, repo=REPO, compute_missing=False)
    assert text == lab.render(claims_, results, verdicts, REPO)[0]
    by = {v.key: v for v in verdicts}
    coverage = dict(by["R-5.2-level@de-en"].comparisons)["coverage"]
    assert coverage.n == 1 and coverage.verdict != rule.NOT_RUN
    assert by["R-T1-order@de-en"].verdict == rule.NOT_RUN  # the expand-kv variants did not run
