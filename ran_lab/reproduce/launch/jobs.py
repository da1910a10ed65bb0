"""The Slurm job of a run folder (its ``slurm.json``) and the job's state, from ``scontrol``
(no accounting database needed). A run whose job is pending or running is in use: another engine
leaves it alone, and only ``--launcher slurm --resume`` attaches to the job."""
import subprocess

from ran_text import textio
from ...common import schema
from ran_lab.common import LabError

RECORD = "slurm.json"  # in a run folder: the job id of its latest job, when, and its resources

# states in which a job may still write its run's folders (a requeued job is PENDING again)
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
          "RESV_DEL_HOLD", "SPECIAL_EXIT"}


def read_record(run):
    """``run``'s slurm.json, or None."""
    path = run.dir / RECORD
    if not path.is_file():
        return None
    fix = f"delete {path} once its job has ended"
    return schema.check(textio.read_json(path, "the run's Slurm job", fix), schema.SLURM,
                        path, "the run's Slurm job", fix)


def job_state(job_id):
    """(state, exit code, reason) of Slurm job ``job_id``; None once Slurm has forgotten it (or
    where there is no Slurm here)."""
    try:
        proc = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)],
                              capture_output=True, text=True, timeout=60)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 or "JobState=" not in proc.stdout:
        return None
    fields = dict(tok.split("=", 1) for tok in proc.stdout.split() if "=" in tok)
    return fields.get("JobState"), fields.get("ExitCode"), fields.get("Reason")


def active_state(state):
    return state is not None and state[0] in ACTIVE


def check_jobs(runs, args):
    """A LabError naming the first run whose Slurm job is pending or running, unless this
    engine collects it (``--launcher slurm --resume``)."""
    if getattr(args, "launcher", "local") == "slurm" and args.resume:
        return
    for run in runs:
        record = read_record(run)
        state = job_state(record["job_id"]) if record else None
        if active_state(state):
            raise LabError(
                f"{run.dir} is in use by Slurm job {record['job_id']} ({state[0].lower()}): "
                f"rerun with --launcher slurm --resume to wait for it and collect it, or "
                f"scancel {record['job_id']}")
