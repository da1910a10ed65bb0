"""The scripts for GPU machines, run here without one: scripts/gpu-batch.sh (commands side by side
until a deadline, results packed), scripts/gpu-speed.sh (benchmarks one after another until a
deadline, with a stand-in interpreter) and the usage of scripts/offline-gpu.sh (its install path
builds fairseq, minutes on 2 cores; it ran on the GPU machines that made results/*/gpu*), whose
folders are private to the user who runs it."""
import os
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

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


def _fake_root(tmp_path, prepare_body):
    """A checkout holding gpu-batch.sh and a stand-in for prepare-multi30k.sh."""
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "gpu-batch.sh").write_text(BATCH.read_text())
    prep = root / "scripts" / "prepare-multi30k.sh"
    prep.write_text("#!/usr/bin/env bash\n" + prepare_body)
    prep.chmod(0o755)
    return root


def test_batch_starts_no_command_when_a_data_bin_cannot_be_made(tmp_path):
    # as on a GPU node without ../shared: one prepare fails, the plan must not start
    root = _fake_root(tmp_path, 'if [ "$1 $2 $3" = "de en " ]; then\n'
                                '  echo "prepare: error: Multi30k raw files not found" >&2; exit 1\nfi\n')
    plan = tmp_path / "plan"
    plan.write_text(f"touch {tmp_path}/started\n")
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu-batch.sh"), "30", str(plan), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert not (tmp_path / "started").exists()
    assert "prepare-de-en failed" in proc.stderr and "raw files not found" in proc.stderr
    assert "prepare-en-de" not in proc.stderr and "offline-gpu.sh data" in proc.stderr
    assert "data prepared" not in proc.stdout
    with tarfile.open(out / "logs.tgz") as tar:  # the logs still come back
        assert "prepare-de-en.log" in {os.path.basename(n) for n in tar.getnames()}
    # the same batch with every data-bin made runs its plan
    root = _fake_root(tmp_path / "ok", "exit 0\n")
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu-batch.sh"), "30", str(plan), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and (tmp_path / "started").exists(), proc.stderr


def test_batch_packs_what_its_commands_wrote_under_results_and_nothing_older(tmp_path):
    # runs added to a CPU table (results/ran/long) come back as well as results/*/gpu* folders;
    # the table's older runs and the generate dumps stay behind
    root = _fake_root(tmp_path, "exit 0\n")
    old = root / "results" / "ran" / "long" / "de-en" / "TransF" / "seed1" / "result.json"
    old.parent.mkdir(parents=True)
    old.write_text("{}")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    new = "results/ran/long/de-en/HC-SA/seed2"
    plan = tmp_path / "plan"
    plan.write_text(f"cd {root} && mkdir -p {new} results/pervasive/gpu-long && "
                    f"echo 1 > {new}/result.json && echo 2 > {new}/generate.txt && "
                    f"echo 3 > results/pervasive/gpu-long/TABLE.md\n")
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu-batch.sh"), "30", str(plan), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(out / "results.tgz") as tar:
        names = set(tar.getnames())
    assert names == {f"{new}/result.json", "results/pervasive/gpu-long/TABLE.md"}, names


def test_batch_uses_an_mps_daemon_already_running_and_starts_one_otherwise(tmp_path):
    # a second batch on a machine still held found the first's daemon: `pgrep -x` cannot see it
    # (its name is over 15 characters), `-d` then failed and the batch stopped the daemon
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    ctl = bin_ / "nvidia-cuda-mps-control"
    ctl.write_text(f'#!/usr/bin/env bash\necho "args:$*" >> {calls}\n'
                   f'[ -t 0 ] || {{ read -r line && echo "stdin:$line" >> {calls}; }}\nexit 0\n')
    ctl.chmod(0o755)
    env = dict(os.environ, PREPARE="0", PATH=f"{bin_}:{os.environ['PATH']}")
    plan = tmp_path / "plan"
    plan.write_text("true\n")

    def batch():
        return subprocess.run(["bash", str(BATCH), "20", str(plan), str(tmp_path / "out")], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)

    daemon = subprocess.Popen(["bash", "-c", "exec -a nvidia-cuda-mps-control sleep 60"])
    try:
        time.sleep(0.3)
        proc = batch()
    finally:
        daemon.kill()
        daemon.wait()
    assert proc.returncode == 0, proc.stderr
    assert "MPS already running" in proc.stdout
    assert "stays running" in proc.stdout  # a timing on the node would go through it
    assert not calls.exists(), calls.read_text()  # neither started nor stopped
    # no daemon: one is started, and stopped again where CUDA does not answer through it (here)
    proc = batch()
    assert proc.returncode == 0, proc.stderr
    log = calls.read_text()
    assert "args:-d" in log
    import torch
    if not torch.cuda.is_available():
        assert "stdin:quit" in log and "MPS unavailable" in proc.stdout, (log, proc.stdout)
        assert "stays running" not in proc.stdout


