"""Remake the committed results tables from their stored runs and say whether any file moved.

``results/REMAKE.json`` lists, for each table folder the reproduction engine wrote under
``results/``, what remakes it from the runs stored in it: a list of ``{"folder", "paper",
"config", "pairs", "systems", "seeds", "threads", "jobs", "note"}``. An entry names a paper (of
``configs/PAPER/reproduce.json``) and the values of its reproduction's options, never a command:
this module makes the command itself, ``scripts/reproduce-PAPER.sh --config CONFIG --pairs ...
--resume`` (every run's result is found, nothing is trained; the engine re-tabulates and
recomputes the paired bootstrap). This module runs those commands one at
a time with this Python and compares each folder's files with git's
(``git status --porcelain``): a folder whose tracked files changed, or that gained a file git
would track, is named, and the exit status is 1. Folders listed inside a folder (``results/ran/short``
holds ``results/ran/long``) are left to their own entries.

A command that starts a run (the engine's ``reproduce-NAME: PAIR SYSTEM seed N ...`` line) is
stopped at once: its folder misses a run, or its command differs from the one that made them.

    python scripts/remake-tables.py                 # every folder, then a summary
    python scripts/remake-tables.py --list          # the folders and their commands
    python scripts/remake-tables.py --only results/ran/gpu
"""
import argparse
import collections
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence
from ran_text import textio
from ran_text.textio import one_line_errors

from ran_lab import checkout
from ran_lab.common import LabError, schema
from ran_lab.common.paths import REPO

MANIFEST = Path("results") / "REMAKE.json"
# the engine's line for a run it starts (one it finds stored says "done before, skipped")
RUN_STARTS = re.compile(r"^reproduce-[\w-]+: (\S+ .+ seed \d+) \.\.\.$")
TAIL_LINES = 20
BOARD_PAPER = "leaderboard"  # remade by its page (ran_lab/leaderboard), not by the engine alone


@dataclass
class Entry:
    folder: str
    paper: str
    config: str
    pairs: List[str]
    systems: List[str]
    seeds: List[int]
    threads: int
    jobs: int
    note: str = ""

    @property
    def argv(self) -> List[str]:
        """The reproduction command this entry stands for (relative to the checkout): the paper's
        script and the entry's values, each given as ``--flag=VALUE``, with ``--resume``; for the
        leaderboard (its config the board's plan), the board's page, which re-tabulates its runs."""
        if self.paper == BOARD_PAPER:
            return [f"scripts/reproduce-{self.paper}.sh", "page", f"--board={self.config}"]
        return [f"scripts/reproduce-{self.paper}.sh", f"--config={self.config}",
                f"--pairs={','.join(self.pairs)}", f"--systems={','.join(self.systems)}",
                f"--seeds={','.join(map(str, self.seeds))}", "--resume",
                f"--threads={self.threads}", f"--jobs={self.jobs}"]


@dataclass
class Outcome:
    folder: str
    seconds: float = 0.0
    returncode: Optional[int] = None
    changes: List[str] = field(default_factory=list)  # `git status --porcelain` lines
    trained: Optional[str] = None  # the run it started, if it started one (then stopped)
    dirty_before: bool = False
    tail: List[str] = field(default_factory=list)  # the command's last stderr lines

    @property
    def unchanged(self):
        return (self.returncode == 0 and not self.changes and self.trained is None
                and not self.dirty_before)


PAPER_NAME = re.compile(r"^[A-Za-z0-9_]+$")
PAIR = re.compile(r"^[a-z]{2,3}-[a-z]{2,3}$")


def paper_problem(repo: Optional[Path], paper: str) -> Optional[str]:
    """Why ``paper`` is not a paper of ``repo``'s configs/ with a reproduction script (None if it
    is; without ``repo``, only its name is checked)."""
    if not PAPER_NAME.match(paper):
        return f"{paper!r} is not the name of a paper (a folder of configs/)"
    if repo is None:
        return None
    script = Path(repo) / "scripts" / f"reproduce-{paper}.sh"
    if not (Path(repo) / "configs" / paper / "reproduce.json").is_file() \
            or script.is_symlink() or not script.is_file():
        return f"{paper!r} is not a paper of configs/ with a scripts/reproduce-{paper}.sh"
    return None


