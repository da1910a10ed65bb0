"""Remake the committed results tables from their stored runs and say whether any file moved.

``results/REMAKE.json`` lists, for each table folder the reproduction engine wrote under
``results/``, the one command that remakes it from the runs stored in it: a list of
``{"folder", "argv", "note"}``, ``argv`` one of the project's reproduction commands
(``scripts/reproduce-PAPER.sh`` of a paper with ``configs/PAPER/reproduce.json``; nothing else is
ever run, whatever a manifest says) and its arguments, relative to the checkout's root, with
``--resume`` (every run's result is found, nothing is trained; the
engine re-tabulates and recomputes the paired bootstrap). This module runs those commands one at
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
import json
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
from ran_text.textio import one_line_errors

from ran_lab import checkout
from ran_lab.common import schema

REPO = checkout.ROOT
MANIFEST = Path("results") / "REMAKE.json"
# the engine's line for a run it starts (one it finds stored says "done before, skipped")
RUN_STARTS = re.compile(r"^reproduce-[\w-]+: (\S+ .+ seed \d+) \.\.\.$")
TAIL_LINES = 20


class ManifestError(ValueError):
    """A manifest that is not a list of {"folder", "argv", "note"}."""


@dataclass
class Entry:
    folder: str
    argv: List[str]
    note: str = ""


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


# the commands a manifest may name: the reproduction script of a paper of configs/
ENTRY_POINT = re.compile(r"^scripts/reproduce-(?P<paper>[A-Za-z0-9_]+)\.sh$")


def entry_point_problem(repo: Path, command: str) -> Optional[str]:
    """Why ``command`` is not one of the project's reproduction commands (None if it is): a
    manifest is data, so it names one of them, never Python's ``-c``, a module or another
    script."""
    found = ENTRY_POINT.match(command)
    if found is None:
        return (f"{command!r} is not a reproduction command of the project; a manifest names "
                f"scripts/reproduce-PAPER.sh")
    script = Path(repo) / command
    if not (Path(repo) / "configs" / found["paper"] / "reproduce.json").is_file() \
            or script.is_symlink() or not script.is_file():
        return f"{command} is not the reproduction script of a paper of configs/"
    return None


def load_manifest(path: Path, repo: Optional[Path] = None) -> List[Entry]:
    """The manifest's entries, checked: each folder once, each argv a non-empty list of strings
    whose first item is a reproduction command of the project (:func:`entry_point_problem`; of
    ``repo``, the manifest's checkout, when given)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ManifestError(f"{path}: {e}") from None
    schema.check(data, schema.REMAKE, path, ManifestError, "the remake manifest")
    if not isinstance(data, list):
        raise ManifestError(f"{path}: a list of {{\"folder\", \"argv\", \"note\"}} expected")
    entries, seen = [], set()
    for i, item in enumerate(data):
        where = f"{path}: entry {i + 1}"
        if not isinstance(item, dict) or set(item) - {"folder", "argv", "note"}:
            raise ManifestError(f"{where}: an object with keys folder, argv, note expected")
        folder, argv = item.get("folder"), item.get("argv")
        if not isinstance(folder, str) or not folder or Path(folder).is_absolute():
            raise ManifestError(f"{where}: 'folder' must be a path relative to the checkout")
        if (not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv)
                or Path(argv[0]).is_absolute()):
            raise ManifestError(f"{where} ({folder}): 'argv' must be a list of strings, a "
                                f"script relative to the checkout first")
        problem = entry_point_problem(repo, argv[0]) if repo is not None else \
            (None if ENTRY_POINT.match(argv[0]) else f"{argv[0]!r} is not a reproduction command "
             f"of the project; a manifest names scripts/reproduce-PAPER.sh")
        if problem:
            raise ManifestError(f"{where} ({folder}): {problem}; nothing was run")
        folder = folder.rstrip("/")
        if folder in seen:
            raise ManifestError(f"{where}: {folder} is listed twice")
        seen.add(folder)
        entries.append(Entry(folder, list(argv), str(item.get("note", ""))))
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


def run_command(repo: Path, argv: Sequence[str], python: str, outcome: Outcome):
    """Run ``python ARGV`` (``bash ARGV`` with ``PYTHON=python`` for a shell script) in ``repo``,
    its stdout discarded and its stderr kept (the last lines in ``outcome.tail``); stop it, and
    what it started, at a run's start."""
    tail = collections.deque(maxlen=TAIL_LINES)
    problem = entry_point_problem(repo, argv[0])
    if problem:  # load_manifest refuses it already; a caller's own entry is checked here
        raise ManifestError(f"{problem}; nothing was run")
    cmd, env = ["bash", *argv], dict(os.environ, PYTHON=python)
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
    run_command(repo, entry.argv, python, outcome)
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
        raise ManifestError(f"not in the manifest: {', '.join(unknown)} (--list names the "
                            f"folders)")
    return [by_folder[f] for f in dict.fromkeys(wanted)]


@one_line_errors("remake")
def main(argv: Optional[List[str]] = None, repo: Path = REPO, python: str = sys.executable):
    args = parse_args(sys.argv[1:] if argv is None else argv)  # --help needs no checkout
    if repo == REPO:  # tests pass a checkout of their own
        checkout.require("ran-remake")
    repo = Path(repo)
    try:
        entries = load_manifest(repo / args.manifest, repo)
        chosen = select(entries, args.only)
    except ManifestError as e:
        sys.exit(f"remake-tables: error: {e}")
    if args.list:
        for e in chosen:
            print(f"{e.folder}\n    {shlex.join(e.argv)}" + (f"\n    ({e.note})" if e.note else ""))
        return 0
    differ = []
    for entry in chosen:
        try:
            outcome = remake(repo, entry, entries, python)
        except subprocess.CalledProcessError as e:  # git: not a checkout, say
            sys.exit(f"remake-tables: error: {shlex.join(e.cmd)}: {e.stderr.strip()}")
        print(describe(outcome), flush=True)
        if not outcome.unchanged:
            differ.append(entry.folder)
    if differ:
        print(f"remake-tables: {len(differ)} of {len(chosen)} folder(s) differ from git: "
              f"{', '.join(differ)}", file=sys.stderr)
        sys.exit(1)
    print(f"remake-tables: all {len(chosen)} folder(s) remade byte for byte")
    return 0


if __name__ == "__main__":  # python -m ran_lab.remake: as its console script
    main()