def test_offline_data_copies_multi30k_and_run_points_the_scripts_at_it(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("train.de.gz", "val.en.gz", "notes.txt"):
        (raw / name).write_bytes(b"x")
    (raw / "train.de.gz").chmod(0o444)  # as in ../shared: read-only
    wheels = tmp_path / "wheels"
    for _ in range(2):  # a second copy overwrites the first
        proc = subprocess.run(["bash", str(OFFLINE), "data", str(wheels)], capture_output=True,
                              text=True, timeout=30, env=dict(os.environ, MULTI30K_DIR=str(raw)))
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (wheels / "multi30k").iterdir()) == ["train.de.gz", "val.en.gz"]
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(["bash", str(OFFLINE), "data", str(tmp_path / "w2")], capture_output=True,
                          text=True, timeout=30, env=dict(os.environ, MULTI30K_DIR=str(empty)))
    assert proc.returncode == 1 and "MULTI30K_DIR" in proc.stderr and str(empty) in proc.stderr

    # `run` with a stand-in interpreter (installs nothing) and fairseq's wheel from an earlier
    # build in the cache: no build, and the command sees MULTI30K_DIR=DIR/multi30k
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho fake-python\n")
    fake.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "fairseq_fixed-0.12.3.1-cp312-cp312-linux_x86_64.whl").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k != "MULTI30K_DIR"}
    env.update(PYTHON=str(fake), WHEEL_CACHE=str(cache), SITE=str(tmp_path / "site"))
    proc = subprocess.run(["bash", str(OFFLINE), "run", str(wheels), "--", "bash", "-c",
                           'echo "data=$MULTI30K_DIR"'], capture_output=True, text=True, timeout=30,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"data={wheels / 'multi30k'}" in proc.stdout
    assert "earlier build" in proc.stderr and "building" not in proc.stderr
    env["MULTI30K_DIR"] = str(raw)  # one the user set wins
    proc = subprocess.run(["bash", str(OFFLINE), "run", str(wheels), "--", "bash", "-c",
                           'echo "data=$MULTI30K_DIR"'], capture_output=True, text=True, timeout=30,
                          env=env)
    assert f"data={raw}" in proc.stdout, proc.stderr


SPEED = helpers.REPO / "scripts" / "gpu-speed.sh"


def _stand_in_python(tmp_path, seconds_per_bench):
    """An interpreter for gpu-speed.sh that records each bench.py call and writes its outputs."""
    calls = tmp_path / "calls"
    stub = tmp_path / "python"
    stub.write_text(f"""#!/usr/bin/env bash
echo "$*" >> {calls}
out=""; prev=""
for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
sleep {seconds_per_bench}
mkdir -p "$out" && echo '{{}}' > "$out/bench.json" && echo table > "$out/bench.md"
""")
    stub.chmod(0o755)
    return stub, calls


def test_speed_runs_each_benchmark_alone_in_order_and_packs_them(tmp_path):
    stub, calls = _stand_in_python(tmp_path, 0)
    out = tmp_path / "out"
    env = dict(os.environ, PREPARE="0", PYTHON=str(stub))
    proc = subprocess.run(["bash", str(SPEED), "600", str(out)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in calls.read_text().splitlines() if "scripts/bench.py" in line]
    systems = [line.split("--systems ")[1].split()[0] for line in lines]
    assert "-m ran_lab.portable" in calls.read_text()  # the logs kept portable
    assert systems == ["configs/bench/ran-base.json", "configs/recurrent_cross/systems.json",
                       "configs/bench/dynmem.json", "configs/bench/pervasive.json"]
    assert all("--device cuda" in line for line in lines)
    ran = lines[0]
    assert "--fp16" in ran and "--decode-length 30 --also-decode-lengths 100" in ran
    assert "--train-flags-of configs/recurrent_cross/full-wmt16-ro-en.json" in lines[1]
    with tarfile.open(out / "speed.tgz") as tar:
        names = {n.lstrip("./") for n in tar.getnames()}
    assert {"ran-base/bench.json", "recurrent-cross/bench.md", "pervasive/bench.log"} <= names
    assert "done in" in (out / "gpu-speed.log").read_text()


def test_speed_skips_what_cannot_finish_and_runs_only_what_is_asked(tmp_path):
    stub, calls = _stand_in_python(tmp_path, 0)
    env = dict(os.environ, PREPARE="0", PYTHON=str(stub))
    # 100 s: ran-base (needs 90) runs, recurrent-cross (needs 150) is skipped, the rest run
    proc = subprocess.run(["bash", str(SPEED), "100", str(tmp_path / "out"),
                           "ran-base,recurrent-cross,dynmem"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    systems = [line.split("--systems ")[1].split()[0] for line in calls.read_text().splitlines()
               if "scripts/bench.py" in line]
    assert systems == ["configs/bench/ran-base.json", "configs/bench/dynmem.json"]
    assert "recurrent-cross skipped" in proc.stderr
    # ran-base-100 runs only when named: decoding at 100 tokens, nine passes
    calls.write_text("")
    proc = subprocess.run(["bash", str(SPEED), "600", str(tmp_path / "o100"), "ran-base-100"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in calls.read_text().splitlines() if "scripts/bench.py" in line]
    assert len(lines) == 1 and "--decode-length 100 " in lines[0] + " ", lines
    assert "--decode-repeats 9" in lines[0] and "--also-decode-lengths" not in lines[0]
    for when in ("0", "ten", f"@{int(time.time()) - 5}"):
        proc = subprocess.run(["bash", str(SPEED), when, str(tmp_path / "o2")], env=env,
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and "positive number of seconds" in proc.stderr, when



@pytest.mark.parametrize("running", [True, False])
def test_speed_says_when_the_timings_go_through_an_mps_daemon(tmp_path, running):
    stub, _ = _stand_in_python(tmp_path, 0)
    tools = tmp_path / "bin"
    tools.mkdir()
    pgrep = tools / "pgrep"  # the daemon a training batch left on the node, or none
    pgrep.write_text(f"#!/usr/bin/env bash\nexit {0 if running else 1}\n")
    pgrep.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, PREPARE="0", PYTHON=str(stub), PATH=f"{tools}:{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(SPEED), "600", str(out), "dynmem"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = "MPS daemon running" in (out / "gpu-speed.log").read_text()
    assert said == running


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
    return subprocess.run(["bash", str(OFFLINE), "run", str(wheels),
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
