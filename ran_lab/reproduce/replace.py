"""A finished run made again (``--force``) keeps its files until the new ones are whole.

Its folder (``OUT/PAIR/SYSTEM/seedN``) and, if it trains, its checkpoint folder are renamed
aside, each to ``.seedN.replaced`` beside it, in one step each; the new run is made in their
place. Once its result.json is written the folders set aside are removed; where it ends without
one (an error, a stopping signal, a failed Slurm job) they are put back. An engine killed in
between (SIGKILL, a lost node) leaves them aside: the next engine that selects the run puts them
back before it reads anything (:func:`recover`), unless the new result.json was written."""
import shutil
import sys


def folders(run):
    """[(folder, its aside name)]: the checkpoint folder first (put back before the run's folder,
    whose result.json says which of the two is whole), then the run's folder."""
    pairs = []
    if run.trains and run.save_dir.resolve() != run.dir.resolve():
        pairs.append((run.save_dir, run.save_dir.with_name(f".{run.save_dir.name}.replaced")))
    pairs.append((run.dir, run.dir.with_name(f".{run.dir.name}.replaced")))
    return pairs


def set_aside(run):
    """Before ``run`` is made from the start: a run with a result.json has its folders renamed
    aside (True); one without has nothing finished, and its folders are removed (False)."""
    if not (run.dir / "result.json").is_file():
        for folder, _ in folders(run):
            shutil.rmtree(folder, ignore_errors=True)
        return False
    for folder, aside in folders(run):
        if aside.exists():  # left by a replacement that was itself replaced: not the table's
            shutil.rmtree(aside)
        if folder.exists():
            folder.rename(aside)
    return True


def put_back(run):
    """The folders set aside back in place of what a replacement left (True if any was)."""
    back = False
    for folder, aside in folders(run):
        if aside.exists():
            shutil.rmtree(folder, ignore_errors=True)
            aside.rename(folder)
            back = True
    return back


def discard(run):
    """The folders set aside removed, the new run being whole (its result.json written)."""
    for _, aside in folders(run):
        shutil.rmtree(aside, ignore_errors=True)


def aside_note(runs):
    """'; the finished run set aside ...' naming the folders of ``runs`` that wait aside (a
    replacement under way or stopped), for a refusal: '' where none does."""
    found = [aside for run in runs for _, aside in folders(run) if aside.exists()]
    if not found:
        return ""
    listed = ", ".join(map(str, found[:3])) + (f" and {len(found) - 3} more" if len(found) > 3
                                               else "")
    return (f"; the finished run set aside by a replacement is kept at {listed} (put back when "
            f"the replacement ends without a result)")


def recover(run, name, waiting_for_job=False):
    """What a killed replacement of ``run`` left: its old folders put back where the new run has
    no result.json (and said), else removed. ``waiting_for_job``: the new run is a Slurm job
    under way (``--launcher slurm --resume``) and the folders stay aside until it ends."""
    if not any(aside.exists() for _, aside in folders(run)):
        return
    if (run.dir / "result.json").is_file():
        discard(run)
    elif not waiting_for_job and put_back(run):
        print(f"{name}: {run.pair} {run.system['name']} seed {run.seed}: a replacement of this "
              f"finished run was stopped before it was whole; the finished run was put back "
              f"from its folder set aside into {run.dir}",
              file=sys.stderr, flush=True)
