"""Making the board: the engine (``ran-reproduce leaderboard``) once per group of runs of the plan
(a direction, its seeds, its systems), each with ``--resume`` so that the command goes on run by
run after an interruption, then the page."""
import subprocess
import sys
import time
from typing import List, Optional

from ran_text import textio
from ..common import paths
from ..reproduce.config import load_config
from .board import Board


def engine_argv(board: Board, group, extra: List[str]) -> List[str]:
    return [sys.executable, "-m", "ran_lab.reproduce", "leaderboard", "--config", board.config,
            "--pairs", group.pair, "--seeds", ",".join(map(str, group.seeds)),
            "--systems", ",".join(group.systems), "--resume", *extra]


def stored(board: Board, config: dict):
    """The (pair, system, seed) of the finished runs in the runs' folder (each run's
    ``PAIR/SYSTEM/seedN/result.json``), whether or not a table holds them yet."""
    found = set()
    for path in sorted(paths.repo_path(config["out"]).glob("*/*/seed*/result.json")):
        run = textio.read_json_file(path, "a run of the board")
        found.add((run["pair"], run["system"], run["seed"]))
    return found


def make_board(board: Board, stop_after: Optional[float] = None, threads: Optional[int] = None,
               jobs: int = 1, dry_run: bool = False, tabulate_only: bool = False,
               data: Optional[str] = None) -> int:
    """Run the board's groups (every run already finished is skipped), or with
    ``tabulate_only`` only re-tabulate the runs there are (``--stop-after 0``: nothing is
    trained); ``data``: an existing data-bin for every direction (the engine's ``--data``,
    {src} and {tgt} replaced) instead of the config's prepared one. Returns the engine's worst
    exit status."""
    config = load_config(paths.repo_path(board.config))
    systems = list(config["systems"])
    start = time.monotonic()
    worst = 0
    done = stored(board, config)
    for group in board.groups(systems):
        extra = []
        if threads:
            extra += ["--threads", str(threads)]
        if jobs != 1:
            extra += ["--jobs", str(jobs)]
        if dry_run:
            extra += ["--dry-run"]
        if data:
            extra += ["--data", data]
        if tabulate_only:
            mine = [(group.pair, s, seed) for s in group.systems for seed in group.seeds]
            if not any(key in done for key in mine):
                continue  # nothing of this group to tabulate
            extra += ["--stop-after", "0"]
        elif stop_after is not None:
            left = stop_after - (time.monotonic() - start) / 60
            if left <= 0:
                print(f"leaderboard: --stop-after {stop_after:g} min reached; the rest "
                      f"with the same command", file=sys.stderr)
                break
            extra += ["--stop-after", f"{left:.2f}"]
        argv = engine_argv(board, group, extra)
        print(f"leaderboard: {group.pair} seeds {','.join(map(str, group.seeds))}: "
              f"{', '.join(group.systems)}", file=sys.stderr, flush=True)
        code = subprocess.call(argv, cwd=paths.REPO)
        worst = max(worst, code)
        if tabulate_only:
            break  # the engine's table holds every finished run of the folder
    return worst
