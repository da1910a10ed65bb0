"""What the harness writes and prints from its workers' results: each figure's ratio to the
baseline, the markdown of bench.md (the main table, the decoding breakdown, the tables of forced
lengths, GPU launches and kernel counts), a progress line per system and the rows of a speed
sweep."""
import statistics

from ..tables import markdown_table
from .settings import BREAKDOWN_PARTS, BREAKDOWN_SHARE, MEMORY_KINDS, METRICS


def progress_line(result):
    """One system's main figures, printed as it finishes (kept in the log if a later one fails)."""
    t, d = result["train"], result["decode"]
    return (f"{t['seconds'] / t['updates']:.4f} s/update, train {t['tokens_per_s']:,.1f} tok/s, "
            f"decode {d['sentences_per_s']:,.2f} sent/s, peak train {t['mem_peak_mib']:,.1f} "
            f"MiB, peak decode {d['mem_peak_mib']:,.1f} MiB")


def add_ratios(results, baseline):
    """Give every result a 'ratios' dict: each metric divided by the baseline's (None if 0)."""
    base = next(r for r in results if r["name"] == baseline)["metrics"]
    for r in results:
        r["ratios"] = {k: (v / base[k] if base[k] else None) for k, v in r["metrics"].items()}


def markdown(report):
    """The results as a markdown table, each figure with its ratio to the baseline."""
    mem = MEMORY_KINDS[report["machine"]["device"]]
    heads = ["system", "arch"] + [h.format(mem=mem) for _, h, _ in METRICS]
    rows = [[r["name"], r["arch"]] + [
        fmt.format(r["metrics"][key]) + (f" (×{r['ratios'][key]:.2f})"
                                         if r["ratios"][key] is not None else " (×n/a)")
        for key, _, fmt in METRICS] for r in report["systems"]]
    lines = markdown_table(heads, rows, text_columns=2)
    lines += [""] + settings_lines(report["settings"], report["machine"])
    if report["settings"].get("decode_breakdown"):
        lines += [""] + breakdown_markdown(report)
    lines += extras_markdown(report)
    return "\n".join(lines) + "\n"


def settings_lines(s, m):
    """The two lines under the main table: the machine, then how training and decoding ran."""
    return [f"Ratios are to `{s['baseline']}`. Device: {m['device_name']} ({m['device']}, "
            f"{m['threads']} threads, load average {m['load_average_before']:.1f} before and "
            f"{m['load_average_after']:.1f} after"
            + ("; NVIDIA MPS daemon running: the kernels went through its server"
               if m.get("cuda_mps") else "")
            + f"); torch {m['torch']}, "
            f"fairseq {m['fairseq']}; {m['date']}.",
            f"Training: {s['train_updates']} timed updates after {s['warmup_updates']} untimed"
            + (" and one untimed update on each timed batch (--warm-shapes)"
               if s.get("warm_shapes") else "") + ", "
            f"--max-tokens {s['max_tokens']}"
            + (f", the training flags of `{s['train_flags_of']}`" if s.get("train_flags_of")
               else "")
            + (f" and its architecture (every system trained as `{s['config_arch']}`)"
               if s.get("config_arch") else "")
            + f". Decoding: first {s['decode_sentences']} sentences of `{s['gen_subset']}`, "
            f"beam {s['beam']}, {s['decode_batch_size']} sentences per "
            f"batch, " + (f"every hypothesis forced to {s['decode_length']} tokens + EOS"
                          if s.get("decode_length") else
                          f"max length {s['max_len_a']}·src+{s['max_len_b']}")
            + (f", median of {s['decode_repeats']} timed passes"
               if s.get("decode_repeats", 1) > 1 else "")
            + f". Memory: {s['memory']}."]


def _ratio(value, base):
    return f"{value:,.2f} (×{value / base:.2f})" if base else f"{value:,.2f} (×n/a)"


def extras_markdown(report):
    """Tables of --also-decode-lengths, --cuda-launches and --count-kernels, where run."""
    systems, s = report["systems"], report["settings"]
    base = next(r for r in systems if r["name"] == s["baseline"])
    lines = []
    if base.get("decode_at_length"):
        lines += lengths_markdown(systems, base, s)
    if base.get("cuda_launches"):
        lines += cuda_launches_markdown(systems, base)
    if base.get("kernels"):
        lines += kernels_markdown(systems, base, s)
    return lines


