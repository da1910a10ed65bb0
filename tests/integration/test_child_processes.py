"""The processes the project starts end with the one that started them: the engine's SIGTERM or
SIGINT reaches its child (in a process group of its own) and stops the engine, a SIGKILLed engine
takes its child with it, a process forked from the engine (a pool worker of the data preparation)
ends by the signal without stopping the engine's trainings, and data preparation starts
fairseq-preprocess tied to itself (``ran_text.tied``), so that a killed preparation leaves no
preprocessing behind. The same holds of a command the engine runs through the tests' fork server
(``helpers.module_launcher``, as the system tests run the engine's fairseq commands), which
runs it as ``python -m`` would."""
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

import helpers
from helpers import REPO


ENGINE = """
import os, sys, time
sys.path.insert(0, {repo!r})
from ran_lab.reproduce import process
from ran_lab.reproduce.runguard import Stopped
process.CHILDREN.install()
child = "import os, time; open({pidfile!r}, 'w').write(str(os.getpid())); time.sleep(120)"
argv = {argv!r} or ["-c", child]
try:
    process.run_logged(argv, {log!r}, dict(os.environ), "a child")
except Stopped as e:
    print("stopped by", e, flush=True)
    sys.exit(143)
"""


def start_engine(tmp_path, argv=None, env=None):
    """An engine running one child (``python -c``, or ``python ARGV`` that writes its pid to
    ``tmp_path/child.pid``), and the child's pid."""
    pidfile = tmp_path / "child.pid"
    code = ENGINE.format(repo=str(REPO), pidfile=str(pidfile), log=str(tmp_path / "child.log"),
                         argv=argv)
    engine = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, text=True, env=env)
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


def test_a_killed_engine_takes_its_child_with_it(tmp_path):
    engine, child = start_engine(tmp_path)
    try:
        engine.kill()  # SIGKILL: no handler runs; PR_SET_PDEATHSIG ends the child
        engine.wait()
        assert gone(child)
    finally:
        if not gone(child, 0):
            os.kill(child, signal.SIGKILL)


PROBE = """import os, sys, time
print(os.getcwd(), os.environ.get("PROBE"), sys.argv[1:], sys.stdin.read(), flush=True)
if sys.argv[1] == "exit":
    sys.exit(3)
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(120)
"""


def test_the_tests_fork_server_runs_an_engines_command_as_python_m_would(tmp_path):
    """Through ``helpers.module_launcher`` a module gets the caller's working directory,
    environment (its PYTHONPATH too), arguments and stdin, and its exit status comes back; the
    engine's SIGTERM reaches it, and it ends with a SIGKILLed engine or a SIGKILLed client."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "probe_module.py").write_text(PROBE)
    launcher = shlex.split(helpers.module_launcher())
    env = dict(os.environ, PROBE="p", PYTHONPATH=f"{tmp_path / 'mods'}{os.pathsep}{REPO}")
    proc = subprocess.run([*launcher, "probe_module", "exit"], cwd=tmp_path, env=env,
                          input="in", capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (3, f"{tmp_path} p ['exit'] in\n"), proc.stderr
    env[helpers.MODULE_LAUNCHER] = shlex.join(launcher)
    for stop in ("SIGTERM", "SIGKILL"):
        (tmp_path / "child.pid").unlink(missing_ok=True)
        engine, child = start_engine(
            tmp_path, ["-m", "probe_module", "sleep", str(tmp_path / "child.pid")], env)
        try:
            if stop == "SIGTERM":
                engine.send_signal(signal.SIGTERM)
                out, _ = engine.communicate(timeout=30)
                assert engine.returncode == 143 and "stopped by SIGTERM" in out
            else:
                engine.kill()
                engine.wait()
            assert gone(child), stop
        finally:
            engine.kill()
            if not gone(child, 0):
                os.kill(child, signal.SIGKILL)
    (tmp_path / "child.pid").unlink()
    client = subprocess.Popen([*launcher, "probe_module", "sleep", str(tmp_path / "child.pid")],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (tmp_path / "child.pid").is_file() or not (tmp_path / "child.pid").read_text():
        assert time.monotonic() < deadline and client.poll() is None, "the child did not start"
        time.sleep(0.1)
    child = int((tmp_path / "child.pid").read_text())
    try:
        client.kill()
        client.wait()
        assert gone(child)
    finally:
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


CHILD_OF_A_KILLED_PARENT = """
import subprocess, sys, time
from ran_text import tied
proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                        preexec_fn=tied.tied_to_this_process())
print(proc.pid, flush=True)
time.sleep(120)
"""


def test_a_child_ends_with_its_killed_parent():
    """Data preparation starts fairseq-preprocess (and its pool workers) tied to itself
    (``ran_text.tied``): a preparation killed by SIGKILL left fairseq-preprocess running,
    re-parented to PID 1, writing a data-bin every rerun then refused."""
    if tied_prctl() is None:
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    parent = subprocess.Popen([sys.executable, "-c", CHILD_OF_A_KILLED_PARENT],
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{child}/stat").read().split()[2] == "Z":  # ended, not yet reaped
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its SIGKILLed parent")


def tied_prctl():
    from ran_text import tied

    return tied._PRCTL


def test_preparation_starts_fairseq_preprocess_tied(monkeypatch, tmp_path):
    """fairseq-preprocess goes through ``tied.run`` (whose behaviour the test above checks)."""
    from ran_text import tied
    from ran_text.prepare import steps

    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess_result()

    monkeypatch.setattr(tied, "run", run)
    prefixes = {s: tmp_path / s for s in ("train", "valid", "test")}
    steps.binarize(prefixes, "de", "en", tmp_path / "bin", 1, joined=True)
    assert calls and "fairseq_cli.preprocess" in calls[0]


def subprocess_result():
    return subprocess.CompletedProcess([], 0, "", "")
