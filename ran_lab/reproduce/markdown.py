"""TABLE.md: the measured rows beside the paper's numbers, and the legend that says what each
column measures."""
import re
import shlex

from ..tables import markdown_table
from .logs import loss_trend


def fmt(value, spec):
    return "" if value is None else format(value, spec)


def ratio(value, base):
    return None if value is None or not base else value / base


def mean_std(values, spec):
    """``mean`` or ``mean ± std`` (sample std) of the non-None values, formatted."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return format(mean, spec)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{format(mean, spec)} ± {format(std, spec)}"


def significance_mark(scores_per_seed, level, metric=""):
    """'†' when every seed's system is significantly better than the baseline's (p < level),
    '↓' when every seed's is significantly worse, else ''; ``metric`` "" for sacreBLEU (the keys
    ``p_value``, ``better``), "ter" for TER (``ter_p_value``, ``ter_better``). (sacrebleu gives a
    system equal to the baseline a small p-value, so a system with the baseline's score gets no
    mark.)"""
    prefix = f"{metric}_" if metric else ""
    marks = set()
    for scores in scores_per_seed:
        p, better = scores.get(f"{prefix}p_value"), scores.get(f"{prefix}better")
        # a p whose Monte-Carlo interval still holds the level marks nothing
        if p is None or p >= level or better is None or scores.get(f"{prefix}p_unsettled"):
            return ""
        marks.add("†" if better else "↓")
    return marks.pop() if len(marks) == 1 else ""


def continued_legend(results, max_update):
    """The legend's line on runs that carried on another config's trainings (its 'continues')."""
    starts = {}
    for r in results:
        if r.get("continued_from") and r.get("checkpoint_of") is None:
            c = r["continued_from"]
            starts.setdefault((c["config"], c["max_update"]), []).append(
                f"{r['system']} (seed {r['seed']})")
    return [f"- **continued trainings**: {', '.join(names)} went on from the checkpoint_last.pt "
            f"of the same system and seed trained by `{config}` to update {updates}, instead of "
            f"starting again. fairseq-train's resume restores the model, the optimizer, the "
            f"learning-rate schedule and the place in the epoch, and seeds dropout by update "
            f"number; what differs from one run to {max_update} updates is how sentences of "
            f"equal length are grouped into batches from then on (fairseq draws that grouping "
            f"once per process, from the seed and the epoch it starts in). Train words/s, train "
            f"min and the validation curve cover the whole training."
            for (config, updates), names in starts.items()]


def _group_not_run(labels):
    """'de-en HC-SA seed 2; de-en Syn-R seed 2' as 'de-en, seed 2: HC-SA, Syn-R': one group per
    pair and seed, in the order the runs were listed (a label of another shape stays as it is)."""
    groups = {}
    for text in labels:
        found = re.fullmatch(r"(\S+) (.+) seed (\d+)", text)
        key, name = ((found[1], found[3]), found[2]) if found else ((text, None), None)
        groups.setdefault(key, []).extend([name] if name else [])
    return "; ".join(f"{pair}, seed {seed}: {', '.join(names)}" if names else pair
                     for (pair, seed), names in groups.items())


def markdown(paper, report):
    """TABLE.md of a report (results.json's content): the heading, the legend, a table per pair
    and subset with a row per system (its seeds together), and the paper's reference rows."""
    numbers, settings = report["paper"], report["settings"]
    # the seeds the table holds (runs of other seeds may be missing: --stop-after)
    seeds = sorted({r["seed"] for r in report["results"]}) or settings["seeds"]
    heads = table_heads(paper, settings, numbers.get("columns", []), seeds)
    lines = heading(paper, report, seeds) + legend(paper, report, seeds)
    for pair in settings["pairs"]:
        for subset in settings["subsets"]:
            groups = {}
            for r in report["results"]:
                if r["pair"] == pair:
                    groups.setdefault(r["system"], []).append(r)
            rows = [table_row(paper, report, seeds, subset, name, runs, groups)
                    for name, runs in groups.items()]
            lines += ["", f"## {pair}" + (f" ({subset})" if len(settings["subsets"]) > 1 else ""),
                      "", *markdown_table(heads, rows, text_columns=2)]
    lines += reference_rows(numbers)
    return "\n".join(lines) + "\n"


def table_heads(paper, settings, columns, seeds):
    """The column titles: ours, the paper script's (``paper.columns``), the paper's numbers."""
    baseline = settings["baseline"]
    bench = settings.get("speed_bench")
    heads = (["paper table", "system"] + (["seeds"] if len(seeds) > 1 else [])
             + ["params", "tok BLEU", "sacreBLEU", "chrF", "TER",
              "decode sent/s", f"sent/s ×{baseline}", "train words/s", "train min",
              f"train time ×{baseline}"]
             + ([f"train time ×{baseline}, quiet {bench['device']} bench"] if bench else [])
             + ["selected (epoch/update)", "valid loss Δ % per epoch (last 3)"]
             + [c.title for c in paper.columns] + [c["title"] for c in columns])
    return heads


def heading(paper, report, seeds):
    """The title, and the line that says how, where and when the table's runs were made."""
    settings = report["settings"]
    m = report["machine"]
    # runs side by side: this invocation's --jobs, or those the stored results were made with
    jobs = max([settings.get("jobs", 1)] + [r.get("machine", {}).get("jobs", 1)
                                            for r in report["results"]])
    # runs tabulated together may come from several invocations (--resume): name every thread
    # count and the span of dates they were made in
    made = [r["machine"] for r in report["results"] if r.get("machine")]
    threads = sorted({x["threads"] for x in made}) or [m.get("threads", settings["threads"])]
    threads = ("/".join(map(str, threads)) + " (each run's in results.json)" if len(threads) > 1
               else str(threads[0]))
    days = sorted({x["date"][:10] for x in made})
    date = f"{days[0]} to {days[-1]}" if len(days) > 1 else m["date"]
    spread = (f"mean ± standard deviation over the seeds in a row's 'seeds' column "
              f"(seeds {', '.join(map(str, seeds))})" if len(seeds) > 1 else f"seed {seeds[0]}")
    return [
        f"# {paper.title}: measured beside the paper",
        "",
        f"Scale config `{settings['config']}`; test set: {settings['test_set']}; "
        f"{settings['max_update']} training updates; checkpoint: {settings['select_text']}; "
        f"{spread}; {machines_text(report['results'], m)}, {threads} thread(s) per fairseq process"
        + (f", up to {jobs} runs at a time (the speed columns measure a shared machine)"
           if jobs > 1 else "")
        + f"; {date}.",
        *(["", f"**Not run** (stopped by --stop-after; rerun with --resume): "
           f"{_group_not_run(settings['not_run'])}."]
          if settings.get("not_run") and settings.get("launcher") != "slurm" else []),
        # --launcher slurm: each run without a result with its Slurm job and why
        *(["", f"**Without a result** (rerun with --launcher slurm --resume to collect or "
           f"resubmit): {'; '.join(settings['not_run'])}."]
          if settings.get("not_run") and settings.get("launcher") == "slurm" else []),
        "",
    ]


def legend(paper, report, seeds):
    """What each column measures, as bullets."""
    numbers, settings = report["paper"], report["settings"]
    baseline = settings["baseline"]
    level = settings["significance"]["level"]
    bench = settings.get("speed_bench")
    return [
        "- **tok BLEU**: BLEU of the tokenized hypotheses (BPE removed) against the tokenized "
        "reference text (the data-bin's `SUBSET.tok.TGT`), with fairseq's `--scoring bleu` "
        "statistics.",
        f"- **sacreBLEU, chrF, TER**: the hypotheses detokenized by fairseq's Moses tokenizer "
        f"against the raw references (`ran_text.evaluate`), "
        f"`{settings['signatures'].get('bleu', '')}`, `{settings['signatures'].get('ter', '')}`. "
        f"**†** / **↓** on sacreBLEU and TER: significantly better / worse than {baseline}'s "
        f"(sacreBLEU above / below, TER below / above; paired bootstrap "
        f"resampling, sacrebleu's, {settings['significance']['samples']} samples, more where "
        f"the Monte-Carlo interval of p holds the level (docs/scoring.md), p < {level}"
        f"{', in every seed' if len(seeds) > 1 else ''}).",
        f"- **decode**: fairseq-generate's own timing line (`{shlex.join(settings['generate_flags'])}`"
        f"); ×{baseline}: sentences/s over {baseline}'s on the same pair. **params**: "
        f"fairseq-train's count, and how many are trained where fewer are.",
        f"- **train words/s**: the mean of fairseq-train's end-of-epoch `wps`; **train min**: "
        f"wall-clock minutes of fairseq-train; **train time ×{baseline}**: that time over "
        f"{baseline}'s (a paper's 'relative training time', where its table has one); the two "
        f"×{baseline} ratios (decoding, training) compare runs made under the same "
        f"conditions (device, threads per run, runs side by side): the row's runs of the seeds "
        f"{baseline} has under theirs, over those runs of {baseline}; or, marked **°**, "
        f"where there is no such seed, over {baseline}'s runs of other seeds under those "
        f"conditions; blank where {baseline} has no run under the row's conditions; "
        f"**selected**: the epoch and update of the decoded checkpoint; **valid loss Δ % per epoch**: how much the validation loss "
        f"still changed per epoch over the last three epochs of training, in percent of the last "
        f"value (a partial last epoch left out). We read less than 0.5 % per epoch as a "
        f"flattened curve: where {baseline}'s falls faster, the budget stops while the models "
        f"still learn.",
        *continued_legend(report["results"], settings["max_update"]),
        *([f"- **quiet {bench['device']} bench**: {baseline}'s training tokens/s over the "
           f"system's, from {', '.join(f'`{f}`' for f in bench['files'])}"
           + (f" (the median of the {len(bench['files'])} runs)" if len(bench["files"]) > 1
              else "")
           + f": `scripts/bench.py` timing {bench['train_updates']} updates of "
           f"{bench['max_tokens']} tokens of each system in turn"
           + (f" with the training flags of `{bench['train_flags_of']}`"
              if bench.get("train_flags_of") else "")
           + f", on {bench['device_name']} with {bench['threads']} thread(s) and nothing else "
           f"running (load average at most {fmt(bench['load_average_max'], '.1f')}; "
           f"{', '.join(d or '?' for d in bench['dates'])}). Unlike the runs' own train time, no "
           f"other run shares the machine; a blank cell is a system the bench did not time."]
          if bench else []),
        *(f"- {note}" for note in paper.notes),
        f"- **paper**: `{settings['paper_file']}`; {numbers.get('source', '')}. A blank cell is "
        f"a number that file does not have. {numbers.get('status', '')}",
    ]


def table_row(paper, report, seeds, subset, name, runs, groups):
    """The cells of system ``name``'s row on ``subset``: ``runs`` its results on the pair (one per
    seed), ``groups`` every system's on the pair."""
    settings = report["settings"]
    baseline = settings["baseline"]
    level = settings["significance"]["level"]
    bench = settings.get("speed_bench")
    columns = report["paper"].get("columns", [])
    # speed ratios against the baseline's runs under the row's conditions (rows may have
    # fewer seeds than the baseline, or seeds made elsewhere)
    timed, base, other_seeds = speed_baseline(runs, groups.get(baseline, []))
    base_sps = mean_of([r["subsets"][subset]["decode"]["sentences_per_s"] for r in base])
    base_time = mean_of([r["train_seconds"] for r in base if r["train_seconds"] is not None])
    sub = [r["subsets"][subset] for r in runs]
    first = runs[0]
    params = fmt(first["params"], ",d")
    if first["params_trained"] != first["params"]:
        params += f" ({first['params_trained']:,d} trained)"
    sps = [s["decode"]["sentences_per_s"] for s in sub]
    times = [r["train_seconds"] for r in runs]
    timed_sps = [r["subsets"][subset]["decode"]["sentences_per_s"] for r in timed]
    timed_times = [r["train_seconds"] for r in timed]
    selected = "; ".join(f"{r['selected']['epoch']}/{r['selected']['num_updates']}"
                         for r in runs)
    cells = [", ".join(first["tables"]), name,
             *([", ".join(str(r["seed"]) for r in runs)] if len(seeds) > 1 else []),
             params,
             mean_std([s["tok_bleu"] for s in sub], ".2f"),
             mean_std([s["sacrebleu"] for s in sub], ".2f")
             + significance_mark(sub, level),
             mean_std([s["chrf"] for s in sub], ".2f"),
             mean_std([s["ter"] for s in sub], ".2f")
             + significance_mark(sub, level, "ter"),
             mean_std(sps, ".2f"),
             marked(fmt(ratio(mean_of(timed_sps), base_sps), ".2f"), other_seeds),
             mean_std([r["train_words_per_s"] for r in runs], ",.0f"),
             mean_std([t / 60 if t is not None else None for t in times], ".1f"),
             marked(fmt(ratio(mean_of(timed_times), base_time), ".2f"), other_seeds)]
    if bench:
        cells.append(fmt(bench["train_time_ratio"].get(name), ".2f"))
    cells.append(selected)
    cells.append(mean_std([loss_trend(r.get("valid_curve")) for r in runs], "+.1f"))
    cells += [c.cell(first) for c in paper.columns]
    cells += [paper_cell(c, name) for c in columns]
    return cells


def paper_cell(column, system):
    """A paper number as printed, with the paper's own significance mark (its ``significant``)."""
    value = column["values"].get(system)
    if value is None:
        return ""
    return f"{value}{'†' if system in column.get('significant', []) else ''}"


def reference_rows(numbers):
    """The paper's literature rows (``reference_rows``: reference values no system of ours
    reproduces) as a small table after the measured ones."""
    ref = numbers.get("reference_rows")
    if not ref:
        return []
    titles = {c["key"]: c["title"] for c in numbers.get("columns", [])}
    if isinstance(ref, dict):  # {"note", "columns": [keys], "rows": [{"source", "system", "values"}]}
        keys = ref.get("columns", [])
        rows = [[f"{r.get('system', '')} ({r.get('source', '')})"] +
                [fmt(v, "") for v in r.get("values", [])] for r in ref.get("rows", [])]
        note = ref.get("note", "")
    else:  # [{"name": ..., field: value, ...}]
        keys = list(dict.fromkeys(k for r in ref for k in r if k != "name"))
        rows = [[r.get("name", "")] + [fmt(r.get(k), "") for k in keys] for r in ref]
        note = ""
    lines = ["", "## Reference rows of the paper (other papers' systems)", ""]
    if note:
        lines += [note, ""]
    return lines + markdown_table(["system"] + [titles.get(k, k) for k in keys], rows)


def speed_baseline(runs, baseline_runs):
    """(the row's runs that its speed ratios average, the baseline's runs they divide by, whether
    those are of other seeds). Speeds compare only under the same conditions: the same device,
    the same number of threads per run and of runs side by side (``run_conditions``). First the
    pairs: the row's runs that have a baseline run of the same seed under their conditions, and
    those baseline runs. Where there is no such pair, the row's runs under conditions that the
    baseline ran under with other seeds, and those runs (a run's speed depends on its conditions,
    not on its seed beyond the order of its batches). Else none: a GPU's runs and a CPU's, or a
    run alone and two side by side, tabulate together, but their speeds do not compare."""
    by_seed = {(run_conditions(r), r["seed"]) for r in baseline_runs}
    paired = [r for r in runs if (run_conditions(r), r["seed"]) in by_seed]
    if paired:
        keys = {(run_conditions(r), r["seed"]) for r in paired}
        return paired, [b for b in baseline_runs
                        if (run_conditions(b), b["seed"]) in keys], False
    conditions = {run_conditions(b) for b in baseline_runs}
    timed = [r for r in runs if run_conditions(r) in conditions]
    mine = {run_conditions(r) for r in timed}
    return timed, [b for b in baseline_runs if run_conditions(b) in mine], bool(timed)


def run_conditions(result):
    """What a run's speed depends on besides its model: (device, its name, threads per run,
    runs side by side); None where not recorded."""
    machine = result.get("machine") or {}
    return (*machine_of(result), machine.get("threads"), machine.get("jobs"))


def mean_of(values):
    """The mean of ``values``; None when there are none or one is unknown."""
    return sum(values) / len(values) if values and None not in values else None


def marked(cell, other_seeds):
    """A speed ratio against the baseline's runs of other seeds: '°' after it."""
    return f"{cell}°" if cell and other_seeds else cell


def machine_of(result):
    """(device, its name) where a stored result was made; (None, None) when not recorded."""
    machine = result.get("machine") or {}
    return machine.get("device"), machine.get("device_name")


def machines_text(results, default):
    """'cuda (NVIDIA H100)' for a table made on one machine; with several, each machine and the
    systems made on it (a system on several: each of its seeds' machines)."""
    made = {}
    for r in results:
        if r.get("machine"):
            made.setdefault(machine_of(r), []).append(r["system"])
    if len(made) < 2:
        device, name = next(iter(made), (default["device"], default["device_name"]))
        return f"{device} ({name})"
    return "; ".join(f"{device} ({name}) for {', '.join(dict.fromkeys(systems))}"
                     for (device, name), systems in made.items())
