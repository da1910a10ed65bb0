"""The locks of the runs' folders: one engine at a time on a run."""
from pathlib import Path

from ran_text.textio import FolderLock, LockedError
from .errors import ReproError


def folder_lock(folder, what):
    """The lock of a run's output or checkpoint folder: a hidden file beside it
    (``.seedN.lock``), so that removing the folder to make the run again keeps the lock."""
    folder = Path(folder)
    return FolderLock(folder, what, lock_file=folder.parent / f".{folder.name}.lock")


def lock_runs(runs):
    """Lock every run's output folder and, for a training, its checkpoint folder; a ReproError
    naming the holder if another engine holds one (nothing is then kept locked). Returns the
    locks. Engines with different runs may share --out (the table then holds both); two with a
    run in common may not (each would take the other's checkpoint or result)."""
    locks = []
    try:
        for run in runs:
            mine = [folder_lock(run.dir, "the run folder").acquire()]
            if run.trains:
                mine.append(folder_lock(run.save_dir, "the checkpoint folder").acquire())
            run.lock_fds = tuple(lock.fileno() for lock in mine)
            locks += mine
    except LockedError as e:
        for lock in locks:
            lock.release()
        raise ReproError(str(e)) from None
    return locks
