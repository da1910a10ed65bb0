"""The quickstart sweep's curve: test_2016 sacreBLEU against training updates, target
tokens and estimated minutes on 2 cores, for every scored checkpoint of every sweep run.

    .venv/bin/python scripts/quickstart/curve.py [--tok-per-s 1750]

Reads results/quickstart/runs/NAME/{train.log,score-LABEL.test.json} (scripts/quickstart/sweep-run.sh
and sweep-eval.sh write them; the demo-seed* runs are make demo's own train.log and scores) and
writes results/quickstart/curve.csv and curve.png. Target tokens up to
update U are summed from fairseq's JSON progress lines (wpb x updates per line). Minutes on 2 cores
= tokens / --tok-per-s: the sweep ran on one thread of a shared machine, so its own wall clock is
no measure of a quiet 2-core one; 1,750 target tokens/s is ran_transformer_small's rate with 2
threads on a quiet 2-core machine (300 updates of 2,048 tokens in 4.9 min, README).
"""
import argparse
import csv
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "results" / "quickstart"
LABEL = re.compile(r"^score-(?:u(\d+)|avg(\d+)-u(\d+))\.test\.json$")


def tokens_by_update(log):
    """{update: cumulative target tokens} at each progress line of a fairseq train log (JSON or
    simple log format)."""
    out, total, last = {}, 0.0, 0
    for line in log.read_text(errors="replace").split("\n"):  # "\n" only: the project's rule
        if "| train_inner |" not in line:
            continue
        body = line.split("| train_inner | ", 1)[1]
        if body.startswith("{"):
            rec = json.loads(body)
        else:  # simple format: "epoch 001:     50 / 498 loss=11.3, ..., num_updates=50, ..."
            rec = dict(kv.split("=", 1) for kv in re.findall(r"\w+=[^,\s]+", body))
        upd = int(rec["num_updates"])
        total += float(rec["wpb"]) * (upd - last)
        last = upd
        out[upd] = total
    return out


def rows(tok_per_s):
    for run in sorted(p for p in (HERE / "runs").iterdir() if p.is_dir()):
        toks = tokens_by_update(run / "train.log")
        for score in sorted(run.glob("score-*.test.json")):
            m = LABEL.match(score.name)
            if not m:
                continue
            upd = int(m.group(1) or m.group(3))
            avg = int(m.group(2) or 1)
            if upd not in toks:
                continue
            s = json.loads(score.read_text())
            yield {"run": run.name, "updates": upd, "averaged": avg,
                   "target_tokens": int(toks[upd]),
                   "minutes_2cores": round(toks[upd] / tok_per_s / 60, 2),
                   "bleu": round(s["bleu"]["score"], 2), "chrf": round(s["chrf"]["score"], 2)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tok-per-s", type=float, default=1750.0)
    args = p.parse_args()
    data = sorted(rows(args.tok_per_s), key=lambda r: (r["run"], r["averaged"], r["updates"]))
    with open(HERE / "curve.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(data[0]))
        w.writeheader()
        w.writerows(data)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for i, run in enumerate(sorted({r["run"] for r in data})):
        color = f"C{i}"
        pts = [r for r in data if r["run"] == run and r["averaged"] == 1]
        ax.plot([r["minutes_2cores"] for r in pts], [r["bleu"] for r in pts], "o-", color=color,
                label=run)
        avg = [r for r in data if r["run"] == run and r["averaged"] > 1]
        if avg:
            ax.plot([r["minutes_2cores"] for r in avg], [r["bleu"] for r in avg], "*",
                    color=color, markersize=12, label=f"{run}, averaged")
    ax.axhline(25, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel(f"training minutes on 2 cores (target tokens / {args.tok_per_s:,.0f} per s)")
    ax.set_ylabel("sacreBLEU, Multi30k test_2016 de→en")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "curve.png", dpi=120)
    print(f"wrote {HERE / 'curve.csv'} ({len(data)} rows) and curve.png")


if __name__ == "__main__":
    main()
