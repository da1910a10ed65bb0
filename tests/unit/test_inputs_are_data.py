"""The lab's inputs are data, never code: a paper file names functions of the project only, and a
Slurm run folder's pickles are never read (a results folder copied from elsewhere must not run code
when the engine collects it). The manifest of ran-remake: tests/unit/test_remake.py."""
import json
import pickle
import shutil
from pathlib import Path

import pytest

from ran_lab.reproduce import papers

REPO = Path(__file__).resolve().parents[2]
MARKER = "foreign-code-ran"


class RunsCode:
    """A pickle that runs code when loaded: it creates ``MARKER`` in the working directory."""

    def __reduce__(self):
        return (open, (MARKER, "w"))


@pytest.mark.parametrize("name", [
    "os:system", "subprocess:run", "builtins:eval",
    "ran_lab.reproduce.launch.slurm:subprocess",  # a module the project imports
    "ran_lab.remake:_private", "ran_lab.remake:os.system",
    "ran_fairseqx.evil:f",
])
def test_a_paper_file_names_only_functions_of_the_project(tmp_path, name):
    folder = tmp_path / "pervasive"
    shutil.copytree(REPO / "configs" / "pervasive", folder)
    spec = json.loads((folder / "reproduce.json").read_text())
    for where in ("measure", "compute"):
        changed = dict(spec)
        if where == "measure":
            changed["measure"] = name
        else:
            changed["columns"] = [{"title": "x", "compute": name}]
        (folder / "reproduce.json").write_text(json.dumps(changed))
        with pytest.raises(papers.PaperFileError, match=f"'{where}' '{name}'"):
            papers.load_paper(folder)
    (folder / "reproduce.json").write_text(json.dumps(spec))
    assert papers.load_paper(folder).measure.__name__ == "pervasive_measure"


def test_a_slurm_failure_is_read_from_text_never_from_a_pickle(tmp_path, monkeypatch):
    """The probe: a result pickle in ``slurm/`` of a run folder ran its code when the engine
    collected the failed job (``--launcher slurm --resume``), even with no cluster running."""
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
    why = slurm.failure(SimpleNamespace(dir=tmp_path / "run"), job_id, ("FAILED", "1:0"))
    assert not (tmp_path / MARKER).exists()
    assert why.startswith("ended FAILED (exit code 1:0): ValueError: --max-tokens must be positive")
    assert f"{job_id}_0_log.out" in why
    (folder / f"{job_id}_0_log.err").unlink()  # no log: the state alone
    assert slurm.failure(SimpleNamespace(dir=tmp_path / "run"), job_id, None).startswith(
        "ended without a result (cancelled or killed; gone from Slurm); log ")
    assert not (tmp_path / MARKER).exists()


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
    import os
    import signal
    import subprocess
    import sys
    import time

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
    import subprocess

    return subprocess.CompletedProcess([], 0, "", "")
