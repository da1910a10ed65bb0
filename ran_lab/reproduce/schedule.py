"""The scheduler: every run of an invocation, in order, ``--jobs`` at a time (or all at once
where Slurm schedules them), each skipped when its stored result stands (``--resume``), made
again from its kept decoding (``--redo-postprocess``), or launched (:mod:`.launch`: here or as a
Slurm job, through one interface); a finished run's result.json is written here, whatever made
it."""
import concurrent.futures
import sys
import threading
import time

from ran_text import textio
from ran_lab.common import LabError
from .process import CHILDREN
from . import replace
from .redo import redo_postprocess, redoable
from .store import difference, read_result, stored_result, stored_train_argv


def made_otherwise(run, old):
    """Whether ``run``'s folders hold a result (``old``, as read) or checkpoints made by other
    commands."""
    if old is not None and difference(run, old) is not None:
        return True
    argv = stored_train_argv(run) if run.trains else None
    return argv is not None and argv != run.train_argv


def data_bin_files(run):
    """The files of ``run``'s data-bin that its training (if it trains) and its decoding and
    scoring of each subset read."""
    src, tgt = run.src, run.tgt
    splits = (["train", "valid"] if run.trains else []) + list(run.subsets)
    names = [f"dict.{src}.txt", f"dict.{tgt}.txt"]
    names += [f"{split}.{src}-{tgt}.{lang}.{ext}" for split in dict.fromkeys(splits)
              for lang in (src, tgt) for ext in ("bin", "idx")]
    names += [path.name for subset in run.subsets
              for path in (run.raw_src[subset], run.raw_ref[subset], run.tok_ref[subset])]
    return names


def check_data_bin(run):
    """Refuse, before anything is trained, a data-bin that lacks a file the run reads (a build
    that was stopped, or a folder made by hand), naming what is missing."""
    missing = [name for name in data_bin_files(run) if not (run.data / name).is_file()]
    if missing:
        listed = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4
                                           else "")
        raise LabError(f"{run_label(run)}: the data-bin {run.data} is not whole: it lacks "
                         f"{listed}; make it again (ran-prepare with --force), or leave --data out "
                         f"to prepare the config's")


def run_label(run):
    return f"{run.pair} {run.system['name']} seed {run.seed}"


def submit_all(pool, runs, one):
    """``one(run, trainer)`` of every run in ``pool``, trainings first, so that a decode-only run
    never holds a worker waiting for one (``trainer``: the Future of the training whose checkpoint
    it decodes, or None); returns the Futures by ``id(run)``."""
    futures = {}
    trained_by = {}  # (pair, system, seed) -> Future of a training run
    for run in sorted(runs, key=lambda r: not r.trains):
        trainer = None
        if not run.trains:
            trainer = trained_by.get((run.pair, run.system["checkpoint_of"], run.seed))
        futures[id(run)] = pool.submit(one, run, trainer)
        if run.trains:
            trained_by[(run.pair, run.system["name"], run.seed)] = futures[id(run)]
    return futures


class Made:
    """What :func:`make_all` returns: the results of the finished runs in the runs' order, the
    runs without one (why, each), and those of them whose launch failed (a Slurm job that ended
    without a result)."""

    def __init__(self, results, not_run, failed):
        self.results, self.not_run, self.failed = results, not_run, failed


def make_all(runs, args, launcher, env, name):
    """Every run, ``launcher.workers`` at a time, in ``runs``' order; a :class:`Made`. A run that
    decodes another's checkpoint waits for it. The first error starts no further run; the runs
    under way finish, then it is raised."""
    start = time.monotonic()
    lock = threading.Lock()
    errors = []
    outcomes = {}

    def say(text):
        with lock:
            print(f"{name}: {text}", file=sys.stderr, flush=True)

    def stopped():
        return CHILDREN.stopped_by is not None

    def one(run, trainer):
        trained = trainer.result() if trainer is not None else None
        if trainer is not None and trained is None:
            return None  # its checkpoint's training did not run
        try:
            stored = read_result(run)  # the run's record, read once
            old, rescored = (stored_result(run, stored, args.force, getattr(args, "rescore", False))
                             if args.resume else (None, False))
            if old is not None:
                say(f"{run_label(run)}: done before, skipped (--resume)"
                    + (f"; rescored: sacreBLEU {old['sacrebleu']:.2f}" if rescored else ""))
                return old
            if errors or stopped() or (args.stop_after is not None
                                       and time.monotonic() - start > 60 * args.stop_after):
                return None
            if getattr(args, "redo_postprocess", False) and redoable(run, stored):
                # no device needed: its machine stays the one that decoded it
                say(f"{run_label(run)}: postprocessed again from its kept decoding "
                    f"(--redo-postprocess) ...")
                result = redo_postprocess(run, env, stored)
            else:
                if not run.data.is_dir():  # (--data: nothing was prepared)
                    raise LabError(f"{run_label(run)}: its data-bin {run.data} does not "
                                     f"exist: give --data the folder of a data-bin (ran-prepare "
                                     f"writes one), or leave --data out to prepare the config's")
                check_data_bin(run)
                launcher.check()  # (before any file is moved)
                if not args.resume or (args.force and made_otherwise(run, stored)):
                    # made again from the start (check_stored refused a finished run, or other
                    # commands' files, unless --force): a finished run's folders wait aside
                    # until the new one is whole (.replace)
                    replace.set_aside(run)
                try:
                    outcome = launcher.launch(run, trained, stopped, say)
                except BaseException:
                    replace.put_back(run)
                    raise
                if outcome.result is None:
                    if outcome.failed:  # (a Slurm job under way keeps them aside)
                        replace.put_back(run)
                    with lock:
                        outcomes[id(run)] = outcome
                    return None
                result = outcome.result
        except Exception as e:  # noqa: BLE001  (kept, raised after the runs under way)
            with lock:
                errors.append(e)
            return None
        textio.write_json(run.dir / "result.json", result)
        replace.discard(run)  # the new run is whole: the old one's folders go
        say(f"{run_label(run)}: tok BLEU {result['tok_bleu']:.2f}, sacreBLEU "
            f"{result['sacrebleu']:.2f}, TER {result['ter']:.2f}, "
            f"{result['decode']['sentences_per_s']:.2f} sent/s, "
            f"{result['train_seconds'] / 60:.1f} min training")
        return result

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=launcher.workers(runs)) as pool:
        futures = submit_all(pool, runs, one)
        for run in runs:
            results[id(run)] = futures[id(run)].result()
    if errors:
        raise errors[0]
    missing = [run for run in runs if results[id(run)] is None]
    not_run = [outcomes[id(run)].reason if id(run) in outcomes else run_label(run)
               for run in missing]
    failed = [outcomes[id(run)].reason for run in missing
              if id(run) in outcomes and outcomes[id(run)].failed]
    return Made([results[id(run)] for run in runs if results[id(run)] is not None], not_run,
                failed)
