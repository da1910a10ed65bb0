"""``ran-reproduce --launcher slurm`` against a real Slurm: a one-node cluster (slurmctld, slurmd,
slurmdbd with MariaDB, where submitit reads the jobs' states, munge; the distribution's packages)
that scripts/slurm-local.sh starts for this file and stops after it. A short two-system table gives
the fields a local run gives; a job of two tasks trains with world size 2 (gloo, CPU) through
fairseq's Slurm detection; a run with a 2-minute limit is requeued and finishes at exactly its
budget, at world size 1 and (resuming across ranks) 2; a cancelled run is reported, then
resubmitted by --resume. These runs mostly wait (for Slurm, a job's start, a time limit), so they
go on side by side, started with the first cluster test. Without Slurm (or submitit, or root) the
cluster tests are skipped, saying why; under CI=true they fail instead. The Slurm variant of
compat.cpu_data_parallel and the cluster's start without one of its packages are checked without
a cluster."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import helpers

SYSTEMS = ["TransF", "RAN-ALL"]
# the node's CPUs: two for each of the table's, the two-task, the cancelled and the two-task
# requeued runs, one for the requeued run (more than the machine has: the jobs mostly wait, see
# scripts/slurm-local.sh)
NODE_CPUS = 9
# the requeued run's budget: its first job is paused after its first save (one epoch of the test
# corpus is one update), so the budget is left to a later job on any machine
REQUEUE_BUDGET = 8


def missing_slurm():
    """Why the cluster cannot be started here, or None."""
    for cmd in ("slurmctld", "slurmd", "slurmdbd", "sacct", "munged", "mungekey", "sbatch",
                "scontrol", "mariadbd", "mariadb-install-db"):
        if shutil.which(cmd) is None:
            return (f"{cmd} not found (Debian: apt-get install slurm-wlm slurmdbd munge "
                    f"mariadb-server)")
    if os.geteuid() != 0:
        return "scripts/slurm-local.sh runs its daemons as root"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (pip install 'ran_fairseq[slurm]')"
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The environment of the commands that talk to the cluster (SLURM_CONF)."""
    why = missing_slurm()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no Slurm to test --launcher slurm against: {why}")
        pytest.skip(f"no Slurm to test --launcher slurm against: {why}")
    state = tmp_path_factory.mktemp("slurm")
    env = dict(helpers.fairseq_env(), RAN_SLURM_DIR=str(state), RAN_SLURM_CPUS=str(NODE_CPUS))
    script = helpers.REPO / "scripts" / "slurm-local.sh"
    try:
        proc = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        env["SLURM_CONF"] = proc.stdout.strip().split("SLURM_CONF=")[1]
        again = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True,
                               timeout=60)  # idempotent: the running cluster is kept
        assert again.returncode == 0 and again.stdout == proc.stdout, again.stderr
        yield env
    finally:  # also after a failed start: no daemon outlives the tests
        stop = subprocess.run([str(script), "stop"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert stop.returncode == 0, stop.stderr


def test_cluster_start_names_a_missing_package(tmp_path):
    """Without one of its programs (here MariaDB's server) the cluster's start stops before it
    starts anything, naming the program and the packages to install."""
    needed = ["slurmctld", "slurmd", "slurmdbd", "sacctmgr", "munged", "mungekey",
              "mariadb-install-db", "mariadb-admin", "sinfo", "python3"]
    for name in needed:
        (tmp_path / name).symlink_to("/bin/true")
    (tmp_path / "hostname").symlink_to(shutil.which("hostname"))
    proc = subprocess.run([shutil.which("bash"), str(helpers.REPO / "scripts" / "slurm-local.sh"),
                           "start"],
                          env={"PATH": str(tmp_path), "RAN_SLURM_DIR": str(tmp_path / "state")},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and not (tmp_path / "state").exists()
    assert proc.stderr.startswith("slurm-local.sh: mariadbd not found: install the packages "
                                  "slurm-wlm, slurmdbd, munge and mariadb-server"), proc.stderr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, scored_corpus):
    root = tmp_path_factory.mktemp("slurm-data")
    scored_corpus(root)
    return root


def config(root, name, **overrides):
    cfg = json.loads((helpers.REPO / "configs" / "ran" / "cpu.json").read_text())
    cfg.update(checkpoints=str(root / f"ckpt-{name}"), bpe=None, **overrides)
    path = root / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return path


def reproduce(env, corpus, name, *args, timeout=900, background=False):
    cmd = [sys.executable, "-m", "ran_lab.reproduce", "ran", "--config",
           str(config(corpus, name)),
           "--data", str(corpus / "bin.{src}-{tgt}"), "--pairs", "de-en",
           "--out", str(corpus / f"out-{name}"), *map(str, args)]
    if background:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


SLURM = ["--launcher", "slurm", "--cpus-per-run", "1"]


def report(corpus, name):
    return json.loads((corpus / f"out-{name}" / "results.json").read_text())


def run_dir(corpus, name, system):
    return corpus / f"out-{name}" / "de-en" / system / "seed1"


def job_of(corpus, name, system):
    path = run_dir(corpus, name, system) / "slurm.json"
    return json.loads(path.read_text())["job_id"] if path.is_file() else None


def scontrol(env, job):
    out = subprocess.run(["scontrol", "show", "job", "-o", job], env=env, capture_output=True,
                         text=True, timeout=60).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def updates_of(checkpoint):
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    return state["optimizer_history"][-1]["num_updates"]


def dry_run(*args):
    return subprocess.run([sys.executable, "-m", "ran_lab.reproduce", "ran", *args,
                           "--dry-run"],
                          env=helpers.fairseq_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("setting,gpus,freq", [("wmt14", 8, 8), ("wmt17-en-tr", 2, 2)])
def test_full_scale_dry_run_prints_the_papers_jobs(setting, gpus, freq):
    """Zeng et al. §3.1: 8 GPUs for WMT'14, 2 for En-Tr; the configs' one-GPU --update-freq
    (8, 2) becomes 1 over the job's GPUs, so each update sees the paper's batch."""
    pytest.importorskip("submitit")
    cfg = json.loads((helpers.REPO / "configs" / "ran" / f"{setting}-base.json").read_text())
    assert cfg["gpus"] == gpus and cfg["train_flags"][cfg["train_flags"].index("--update-freq")
                                                       + 1] == str(freq)
    proc = dry_run("--full", setting, "--launcher", "slurm", "--slurm-partition", "gpu",
                   "--time-limit", "1440", "--slurm-extra", "--account=nmt --exclusive")
    assert proc.returncode == 0, proc.stderr[-3000:]
    systems = json.loads((helpers.REPO / "configs" / "ran" / "systems.json").read_text())
    # one block per run: its header, its fairseq commands, its sbatch script
    blocks = re.split(r"^# [a-z]+-[a-z]+ .+ seed \d+$", proc.stdout, flags=re.M)[1:]
    assert len(blocks) == len(cfg["pairs"]) * len(systems["systems"])
    for block in blocks:
        train = next(line for line in block.splitlines() if line.startswith("fairseq-train"))
        assert " --update-freq 1 " in train + " " and " --distributed-port " in train
        for option in (f"--gpus-per-node={gpus}", "--nodes=1", "--ntasks-per-node=1",
                       "--partition=gpu", "--time=1440", "--requeue", "--signal=USR2@90",
                       "--account=nmt", "--exclusive", f"--cpus-per-task={4 * gpus}"):
            assert f"#SBATCH {option}\n" in block, (option, block)
        assert "srun " in block and "submitit.core._submit" in block


def test_every_full_scale_config_states_the_papers_gpus():
    """--launcher slurm asks each run for the config's "gpus": every paper-scale config states it,
    with its source in the config's notes (the paper's count, or that the paper gives none)."""
    full = [p for p in sorted((helpers.REPO / "configs").glob("*/*.json"))
            if json.loads(p.read_text()).get("device") == "cuda"
            and (p.stem.startswith("full") or p.stem.endswith("-base"))]
    assert len(full) >= 7, full
    for path in full:
        cfg = json.loads(path.read_text())
        assert isinstance(cfg.get("gpus"), int) and cfg["gpus"] >= 1, path
        notes = (path.parent / cfg["notes"]).read_text()
        assert "GPU" in notes, path


def test_without_submitit_slurm_says_how_to_install_it(tmp_path):
    fake = tmp_path / "submitit"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = dict(helpers.fairseq_env())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "ran_lab.reproduce", "ran", "--launcher",
                           "slurm", "--dry-run"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    assert (
        "reproduce-ran: error: --launcher slurm needs the submitit package: "
        "pip install 'ran_fairseq[slurm]' (or pip install submitit)") in proc.stderr.splitlines()


def test_launcher_options_need_slurm():
    proc = dry_run("--gpus-per-run", "2")
    assert proc.returncode == 2 and "--gpus-per-run needs --launcher slurm" in proc.stderr


def test_srun_tasks_give_fairseq_cpu_world(monkeypatch):
    """compat.cpu_data_parallel under srun with 2 tasks and --distributed-port on CPUs: world
    size and rank from Slurm's variables, gloo, the step's node as the rendezvous (fairseq's own
    Slurm detection asks --distributed-world-size to match and keeps nccl)."""
    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed import utils as distributed_utils

    from ran_fairseq import compat

    compat.cpu_data_parallel()
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    for key in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "MASTER_ADDR", "RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_NNODES", "1")
    cfg = DistributedTrainingConfig(distributed_port=12345, distributed_backend="nccl")
    distributed_utils.infer_init_method(cfg)
    assert (cfg.distributed_world_size, cfg.distributed_rank, cfg.device_id) == (2, 1, 0)
    assert cfg.distributed_init_method == "tcp://127.0.0.1:12345"
    assert cfg.distributed_backend == "gloo" and cfg.distributed_no_spawn
    # without --distributed-port fairseq's detection is not asked for: nothing changes
    cfg = DistributedTrainingConfig()
    distributed_utils.infer_init_method(cfg)
    assert cfg.distributed_init_method is None and cfg.distributed_world_size == 1


def without_save_dir(argv):
    i = argv.index("--save-dir")
    return argv[:i] + argv[i + 2:]


def finish(proc, timeout=900):
    """The outcome of a background engine started by reproduce(..., background=True)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_table_through_slurm_has_the_local_fields(cluster, corpus, background):
    """The same two-system table made locally and through Slurm, side by side (and beside the
    other cluster tests' runs)."""
    common = ["--systems", ",".join(SYSTEMS), "--max-update", "2", "--threads", "1"]
    slurm = reproduce(cluster, corpus, "slurm", *common, *SLURM, background=True)
    local = reproduce(cluster, corpus, "local", *common)
    slurm = finish(slurm)
    assert local.returncode == 0, local.stderr[-4000:]
    assert slurm.returncode == 0, slurm.stderr[-4000:]
    ours, theirs = report(corpus, "slurm"), report(corpus, "local")
    assert set(ours) == set(theirs) and set(ours["settings"]) == set(theirs["settings"])
    assert ours["settings"]["launcher"] == "slurm" and theirs["settings"]["launcher"] == "local"
    assert [r["system"] for r in ours["results"]] == SYSTEMS
    for mine, local_one in zip(ours["results"], theirs["results"]):
        assert set(mine) == set(local_one)
        # the same commands on the same CPU with one thread: the same model and translations
        assert mine["tok_bleu"] == local_one["tok_bleu"]
        assert without_save_dir(mine["train_argv"]) == without_save_dir(local_one["train_argv"])
        slurm_record = mine["machine"]["slurm"]
        assert slurm_record["world_size"] == 1 and slurm_record["job_id"]
        assert (run_dir(corpus, "slurm", mine["system"]) / "slurm.json").is_file()
        assert list((run_dir(corpus, "slurm", mine["system"]) / "slurm").glob("*_log.out"))


def world2_flow(env, corpus):
    return reproduce(env, corpus, "world2", "--systems", "TransF", "--max-update", "2", *SLURM,
                     "--tasks-per-run", "2")


def test_two_tasks_train_with_world_size_2(cluster, corpus, background):
    proc = background["world2"].result(timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = report(corpus, "world2")["results"][0]
    assert result["machine"]["slurm"]["world_size"] == 2
    assert "--distributed-port" in result["train_argv"]
    log = (run_dir(corpus, "world2", "TransF") / "train.log").read_text()
    assert "distributed init (rank 0)" in log and "distributed_world_size': 2" in log
    assert "distributed init (rank 1)" in (run_dir(corpus, "world2", "TransF")
                                           / "train.rank1.log").read_text()


CANCEL_ARGS = ["--systems", ",".join(SYSTEMS), "--max-update", "2", *SLURM]


def cancel_flow(env, corpus):
    """A table whose RAN-ALL job is cancelled once it runs; then --resume."""
    name = "cancel"
    engine = reproduce(env, corpus, name, *CANCEL_ARGS, background=True)
    out = {"job": None}
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            out["job"] = job_of(corpus, name, "RAN-ALL")
            if out["job"] and scontrol(env, out["job"]).get("JobState") == "RUNNING":
                break
            time.sleep(1)
        if out["job"]:
            subprocess.run(["scancel", out["job"]], env=env, check=True, timeout=60)
    finally:
        out["first"] = finish(engine)
    if out["job"]:
        out["first_report"] = report(corpus, name)
        out["first_table"] = (corpus / f"out-{name}" / "TABLE.md").read_text()
        out["again"] = reproduce(env, corpus, name, *CANCEL_ARGS, "--resume")
    return out


def test_cancelled_run_is_reported_then_resubmitted(cluster, corpus, background):
    out = background["cancel"].result(timeout=1500)
    job = out["job"]
    assert job, "RAN-ALL's job never ran"
    assert out["first"].returncode != 0
    reason = f"de-en RAN-ALL seed 1 (Slurm job {job} ended CANCELLED"
    assert reason in out["first"].stderr
    first = out["first_report"]
    assert [r["system"] for r in first["results"]] == ["TransF"]
    assert any(reason in text for text in first["settings"]["not_run"])
    assert f"Slurm job {job} ended CANCELLED" in out["first_table"]
    again = out["again"]
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"Slurm job {job} ended CANCELLED" in again.stderr and "submitted again" in again.stderr
    assert [r["system"] for r in report(corpus, "cancel")["results"]] == SYSTEMS
    assert job_of(corpus, "cancel", "RAN-ALL") != job


def release_requeued(env, job, stop):
    """Start a requeued job at once: Slurm holds one two minutes before it may start again
    (Reason=BeginTime), which only lengthens the test."""
    while not stop.is_set():
        info = scontrol(env, job)
        if info.get("JobState") == "PENDING" and info.get("Reason") == "BeginTime":
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env,
                           capture_output=True, timeout=60)
        stop.wait(3)


def training_pids(save_dir):
    """The fairseq-train processes that save into ``save_dir`` (the node is this machine)."""
    pids = []
    for proc in os.listdir("/proc"):
        try:
            argv = (open(f"/proc/{proc}/cmdline", "rb").read().decode(errors="replace")
                    .split("\0"))
        except OSError:
            continue
        if "train" in argv and str(save_dir) in argv:
            pids.append(int(proc))
    return pids


def pause_after_first_save(save_dir, stop):
    """Stop the first job's training once checkpoint_last.pt is whole (fairseq copies it from the
    first file it writes), so that the job reaches its time limit with the budget unmade on a
    machine of any speed. Returns the updates the paused checkpoint holds."""
    ckpt = save_dir / "checkpoint_last.pt"
    while not stop.is_set():
        pids = training_pids(save_dir) if ckpt.is_file() else []
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        if pids:
            try:
                return updates_of(ckpt)
            except Exception:  # noqa: BLE001  (caught in the middle of the copy: let it finish)
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
        stop.wait(0.05)
    return None


def requeue_flow(env, corpus, name, tasks=1):
    """A run of ``tasks`` tasks (the training's world size) with a 2-minute limit, the job told
    10 s before it, submitted with --submit-only (a local engine then finds it in use), its first
    job paused after its first save; --resume waits for it and collects it. Returns what the test
    checks."""
    limit = ["--time-limit", "2", "--requeue-signal", "10", "--tasks-per-run", tasks]
    run = ["--systems", "TransF", "--max-update", REQUEUE_BUDGET]
    save_dir = corpus / f"ckpt-{name}" / "de-en" / "TransF" / "seed1"
    out = {"submitted": reproduce(env, corpus, name, *run, *SLURM, *limit, "--submit-only")}
    out["job"] = job = job_of(corpus, name, "TransF")
    if out["submitted"].returncode != 0 or not job:
        return out
    out["blocked"] = reproduce(env, corpus, name, *run)
    stop = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        pool.submit(release_requeued, env, job, stop)
        paused = pool.submit(pause_after_first_save, save_dir, stop)
        try:
            out["collected"] = reproduce(env, corpus, name, *run, *SLURM, *limit, "--resume",
                                         timeout=1200)
        finally:
            stop.set()
        out["first_job_updates"] = paused.result()
    out["restarts"] = int(scontrol(env, job).get("Restarts", 0))
    out["updates"] = updates_of(save_dir / "checkpoint_last.pt")
    return out


@pytest.fixture(scope="module")
def background(cluster, corpus):
    """The cluster tests' runs other than the table's, started beside it: they mostly wait (for
    Slurm, for a job's start, for a time limit), so side by side they take little more than the
    longest of them."""
    with ThreadPoolExecutor(4) as pool:
        yield {"requeue": pool.submit(requeue_flow, cluster, corpus, "requeue"),
               "requeue2": pool.submit(requeue_flow, cluster, corpus, "requeue2", 2),
               "world2": pool.submit(world2_flow, cluster, corpus),
               "cancel": pool.submit(cancel_flow, cluster, corpus)}


def check_requeued(out, corpus, name):
    assert out["submitted"].returncode == 0, out["submitted"].stderr[-4000:]
    job = out["job"]
    assert job and "submitted as Slurm job" in out["submitted"].stderr
    assert out["blocked"].returncode != 0 and f"in use by Slurm job {job}" in out["blocked"].stderr
    assert out["collected"].returncode == 0, out["collected"].stderr[-4000:]
    # the first job saved, stopped short of the budget, was requeued at its limit; a later job
    # resumed from checkpoint_last.pt and stopped at exactly the budget
    assert out["first_job_updates"] is not None and 1 <= out["first_job_updates"] < REQUEUE_BUDGET
    assert out["restarts"] >= 1
    # task 0's submitit log (a two-task job has one per task)
    log = next((run_dir(corpus, name, "TransF") / "slurm").glob("*_0_log.out")).read_text()
    # submitit logs "Requeued job" after its `scontrol requeue` returns; Slurm may end the job
    # step (and that scontrol) first, logging the requeue itself
    assert "Requeued job" in log or "DUE TO JOB REQUEUE" in log, log[-3000:]
    assert out["updates"] == REQUEUE_BUDGET, out["collected"].stderr[-3000:]
    result = report(corpus, name)["results"][0]
    assert result["selected"]["num_updates"] <= REQUEUE_BUDGET
    return result


def test_time_limit_requeues_to_the_exact_budget(cluster, corpus, background):
    out = background["requeue"].result(timeout=1500)
    assert check_requeued(out, corpus, "requeue")["machine"]["slurm"]["world_size"] == 1


def test_two_task_run_requeues_to_the_exact_budget(cluster, corpus, background):
    """World size 2: after the requeue rank 0 reads checkpoint_last.pt and sends its state to
    rank 1 (which refused it under torch >= 2.6 before ran_fairseq.compat's fix)."""
    out = background["requeue2"].result(timeout=1500)
    assert check_requeued(out, corpus, "requeue2")["machine"]["slurm"]["world_size"] == 2
    run = run_dir(corpus, "requeue2", "TransF")
    log = (run / "train.log").read_text()
    assert re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ "
                     rf"{out['first_job_updates']} updates\)", log), log[-3000:]
    assert f"num_updates {REQUEUE_BUDGET}" in log or f"num_updates={REQUEUE_BUDGET}" in log
    # rank 1 joined both jobs' trainings (its log is appended to) and ended without an error
    rank1 = (run / "train.rank1.log").read_text()
    assert rank1.count("distributed init (rank 1)") >= 2 and "Error" not in rank1, rank1[-3000:]
