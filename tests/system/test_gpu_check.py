"""scripts/gpu-check.sh on the CPU: its arguments, its plan, its verdicts, its deadline and its
report (ran_lab/gpucheck). The GPU itself is what the script is for; here its machinery
runs with --device cpu on the tiny synthetic corpus."""
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

import helpers
from ran_lab.gpucheck import plan, training

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check.sh"


def gpu_check(*args, timeout=600, env=None):
    """The script, its trainings (``python -m ran_lab.run_fairseq train``) forked from a server
    that has imported torch and fairseq once (``RAN_LAB_MODULE_LAUNCHER``)."""
    env = dict(helpers.fairseq_env(), PYTHON=sys.executable, **(env or {}),
               **{helpers.MODULE_LAUNCHER: helpers.module_launcher()})
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env)


# joined_databin (tests/conftest.py): the recipes share their embeddings
# (--share-all-embeddings), so the corpus has one joined dictionary


@pytest.mark.parametrize("args, message", [
    (["abc", "OUT"], "positive number of seconds"),
    (["@1", "OUT"], "positive number of seconds"),
    (["60", "OUT", "--systems", "nope"], "--systems: 'nope' is not in"),
    (["60", "OUT", "--dtypes", "float8"], "unknown dtype 'float8'"),
    (["60", "OUT", "--steps", "tests,fly"], "--steps: unknown step 'fly'"),
    (["60", "OUT", "--updates", "0"], "--updates must be at least 1"),
])
def test_bad_arguments_are_one_line_errors(args, message, tmp_path):
    proc = gpu_check(*[a.replace("OUT", str(tmp_path / "out")) for a in args])
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().split("\n")) == 1
    assert not (tmp_path / "out").exists()


def test_the_plan_covers_every_custom_backward_in_three_dtypes():
    config = plan.load("configs/gpu-check.json")
    jobs = plan.jobs(config, "cuda")
    systems = {j.system for j in jobs}
    recurrent = {"prev-context", "prev-weight", "prev-accum-weight", "expand-kv 1", "expand-kv 2",
                 "expand-kv 3", "expand-kv 4", "continuous", "coverage"}
    assert {"RAN-ALL", "max-attn", *recurrent} <= systems
    archs = {j.argv[j.argv.index("--arch") + 1].split("_small")[0] for j in jobs}
    assert archs == {"ran_transformer", "recurrent_cross_transformer", "pervasive_attention",
                     "rnnsearch_dynmem"}
    assert [j.system for j in jobs[:3]] == ["RAN-ALL"] * 3  # priority order, system-major
    by = {j.name: j.argv for j in jobs}
    assert "--fp16" in by["RAN-ALL.float16"] and "--bf16" in by["RAN-ALL.bfloat16"]
    assert not {"--fp16", "--bf16", "--cpu"} & set(by["RAN-ALL.float32"])
    for argv in by.values():  # the check owns the budget and the log, and saves nothing
        assert argv.count("--max-update") == 1 and argv.count("--log-format") == 1
        assert "--no-save" in argv and "--save-dir" not in argv


def test_plan_prints_the_trainings_and_their_time_and_runs_nothing(tmp_path):
    proc = gpu_check(600, tmp_path / "out", "--plan")
    assert proc.returncode == 0, proc.stderr
    config = plan.load("configs/gpu-check.json")
    n = len(config["systems"]) * len(config["dtypes"])
    assert f"{n} trainings of {config['updates']} updates" in proc.stdout
    assert f"about {plan.estimate_seconds(config, n):.0f} s" in proc.stdout
    assert not (tmp_path / "out").exists()


def _log(losses, valid=None, updates=None):
    lines = [json.dumps({"epoch": 1, "loss": str(x), "num_updates": str(10 * (i + 1))})
             for i, x in enumerate(losses)]
    if valid is not None:
        lines.append("INFO | valid | " + json.dumps({"valid_loss": str(valid),
                                                     "valid_num_updates": str(updates)}))
    return "\n".join(lines)


