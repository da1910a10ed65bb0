"""The locks of the runs' folders: one engine at a time on a run; and the refusal of a link in
the folders the engine writes (a results folder copied from elsewhere may hold one)."""
import os
from pathlib import Path

from ran_text.textio import FolderLock, LockedError, link_message
from ran_lab.common import LabError


def folder_lock(folder, what):
    """The lock of a run's output or checkpoint folder: a hidden file beside it
    (``.seedN.lock``), so that removing the folder to make the run again keeps the lock."""
    folder = Path(folder)
    return FolderLock(folder, what, lock_file=folder.parent / f".{folder.name}.lock")


def lock_runs(runs):
    """Lock every run's output folder and, for a training, its checkpoint folder; a LabError
    naming the holder if another engine holds one (nothing is then kept locked). Returns the
    locks. Engines with different runs may share --out (the table then holds both); two with a
    run in common may not (each would take the other's checkpoint or result)."""
    locks = []
    held = {}  # lock file -> (the run that holds it, its lock): this engine's own
    try:
        for run in runs:
            mine = []
            folders = [(run.dir, "the run folder")]
            if run.trains:
                folders.append((run.save_dir, "the checkpoint folder"))
            for folder, what in folders:
                key = Path(folder).resolve()
                if key in held:
                    other, lock = held[key]
                    if other is not run:  # two runs of this invocation, one folder
                        raise LabError(
                            f"{folder} is the folder of two runs of this command "
                            f"({other.pair} {other.system['name']} seed {other.seed}, and "
                            f"{run.pair} {run.system['name']} seed {run.seed}); name each "
                            f"pair, system and seed once, or give --out and --checkpoints "
                            f"folders of their own")
                    continue  # --out and --checkpoints are one folder: one lock serves both
                lock = folder_lock(folder, what).acquire()
                held[key] = (run, lock)
                mine.append(lock)
                locks.append(lock)
            run.lock_fds = tuple(lock.fileno() for lock in mine)
    except (LockedError, LabError) as e:
        for lock in locks:
            lock.release()
        raise LabError(str(e)) from None
    return locks


# the files the engine writes directly in a table folder (--out)
TABLE_FILES = ("results.json", "TABLE.md", "CLAIMS.md", ".table.lock")


def link_below(root, folder):
    """The first symbolic link on the way from ``root`` (not itself) down to ``folder``, or any
    link inside ``folder`` and its subfolders; None if there is none."""
    root, folder = Path(root), Path(folder)
    try:
        parts = folder.relative_to(root).parts
    except ValueError:  # (a folder outside --out: the engine checks what is below it)
        root, parts = folder, ()
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            return path
    for top, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            if os.path.islink(os.path.join(top, name)) and not submitit_own(top, name):
                return Path(top) / name
    return None


def submitit_own(top, name):
    """Whether ``name`` in ``top`` is a link submitit keeps for its own bookkeeping in a run's
    ``slurm/`` folder (``.submission_file_*.sh``, a link to the job's script beside it): the
    engine writes nothing through it."""
    return Path(top).name == "slurm" and name.startswith(".submission_file_") \
        and name.endswith(".sh")


def refuse_links(runs, out, checkpoints):
    """A LabError naming the first symbolic link the runs' writes would go through: a folder
    between --out (--checkpoints) and a run's folder, a file or folder inside it (its
    generate.txt, its lock file ``.seedN.lock``), or a file the table writes in --out. A link
    there would carry a write outside the folder the engine names."""
    found = [Path(out) / name for name in TABLE_FILES if (Path(out) / name).is_symlink()]
    found += [Path(out) / name for name in (os.listdir(out) if Path(out).is_dir() else ())
              if name.startswith("prepare.") and (Path(out) / name).is_symlink()]
    for run in runs:
        found.append(link_below(out, run.dir))
        lock = run.dir.with_name(f".{run.dir.name}.lock")
        found.append(lock if lock.is_symlink() else None)
        if run.trains:
            found.append(link_below(checkpoints, run.save_dir))
            lock = run.save_dir.with_name(f".{run.save_dir.name}.lock")
            found.append(lock if lock.is_symlink() else None)
    link = next((path for path in found if path is not None), None)
    if link is not None:
        raise LabError(f"{link_message(link)}; nothing was changed")
