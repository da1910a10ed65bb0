"""The helpers of scripts/quickstart.sh (make demo), each a subcommand:

``threads``
    measure how busy the CPU is (its use over one second from /proc/stat, all processes) and print
    ``THREADS<TAB>a sentence saying what was measured``: one thread per core that is free.
``progress PLANNED``
    filter fairseq-train's output: its progress lines without their timestamp, each followed by
    the update reached of PLANNED and the expected finish time at the rate of the last interval
    (fairseq's ``ups``).
``record``
    write demo.json (the environment variables DEMO_* name what the script measured).
``verdict``
    the closing lines: training stopped at update N of PLANNED, why, and how to run it to the end.

Only the standard library, but for ``record`` (ran_fairseq's machine description).
"""
import json
import os
import re
import sys
import time
from pathlib import Path

PROGRESS = re.compile(r"^[0-9-]+ [0-9:]+ \| INFO \| (train_inner|train|valid) \| ")
# What three full runs of configs/quickstart.args (700 updates, seeds 1-3) scored:
# results/quickstart/README.md and its curve.csv.
FULL_RUN = "sacreBLEU 25.8-27.0 over three seeds (results/quickstart/README.md)"
DEFAULT_CONFIG = "configs/quickstart.args"


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def busy_cores(seconds=1.0, stat="/proc/stat"):
    """How many cores' worth of CPU time every process used over ``seconds`` (None without
    /proc/stat)."""
    def sample():
        with open(stat, encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / (total1 - total0))


def threads_for(n_cores, busy):
    """One thread per free core, at least one: a thread that must share its core with another
    process stalls the others at every synchronisation (2 threads on 2 cores with one busy:
    slower than 1 thread)."""
    if busy is None:
        return n_cores
    return max(1, min(n_cores, int(n_cores - busy + 0.5)))


def cmd_threads():
    n, busy = cores(), busy_cores()
    threads = threads_for(n, busy)
    if busy is None:
        said = f"{n} cores; the load is unknown (no /proc/stat)"
    else:
        said = f"{n} cores, {busy:.1f} of them busy over the last second (/proc/stat)"
    print(f"{threads}\t{said}")


def flag(flags, name, default=None):
    """The last value of ``name`` in a list of flags."""
    value = default
    for i, f in enumerate(flags[:-1]):
        if f == name:
            value = flags[i + 1]
    return value


def cmd_progress(planned):
    last = None  # (updates, wall) of the previous progress line
    for line in sys.stdin:
        if not PROGRESS.match(line):
            continue
        line = re.sub(r"^[0-9-]+ [0-9:]+ \| INFO \| ", "", line.rstrip("\n"))
        updates = re.search(r"num_updates=(\d+)", line)
        wall = re.search(r"\bwall=(\d+(?:\.\d+)?)", line)
        note = ""
        if line.startswith("train_inner") and updates and wall:
            n, w = int(updates.group(1)), float(wall.group(1))
            ups = re.search(r"\bups=(\d+(?:\.\d+)?)", line)  # fairseq's, over the interval
            if ups and float(ups.group(1)) > 0:
                rate = float(ups.group(1))
            elif last and n > last[0] and w > last[1]:
                rate = (n - last[0]) / (w - last[1])
            else:
                rate = n / w if w > 0 else 0
            if rate > 0 and n < planned:
                left = (planned - n) / rate
                finish = time.strftime("%H:%M", time.localtime(time.time() + left))
                note = (f"  -> update {n} of {planned}, {rate:.2f} updates/s, "
                        f"done at about {finish} (in {left / 60:.1f} min)")
            last = (n, w)
        print(line + note, flush=True)


def reached_updates(train_log):
    found = re.findall(r"num_updates=(\d+)", Path(train_log).read_text(errors="replace"))
    return int(found[-1]) if found else 0


def training_rate(train_log, seconds, reached):
    """Updates per second of training: from fairseq's last progress line that has both the update
    count and the wall time, else over the whole step (start-up included)."""
    for line in reversed(Path(train_log).read_text(errors="replace").splitlines()):
        updates, wall = re.search(r"num_updates=(\d+)", line), re.search(r"\bwall=(\d+)", line)
        if updates and wall and int(wall.group(1)) > 0:
            return int(updates.group(1)) / int(wall.group(1))
    return reached / seconds if seconds > 0 else 0


def cmd_verdict():
    env = os.environ
    planned, reached = int(env["DEMO_PLANNED"]), reached_updates(env["DEMO_TRAIN_LOG"])
    if planned <= 0:  # no --max-update: fairseq's own stopping rules decide
        return
    if reached >= planned:
        print(f"Training ran all {planned} planned updates.")
        return
    cap = env.get("DEMO_TIME_CAP", "")
    rate = training_rate(env["DEMO_TRAIN_LOG"], float(env.get("DEMO_TRAIN_SECONDS") or 0), reached)
    why = (f"the time cap TIME_CAP_MINUTES={cap} ran out" if cap
           else "fairseq stopped before --max-update")
    print(f"NOTE: training stopped at update {reached} of {planned}: {why}, at "
          f"{rate:.2f} updates/s on {env.get('DEMO_THREADS', '?')} thread(s) "
          f"(at the start: {env.get('DEMO_LOAD', 'load not measured')}; load average at the "
          f"end: {os.getloadavg()[0]:.1f}). The scores above are those of a model trained "
          f"{100 * reached / planned:.0f}% of the way.")
    if env.get("DEMO_CONFIG") == DEFAULT_CONFIG:
        print(f"A full run ({planned} updates) scores {FULL_RUN}.")
    more = f" (about {planned / rate / 60:.0f} min at this rate)" if rate > 0 else ""
    print(f"To run one, unset TIME_CAP_MINUTES and run `make demo` again{more}, on a quieter "
          f"machine if you can.")


def cmd_record(argv):
    from ran_lab.common.machine import git_commit, machine_info

    env = os.environ
    out = Path(env["DEMO_OUT"])
    seconds = dict(kv.split("=") for kv in env["DEMO_SECONDS"].split())
    planned = int(env["DEMO_PLANNED"])
    reached = reached_updates(out / "train.log")
    cap = env.get("DEMO_TIME_CAP", "")
    record = {
        "pair": env["DEMO_PAIR"], "config": env["DEMO_CONFIG"], "extra_flags": argv,
        "average_last": int(env["DEMO_AVERAGE"]),
        "updates": {"planned": planned, "reached": reached},
        "time_cap_minutes": float(cap) if cap else None,
        "stopped_early": reached < planned,
        "load_at_start": env.get("DEMO_LOAD", ""),
        "seconds": {k: int(v) for k, v in seconds.items()},
        "total_seconds": int(env["DEMO_TOTAL"]),
        "scores": json.loads((out / "scores.json").read_text()),
        "machine": dict(machine_info("cpu", int(env.get("OMP_NUM_THREADS", "1"))),
                        git_commit=git_commit()),
    }
    (out / "demo.json").write_text(json.dumps(record, indent=1) + "\n")


def main(argv):
    if argv[:1] == ["threads"]:
        cmd_threads()
    elif argv[:1] == ["progress"] and len(argv) == 2:
        cmd_progress(int(argv[1]))
    elif argv[:1] == ["record"]:
        cmd_record(argv[1:])
    elif argv[:1] == ["verdict"]:
        cmd_verdict()
    elif argv[:1] == ["planned"]:
        print(flag(argv[1:], "--max-update", "0"))
    else:
        sys.exit("usage: demo.py threads | progress PLANNED | record [FLAGS] | verdict | "
                 "planned FLAGS...")


if __name__ == "__main__":
    main(sys.argv[1:])