def lengths_markdown(systems, base, s):
    """--also-decode-lengths: decoding speed at each forced length."""
    lengths = [str(s["decode_length"])] + list(base["decode_at_length"])
    b = {str(s["decode_length"]): base["decode"], **base["decode_at_length"]}
    rows = []
    for r in systems:
        at = {str(s["decode_length"]): r["decode"], **r.get("decode_at_length", {})}
        rows.append([r["name"]] + [_ratio(at[n]["sentences_per_s"], b[n]["sentences_per_s"])
                                   for n in lengths])
    heads = ["system"] + [f"decode sent/s, {n} tokens" for n in lengths]
    return [""] + markdown_table(heads, rows) + [
        "", "Decoding speed at each forced length (every hypothesis forced to that many tokens "
            "+ EOS), ratios to the baseline."]


def cuda_launches_markdown(systems, base):
    """--cuda-launches: the GPU's kernels per decoding step at each forced length."""
    lengths = list(base["cuda_launches"])
    rows = [[r["name"]] + [_ratio(r["cuda_launches"][n]["per_step"],
                                  base["cuda_launches"][n]["per_step"]) for n in lengths]
            for r in systems]
    heads = ["system"] + [f"GPU kernels per decoding step, {n} tokens" for n in lengths]
    return [""] + markdown_table(heads, rows) + [
        "", "Kernels the GPU ran in one decoding batch (torch.profiler's CUDA kernel events) "
            "divided by the forced length."]


def kernels_markdown(systems, base, s):
    """--count-kernels: aten kernels per decoding step by component, and per training step."""
    parts = ["encoder", "self_attn", "encoder_attn", "ffn", "rest"]
    bd, bt = base["kernels"]["decoding"], base["kernels"]["training"]
    calls = bd.get("python_calls") is not None  # absent from counts made before it was added
    heads = (["system", "decoding kernels per step"] + parts
             + ["training kernels per step", "forward", "backward"]
             + ["decoding Python calls per step"] * calls)
    rows = []
    for r in systems:
        d, t = r["kernels"]["decoding"], r["kernels"]["training"]
        rows.append([r["name"], _ratio(d["total"], bd["total"])]
                    + [f"{d['components'].get(p, 0):,.2f}" for p in parts]
                    + [_ratio(t["total"], bt["total"]), t["forward"], t["backward"]]
                    + ([_ratio(d["python_calls"], bd["python_calls"])
                        if d.get("python_calls") is not None else ""] if calls else []))
    return [""] + markdown_table(heads, rows) + [
        "", f"Kernels (ran_lab/bench/kernels.py): aten operators dispatched "
            f"on the CPU in float32, views and aliases excluded. Decoding: the first "
            f"decoding batch ({bd['sentences']} sentences, beam {bd['beam']}) forced "
            f"to {bd['length']} tokens, per step (the call's count divided by "
            f"{bd['length']}), by module; training: one forward and backward over the "
            f"first {bt['sentences']} sentences of `{s['count_subset']}` (target "
            f"length {bt['target_length']}), no optimizer step. On a GPU a small "
            f"model's step costs about one launch per kernel."
            + (" Python calls: the function calls cProfile counts in one such decoding call, "
               "per step (the host's work beside the launches)." if calls else "")]


def breakdown_markdown(report):
    """--decode-breakdown: each system's decoding time by part, as shares of that pass."""
    parts = [p for p, _ in BREAKDOWN_PARTS] + ["rest"]
    heads = ["system", "pass (s)"] + parts[:2] + ["(of which W_v, W_o)"] + parts[2:]
    rows = []
    for r in report["systems"]:
        b = r["decode"]["breakdown"]
        seconds = b["parts_seconds"]
        rows.append([r["name"], f"{b['pass_seconds']:.2f}"] + [
            f"{100 * seconds[p] / b['pass_seconds']:.1f} %" if p in seconds else "–"
            for p in parts[:2] + [BREAKDOWN_SHARE[0]] + parts[2:]])
    return markdown_table(heads, rows) + [
        "", "Decoding time by part: one more pass over the same batches, with a timer around "
            "each part (the timers add a little time; on CUDA each one synchronizes). W_v, W_o: "
            "the self-attention's value and output projections, a share of its time; rest: "
            "beam search, embeddings, layer norms and all else."]


def sweep_rows(sweep, report):
    """Fig. 3 rows of one benchmark run: decoding tokens/s and sentences/s of each system from
    the mean time of its timed passes."""
    rows = []
    for r in report["systems"]:
        d = r["decode"]
        mean = statistics.mean(d["pass_seconds"])
        rows.append({"sweep": sweep, "system": r["name"],
                     "batch_size": report["settings"]["decode_batch_size"],
                     "beam": report["settings"]["beam"], "sentences": d["sentences"],
                     "generated_tokens": d["generated_tokens"], "mean_seconds": mean,
                     "tokens_per_s": d["generated_tokens"] / mean,
                     "sentences_per_s": d["sentences"] / mean, "passes": len(d["pass_seconds"])})
    return rows
