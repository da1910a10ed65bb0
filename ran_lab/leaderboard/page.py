"""The board's page, from the runs' folder (the engine's results.json and hypotheses) and the cost
measurements (cost.json, where measured): TABLE.md, leaderboard.json, leaderboard.png, the
pairwise verdicts (CLAIMS.md, CLAIMS.json, and the claims file they judge, pairs.claims.json), and
the short form (SHORT.md) that README.md and docs/results.md quote between
``<!-- leaderboard -->`` and ``<!-- /leaderboard -->``."""
import json
import math
import re
from pathlib import Path
from typing import List, Optional

from ran_text import textio
from .. import claims as claims_pkg
from ..common import paths
from ..common.flags import flag_pairs
from ..common.paths import shown
from ..reproduce.config import load_config
from ..tables import markdown_table
from . import quality
from .board import BOARD, MAX_LOAD, Board

SHORT_SPAN = re.compile(r"(<!-- leaderboard -->\n).*?(<!-- /leaderboard -->)", re.S)
QUOTED_BY = ("README.md", "docs/results.md")


def _num(x, digits=1, empty="—"):
    return empty if x is None else f"{x:,.{digits}f}"


def _params(n):
    return "—" if n is None else f"{n / 1e6:.2f} M"


def train_tokens(runs: Path, result: dict) -> Optional[float]:
    log = runs / result["pair"] / quality.slug(result["system"]) / f"seed{result['seed']}" / \
        "train.log"
    if not log.is_file():
        return None
    wpb = [float(m) for m in re.findall(r"\| wpb ([\d.,]+)", log.read_text(
        encoding="utf-8", errors="replace").replace(",", ""))]
    updates = (result.get("selected") or {}).get("num_updates")
    if not wpb or not updates:
        return None
    return sum(wpb) / len(wpb) * updates


def rows_of(board: Board, config: dict, report: dict, runs: Path, repo: Path,
            cost: Optional[dict]):
    """The board's rows per direction, with intervals and ranks, and the pairwise verdicts."""
    results = report["results"]
    level = report["settings"]["significance"]["level"]
    systems = list(config["systems"])
    refs = quality.refs_of(results, repo)
    intervals = quality.system_intervals(runs, results, level, refs) if results else {}
    by = {}
    for r in results:
        by.setdefault((r["pair"], r["system"]), []).append(r)
    ranked = {}
    for pair in board.pairs:
        means = {s: intervals[(pair, s)]["sacrebleu"].mean for s in systems
                 if (pair, s) in intervals}
        ranked[pair] = sorted(means, key=lambda s: -means[s])
    claims_data = quality.pairwise_claims(
        {p: names for p, names in ranked.items() if len(names) > 1},
        report["settings"]["paper_file"])
    verdicts = []
    folder = None
    claims = None
    if claims_data["claims"]:
        where = paths.repo_path(board.page) / "pairs.claims.json"
        claims, folder, verdicts = quality.verdicts(runs, claims_data, where, repo)
    apart = quality.not_separated(verdicts)
    cost_rows = {c["system"]: c for c in (cost or {}).get("systems", [])}
    table = {}
    for pair in board.pairs:
        means = {s: intervals[(pair, s)]["sacrebleu"].mean for s in ranked[pair]}
        rank = quality.ranks(means)
        rows = []
        for system in ranked[pair] + [s for s in systems if s not in ranked[pair]]:
            rs = sorted(by.get((pair, system), []), key=lambda r: r["seed"])
            planned = board.seeds_for(system, pair)
            row = {"system": system, "arch": config["systems"][system]["arch"],
                   "seeds": [r["seed"] for r in rs], "seeds_planned": planned,
                   "params": rs[0].get("params") if rs else None}
            if rs:
                stands = [quality.curve_stand(r) for r in rs]
                stands = [s for s in stands if s]
                tokens = [t for t in (train_tokens(runs, r) for r in rs) if t]
                row.update(
                    rank=rank[system],
                    not_separated=sorted(apart.get((pair, system), []),
                                         key=lambda s: rank.get(s, 0)),
                    sacrebleu=intervals[(pair, system)]["sacrebleu"].as_json(),
                    chrf=intervals[(pair, system)]["chrf"].as_json(),
                    runs=[{"seed": r["seed"], "sacrebleu": r["subsets"]["test"]["sacrebleu"],
                           "chrf": r["subsets"]["test"]["chrf"]} for r in rs],
                    valid_loss=(sum(s["loss"] for s in stands) / len(stands)) if stands else None,
                    valid_change_pct=(sum(s["change_pct"] for s in stands if s["change_pct"]
                                          is not None) / len(stands)) if stands and all(
                        s["change_pct"] is not None for s in stands) else None,
                    updates=rs[0].get("selected", {}).get("num_updates"),
                    train_target_tokens=(sum(tokens) / len(tokens)) if tokens else None)
            if system in cost_rows:
                row["cost"] = cost_rows[system]
            rows.append(row)
        table[pair] = rows
    return table, claims, folder, verdicts, claims_data