@pytest.mark.parametrize("losses, valid, ref, passed, reason", [
    ([9, 8, 7, 6, 5, 4], 4.0, None, True, "passed"),
    ([9, 8, 7, 6, 5, 4], 4.1, 4.0, True, "passed"),
    ([9, 8, 7, 6, 5, 4], 4.5, 4.0, False, "from float32's 4.000"),
    ([9, 8, math.nan, 6, 5, 4], 4.0, None, False, "not finite"),
    ([4, 5, 6, 7, 8, 9], 4.0, None, False, "did not fall"),
    ([9, 8, 7, 6, 5], 4.0, None, False, "stopped at update 50 of 60"),
    ([9, 8, 7, 6, 5, 4], None, None, False, "no finite validation loss"),
])
def test_verdicts(losses, valid, ref, passed, reason):
    parsed = training.parse(_log(losses, valid, 60), 60)
    ok, why = training.judge(parsed, 60, 3, ref, 0.05)
    assert ok is passed and reason in why


def test_trains_judges_and_reports_on_the_cpu(joined_databin, tmp_path):
    out = tmp_path / "out"
    proc = gpu_check(400, out, "--device", "cpu", "--steps", "training,speed", "--systems",
                     "RAN-ALL,prev-accum-weight", "--dtypes", "float32", "--updates", "8",
                     "--data", joined_databin)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "check.json").read_text())
    assert report["environment"]["device"] == "cpu" and report["environment"]["torch"]
    rows = report["steps"]["training"]["rows"]
    assert [(r["system"], r["status"]) for r in rows] == [("RAN-ALL", "passed"),
                                                          ("prev-accum-weight", "passed")]
    assert all(r["updates"] == 8 and math.isfinite(r["valid_loss"]) for r in rows)
    assert report["steps"]["speed"]["status"] == "not run"
    md = (out / "CHECK.md").read_text()
    assert helpers.table_rows(md)["RAN-ALL"]["float32"].startswith("passed, valid ")
    assert not list(out.rglob("*.pt"))  # no checkpoints
    logs = list(out.rglob("*.log"))
    assert logs and not any(str(helpers.REPO) in log.read_text() for log in logs)  # portable


def test_the_deadline_stops_the_trainings_and_keeps_the_report(joined_databin, tmp_path):
    out = tmp_path / "out"
    start = time.time()
    # a short deadline: RAN_GPU_CHECK_MIN_SECONDS lets the training step start with under 25 s
    # left (it needs 60 s otherwise), so the deadline, not the updates, ends the training
    proc = gpu_check(25, out, "--device", "cpu", "--steps", "training", "--systems", "RAN-ALL",
                     "--dtypes", "float32", "--updates", "1000000", "--data", joined_databin,
                     env={"RAN_GPU_CHECK_MIN_SECONDS": "1"})
    took = time.time() - start
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "check.json").read_text())
    # the deadline counts from the check's start (after Python has imported torch and fairseq)
    assert report["deadline"] == report["started"] + 25
    late = report["finished"] - report["deadline"]
    assert late < 15, f"the check ended {late:.0f} s after its deadline"
    assert took < 25 + 120
    rows = report["steps"]["training"]["rows"]
    assert rows[0]["status"] == "stopped" and "deadline" in rows[0]["reason"]
    assert "stopped: the deadline stopped it" in (out / "CHECK.md").read_text()


def test_a_step_without_its_minimum_left_is_not_started(tmp_path):
    out = tmp_path / "out"
    proc = gpu_check(20, out, "--device", "cpu", "--steps", "training", "--systems", "RAN-ALL",
                     "--dtypes", "float32", "--updates", "1",
                     env={"RAN_GPU_CHECK_MIN_SECONDS": ""})  # the step's own minimum, 60 s
    assert proc.returncode == 0, proc.stderr
    assert "gpu-check: training: not started" in proc.stderr
    assert json.loads((out / "check.json").read_text())["steps"] == {}


def test_a_bad_minimum_is_a_one_line_error(tmp_path):
    proc = gpu_check(60, tmp_path / "out", "--device", "cpu", "--steps", "training",
                     env={"RAN_GPU_CHECK_MIN_SECONDS": "soon"})
    assert proc.returncode == 2, proc.stderr
    assert "RAN_GPU_CHECK_MIN_SECONDS must be a whole number" in proc.stderr
    assert len(proc.stderr.strip().split("\n")) == 1
    assert not (tmp_path / "out").exists()


def test_the_tests_step_runs_the_device_aware_tests_only(tmp_path):
    out = tmp_path / "out"
    proc = gpu_check(500, out, "--device", "cpu", "--steps", "tests", "--tests",
                     "test_incremental_matches_full_forward and ran-all")
    assert proc.returncode == 0, proc.stderr
    tests = json.loads((out / "check.json").read_text())["steps"]["tests"]
    assert tests["status"] == "passed" and tests["tests"] == 2 and tests["failures"] == 0
