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
                        raise ReproError(
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
    except (LockedError, ReproError) as e:
        for lock in locks:
            lock.release()
        raise ReproError(str(e)) from None
    return locks
