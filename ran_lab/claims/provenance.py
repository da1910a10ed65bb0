"""What a results folder holds, from its results.json: for each group of runs, the machine, the
budget, the seeds and how the run started (from scratch, continuing another config's training, or
decoding another system's checkpoint). CLAIMS.md opens with it, and a folder's README quotes it
in a ``<!-- holds FOLDER -->…<!-- /holds -->`` block that :func:`ran_lab.claims.report.fill`
rewrites."""
from typing import Dict, List, Tuple


def _flag(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def budget(result: dict) -> str:
    argv = result.get("train_argv") or []
    updates, epochs = _flag(argv, "--max-update"), _flag(argv, "--max-epoch")
    tokens, sentences = _flag(argv, "--max-tokens"), _flag(argv, "--batch-size")
    size = (f" of {int(tokens):,} tokens" if tokens else
            f" of {int(sentences):,} sentences" if sentences else "")
    if updates and updates != "0":
        return f"{int(updates):,} updates{size}"
    if epochs:
        return f"{epochs} epochs{size}"
    return "fairseq's default budget"


def machine(result: dict) -> str:
    m = result.get("machine")
    if not m:
        return "no machine recorded"
    kind = "GPU" if m.get("device") == "cuda" else "CPU"
    threads, jobs = m.get("threads"), m.get("jobs")
    thread_text = f", {threads} thread{'s' if threads != 1 else ''} per run" if threads else ""
    jobs_text = (f", up to {jobs} runs at a time" if jobs and jobs > 1 else
                 ", one run at a time" if jobs == 1 else "")
    return f"{kind}: {m.get('device_name') or m.get('device')}{thread_text}{jobs_text}"


def start(result: dict) -> str:
    if result.get("checkpoint_of"):
        return f"no training of its own: decodes {result['checkpoint_of']}'s checkpoint"
    c = result.get("continued_from")
    if c:
        return (f"continued from the checkpoint of `{c['config']}` at update "
                f"{int(c['max_update']):,}")
    return "trained from scratch"


def _date(result: dict) -> str:
    return ((result.get("machine") or {}).get("date") or "")[:10]


def not_run(report: dict) -> List[str]:
    """Every run of the folder's grid (results.json's settings: its pairs × systems × seeds) that
    results.json does not hold, by pair and system ("en-de: RNNSearch (seed 2)"), then the runs
    its ``not_run`` names: the runs its last invocation did not make (failed, or not started
    before --stop-after), with the engine's reason where it gave one."""
    settings = report.get("settings", {})
    made = {(r["pair"], r["system"], r["seed"]) for r in report["results"]}
    missing = []
    for pair in settings.get("pairs", []):
        by_system = []
        for system in settings.get("systems", []):
            seeds = [str(seed) for seed in settings.get("seeds", [])
                     if (pair, system, seed) not in made]
            if seeds:
                by_system.append(f"{system} (seed{'s' if len(seeds) > 1 else ''} "
                                 f"{', '.join(seeds)})")
        if by_system:
            missing.append(f"{pair}: {', '.join(by_system)}")
    failed = [label for label in settings.get("not_run") or []]
    return missing + ([f"not made by the last run of the engine (failed, or stopped before it "
                       f"started): {', '.join(failed)}"] if failed else [])


def holds(report: dict) -> List[str]:
    """Markdown bullet lines, one per group of runs that share machine, budget and start, and one
    for the runs asked for and not made (:func:`not_run`)."""
    groups: Dict[Tuple[str, str, str], List[dict]] = {}
    for r in report["results"]:
        groups.setdefault((machine(r), budget(r), start(r)), []).append(r)
    several_pairs = len({r["pair"] for r in report["results"]}) > 1
    lines = []
    for (where, size, how), runs in groups.items():
        by_seed = []
        for seed in sorted({r["seed"] for r in runs}):
            pairs: Dict[str, List[str]] = {}
            for r in runs:
                if r["seed"] == seed:
                    pairs.setdefault(r["system"], []).append(r["pair"])
            same = len({tuple(p) for p in pairs.values()}) == 1
            if several_pairs and same:
                head = f"seed {seed}, {', '.join(next(iter(pairs.values())))}"
                names = list(pairs)
            else:
                head = f"seed {seed}"
                names = [s + (f" ({', '.join(p)})" if several_pairs else "")
                         for s, p in pairs.items()]
            by_seed.append(f"{head}: {', '.join(names)}")
        dates = sorted({_date(r) for r in runs if _date(r)})
        when = (f"; {dates[0]}" if len(dates) == 1 else
                f"; {dates[0]} to {dates[-1]}" if dates else "")
        what = f"{how} ({size})" if runs[0].get("checkpoint_of") else f"{size}, {how}"
        lines.append(f"- {'; '.join(by_seed)} — {what}; {where}{when}.")
    missing = not_run(report)
    if missing:
        lines.append(f"- Not run (of the pairs, systems and seeds results.json's settings name): "
                     f"{'; '.join(missing)}.")
    return lines