def _interval_cell(entry):
    if not entry:
        return "—"
    lo, hi = entry["interval"]
    return f"{entry['mean']:.2f} [{lo:.2f}, {hi:.2f}]"


def _rank_cell(row, ranks_by_system):
    if "rank" not in row:
        return "—"
    mark = "" if not row["not_separated"] else " ≈ " + ", ".join(
        f"{ranks_by_system[s]}" for s in row["not_separated"])
    return f"{row['rank']}{mark}"


def _seeds_cell(row):
    done, planned = row["seeds"], row["seeds_planned"]
    text = f"{len(done)}/{len(planned)}"
    return text


def cost_table(board: Board, cost: Optional[dict], names: List[str]) -> List[str]:
    if not cost:
        return ["**Cost columns: pending.** They are measured on the board's checkpoints with "
                "nothing else running on the machine (`scripts/reproduce-leaderboard.sh cost`); "
                "numbers timed on a busy machine are not shown.", ""]
    m, threads = cost["machine"], cost["threads"]
    measured = [c["measured"] for c in cost["systems"]]
    dates = sorted({w["date"] for w in measured})
    loads = [w["load_average_before"] for w in measured]
    lines = [f"Measured {', '.join(dates)} on {m['cpu']} ({m['cores']} cores), one system after "
             f"another, the machine's load average {_span(loads)} before and "
             f"{_span([w['load_average_after'] for w in measured])} after (its own timings "
             f"included); the checkpoints of "
             f"{cost['pair']} seed {cost['seed']}; decoding the {cost['sentences']:,} test "
             f"sentences (model loading excluded); training {cost['train_updates']} updates of "
             f"the board's recipe (the first {cost['warmup_updates']} excluded).", ""]
    busy = [c["system"] for c, load in zip(cost["systems"], loads)
            if load is None or load > MAX_LOAD]
    if busy:
        lines = [f"**Measured beside other work** ({', '.join(busy)}: load average above "
                 f"{MAX_LOAD:g} before): these figures are not the systems' cost; measure them "
                 f"again on a quiet machine.", ""] + lines
    head = ["system", "params", "train tok/s", "train peak RSS"]
    for t in threads:
        head += [f"greedy sent/s ({t} thr)", f"beam 5 sent/s ({t} thr)"]
    head += ["decode peak RSS"]
    rows = []
    by = {c["system"]: c for c in cost["systems"]}
    for name in names + [n for n in by if n not in names]:
        c = by.get(name)
        if c is None:
            continue
        cells = [name + (" (authors' code)" if c.get("peer") else ""), _params(c.get("params")),
                 _num(c.get("train_tokens_per_s"), 0), _num(c.get("train_peak_rss_mib"), 0)
                 + (" MiB" if c.get("train_peak_rss_mib") else "")]
        for t in threads:
            d = c.get("decode", {}).get(str(t), {})
            cells += [_num(d.get("greedy", {}).get("sentences_per_s"), 1),
                      _num(d.get("beam5", {}).get("sentences_per_s"), 1)]
        peaks = [d.get(k, {}).get("peak_rss_mib") for d in c.get("decode", {}).values()
                 for k in ("greedy", "beam5")]
        peaks = [p for p in peaks if p]
        cells.append(f"{max(peaks):,.0f} MiB" if peaks else "—")
        rows.append(cells)
    return lines + markdown_table(head, rows) + [""]