def entry_problem(repo: Optional[Path], entry: Entry) -> Optional[str]:
    """Why ``entry`` cannot remake its folder (None if it can): its paper, a config outside the
    paper's folder, or a value the engine would read as an option (``--help``, ``--dry-run``)."""
    problem = paper_problem(repo, entry.paper)
    if problem:
        return problem
    config = Path(entry.config)
    if config.is_absolute() or ".." in config.parts or config.suffix != ".json" \
            or config.parts[:2] != ("configs", entry.paper):
        return (f"'config' {entry.config!r} is not a config of the paper (a file "
                f"configs/{entry.paper}/NAME.json)")
    bad = [p for p in entry.pairs if not PAIR.match(p)]
    if bad:
        return f"'pairs' {bad[0]!r} is not a language pair such as de-en"
    bad = [s for s in entry.systems if s.startswith("-") or "," in s]
    if bad:
        return f"'systems' {bad[0]!r} is not the name of a system (no leading '-', no comma)"
    return None


def load_manifest(path: Path, repo: Optional[Path] = None) -> List[Entry]:
    """The manifest's entries, checked: each folder once, each naming a paper (of ``repo``, the
    manifest's checkout, when given) and its options (:func:`entry_problem`)."""
    try:
        data = textio.read_json(path, "the remake manifest", "fix the entry as "
                                "ran_lab/remake.py describes")
    except OSError as e:
        raise LabError(f"{path}: {e}") from None
    schema.check(data, schema.REMAKE, path, "the remake manifest")
    entries, seen = [], set()
    for i, item in enumerate(data):
        where = f"{path}: entry {i + 1}"
        folder = item["folder"]
        if Path(folder).is_absolute() or ".." in Path(folder).parts:
            raise LabError(f"{where}: 'folder' must be a path relative to the checkout")
        entry = Entry(**dict(item, folder=folder.rstrip("/")))
        problem = entry_problem(repo, entry)
        if problem:
            raise LabError(f"{where} ({folder}): {problem}; nothing was run")
        if entry.folder in seen:
            raise LabError(f"{where}: {entry.folder} is listed twice")
        seen.add(entry.folder)
        entries.append(entry)
    return entries


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def folder_changes(repo: Path, folder: str, inner: Sequence[str] = ()) -> List[str]:
    """``git status --porcelain`` of ``folder`` (tracked files changed or deleted, files git
    would add), leaving out the folders ``inner`` inside it."""
    spec = [folder] + [f":(exclude){f}" for f in inner]
    out = git(repo, "status", "--porcelain", "--untracked-files=all", "--", *spec)
    return [line.strip() for line in out.splitlines() if line.strip()]


def inner_folders(entries: Sequence[Entry], folder: str) -> List[str]:
    return [e.folder for e in entries if e.folder.startswith(folder + "/")]


def stop(proc):
    """SIGTERM to the command's process group (the engine stops its fairseq children with it)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it has ended


def run_command(repo: Path, entry: Entry, python: str, outcome: Outcome):
    """Run ``entry``'s reproduction command (``bash scripts/reproduce-PAPER.sh ...`` with
    ``PYTHON=python``) in ``repo``, its stdout discarded and its stderr kept (the last lines in
    ``outcome.tail``); stop it, and what it started, at a run's start."""
    tail = collections.deque(maxlen=TAIL_LINES)
    problem = entry_problem(repo, entry)
    if problem:  # load_manifest refuses it already; a caller's own entry is checked here
        raise LabError(f"{problem}; nothing was run")
    cmd, env = ["bash", *entry.argv], dict(os.environ, PYTHON=python)
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        for line in proc.stderr:
            line = line.rstrip("\n")
            tail.append(line)
            found = RUN_STARTS.match(line)
            if found and outcome.trained is None:
                outcome.trained = found.group(1)
                stop(proc)
    except BaseException:
        stop(proc)
        raise
    finally:
        outcome.returncode = proc.wait()
        outcome.tail = list(tail)


