"""The board's cost columns, measured on its checkpoints (``scripts/reproduce-leaderboard.sh
cost``), one system after another, on a machine with nothing else running: parameters; training target
tokens/s (a short training of the board's recipe, its first log interval left out) and its peak
resident memory; decoding sentences/s of the test set, greedy and beam 5, at each thread count of
the board's ``cost.threads`` (``"all"``: every core), with each decoding's peak resident memory.
Decoding speed is fairseq-generate's own (model loading excluded); peak memory is the process's
``ru_maxrss``. The machine's load average before and after is recorded: the page prints it.

The authors' code: :func:`peer_rows` reads the peer benchmark's committed runs
(``results/bench/peers/cpu-run*/peers.json``) at the board's sizes."""
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Dict, List, Optional

from ran_text import textio
from ran_lab.common import LabError
from ..common import paths
from ..common.machine import available_cores, cpu_model
from ..common.flags import without
from ..common.paths import shown, slug
from ..reproduce.config import load_config
from ..reproduce.logs import SPEED_RE
from .board import MAX_LOAD, Board

# fairseq-train's progress lines with --log-format simple: "... | train_inner | epoch 001: 20 / 498
# loss=..., wps=2310.5, ..., num_updates=20, ..."
WPS_RE = re.compile(r"\| train_inner \|.*?\bwps=([\d.]+).*?\bnum_updates=(\d+)")
LOG_INTERVAL = 10
PEER_CASES = {"ran-cpu": "RAN-ALL as the authors' code", "pa-cpu": "Pervasive Attention small"}
PEER_RUNS = "results/bench/peers/cpu-run*/peers.json"


def _set(argv: List[str], flag: str, *values: str) -> List[str]:
    """``argv`` with ``flag`` set to ``values`` (replaced where present, else appended)."""
    return without(argv, {flag}) + [flag, *values]


def timed(argv: List[str], log: Path, threads: int) -> dict:
    """Run ``python -m ran_lab.run_fairseq ARGV`` with ``threads`` threads, its output into
    ``log``: wall seconds and peak resident memory (MiB)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONUNBUFFERED="1")
    with open(log, "w", encoding="utf-8") as out:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "ran_lab.run_fairseq", *argv],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=paths.REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
        raise LabError(f"{' '.join(argv[:2])} failed (exit {proc.returncode}): "
                        + " / ".join(tail))
    rss = usage.ru_maxrss / (2 ** 20 if sys.platform == "darwin" else 1024)
    return {"seconds": seconds, "peak_rss_mib": rss}


def train_cost(result: dict, updates: int, threads: int, work: Path) -> dict:
    """Training target tokens/s of the board's recipe for ``updates`` updates (the first log
    interval left out) and the training's peak resident memory."""
    argv = result["train_argv"]  # (run in the checkout: its paths are relative to it)
    argv = _set(argv, "--save-dir", str(work / "train"))
    argv = _set(argv, "--max-update", str(updates))
    argv = _set(argv, "--log-interval", str(LOG_INTERVAL))
    argv = without(argv, {"--validate-interval-updates"}) + ["--disable-validation", "--no-save"]
    log = work / "train.log"
    run = timed(argv if argv[:1] == ["train"] else ["train", *argv], log, threads)
    speeds = [(int(u), float(w)) for w, u in
              WPS_RE.findall(log.read_text(encoding="utf-8", errors="replace"))]
    kept = [w for u, w in speeds if u > LOG_INTERVAL]
    if not kept:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-3:]
        raise LabError(f"no training speed past update {LOG_INTERVAL} in the timed training's "
                        f"log: {' / '.join(tail)}")
    return {"train_tokens_per_s": median(kept), "train_peak_rss_mib": run["peak_rss_mib"],
            "train_updates": updates, "train_threads": threads}


def decode_cost(result: dict, beam: int, threads: int, work: Path) -> dict:
    argv = result["generate_argv"]
    argv = _set(argv, "--beam", str(beam))
    argv = _set(argv, "--nbest", "1")
    log = work / f"generate.beam{beam}.t{threads}.txt"
    run = timed(["generate", *argv], log, threads)
    speed = SPEED_RE.search(log.read_text(encoding="utf-8", errors="replace"))
    if not speed:
        raise LabError(f"no timing line in {log}")
    sentences = float(speed.group(1).replace(",", ""))
    return {"sentences": int(sentences),
            "sentences_per_s": float(speed.group(4).replace(",", "")),
            "tokens_per_s": float(speed.group(5).replace(",", "")),
            "peak_rss_mib": run["peak_rss_mib"], "wall_seconds": run["seconds"]}


def _thread_counts(spec) -> List[int]:
    return [available_cores() if t == "all" else int(t) for t in spec]


