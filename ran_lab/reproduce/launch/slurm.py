"""``--launcher slurm``: each (pair, system, seed) is one Slurm job, submitted with submitit, that
trains, decodes and scores the run on the cluster and writes its result.json; the engine waits for
the jobs (or returns after submitting them: ``--submit-only``) and tabulates their results.

A job stopped by its time limit or preempted is requeued by submitit (the job's Python process is
sent USR2 ``--requeue-signal`` seconds before the limit, and requeues itself) and its training goes
on from checkpoint_last.pt to the exact --max-update. Multi-GPU and multi-node trainings are
fairseq's own distributed training under srun (its Slurm detection, ``--distributed-port``). The
jobs are submitted, watched and read through submitit's public API (their states: ``sacct``, the
cluster's accounting)."""
import copy
import os
import re
import subprocess
import tempfile
import time
import zlib
from pathlib import Path

from ran_text import textio
from ...common import paths
from ...common.flags import flag_pairs, set_flag
from ...common.machine import machine_info
from ran_lab.common import LabError
from ..training import read_finished
from .jobs import ACTIVE, RECORD, job_of, job_state, read_record, recorded_state
from . import Outcome, require_submitit

submitit = require_submitit()

POLL_SECONDS = 5


def resources(args, config):
    """The Slurm resources of every run: nodes, tasks per node, GPUs per node, CPUs per task and
    the training's world size. GPU trainings have one task per node and fairseq starts one
    process per GPU (its Slurm detection); CPU trainings have ``--tasks-per-run`` tasks."""
    gpus = args.gpus_per_run
    if gpus is None:
        gpus = int(config.get("gpus", 1)) if config["device"] == "cuda" else 0
    nodes = args.nodes_per_run
    if gpus and gpus % nodes:
        raise LabError(f"--gpus-per-run {gpus} is not a multiple of --nodes-per-run {nodes}")
    if gpus:
        return {"nodes": nodes, "tasks_per_node": 1, "gpus_per_node": gpus // nodes,
                "cpus_per_task": args.cpus_per_run or 4 * (gpus // nodes), "world_size": gpus}
    return {"nodes": nodes, "tasks_per_node": args.tasks_per_run, "gpus_per_node": 0,
            "cpus_per_task": args.cpus_per_run or 2, "world_size": nodes * args.tasks_per_run}


def distributed_argv(run, world):
    """``run``'s fairseq-train flags for ``world`` processes: fairseq's Slurm detection needs
    --distributed-port (one per run, from its folder); --update-freq is divided by the world size
    so that each update sees the config's batch (the configs' one-GPU --update-freq stands for the
    paper's GPUs: configs/ran/wmt14-base.json); where it does not divide, it is kept and the batch
    grows with the world size."""
    if world == 1:
        return run.train_argv
    argv = run.train_argv
    freq = int(flag_pairs(argv).get("--update-freq") or 1)
    if freq % world == 0:
        argv = set_flag(argv, "--update-freq", freq // world)
    port = 20000 + zlib.crc32(str(run.dir).encode()) % 20000
    return set_flag(argv, "--distributed-port", port)


def placed(runs, args, config):
    """(copies of ``runs`` with their Slurm resources and distributed flags, the threads of a
    task): what the engine compares with stored results, prints and submits."""
    res = resources(args, config)
    placed_runs = []
    for run in runs:
        run = copy.copy(run)
        run.slurm = res
        run.train_argv = distributed_argv(run, res["world_size"])
        placed_runs.append(run)
    return placed_runs, args.threads_given or res["cpus_per_task"]


def sbatch_parameters(run, args):
    """submitit's SlurmExecutor parameters of ``run``'s job (the sbatch options it writes)."""
    res = run.slurm
    extra = {"requeue": True}  # requeued at its time limit or on preemption (submitit)
    for option in args.slurm_extra:
        key, _, value = option[2:].partition("=")
        extra[key] = value if value else True
    params = {"job_name": f"ran-{run.pair}-{run.system['name']}-seed{run.seed}".replace(" ", "_"),
              "time": args.time_limit, "nodes": res["nodes"],
              "ntasks_per_node": res["tasks_per_node"], "cpus_per_task": res["cpus_per_task"],
              "signal_delay_s": args.requeue_signal, "stderr_to_stdout": True,
              "additional_parameters": extra}
    if res["gpus_per_node"]:
        params["gpus_per_node"] = res["gpus_per_node"]
    if args.slurm_partition:
        params["partition"] = args.slurm_partition
    return params


def executor(run, args, folder=None):
    ex = submitit.SlurmExecutor(folder=folder or run.dir / "slurm", max_num_timeout=100000)
    ex.update_parameters(**sbatch_parameters(run, args))
    return ex


def submit(run, args, work):
    """``work`` submitted as ``run``'s Slurm job; where sbatch refuses it (no Slurm running here,
    an unknown partition or account), a LabError of one line with sbatch's own reason."""
    try:
        return executor(run, args).submit(work)
    except (submitit.core.utils.FailedJobError, OSError) as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        reason = next((line for line in lines if "error" in line.lower()),
                      lines[-1] if lines else type(e).__name__)
        raise LabError(f"{label(run)}: sbatch did not take the job ({reason}); is Slurm "
                         f"running here (scontrol ping), and are the partition and "
                         f"--slurm-extra options the cluster's?") from None


def sbatch_script(run, args):
    """The sbatch script submitit submits for ``run`` (``--dry-run``): submitit's own, from a
    submission to a stand-in sbatch that takes it and runs nothing (so that a machine without
    Slurm prints it too); nothing is written in the run's folder."""
    with tempfile.TemporaryDirectory() as tmp:
        for tool in ("sbatch", "srun"):  # submitit looks for srun: the machine's Slurm
            Path(tmp, tool).write_text("#!/bin/sh\necho 'Submitted batch job 1'\n")
            Path(tmp, tool).chmod(0o755)
        path = os.environ["PATH"]
        os.environ["PATH"] = tmp + os.pathsep + path
        try:
            job = executor(run, args, Path(tmp, "slurm")).submit(print)
        finally:
            os.environ["PATH"] = path
        return job.paths.submission_file.read_text().replace(str(Path(tmp, "slurm")),
                                                             str(run.dir / "slurm"))


class RunJob(submitit.helpers.Checkpointable):
    """The job of one run: task 0 trains (resuming from checkpoint_last.pt), decodes, scores and
    writes result.json; the other tasks of a multi-process CPU training join its training.
    Checkpointable: at its time limit or on preemption submitit requeues it as it is."""

    def __init__(self, run, paper_key, threads):
        self.run, self.paper_key, self.threads = run, paper_key, threads

    def __call__(self):
        from ..execute import finished_result
        from ..papers import PAPERS
        from ..process import run_logged

        run = self.run
        env = dict(os.environ, OMP_NUM_THREADS=str(self.threads),
                   MKL_NUM_THREADS=str(self.threads), PYTHONUNBUFFERED="1")
        rank = int(os.environ.get("SLURM_PROCID", "0"))
        if rank != 0:
            if must_train(run):
                run_logged(["-m", "ran_lab.run_fairseq", "train", *run.train_argv],
                           run.dir / f"train.rank{rank}.log", env,
                           f"fairseq-train rank {rank}", append=True)
            return None
        trained = None
        if not run.trains:
            trained = textio.read_json(run.dir / "trained.json", "the trained run's result",
                                       "resubmit with --resume")
        paper = PAPERS.get(self.paper_key)
        result = finished_result(run, env, trained, paper.measure if paper else None,
                                 self.machine())
        textio.write_json(run.dir / "result.json", result)
        print(f"{label(run)}: tok BLEU {result['tok_bleu']:.2f}", flush=True)
        return "done"

    def machine(self):
        """The machine record of the job: the first node's, with the job and its world size."""
        res = self.run.slurm
        device = "cuda" if res["gpus_per_node"] else "cpu"
        return dict(machine_info(device, self.threads), jobs=1,
                    slurm={"job_id": os.environ.get("SLURM_JOB_ID"),
                           "nodes": res["nodes"], "world_size": res["world_size"],
                           "gpus": res["gpus_per_node"] * res["nodes"],
                           "tasks": res["nodes"] * res["tasks_per_node"],
                           "node_list": os.environ.get("SLURM_JOB_NODELIST")})


def must_train(run):
    """Whether ``run``'s training still has updates to make (as training.train decides)."""
    from ..checkpoints import load_checkpoint

    finished = run.save_dir / "train_finished.json"
    if finished.is_file():
        try:
            record = read_finished(finished)
        except LabError:
            record = {}
        if record.get("argv") == run.train_argv:
            return False
    last = run.save_dir / "checkpoint_last.pt"
    budget = int(flag_pairs(run.train_argv).get("--max-update") or 0)
    if budget <= 0 or not last.is_file():
        return True
    history = load_checkpoint(last).get("optimizer_history") or [{}]
    return (history[-1].get("num_updates") or 0) < budget


class Slurm:
    """The launcher of ``--launcher slurm``: a run's job submitted (or, with --resume, the one
    under way attached to), waited for and collected."""

    def __init__(self, args, paper):
        self.args, self.paper = args, paper
        self.accounting = False

    def workers(self, runs):
        return max(1, len(runs))  # every job waited for at once: Slurm schedules them

    def check(self):
        """submitit reads the jobs' states with sacct, and takes a job it cannot read for one
        under way: a job that ended without a result would be waited for without end."""
        if self.accounting:
            return
        try:
            proc = subprocess.run(["sacct", "-n", "-X", "-o", "JobID", "-j", "1"],
                                  capture_output=True, text=True, timeout=60)
            lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
            why = proc.returncode and (lines[-1] if lines else f"exit status {proc.returncode}")
        except (OSError, subprocess.TimeoutExpired) as e:
            why = f"sacct: {getattr(e, 'strerror', None) or e}"
        if why:
            raise LabError(f"--launcher slurm reads the jobs' states from the cluster's "
                           f"accounting, and sacct fails here ({why}); is Slurm running here "
                           f"(scontrol ping), with slurmdbd?")
        self.accounting = True

    def launch(self, run, trained, stopped, say):
        record = read_record(run)
        state = recorded_state(run, record) if record else None
        if not (record and self.args.resume and state in ACTIVE):
            if record and self.args.resume:
                why = record.get("failed") or failure(run, record["job_id"], state)
                say(f"{label(run)}: Slurm job {record['job_id']} {why}; submitted again "
                    f"(--resume)")
            run.dir.mkdir(parents=True, exist_ok=True)
            if trained is not None:
                textio.write_json(run.dir / "trained.json", trained)
            job = submit(run, self.args, RunJob(run, self.paper.key, self.args.threads))
            record = {"job_id": str(job.job_id), "submitted": time.time(),
                      "folder": paths.shown(run.dir / "slurm"),
                      "resources": run.slurm}
            textio.write_json(run.dir / RECORD, record)
            say(f"{label(run)}: submitted as Slurm job {job.job_id}")
        else:
            say(f"{label(run)}: its Slurm job {record['job_id']} is {state.lower()}; "
                f"collecting it")
        job_id = record["job_id"]
        if self.args.submit_only:
            return Outcome(None, f"{label(run)} (Slurm job {job_id}, submitted)")
        job = job_of(run, job_id)
        # done: its result written, or ended as submitit reads it from Slurm (its own pace);
        # then ended as Slurm says now (a job that wrote its result may still be completing)
        while not job.done() or (state := job_state(job)) in ACTIVE:
            if stopped():
                return Outcome(None, f"{label(run)} (Slurm job {job_id}, under way)")
            time.sleep(POLL_SECONDS)
        result_file = run.dir / "result.json"
        if result_file.is_file() and result_file.stat().st_mtime >= record["submitted"]:
            return Outcome(textio.read_json(result_file, "the run's result",
                                            "resubmit with --resume"))
        why = failure(run, job_id, state)
        textio.write_json(run.dir / RECORD, dict(record, failed=why))
        say(f"{label(run)}: Slurm job {job_id} {why}")
        return Outcome(None, f"{label(run)} (Slurm job {job_id} {why}; --resume resubmits it)",
                       failed=True)


def failure(run, job_id, state):
    """Why job ``job_id`` of ``run`` left no result: its Slurm state, and the last line of its
    error log (text, where its Python process printed the error), with its log. submitit's result
    pickle is never read: a run folder may come from elsewhere, and unpickling a file of it could
    run code."""
    why = (f"ended {state}" if state
           else "ended without a result (cancelled or killed; gone from Slurm)")
    job = job_of(run, job_id)
    # the job writes its stderr into its stdout (sbatch_parameters: stderr_to_stdout)
    last = last_error_line(job.paths.stdout) or last_error_line(job.paths.stderr)
    if last:
        why += f": {last[:300]}"
    return why + f"; log {paths.shown(job.paths.stdout)}"


def last_error_line(path, tail_bytes=65536):
    """The last line of an exception in the job's error log ``path`` (a line such as
    ``ValueError: ...``), or None (no log, or no such line in its last ``tail_bytes``)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    errors = [line.strip() for line in lines
              if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*:", line.strip())]
    return errors[-1] if errors else None


def label(run):
    return f"{run.pair} {run.system['name']} seed {run.seed}"
