"""Validation curves of a reproduction (``scripts/reproduce-*.sh``): the validation loss at each
validation of every training, read from the results folder's results.json, as a CSV and a PNG
(validation loss against updates, a line per system and seed, a panel per pair). It shows what
the tables' "valid loss Δ % per epoch" column sums up: whether a budget ends on a flat curve.

    python -m ran_lab.analysis.curves --results results/ran/long --pair de-en \\
        --systems TransF,RAN-ALL --out results/ran/long

writes OUT/valid-curve.csv and OUT/valid-curve.png (``--name`` changes the file names).
"""
import argparse
import sys
from pathlib import Path
from .results import read_results


def validation_curves(results_dir, pair=None, systems=None):
    """Rows (pair, system, seed, epoch, num_updates, loss) of every validation of the trainings in
    ``results_dir``'s results.json, optionally of one ``pair`` and of ``systems`` (in that order).
    A validation logged twice at one update (a resumed training) is kept once, the later."""
    path = Path(results_dir) / "results.json"
    results = [r for r in read_results(results_dir)["results"]
               if pair is None or r["pair"] == pair]
    if not results:
        raise ValueError(f"{path} has no result for pair {pair} (--pair)")
    if systems is not None:
        found = list(dict.fromkeys(r["system"] for r in results))
        missing = [s for s in systems if s not in found]
        if missing:
            raise ValueError(f"{path} has no result for {', '.join(map(repr, missing))}"
                             f"{f' on {pair}' if pair else ''}; it has {', '.join(found)} "
                             f"(--systems)")
        results = [r for s in systems for r in results if r["system"] == s]
    rows = []
    for r in results:
        if r.get("checkpoint_of"):  # decodes another system's training: same curve
            continue
        points = {}
        for c in r.get("valid_curve") or []:
            if c.get("num_updates") is not None and c.get("loss") is not None:
                points[c["num_updates"]] = c
        rows += [{"pair": r["pair"], "system": r["system"], "seed": r["seed"],
                  "epoch": c.get("epoch"), "num_updates": u, "loss": c["loss"]}
                 for u, c in sorted(points.items())]
    if not rows:
        raise ValueError(f"{path}: the selected results have no validation curve")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", required=True, help="a reproduction's --out folder")
    p.add_argument("--pair", help="only this language pair (e.g. de-en)")
    p.add_argument("--systems", help="comma-separated systems, in this order (default: all)")
    p.add_argument("--out", help="folder for NAME.csv and NAME.png (default: --results)")
    p.add_argument("--name", default="valid-curve", help="file name stem (default valid-curve)")
    args = p.parse_args(argv)
    from . import plots
    from .tables import write_csv

    try:
        rows = validation_curves(args.results, args.pair,
                                 args.systems.split(",") if args.systems else None)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"curves: {e}")
    out = Path(args.out or args.results)
    out.mkdir(parents=True, exist_ok=True)
    print(write_csv(out / f"{args.name}.csv", rows,
                    ["pair", "system", "seed", "epoch", "num_updates", "loss"]))
    print(plots.plot_valid_curves(rows, out / f"{args.name}.png"))


if __name__ == "__main__":
    main()