def load_average():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def measure(board: Board, systems: Optional[List[str]] = None, out: Optional[Path] = None,
            updates: Optional[int] = None, max_load: float = MAX_LOAD) -> Path:
    """Measure the systems' cost on the board's checkpoints (``cost.pair``, ``cost.seed``) into
    ``PAGE/cost.json`` (or ``out``): every system with a finished run, or only ``systems``. The
    rows of systems not measured this time are kept where the file was measured with the same
    settings on the same kind of machine, so the columns fill in as the board's runs finish; each
    row records its date and the load average before the command started its first timing (the
    machine's other work: its own timings raise the load for the next system) and after its
    last. Refused where the machine's one-minute load average is above
    ``max_load`` before it starts: numbers timed beside other work are not the systems' cost."""
    load = load_average()
    if load is not None and load > max_load:
        raise LabError(f"the machine's load average is {load:g}, above {max_load:g}: the cost "
                        f"columns are measured with nothing else running (wait, or raise "
                        f"--max-load where a background load is part of the machine)")
    config = load_config(paths.repo_path(board.config))
    runs = paths.repo_path(config["out"])
    pair, seed = board.cost["pair"], board.cost["seed"]
    updates = updates or board.cost["train_updates"]
    counts = _thread_counts(board.cost["threads"])
    path = Path(out) if out else paths.repo_path(board.page) / "cost.json"
    data = {"pair": pair, "seed": seed, "train_updates": updates,
            "warmup_updates": LOG_INTERVAL, "threads": [str(t) for t in board.cost["threads"]],
            "machine": {"cpu": cpu_model(), "cores": available_cores(),
                        "python": platform.python_version()}}
    kept = _kept_rows(path, data, systems)
    rows = []
    for name in systems or list(config["systems"]):
        result_file = runs / pair / slug(name) / f"seed{seed}" / "result.json"
        if not result_file.is_file():
            print(f"leaderboard cost: {name}: no {pair} seed {seed} run yet, skipped",
                  file=sys.stderr)
            continue
        result = textio.read_json_file(result_file, "a board run's result")
        print(f"leaderboard cost: {name} ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="leaderboard-cost-") as tmp:
            work = Path(tmp)
            row = {"system": name, "params": result.get("params"),
                   **train_cost(result, updates, counts[-1], work), "decode": {}}
            for label, threads in zip(board.cost["threads"], counts):
                row["decode"][str(label)] = {
                    "threads": threads,
                    "greedy": decode_cost(result, 1, threads, work),
                    "beam5": decode_cost(result, 5, threads, work)}
        row["measured"] = {"date": time.strftime("%Y-%m-%d"), "load_average_before": load}
        rows.append(row)
    after = load_average()
    for row in rows:
        row["measured"]["load_average_after"] = after
    order = list(config["systems"])
    rows = sorted(kept + rows, key=lambda r: order.index(r["system"])
                  if r["system"] in order else len(order))
    first = next(iter(rows), None)
    data.update(sentences=first["decode"][data["threads"][0]]["greedy"]["sentences"]
                if first else 0, systems=rows, peers=peer_rows())
    path.parent.mkdir(parents=True, exist_ok=True)
    textio.write_json(path, data)
    return path


def _kept_rows(path: Path, settings: dict, measured: Optional[List[str]]) -> List[dict]:
    """The rows of ``path`` (an earlier cost.json) that this measurement keeps: those of systems
    it does not measure, where the file's settings and machine are this measurement's (else
    every system is measured again: a table mixes no two recipes or machines)."""
    if measured is None or not path.is_file():
        return []
    old = textio.read_json_file(path, "the cost measurements")
    same = all(old.get(k) == settings[k] for k in ("pair", "seed", "train_updates", "threads")) \
        and {k: old.get("machine", {}).get(k) for k in ("cpu", "cores")} \
        == {k: settings["machine"][k] for k in ("cpu", "cores")}
    if not same:
        raise LabError(f"{shown(path)} was measured with other settings or on another machine: "
                       f"measure every system again (leave out --systems)")
    return [r for r in old.get("systems", []) if r["system"] not in measured]


def peer_rows(pattern: str = PEER_RUNS) -> List[dict]:
    """The authors' code beside the plugin at the board's sizes, from the peer benchmark's
    committed runs: per case, training target tokens/s and decoding sentences/s of each side
    (the benchmark's synthetic batch: its sentences of its target length), the median over the
    runs of each run's median round."""
    files = sorted(paths.REPO.glob(pattern))
    by: Dict[str, dict] = {}
    for f in files:
        results = textio.read_json_file(f, "a peer benchmark run").get("results", {})
        for case, system in PEER_CASES.items():
            r = results.get(case)
            if not r:
                continue
            c = r["case"]
            entry = by.setdefault(case, {"case": case, "system": system, "peer": c["peer"],
                                         "sentences": c["sentences"],
                                         "target_length": c["target_length"], "runs": [],
                                         "train": {}, "decode": {}})
            entry["runs"].append(str(f.relative_to(paths.REPO)))
            for side, s in r["train"]["sides"].items():
                entry["train"].setdefault(side, []).append(
                    c["sentences"] * c["target_length"] / s["median"])
            for side, s in r.get("decode", {}).get("sides", {}).items():
                entry["decode"].setdefault(side, []).append(c["sentences"] / s["median"])
    out = []
    for entry in by.values():
        entry["train_tokens_per_s"] = {k: median(v) for k, v in entry.pop("train").items()}
        entry["decode_sentences_per_s"] = {k: median(v) for k, v in entry.pop("decode").items()}
        out.append(entry)
    return out

