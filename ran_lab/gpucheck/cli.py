"""scripts/gpu-check.sh SECONDS|@EPOCH OUT: the GPU check in one job that ends by a deadline."""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from ..common.errors import LabError
from ..common.machine import available_cores
from .. import portable
from ..common.paths import REPO
from . import device_tests, plan, report, training

STEPS = ("tests", "training", "speed")
# what a step needs left to start (a step started runs to the deadline at most);
# RAN_GPU_CHECK_MIN_SECONDS=N lowers (or raises) every step's to N seconds, so that a short
# deadline still starts the step (the system tier's check of the deadline)
MIN_SECONDS = {"tests": 30, "training": 60, "speed": 120}
SPEED = "ran-base,ran-base-100,recurrent-cross"


def min_seconds(step):
    """What ``step`` needs left to start: MIN_SECONDS, or $RAN_GPU_CHECK_MIN_SECONDS for any."""
    value = os.environ.get("RAN_GPU_CHECK_MIN_SECONDS", "")
    if not value:
        return MIN_SECONDS[step]
    if not value.isdigit():
        raise LabError(f"RAN_GPU_CHECK_MIN_SECONDS must be a whole number of seconds; "
                       f"got {value!r}")
    return int(value)


def deadline_of(text, start):
    """SECONDS from ``start``, or @EPOCH: a deadline fixed before an earlier step (a build)."""
    value = text[1:] if text.startswith("@") else text
    if not value.isdigit() or (text.startswith("@") and int(value) <= start) or int(value) == 0:
        raise LabError(f"the deadline must be a positive number of seconds or a later @EPOCH; "
                       f"got {text!r}")
    return int(value) if text.startswith("@") else start + int(value)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__)
    p.add_argument("deadline", help="seconds from now, or @EPOCH (a time fixed before a build)")
    p.add_argument("out", type=Path, help="folder for check.json, CHECK.md and the small logs")
    p.add_argument("--config", default="configs/gpu-check.json")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu tries the check's own machinery without a GPU (default: cuda)")
    p.add_argument("--steps", default=",".join(STEPS),
                   help=f"comma-separated steps, in this order: {', '.join(STEPS)}")
    p.add_argument("--systems", help="comma-separated systems of the config (default: all)")
    p.add_argument("--dtypes", help="comma-separated dtypes (default: the config's)")
    p.add_argument("--updates", type=int, help="training updates (default: the config's)")
    p.add_argument("--data", type=Path,
                   help="one data-bin for every training instead of each recipe's (nothing is "
                        "prepared)")
    p.add_argument("--tests", dest="select", help="pytest -k expression for the tests step")
    p.add_argument("--plan", action="store_true", help="print the plan and its time; run nothing")
    return p.parse_args(argv)


def configured(args):
    config = plan.load(args.config)
    if args.updates is not None:
        if args.updates < 1:
            raise LabError(f"--updates must be at least 1; got {args.updates}")
        config["updates"] = args.updates
    if args.dtypes:
        config["dtypes"] = args.dtypes.split(",")
        plan.load_check_dtypes(config, "--dtypes")
    if args.systems:
        wanted = args.systems.split(",")
        names = [s["name"] for s in config["systems"]]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise LabError(f"--systems: {unknown[0]!r} is not in {args.config} "
                           f"(one of: {', '.join(names)})")
        config["systems"] = [s for s in config["systems"] if s["name"] in wanted]
    steps = args.steps.split(",")
    bad = [s for s in steps if s not in STEPS]
    if bad:
        raise LabError(f"--steps: unknown step {bad[0]!r} (one of {', '.join(STEPS)})")
    return config, [s for s in STEPS if s in steps]


def main(argv=None):
    start = int(time.time())
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        deadline = deadline_of(args.deadline, start)
        config, steps = configured(args)
        for step in steps:
            min_seconds(step)
        jobs = plan.jobs(config, args.device, data_bin=args.data)
    except LabError as e:
        print(f"gpu-check: {e}", file=sys.stderr)
        sys.exit(2)
    estimate = plan.estimate_seconds(config, len(jobs))
    if args.plan:
        print(f"gpu-check: steps {', '.join(steps)}; {len(jobs)} trainings of "
              f"{config['updates']} updates, {config['concurrent']} at a time: about "
              f"{estimate:.0f} s (configs/gpu-check.json's estimates); {deadline - start} s given")
        for job in jobs:
            print(f"  {job.name}: fairseq-train {' '.join(job.argv)}")
        return
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("gpu-check: no CUDA device here (--device cpu tries the check without one)")
    out = args.out
    result = {"environment": report.environment(args.device), "planned": steps,
              "deadline_seconds": deadline - start, "plan_seconds": round(estimate),
              "started": start, "deadline": deadline,
              "steps": {}}
    report.write(out, result)
    if result["environment"]["cuda_mps"]:
        print("gpu-check: an NVIDIA MPS daemon is running: the speed figures go through its "
              "server (stop it with 'echo quit | nvidia-cuda-mps-control')", file=sys.stderr)
    failed = False
    for step in steps:
        left = deadline - time.time()
        if left < min_seconds(step):
            print(f"gpu-check: {step}: not started ({left:.0f} s left)", file=sys.stderr)
            continue
        print(f"gpu-check: {step} ({left:.0f} s left)", file=sys.stderr)
        outcome = STEP[step](args, config, jobs, out, deadline)
        result["steps"][step] = outcome
        failed |= outcome["status"] == "failed" or any(
            r["status"] == "failed" for r in outcome.get("rows", []))
        report.write(out, result)
    result["finished"] = round(time.time(), 1)
    report.write(out, result)
    print(f"gpu-check: report {out / 'CHECK.md'}", file=sys.stderr)
    sys.exit(1 if failed else 0)


def _tests(args, config, jobs, out, deadline):
    return device_tests.run(args.device, out, deadline, args.select)


def _training(args, config, jobs, out, deadline):
    with open(out / "prepare.log", "w") as log:
        try:
            training.prepare(jobs, deadline, log)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return {"status": "failed", "reason": str(e)}
    threads = max(1, available_cores() // max(1, config["concurrent"]))
    finished = training.run(jobs, config["concurrent"], deadline, out / "logs", threads)
    rows = training.results(jobs, finished, config)
    bad = any(r["status"] == "failed" for r in rows)
    return {"status": "failed" if bad else "passed", "updates": config["updates"],
            "dtypes": config["dtypes"], "tolerance": config["tolerance"], "rows": rows}


def _speed(args, config, jobs, out, deadline):
    if args.device != "cuda":
        return {"status": "not run", "reason": "speed is measured on a GPU"}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu-speed.sh"), f"@{int(deadline)}",
                           str(out / "speed"), SPEED], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True)
    (out / "speed.log").write_text(portable.kept_log(proc.stdout + proc.stderr))
    return {"status": "passed" if proc.returncode == 0 else "failed", "exit": proc.returncode,
            "benchmarks": SPEED.split(","), "files": "speed/ (scripts/gpu-speed.sh)"}


STEP = {"tests": _tests, "training": _training, "speed": _speed}