def _span(values) -> str:
    """'0.12' or '0.05–0.31' (None: unknown)."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return "unknown"
    return f"{known[0]:g}" if known[0] == known[-1] else f"{known[0]:g}–{known[-1]:g}"


def peer_table() -> List[str]:
    """The authors' code beside the plugin at the board's sizes (the peer benchmark's committed
    runs: :func:`.cost.peer_rows`)."""
    from .cost import peer_rows
    rows = peer_rows()
    if not rows:
        return []
    lines = ["**The authors' code**, from the peer benchmark's committed runs at the board's "
             "sizes (one thread; its synthetic batch, not the test set; median over the runs of "
             "each run's median round: one training step, greedy decoding of the batch; "
             "docs/benchmarks.md):", ""]
    head = ["system", "authors' code", "batch", "train tok/s, plugin", "train tok/s, authors'",
            "greedy sent/s, plugin", "greedy sent/s, authors'", "runs"]
    cells = [[r["system"], r["peer"], f"{r['sentences']} × {r['target_length']} tokens",
              _num(r["train_tokens_per_s"].get("plugin"), 0),
              _num(r["train_tokens_per_s"].get(r["peer"]), 0),
              _num(r["decode_sentences_per_s"].get("plugin"), 1),
              _num(r["decode_sentences_per_s"].get(r["peer"]), 1),
              ", ".join(f"`{f}`" for f in r["runs"])] for r in rows]
    return lines + markdown_table(head, cells, text_columns=3) + [""]


def markdown(board: Board, config: dict, report: dict, table: dict, verdicts, cost,
             planned: int, done: int) -> str:
    updates = flag_pairs(config["train_flags"]).get("--max-update")
    max_tokens = flag_pairs(config["train_flags"]).get("--max-tokens")
    level = report["settings"]["significance"]["level"]
    conf = f"{100 * (1 - level):g} %"
    names = list(config["systems"])
    lines = [
        "# The leaderboard: the four architectures and their baselines on one data set, budget "
        "and machine",
        "",
        f"{config['test_set']}, {' and '.join(p.replace('-', '→') for p in board.pairs)}, one "
        f"data-bin and one joint BPE per direction; every system trained with one recipe for "
        f"{updates} updates of at most "
        f"{max_tokens} tokens and its last checkpoint decoded with beam 5 "
        f"(`{shown(board.path)}`, `{config['config_shown']}`). Made by "
        f"`scripts/reproduce-leaderboard.sh` (docs/leaderboard.md); the runs, their logs and "
        f"hypotheses are in `{config['out']}/`, the engine's own table in "
        f"`{config['out']}/TABLE.md`.",
        "",
        f"**Runs: {done} of {planned} finished.**" + (
            " The board is incomplete: rows show what has finished; the same command goes on "
            "(it resumes run by run)." if done < planned else ""),
        "",
    ]
    for why in ("budget", "seeds_of"):
        if board.why.get(why):
            lines += [f"- **{why.replace('_', ' ')}**: {board.why[why]}"]
    lines += [""]
    for pair, rows in table.items():
        ranks_by = {r["system"]: r.get("rank") for r in rows}
        head = ["rank", "system", "arch", "params", "seeds", f"sacreBLEU [{conf}]",
                f"chrF [{conf}]", "valid loss at budget (Δ % over the last 250 updates)",
                "target tokens trained"]
        cells = []
        for row in rows:
            change = row.get("valid_change_pct")
            stand = "—" if row.get("valid_loss") is None else (
                f"{row['valid_loss']:.3f}" + ("" if change is None else f" ({change:+.1f} %)"))
            tokens = row.get("train_target_tokens")
            cells.append([_rank_cell(row, ranks_by), row["system"], f"`{row['arch']}`",
                          _params(row["params"]), _seeds_cell(row),
                          _interval_cell(row.get("sacrebleu")), _interval_cell(row.get("chrf")),
                          stand, "—" if not tokens else f"{tokens / 1e6:.2f} M"])
        lines += [f"## {pair}", "", *markdown_table(head, cells, text_columns=3), ""]
    scored = [r["sacrebleu"] for rows in table.values() for r in rows if r.get("sacrebleu")]
    no_seed_part = (" **No seed variance yet**: no system of the board has two finished seeds, "
                    "so these intervals hold the test set's variance alone and are too narrow; "
                    "the pairwise claims are not judged."
                    if scored and not any(i.get("seed_var") for i in scored) else "")
    lines += [
        "Rank by mean sacreBLEU; **≈ k**: the order with the system ranked k is not "
        f"significant at {level:g} (the pairwise verdict is inconclusive: CLAIMS.md). Intervals: "
        f"{conf} over seeds and test sentences (the seeds' variance pooled over the board's "
        "systems and directions, plus the test set's bootstrap share; "
        "`ran_lab/leaderboard/quality.py`). Seeds: finished/planned. The validation change is "
        "the validation loss's change over the last 250 updates in percent of the last loss "
        f"(negative: still falling), averaged over seeds.{no_seed_part}", "",
        "## Pairwise verdicts", "",
    ]
    if verdicts:
        held = sum(v.outcome == "held" for v in verdicts)
        lines += [f"Pairs compared: {len(verdicts)}, ordered significantly: {held}; each pair's "
                  f"interval and p in CLAIMS.md (the claims format: `pairs.claims.json` judged "
                  f"by `ran_lab.claims`). Not significant:", ""]
        for v in verdicts:
            if v.outcome != "held":
                c = v.comparisons[0][1]
                lo, hi = c.pooled if c.pooled else (None, None)
                lines.append(f"- {v.pair}: {v.claim['system']} vs {v.claim['against']} "
                             f"(difference {c.difference:+.2f}"
                             + (f", interval [{lo:+.2f}, {hi:+.2f}]" if lo is not None else "")
                             + ")")
        lines += [""]
    else:
        lines += ["No pair compared yet.", ""]
    lines += ["## Cost", ""] + cost_table(board, cost, names)
    lines += peer_table()
    lines += ["GPU rows (fp16/bf16): not measured; `configs/leaderboard/gpu.json` runs the "
              "board on a GPU.", ""]
    lines += ["## What the board shows, and what it does not", ""] + shows(table, config)
    return "\n".join(lines).rstrip("\n") + "\n"


def shows(table, config) -> List[str]:
    stands = [r.get("valid_change_pct") for rows in table.values() for r in rows
              if r.get("valid_change_pct") is not None]
    tokens = [r.get("train_target_tokens") for rows in table.values() for r in rows
              if r.get("train_target_tokens")]
    out = [
        "- It shows which architecture translates Multi30k best after the same short training"
        + (f" (about {min(tokens) / 1e6:.1f}–{max(tokens) / 1e6:.1f} M target tokens)"
           if tokens else "")
        + ", with one recipe for all, and which differences survive the seeds' spread and the "
          "test set's sampling.",
        "- It does not show which is best when trained to convergence: "
        + (f"every curve still moved by {min(stands):+.1f} to {max(stands):+.1f} % of its "
           "validation loss over the last 250 updates, so " if stands else "")
        + "the ranking can change with more updates, and a system that learns slowly early "
          "(RNNs, Pervasive Attention) is at a disadvantage at this budget.",
        "- It does not show each architecture at its own best recipe (the papers tune "
        "learning rate, dropout and batch size per model; here only the architecture differs), "
        "nor at the papers' sizes and corpora: results/ holds the four reproductions.",
    ]
    return out


def short_form(table, link: str = "TABLE.md", runs=None) -> str:
    """The short board (README.md, docs/results.md): rank, system, sacreBLEU with its interval,
    per direction; ``runs``, (finished, planned), says so while the board is incomplete."""
    pairs = list(table)
    ranks = {pair: {r["system"]: r["rank"] for r in table[pair] if "rank" in r} for pair in pairs}
    rows = []
    for system in [r["system"] for r in table[pairs[0]]]:
        cells = [system]
        for pair in pairs:
            row = next((r for r in table[pair] if r["system"] == system), {})
            cells.append(("—" if "rank" not in row else
                          f"{_interval_cell(row['sacrebleu'])} (#{_rank_cell(row, ranks[pair])})"))
        rows.append(cells)
    lines = markdown_table(["system"] + [f"{p} sacreBLEU" for p in pairs], rows)
    made = f"; {runs[0]} of {runs[1]} runs made" if runs and runs[0] < runs[1] else ""
    return "\n".join(lines) + f"\n\n[The whole board]({link}): chrF, seeds, verdicts, cost{made}.\n"


def plot(table, cost, path: Path):
    from ..analysis.plots import pyplot
    plt = pyplot()
    pairs = list(table)
    fig, axes = plt.subplots(1, len(pairs), figsize=(6 * len(pairs), 4.5), squeeze=False)
    speed = {}
    if cost:
        for c in cost["systems"]:
            threads = str(cost["threads"][-1])
            s = c.get("decode", {}).get(threads, {}).get("beam5", {}).get("sentences_per_s")
            if s and not c.get("peer"):
                speed[c["system"]] = s
    for ax, pair in zip(axes[0], pairs):
        for row in table[pair]:
            if "rank" not in row:
                continue
            x = speed.get(row["system"]) if cost else (row["params"] or 0) / 1e6
            if x is None:
                continue
            mean = row["sacrebleu"]["mean"]
            lo, hi = row["sacrebleu"]["interval"]
            ax.errorbar([x], [mean], yerr=[[mean - lo], [hi - mean]], fmt="o", capsize=3)
            ax.annotate(row["system"], (x, mean), textcoords="offset points", xytext=(5, 3),
                        fontsize=7)
        ax.set_title(pair)
        ax.set_ylabel("sacreBLEU (interval over seeds and sentences)")
        if cost:
            ax.set_xscale("log")
            ax.set_xlabel(f"decoding sentences/s, beam 5, threads: {cost['threads'][-1]}")
        else:
            ax.set_xlabel("parameters (M); decoding speed pending (not measured yet)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def fill_quotes(table, page: Path, repo: Path, runs=None) -> List[str]:
    """Replace the short board between the markers of the files that quote it (its link to the
    page relative to each); the files changed."""
    import os
    changed = []
    for name in QUOTED_BY:
        path = repo / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        link = os.path.relpath(page / "TABLE.md", path.parent)
        short = short_form(table, link, runs)
        new = SHORT_SPAN.sub(lambda m: m.group(1) + short + m.group(2), text)
        if new != text:
            textio.write_text_atomic(path, new)
            changed.append(name)
    return changed


def write_page(board: Board, repo: Path = paths.REPO) -> Path:
    """Write the board's page from its runs' folder; return TABLE.md's path."""
    config = load_config(paths.repo_path(board.config))
    config["config_shown"] = board.config
    runs = paths.repo_path(config["out"])
    page = paths.repo_path(board.page)
    report = textio.read_json_file(runs / "results.json", "the board's runs (results.json: "
                                   "scripts/reproduce-leaderboard.sh writes it)")
    cost_file = page / "cost.json"
    cost = textio.read_json_file(cost_file, "the cost measurements") if cost_file.is_file() \
        else None
    table, claims, folder, verdicts, claims_data = rows_of(board, config, report, runs, repo,
                                                           cost)
    planned = len(board.planned(list(config["systems"])))
    done = len(report["results"])
    page.mkdir(parents=True, exist_ok=True)
    if verdicts:
        text, data = claims_pkg.render(claims, folder, verdicts, repo)
        pairs_file = page / "pairs.claims.json"
        textio.write_text_atomic(pairs_file, json.dumps(claims_data, indent=1,
                                                        ensure_ascii=False) + "\n")
        textio.write_text_atomic(page / "CLAIMS.json",
                                 json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        textio.write_text_atomic(page / "CLAIMS.md", text)
    data = {"board": shown(board.path), "config": board.config,
            "level": report["settings"]["significance"]["level"],
            "runs_finished": done, "runs_planned": planned, "directions": table,
            "cost": cost}
    textio.write_text_atomic(page / "leaderboard.json",
                             json.dumps(data, indent=1, ensure_ascii=False,
                                        default=_json_default) + "\n")
    text = markdown(board, config, report, table, verdicts, cost, planned, done)
    textio.write_text_atomic(page / "TABLE.md", text)
    short = short_form(table, runs=(done, planned))
    textio.write_text_atomic(page / "SHORT.md", short)
    plot(table, cost, page / "leaderboard.png")
    if Path(board.path).resolve() == paths.repo_path(BOARD).resolve():
        fill_quotes(table, page, repo, (done, planned))  # only the committed board is quoted
    return page / "TABLE.md"


def _json_default(x):
    if isinstance(x, float) and math.isinf(x):
        return None
    raise TypeError(f"{type(x)} is not JSON")
