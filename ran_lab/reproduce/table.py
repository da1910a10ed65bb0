"""Tabulating: this invocation's results and the finished runs beside them into OUT/results.json,
OUT/TABLE.md and (where the paper has claims) OUT/CLAIMS.md."""
import sys

from ran_text import textio
from ..common.machine import machine_info
from ..common.paths import repo_path, shown
from .markdown import markdown
from .scores import add_significance
from .store import check_table, finished_beside


SELECT_TEXT = {"last": "the last (checkpoint_last.pt)",
               "loss": "the best on validation loss (checkpoint_best.pt)",
               "bleu": "the best on validation BLEU (checkpoint_best.pt, fairseq's --eval-bleu)"}


def tabulate(paper, args, config, runs, results, not_run, data_template, name):
    """Write OUT/results.json and OUT/TABLE.md from this invocation's ``results`` and the
    finished runs beside them, and print the table. Called under the table's lock: what the
    table loses is checked against the disk now (:func:`.store.check_table`)."""
    check_table(args, config, runs, data_template)
    beside = finished_beside(args, config, runs, data_template, name)
    if beside:
        found = "; ".join(f"{run.pair} {run.system['name']} seed {run.seed}" for run, _ in beside)
        print(f"{name}: tabulated beside this invocation's runs, the finished ones in "
              f"{shown(args.out)}: {found}", file=sys.stderr)
    every = runs + [run for run, _ in beside]
    results += [old for _, old in beside]
    # rows in the systems file's order, each system's seeds together
    order = {name: i for i, name in enumerate(config["systems"])}
    pair_order = {pair: i for i, pair in enumerate(dict.fromkeys(run.pair for run in every))}
    results.sort(key=lambda r: (pair_order[r["pair"]], order.get(r["system"], len(order)),
                                r["seed"]))
    refs = {(run.pair, subset): run.raw_ref[subset] for run in every for subset in run.subsets}
    add_significance(results, config["baseline"], config["significance"], args.out, refs)

    train_argv = runs[0].train_argv
    max_update = (train_argv[train_argv.index("--max-update") + 1]
                  if "--max-update" in train_argv else "fairseq's default number of")
    report = {
        "settings": {
            "config": shown(config["path"]), "test_set": config["test_set"],
            "paper_file": shown(repo_path(config["paper"])), "baseline": config["baseline"],
            "data": shown(data_template), "pairs": list(pair_order),
            "systems": [name for name in config["systems"]
                        if any(run.system["name"] == name for run in every)],
            "seeds": sorted({run.seed for run in every}),
            "subsets": config["subsets"], "select": config["select"],
            "select_text": SELECT_TEXT[config["select"]],
            "significance": config["significance"],
            "max_update": max_update, "threads": args.threads, "jobs": args.jobs,
            "not_run": not_run,
            "launcher": getattr(args, "launcher", "local"),
            "generate_flags": config["generate_flags"],
            "speed_bench": config["speed_bench"],
            "signatures": results[0]["signatures"]},
        # where the runs were made (--resume can tabulate another machine's results)
        "machine": next((r["machine"] for r in results if "machine" in r), None)
        or machine_info("cpu" if config["device"] == "cuda" else config["device"], args.threads),
        "paper": config["paper_numbers"], "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    textio.write_json(args.out / "results.json", report)
    table = markdown(paper, report)
    textio.write_text_atomic(args.out / "TABLE.md", table)
    claims = repo_path(config["paper"]).parent / "claims.json"
    if claims.is_file():  # CLAIMS.md beside TABLE.md: each claim's verdict (ran_lab.claims)
        from ..claims import write_claims
        try:
            print(f"{name}: {shown(write_claims(claims, args.out, refs))}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 (a table is never lost to its claims)
            print(f"{name}: no CLAIMS.md: {e}", file=sys.stderr)
    print(table)
