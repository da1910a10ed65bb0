"""The Slurm job of a run folder (its ``slurm.json``) and the job's state, through submitit (which
reads it with ``sacct``, from the cluster's accounting). A run whose job is pending or running is in
use: another engine leaves it alone, and only ``--launcher slurm --resume`` attaches to the job."""
import importlib.util
import shutil
import time

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


def job_of(run, job_id):
    """submitit's handle on Slurm job ``job_id`` of ``run`` (its files in the run's slurm/)."""
    from . import require_submitit

    return require_submitit().SlurmJob(folder=run.dir / "slurm", job_id=str(job_id))


def job_state(job):
    """The Slurm state of ``job`` now (RUNNING, CANCELLED, ...); None where the cluster's accounting
    has no such job (or there is no Slurm here)."""
    state = job.get_info(mode="force").get("State", "").split()  # "CANCELLED by 0"
    state = state[0] if state and state[0] != "UNKNOWN" else None
    if state in ACTIVE and job.watcher.is_done(job.job_id, mode="cache"):
        # submitit takes a state outside its list of running ones (SUSPENDED) for an end and
        # asks no more about the job: forget what it keeps, so that the next call asks again
        job.watcher.clear()
    return state


# sacct knows a job once slurmctld has handed it to the accounting daemon, moments after sbatch
# returns: a recorded job submitted this recently that sacct does not know yet is taken as pending
JUST_SUBMITTED_SECONDS = 120


def recorded_state(run, record):
    """:func:`job_state` of the job ``record`` (``run``'s slurm.json) names; PENDING where the
    accounting has no such job yet but the record says it was submitted moments ago."""
    state = job_state(job_of(run, record["job_id"]))
    if state is None and time.time() - record.get("submitted", 0) < JUST_SUBMITTED_SECONDS:
        return "PENDING"
    return state


def check_jobs(runs, args):
    """A LabError naming the first run whose Slurm job is pending or running, unless this
    engine collects it (``--launcher slurm --resume``)."""
    if getattr(args, "launcher", "local") == "slurm" and args.resume:
        return
    # where there is no Slurm (or no submitit), no job can be read (nor was submitted from here)
    slurm = importlib.util.find_spec("submitit") and shutil.which("sacct")
    for run in runs:
        record = read_record(run)
        state = recorded_state(run, record) if record and slurm else None
        if state in ACTIVE:
            raise LabError(
                f"{run.dir} is in use by Slurm job {record['job_id']} ({state.lower()}): "
                f"rerun with --launcher slurm --resume to wait for it and collect it, or "
                f"scancel {record['job_id']}")
