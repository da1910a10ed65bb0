"""The training checks: every (system, dtype) of the plan trained on the device, several at a time,
each stopped at the deadline; then judged from fairseq's JSON log lines (finite losses, a falling
loss, the validation loss at the last update against float32's)."""
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..common.launcher import launched
from ..common.paths import REPO
from ..portable import copy_log, kept_log


def log_records(text):
    """The JSON objects of fairseq's ``--log-format json`` lines, in order."""
    out = []
    for line in text.split("\n"):
        start = line.find("{")
        if start < 0:
            continue
        try:
            record = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def parse(text, updates):
    """Training losses (train_inner lines), the updates reached and the validation loss at
    update ``updates`` (None where fairseq did not validate there)."""
    losses, reached, valid = [], 0, None
    for r in log_records(text):
        if "valid_loss" in r:
            if int(_float(r.get("valid_num_updates", -1))) == updates:
                valid = _float(r["valid_loss"])
        elif "loss" in r and "num_updates" in r:
            losses.append(_float(r["loss"]))
            reached = max(reached, int(_float(r["num_updates"])))
        elif "train_num_updates" in r:
            reached = max(reached, int(_float(r["train_num_updates"])))
    return {"losses": losses, "updates": reached, "valid_loss": valid}


def judge(parsed, updates, window, reference=None, tolerance=None):
    """(passed, reason) of one training; ``reference`` is float32's validation loss."""
    losses = parsed["losses"]
    if parsed["updates"] < updates:
        return False, f"stopped at update {parsed['updates']} of {updates}"
    if not losses or not all(math.isfinite(x) for x in losses):
        return False, "a training loss is not finite" if losses else "no training loss logged"
    if len(losses) >= 2 * window:
        first, last = sum(losses[:window]) / window, sum(losses[-window:]) / window
        if not last < first:
            return False, f"the loss did not fall ({first:.3f} -> {last:.3f})"
    valid = parsed["valid_loss"]
    if valid is None or not math.isfinite(valid):
        return False, f"no finite validation loss at update {updates}"
    if reference is not None and tolerance is not None:
        gap = abs(valid - reference) / reference
        if gap > tolerance:
            return False, (f"validation loss {valid:.3f} is {gap:.1%} from float32's "
                           f"{reference:.3f} (tolerance {tolerance:.0%})")
    return True, "passed"


def prepare(jobs, deadline, log):
    """Make each data-bin the jobs read that is missing (the data package, from the recipe)."""
    done = set()
    for job in jobs:
        if job.data in done or (REPO / job.data / "dict.txt").exists() or \
                any((REPO / job.data).glob("dict.*.txt")) or not job.prepare:
            done.add(job.data)
            continue
        proc = subprocess.run([sys.executable, *job.prepare], cwd=REPO, capture_output=True,
                              text=True, timeout=max(1, deadline - time.time()))
        log.write(kept_log(proc.stdout + proc.stderr))
        if proc.returncode != 0:
            raise RuntimeError(f"preparing {job.data} failed (its log: the training step's "
                               f"prepare.log)")
        done.add(job.data)


def run(jobs, concurrent, deadline, logs_dir, threads=1, poll=1.0):
    """Train every job, ``concurrent`` at a time; a job still running at ``deadline`` is
    stopped. Returns {job name: (exit code or None when stopped, log text)}."""
    logs_dir = Path(logs_dir)
    logs_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    pending, running, finished = list(jobs), {}, {}
    while pending or running:
        while pending and len(running) < concurrent and time.time() < deadline:
            job = pending.pop(0)
            log = open(logs_dir / f"{job.name}.log", "w")
            cmd = launched([sys.executable, "-m", "ran_lab.run_fairseq", "train", *job.argv], env)
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace")
            copying = threading.Thread(target=copy_log, args=(proc.stdout, log))  # as it comes
            copying.start()
            running[job.name] = (proc, log, copying)
        if time.time() >= deadline:
            pending.clear()
        for name, (proc, log, copying) in list(running.items()):
            code = proc.poll()
            if code is None and time.time() >= deadline:
                proc.kill()
                proc.wait()
                code = None
            elif code is None:
                continue
            copying.join()
            log.close()
            finished[name] = (code, (logs_dir / f"{name}.log").read_text(errors="replace"))
            del running[name]
        if running:
            time.sleep(poll)
    return finished


def results(jobs, finished, config):
    """Per job: its verdict, the dtype compared with float32's validation loss."""
    updates, window = config["updates"], config.get("window", 3)
    parsed = {name: parse(text, updates) for name, (_, text) in finished.items()}
    out = []
    for job in jobs:
        row = {"system": job.system, "dtype": job.dtype}
        if job.name not in finished:
            row.update(status="not run", reason="the deadline came first")
            out.append(row)
            continue
        code, _ = finished[job.name]
        p = parsed[job.name]
        row.update(updates=p["updates"], valid_loss=p["valid_loss"],
                   first_loss=p["losses"][0] if p["losses"] else None,
                   last_loss=p["losses"][-1] if p["losses"] else None)
        if code is None:
            row.update(status="stopped", reason=f"the deadline stopped it at update {p['updates']}")
        elif code != 0:
            row.update(status="failed", reason=f"exit status {code} (logs/{job.name}.log)")
        else:
            ref = None
            if job.dtype != "float32":
                ref_name = job.name.rsplit(".", 1)[0] + ".float32"
                ref = parsed.get(ref_name, {}).get("valid_loss")
            ok, reason = judge(p, updates, window, ref, config["tolerance"].get(job.dtype))
            if job.dtype != "float32" and ref is None and ok:
                reason = "passed (no float32 run to compare with)"
            row.update(status="passed" if ok else "failed", reason=reason)
        out.append(row)
    return out
