"""The plugin against the authors' own code: training steps and greedy decoding side by side.

For each case (an architecture, sizes, a batch with or without padding) two worker processes
(:mod:`ran_lab.bench.peer_worker`) hold the plugin's model and the authors' model at the same
sizes, on the same token ids; the parent times one training step (forward, backward, Adam step)
in one and then in the other, alternating which goes first, ``--reps`` times, then greedy
decoding of the batch likewise. The ratio of the medians (plugin ÷ peer, below 1: the plugin is
faster) and the spread of the paired ratios say who is faster; ``uptime``'s load average is
recorded before and after. Peak memory is measured apart, each side alone in a fresh process
under glibc's ``MALLOC_MMAP_THRESHOLD_`` (freed tensors go back to the system, so the resident set
follows the live tensors): the high-water mark of the resident set over a few training steps,
less the resident set before the first one.

The authors' code is read from a local clone at a pinned commit (:data:`PEERS`); it is never copied
into the project. A missing clone is an error of one line that says how to get it. The peers:
Elbayad et al.'s attn2d for Pervasive Attention (the ``pa-`` cases: its paper code, and in the
``pa-fairseq-`` cases its later fairseq port, :mod:`ran_lab.bench.peer_attn2d_fairseq`), Zeng et
al.'s thseq for RAN (the ``ran-`` cases; :mod:`ran_lab.bench.peer_thseq`).

    python scripts/bench-peers.py --attn2d ~/src/attn2d --out results/bench/peers/cpu-run1
    python scripts/bench-peers.py --thseq ~/src/RAN --cases ran-cpu,ran-cpu-padded --out OUT
    python scripts/bench-peers.py --attn2d-fairseq ~/src/attn2d-fairseq --out OUT
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from .peer_clones import PEERS, clone_commit, clone_problem, require_clone  # noqa: F401
from ran_lab.common import LabError
from ran_lab.common.machine import available_cores, cpu_model, git_commit, utc_now
from ran_lab import portable
from ran_lab.tables import markdown_table
from ran_lab.common.paths import REPO

MMAP_THRESHOLD = 65536  # as ran-bench --live-memory


# The cases: the plugin's architecture at the sizes of a recipe, against the peer of that paper.
# 16 sentences of 20 tokens is the batch of the project's first comparison; the vocabulary
# is about Multi30k's joint BPE (configs/pervasive/cpu.json).
_PA = {"arch": "pervasive_attention", "peer": "attn2d", "sentences": 16, "source_length": 20,
       "target_length": 20, "vocab": 8000, "seed": 1}
CASES = {
    "pa-cpu": dict(_PA, embed_dim=64, layers=8, growth_rate=16, kernel_size=3,
                   about="pervasive_attention_small (configs/pervasive/systems.json)"),
    "pa-d128": dict(_PA, embed_dim=128, layers=8, growth_rate=16, kernel_size=3,
                    about="the CPU depth at the paper's d = 128 (the first comparison's size)"),
    "pa-paper": dict(_PA, embed_dim=128, layers=24, growth_rate=32, kernel_size=5,
                     about="the paper's base size (Table 1, Max)"),
}
# The same sizes against attn2d's later fairseq port (ran_lab/bench/peer_attn2d_fairseq.py), both
# sides without dropout (the measurement that found the port's step faster than the plugin's).
for _size in ("cpu", "d128", "paper"):
    CASES[f"pa-fairseq-{_size}"] = dict(CASES[f"pa-{_size}"], peer="attn2d-fairseq", dropout=0.0)

# RAN-ALL (Zeng et al. 2021) against the authors' thseq: 32 sentences of 25 tokens, the batch the
# first comparison measured, the same vocabulary. The plugin runs the system 'RAN-ALL as the authors'
# code' of configs/ran/systems.json (their feed-forward transition n -> 1,024 -> n, whole-row A_0,
# Xavier-drawn A_0) without dropout on the attention weights, as the authors' command
# (--attention-dropout 0), so that both sides compute the same model; residual dropout 0.1 on
# both. 'ran-cpu-paper' is the plugin's own RAN-ALL instead (the transition of Eqs. 3-4, the
# decoder's lower triangle of §2.2, attention dropout 0.2 of §3.1) against the same thseq model.
AS_THE_AUTHORS_CODE = ["--ran-transition", "ffn", "--ran-decoder-initial", "full",
                       "--ran-initial-init", "xavier", "--ran-ffn-dim", "1024"]
_RAN = {"arch": "ran_transformer", "peer": "thseq", "sentences": 32, "source_length": 25,
        "target_length": 25, "vocab": 8000, "seed": 1, "dropout": 0.1,
        "plugin_flags": AS_THE_AUTHORS_CODE + ["--positional-attention-dropout", "0"]}
_RAN_CPU = dict(_RAN, embed_dim=256, layers=3, ffn_dim=1024, heads=4)
CASES.update({
    "ran-cpu": dict(_RAN_CPU, about="ran_transformer_small, the CPU recipe's RAN-ALL "
                                    "(configs/ran/systems.json), as the authors' code"),
    "ran-cpu-paper": dict(_RAN_CPU, plugin_flags=[],
                          about="the plugin's RAN-ALL as the CPU recipe trains it (the paper's "
                                "transition, lower triangle, attention dropout 0.2) against "
                                "the authors' code at the same sizes"),
    "ran-paper": dict(_RAN, embed_dim=512, layers=6, ffn_dim=2048, heads=8,
                      about="the paper's base size (transformer-base: 6+6 layers, 512/2048, 8 "
                            "heads), as the authors' code"),
})
for _name in list(CASES):
    CASES[_name + "-padded"] = dict(CASES[_name], padded=True)


def plugin_changes():
    """Files of ran_fairseq/ that differ from the checkout's commit (what was measured is then
    not that commit's code)."""
    git = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "ran_fairseq"],
                         capture_output=True, text=True)
    return [line[3:] for line in git.stdout.splitlines()] if git.returncode == 0 else []


