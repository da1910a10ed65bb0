"""Where the runs are made: ``--launcher local`` (the engine's own processes, ``--jobs`` at a time:
:mod:`.local`) or ``--launcher slurm`` (one Slurm job per (pair, system, seed): :mod:`.slurm`).

Both are launchers for the scheduler (:mod:`..schedule`), with one interface:

- ``workers(runs)``: how many runs may be under way at once;
- ``check()``: raises where no run can be made (before the scheduler removes a run's old files);
- ``launch(run, trained, stopped, say) -> Outcome``: ``run`` made (``trained``: the result of the
  training whose checkpoint it decodes, or None; ``stopped()``: whether the engine was told to
  stop; ``say``: a progress line). Neither changes the run or the arguments it is given.
"""
import dataclasses
import shlex
from typing import Optional

LAUNCHERS = ("local", "slurm")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A launched run: its result (as stored in result.json), or None with the reason; ``failed``
    where its launch failed (a Slurm job ended without a result) rather than was left under
    way."""
    result: Optional[dict]
    reason: Optional[str] = None
    failed: bool = False

INSTALL_SUBMITIT = ("--launcher slurm needs the submitit package: pip install 'ran_fairseq[slurm]' "
                    "(or pip install submitit)")


def add_arguments(p):
    """The launcher's options of ``ran-reproduce PAPER``."""
    g = p.add_argument_group("cluster (--launcher slurm)")
    g.add_argument("--launcher", choices=LAUNCHERS, default="local",
                   help="make the runs here, or submit each (pair, system, seed) as one Slurm job "
                        "(trained, decoded and scored there; requeued at its time limit)")
    g.add_argument("--slurm-partition", help="the partition of the jobs (default: the cluster's)")
    g.add_argument("--gpus-per-run", type=int,
                   help="GPUs of each training, over --nodes-per-run nodes (default: the "
                        "config's 'gpus', the paper's count, on a GPU config; 0 on a CPU one); "
                        "--update-freq is divided by it, so that the batch stays the config's")
    g.add_argument("--nodes-per-run", type=int, default=1, help="nodes of each training")
    g.add_argument("--tasks-per-run", type=int, default=1,
                   help="processes of a CPU training (world size, gloo; GPU runs have one per GPU)")
    g.add_argument("--cpus-per-run", type=int,
                   help="CPUs of each task (default: 4 per GPU of a node on a GPU run, else 2)")
    g.add_argument("--time-limit", type=int, default=240, metavar="MINUTES",
                   help="each job's time limit; a run stopped by it is requeued and goes on "
                        "from its checkpoint_last.pt")
    g.add_argument("--requeue-signal", type=int, default=90, metavar="SECONDS",
                   help="the job is told this long before its time limit to requeue itself")
    g.add_argument("--slurm-extra", default="",
                   help="more sbatch options, e.g. \"--account=nlp --qos=high\"")
    g.add_argument("--submit-only", action="store_true",
                   help="return once the jobs are submitted; a later --resume waits for them "
                        "and tabulates")


def check_arguments(p, args, argv):
    """Errors of the launcher's options (``p.error``); fills ``args.slurm_options``."""
    slurm_only = [flag for flag in ("--slurm-partition", "--gpus-per-run", "--nodes-per-run",
                                    "--tasks-per-run", "--cpus-per-run", "--time-limit",
                                    "--requeue-signal", "--slurm-extra", "--submit-only")
                  if any(a == flag or a.startswith(flag + "=") for a in argv)]
    if args.launcher == "local":
        if slurm_only:
            p.error(f"{slurm_only[0]} needs --launcher slurm")
        return
    for name in ("nodes_per_run", "tasks_per_run", "cpus_per_run", "time_limit"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.gpus_per_run is not None and args.gpus_per_run < 0:
        p.error("--gpus-per-run must be 0 or more")
    if args.requeue_signal < 0 or args.requeue_signal >= 60 * args.time_limit:
        p.error("--requeue-signal must be between 0 and the --time-limit in seconds")
    try:
        args.slurm_extra = shlex.split(args.slurm_extra)
    except ValueError as e:
        p.error(f"--slurm-extra: {e}")
    bad = [o for o in args.slurm_extra if o.startswith("-") and not o.startswith("--")]
    if bad:
        p.error(f"--slurm-extra: write sbatch options in their long form (--name=value), "
                f"not {bad[0]}")
    if args.jobs != 1:
        p.error("--jobs is for --launcher local: Slurm schedules the jobs")


def require_submitit():
    """submitit, or a LabError saying how to install it."""
    from ran_lab.common import LabError
    try:
        import submitit
    except ImportError:
        raise LabError(INSTALL_SUBMITIT) from None
    return submitit