def remake(repo: Path, entry: Entry, entries: Sequence[Entry], python: str) -> Outcome:
    """Remake ``entry``'s folder (unless it holds uncommitted changes: it is then not run) and
    compare it with git's."""
    outcome = Outcome(entry.folder)
    inner = inner_folders(entries, entry.folder)
    outcome.changes = folder_changes(repo, entry.folder, inner)
    if outcome.changes:
        outcome.dirty_before = True
        return outcome
    start = time.monotonic()
    run_command(repo, entry, python, outcome)
    outcome.seconds = time.monotonic() - start
    outcome.changes = folder_changes(repo, entry.folder, inner)
    return outcome


def describe(outcome: Outcome) -> str:
    """One line for ``outcome``; after a failure, the command's last lines under it."""
    changed = "; ".join(outcome.changes[:8]) + (
        f"; and {len(outcome.changes) - 8} more" if len(outcome.changes) > 8 else "")
    took = f"{outcome.seconds:.0f} s"
    if outcome.dirty_before:
        return (f"{outcome.folder}: not remade: it holds uncommitted changes ({changed}); "
                f"commit or remove them first")
    if outcome.unchanged:
        return f"{outcome.folder}: unchanged ({took})"
    if outcome.trained is None and outcome.returncode == 0:
        return f"{outcome.folder}: DIFFERS ({took}): {changed}"
    if outcome.trained is not None:
        text = (f"{outcome.folder}: DIFFERS: the command started a run ({outcome.trained}) and "
                f"was stopped: a run is missing or the command is not the one that made them")
    else:
        text = f"{outcome.folder}: FAILED (exit {outcome.returncode}, {took})"
    if changed:
        text += f"; changed: {changed}"
    return text + "".join(f"\n    {line}" for line in outcome.tail)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="ran-remake",
        description="Remake every results table listed in results/REMAKE.json from its stored "
                    "runs (nothing is trained) and check that its files tracked by git are "
                    "byte-for-byte unchanged; exit 1 naming the folders that differ.")
    p.add_argument("--list", action="store_true", help="list the folders and their commands")
    p.add_argument("--only", action="append", metavar="FOLDER",
                   help="remake this folder only (repeatable), e.g. results/ran/gpu")
    p.add_argument("--manifest", type=Path, default=MANIFEST,
                   help="the manifest, relative to the checkout (default: %(default)s)")
    return p.parse_args(argv)


def select(entries: List[Entry], only: Optional[List[str]]) -> List[Entry]:
    if not only:
        return entries
    by_folder = {e.folder: e for e in entries}
    wanted = [f.rstrip("/") for f in only]
    unknown = [f for f in wanted if f not in by_folder]
    if unknown:
        raise LabError(f"not in the manifest: {', '.join(unknown)} (--list names the "
                            f"folders)")
    return [by_folder[f] for f in dict.fromkeys(wanted)]


@one_line_errors("ran-remake")
def main(argv: Optional[List[str]] = None, repo: Path = REPO, python: str = sys.executable):
    args = parse_args(sys.argv[1:] if argv is None else argv)  # --help needs no checkout
    if repo == REPO:  # tests pass a checkout of their own
        checkout.require("ran-remake")
    repo = Path(repo)
    try:
        entries = load_manifest(repo / args.manifest, repo)
        chosen = select(entries, args.only)
    except LabError as e:
        sys.exit(f"ran-remake: error: {e}")
    if args.list:
        for e in chosen:
            print(f"{e.folder}\n    {shlex.join(e.argv)}" + (f"\n    ({e.note})" if e.note else ""))
        return 0
    differ = []
    for entry in chosen:
        try:
            outcome = remake(repo, entry, entries, python)
        except subprocess.CalledProcessError as e:  # git: not a checkout, say
            sys.exit(f"ran-remake: error: {shlex.join(e.cmd)}: {e.stderr.strip()}")
        print(describe(outcome), flush=True)
        if not outcome.unchanged:
            differ.append(entry.folder)
    if differ:
        print(f"ran-remake: {len(differ)} of {len(chosen)} folder(s) differ from git: "
              f"{', '.join(differ)}", file=sys.stderr)
        sys.exit(1)
    print(f"ran-remake: all {len(chosen)} folder(s) remade byte for byte")
    return 0


if __name__ == "__main__":  # python -m ran_lab.remake: as its console script
    main()