# ---- runners: a side in a worker process, or in this process (the tests) -----------------------

class ProcessRunner:
    """A side in a worker process of its own (one thread, unbuffered, this checkout first on the
    path; ``live_memory`` adds glibc's mmap threshold). Its stderr goes to ``log``."""

    def __init__(self, name, threads=1, live_memory=False, log=None):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        if live_memory:
            env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
        self.name = name
        self.log = open(log, "a") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "ran_lab.bench.peer_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, text=True)

    def call(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise LabError(f"the {self.name} worker ended (exit code {self.proc.wait()}); its "
                            f"log says why")
        answer = json.loads(line)
        if not answer.pop("ok"):
            raise LabError(f"{self.name}: {answer['error']}")
        return answer

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait()
        if self.log is not subprocess.DEVNULL:
            self.log.close()


class InProcessRunner:
    """A side in this process (the tests): the worker's commands without the pipe."""

    def __init__(self, name, **unused):
        from .peer_worker import Worker

        self.name, self.worker = name, Worker()

    def call(self, **command):
        return self.worker.handle(command)

    def close(self):
        pass


# ---- measuring ---------------------------------------------------------------------------------

def summary(values):
    """Median, quartiles, extremes and the interquartile range relative to the median."""
    values = sorted(values)
    if len(values) >= 2:
        q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    else:
        q1 = q2 = q3 = values[0]
    return {"median": q2, "q1": q1, "q3": q3, "min": values[0], "max": values[-1],
            "relative_iqr": (q3 - q1) / q2 if q2 else None, "n": len(values)}


def interleaved(runners, command, reps, warmup):
    """``warmup`` untimed calls of ``command`` on each runner, then ``reps`` timed rounds, each
    calling every runner once, in turn: the first runner first in even rounds, last in odd ones
    (so that a drift of the machine's speed falls on both sides). Seconds per runner, by round."""
    for runner in runners:
        for _ in range(warmup):
            runner.call(cmd=command)
    times = {runner.name: [] for runner in runners}
    for rep in range(reps):
        order = runners if rep % 2 == 0 else list(reversed(runners))
        for runner in order:
            times[runner.name].append(runner.call(cmd=command)["seconds"])
    return times


def compare(times, plugin="plugin"):
    """Per side the summary of its times; the ratio of the medians (plugin ÷ peer) and the
    summary of the per-round ratios."""
    peer = next(name for name in times if name != plugin)
    rounds = [a / b for a, b in zip(times[plugin], times[peer])]
    sides = {name: summary(values) for name, values in times.items()}
    return {"sides": sides, "ratio_of_medians": sides[plugin]["median"] / sides[peer]["median"],
            "round_ratios": summary(rounds), "seconds": times}


def peak_memory(runner_class, side, case, clone, threads, steps, log):
    """The training peak of one side alone: resident-set high-water mark over ``steps``
    training steps, less the resident set before the first one (MiB)."""
    runner = runner_class(side, threads=threads, live_memory=True, log=log)
    try:
        setup = runner.call(cmd="setup", side=side, case=case, clone=clone, threads=threads)
        for _ in range(steps):
            runner.call(cmd="train")
        memory = runner.call(cmd="memory")
        memory.update(runner.call(cmd="saved"))
        memory.update(runner.call(cmd="kernels"))
    finally:
        runner.close()
    return dict(memory, rss_before_mib=setup["rss_before_mib"],
                peak_resettable=setup["peak_resettable"])


def run_case(name, case, clones, reps, warmup, threads, runner_class=ProcessRunner, log=None,
             memory_steps=3, decode=True):
    """One case: interleaved training (and decoding) times, then each side's peak memory."""
    peer = case["peer"]
    sides = ["plugin", peer]
    runners = [runner_class(side, threads=threads, log=log) for side in sides]
    result = {"case": case}
    try:
        for runner in runners:
            setup = runner.call(cmd="setup", side=runner.name, case=case,
                                clone=clones.get(runner.name), threads=threads)
            result.setdefault("info", {})[runner.name] = setup["info"]
            result["torch"] = setup["torch"]
        result["train"] = compare(interleaved(runners, "train", reps, warmup))
        if decode:
            result["decode"] = compare(interleaved(runners, "decode", reps, 1))
    finally:
        for runner in runners:
            runner.close()
    if memory_steps:
        result["memory"] = {side: peak_memory(runner_class, side, case, clones.get(side), threads,
                                              memory_steps, log) for side in sides}
        memory = result["memory"]
        memory["ratio"] = memory["plugin"]["increment_mib"] / memory[peer]["increment_mib"]
        memory["saved_ratio"] = memory["plugin"]["saved_mib"] / memory[peer]["saved_mib"]
    return result


# ---- the report --------------------------------------------------------------------------------

def _ms(summary_):
    return f"{1000 * summary_['median']:,.1f}"


def _ratio(comparison):
    r = comparison["round_ratios"]
    return f"×{comparison['ratio_of_medians']:.2f} ({r['min']:.2f}–{r['max']:.2f})"


def report(results, machine):
    """bench-peers' Markdown table: one row per case."""
    heads = ["case", "peer", "plugin train ms", "peer train ms",
             "train plugin ÷ peer (rounds' range)", "plugin decode ms", "peer decode ms",
             "decode plugin ÷ peer (rounds' range)", "train Δ memory MiB plugin / peer (ratio)",
             "saved for backward MiB plugin / peer (ratio)",
             "kernels per training step plugin / peer"]
    rows = []
    for name, r in results.items():
        peer = r["case"]["peer"]
        train = r["train"]
        row = [name, peer, _ms(train["sides"]["plugin"]), _ms(train["sides"][peer]), _ratio(train)]
        if "decode" in r:
            dec = r["decode"]
            row += [_ms(dec["sides"]["plugin"]), _ms(dec["sides"][peer]), _ratio(dec)]
        else:
            row += ["", "", ""]
        if "memory" in r:
            m = r["memory"]
            row.append(f"{m['plugin']['increment_mib']:,.0f} / {m[peer]['increment_mib']:,.0f} "
                       f"(×{m['ratio']:.2f})")
            row.append(f"{m['plugin']['saved_mib']:,.1f} / {m[peer]['saved_mib']:,.1f} "
                       f"(×{m['saved_ratio']:.2f})")
            row.append(f"{m['plugin']['kernels']:,} / {m[peer]['kernels']:,}")
        else:
            row += ["", "", ""]
        rows.append(row)
    lines = markdown_table(heads, rows, text_columns=2)
    cores = f"{machine['cores']} cores"
    if machine.get("machine_cores", machine["cores"]) != machine["cores"]:  # taskset, cgroups
        cores = f"{machine['machine_cores']} cores, {machine['cores']} available to the benchmark"
    lines += ["", f"Machine: {machine['cpu']} ({cores}), {machine['threads']} "
              f"thread per worker, torch {machine['torch']}; load average "
              f"{machine['load_before']} before, {machine['load_after']} after; "
              f"{machine['date']}; commit {machine['commit']}.",
              f"Medians of {machine['reps']} interleaved rounds after {machine['warmup']} untimed "
              f"steps per side; a round's ratio is the plugin's time over the peer's in that "
              f"round. Memory: each side alone, peak resident set over "
              f"{machine['memory_steps']} training steps less the resident set before them, "
              f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}; saved for backward: the distinct "
              f"storages autograd keeps from one training forward pass, parameters left out; "
              f"kernels: the aten operators of a training forward and backward pass on the CPU, "
              f"views left out (ran_lab/bench/kernels.py), about a GPU step's launches."]
    if machine.get("plugin_changes"):
        lines.append(f"The plugin's code differed from that commit in: "
                     f"{', '.join(machine['plugin_changes'])}.")
    for peer, commit in machine["peers"].items():
        at = (f"at {commit}" if commit else
              f"from a copy outside git (the pinned commit is {PEERS[peer]['commit']}; the "
              f"copy's is not checked)")
        lines.append(f"{peer}: {PEERS[peer]['url']} {at} ({PEERS[peer]['note']}).")
    return "\n".join(lines) + "\n"


