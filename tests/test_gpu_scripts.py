"""The scripts for GPU machines that run here without one: scripts/gpu-batch.sh (commands side by
side until a deadline, results packed) and the usage of scripts/offline-gpu.sh (its install path ran
on the lent H100 that made results/*/gpu; it builds fairseq, minutes on 2 cores)."""
import os
import subprocess
import tarfile
import time

import helpers

BATCH = helpers.REPO / "scripts" / "gpu-batch.sh"
OFFLINE = helpers.REPO / "scripts" / "offline-gpu.sh"


def test_batch_runs_commands_side_by_side_and_stops_them_at_the_deadline(tmp_path):
    plan = tmp_path / "plan"
    marks = tmp_path / "marks"
    plan.write_text(f"sleep 1; echo reproduce-x: first BLEU 1; touch {marks}.1\n\n"
                    f"sleep 1; echo reproduce-x: second BLEU 2; touch {marks}.2\n"
                    f"sleep 60; touch {marks}.late\n")
    out = tmp_path / "out"
    env = dict(os.environ, PREPARE="0")
    proc = subprocess.run(["bash", str(BATCH), "8", str(plan), str(out)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # both short commands ran (side by side: each sleeps 1 s), the long one was stopped
    assert (tmp_path / "marks.1").exists() and (tmp_path / "marks.2").exists()
    assert not (tmp_path / "marks.late").exists()
    assert "reproduce-x: first BLEU 1" in proc.stdout and "reproduce-x: second BLEU 2" in proc.stdout
    ended = int(proc.stdout.split("commands ended at ")[1].split()[0])
    assert 7 <= ended <= 20, proc.stdout
    with tarfile.open(out / "logs.tgz") as tar:
        names = {os.path.basename(n) for n in tar.getnames()}
    assert {"command-1.log", "command-2.log", "command-3.log"} <= names
    assert (out / "results.tgz").is_file()


def test_batch_takes_a_deadline_as_a_time_and_refuses_one_past(tmp_path):
    # @EPOCH: the deadline fixed before whatever precedes the batch (a build), as in the plans'
    # README; the batch stops its commands there, not SECONDS after its own start
    plan = tmp_path / "plan"
    plan.write_text(f"sleep 60; touch {tmp_path}/late\n")
    env = dict(os.environ, PREPARE="0")
    t0 = time.time()
    proc = subprocess.run(["bash", str(BATCH), f"@{int(t0) + 5}", str(plan), str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    ended = int(proc.stdout.split("commands ended at ")[1].split()[0])  # s after the batch's start
    assert ended <= 15 and not (tmp_path / "late").exists(), proc.stdout
    for when in (f"@{int(t0) - 10}", "0", "ten"):
        proc = subprocess.run(["bash", str(BATCH), when, str(plan), str(tmp_path / "out2")], env=env,
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and "positive number of seconds" in proc.stderr, (when, proc)
        assert not (tmp_path / "out2").exists()


def test_usage_errors_exit_2_and_say_how():
    for script, args in ((BATCH, []), (BATCH, ["5", "plan"]), (OFFLINE, []), (OFFLINE, ["nope", "x"])):
        proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, (script.name, args, proc.stderr)
        assert script.name in proc.stderr or "scripts/" in proc.stderr, proc.stderr
