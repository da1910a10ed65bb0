"""``python -m ran_lab.leaderboard [run|page|cost]`` (``scripts/reproduce-leaderboard.sh``):

- ``run`` (the default): every run of the board not yet made (the engine's ``--resume``: a
  finished run is skipped, an interrupted one goes on from its last checkpoint), then the page;
- ``page``: the page from the runs there are (the engine re-tabulates them; nothing is trained);
- ``cost``: the cost columns, measured on the board's checkpoints (run it on a machine with
  nothing else running), then the page.
"""
import argparse
import sys

from ran_lab.common import LabError
from ran_lab import checkout
from .board import BOARD, MAX_LOAD, load_board


def main(argv=None):
    checkout.require("leaderboard")
    p = argparse.ArgumentParser(prog="leaderboard", description="The leaderboard (docs/leaderboard.md): its runs, its "
                                            "page, or its cost columns.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("action", nargs="?", choices=["run", "page", "cost"], default="run")
    p.add_argument("--board", default=None, help=f"the board's plan (default {BOARD})")
    p.add_argument("--stop-after", type=float, metavar="MINUTES",
                   help="run: start no run after this many minutes (a job's time limit); the "
                        "same command goes on")
    p.add_argument("--threads", type=int, help="run, page: threads of each run (default: all cores "
                                               "over --jobs)")
    p.add_argument("--jobs", type=int, default=1, help="run, page: runs at a time (page: as the "
                                                       "runs were made)")
    p.add_argument("--data", help="run, page: an existing data-bin ({src} and {tgt} replaced "
                                  "per direction) instead of the config's prepared one")
    p.add_argument("--dry-run", action="store_true", help="run: print the engine's commands")
    p.add_argument("--systems", help="cost: only these systems (comma-separated); the rows "
                                     "measured before for the others are kept")
    p.add_argument("--train-updates", type=int,
                   help="cost: updates of each timed training (default: the board's)")
    p.add_argument("--max-load", type=float, default=MAX_LOAD,
                   help="cost: refuse to start above this one-minute load average")
    args = p.parse_args(argv)
    from .page import write_page
    try:
        board = load_board(args.board)
        if args.action == "run":
            from .run import make_board
            code = make_board(board, args.stop_after, args.threads, args.jobs, args.dry_run,
                              data=args.data)
            if args.dry_run:
                return
            if code:
                print(f"leaderboard: the engine stopped with status {code}; the page holds "
                      f"what finished", file=sys.stderr)
        elif args.action == "page":
            from .run import make_board
            code = make_board(board, threads=args.threads, jobs=args.jobs, tabulate_only=True,
                              data=args.data)
        else:
            from .cost import measure
            systems = args.systems.split(",") if args.systems else None
            written = measure(board, systems, None, args.train_updates, args.max_load)
            print(f"leaderboard: cost written to {written}", file=sys.stderr)
            code = 0
        print(f"leaderboard: {write_page(board)}", file=sys.stderr)
        sys.exit(code)
    except LabError as e:
        sys.exit(f"leaderboard: error: {e}")