def _dest(peer):
    """The argparse attribute of ``--PEER``."""
    return peer.replace("-", "_")


def parser():
    p = argparse.ArgumentParser(prog="bench-peers", description=__doc__.split("\n\n")[0])
    for peer, spec in PEERS.items():
        p.add_argument(f"--{peer}", metavar="CLONE",
                       help=f"a local clone of {spec['url']} at {spec['commit'][:12]} "
                            f"({spec['paper']})")
    p.add_argument("--out", required=True, help="folder for peers.json and peers.md")
    p.add_argument("--cases", help=f"comma-separated, of {', '.join(CASES)} (default: every case "
                                   f"whose peer's clone is given)")
    p.add_argument("--reps", type=int, default=10, help="timed rounds (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed training steps per side")
    p.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    p.add_argument("--memory-steps", type=int, default=3,
                   help="training steps of the memory measurement (0: none)")
    p.add_argument("--no-decode", action="store_true", help="time training only")
    return p


def selected_cases(args):
    clones = {peer: getattr(args, _dest(peer)) for peer in PEERS if getattr(args, _dest(peer))}
    if args.cases:
        names = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = [n for n in names if n not in CASES]
        if unknown:
            raise LabError(f"unknown case(s) {', '.join(unknown)}; the cases are "
                            f"{', '.join(CASES)}")
    else:
        names = [n for n, c in CASES.items() if c["peer"] in clones]
        if not names:
            raise LabError("no clone of the authors' code given: "
                            + "; ".join(clone_problem(peer, None) for peer in PEERS))
    for peer in sorted({CASES[n]["peer"] for n in names}):
        require_clone(peer, clones.get(peer))
    return names, clones


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        names, clones = selected_cases(args)
    except LabError as e:
        sys.exit(f"bench-peers: error: {e}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = round(os.getloadavg()[0], 2)
    results = {}
    for name in names:
        print(f"bench-peers: {name} ...", file=sys.stderr, flush=True)
        results[name] = run_case(name, CASES[name], clones, args.reps, args.warmup, args.threads,
                                 log=out / "workers.log", memory_steps=args.memory_steps,
                                 decode=not args.no_decode)
    # the clones' paths are this machine's: the command and the workers' log name them {peer},
    # the checkout {repo} (ran_lab.portable)
    given = [(str(Path(clone).resolve()), "{" + peer + "}") for peer, clone in clones.items()]
    given += [(str(clone), "{" + peer + "}") for peer, clone in clones.items()]
    argv = [portable.log_text(a, replace=given) for a in (sys.argv[1:] if argv is None else argv)]
    log = out / "workers.log"
    if log.is_file():
        log.write_text(portable.log_text(log.read_text(errors="replace"), replace=given))
    machine = {"cpu": cpu_model(), "cores": available_cores(), "machine_cores": os.cpu_count(),
               "threads": args.threads,
               "torch": next(iter(results.values()))["torch"], "load_before": load_before,
               "load_after": round(os.getloadavg()[0], 2), "date": utc_now(),
               "commit": git_commit(), "plugin_changes": plugin_changes(), "reps": args.reps, "warmup": args.warmup,
               "memory_steps": args.memory_steps, "argv": argv,
               "peers": {peer: clone_commit(clone) for peer, clone in clones.items()}}
    (out / "peers.json").write_text(json.dumps({"machine": machine, "results": results},
                                               indent=1) + "\n")
    table = report(results, machine)
    (out / "peers.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
