"""The command line: ``ran-reproduce PAPER [options]`` (also ``python -m ran_lab.reproduce
PAPER`` and ``scripts/reproduce-PAPER.sh``)."""
import argparse
import os
import shlex
import sys
import textwrap
import threading
from pathlib import Path
from typing import List, Optional

from ran_lab import checkout
from ran_text.textio import FolderLock, os_error_line
from .runguard import Stopped
from ..common.machine import available_cores
from ..common.paths import repo_path, shown
from .config import (Paper, check_data_template, check_device_flags, load_config, parse_pairs,
                     parse_seeds, select_systems)
from ran_lab.common import LabError
from .launch.local import Local
from .schedule import make_all
from . import launch
from .launch.jobs import check_jobs
from .locks import lock_runs, refuse_links
from .process import CHILDREN, prepare
from .runs import Run
from .store import check_stored, pairs_beside
from .table import tabulate


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """An option's default after its help unless it is None or False (the help then says what
    happens); the epilog (the full-size settings) as written."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def full_settings_epilog(paper):
    """The help's list of a paper's named full-size settings (None where it has one config)."""
    if not paper.full_settings:
        return None
    width = max(len(s.name) for s in paper.full_settings)
    return "full-size settings (--full NAME):\n" + "\n".join(
        textwrap.fill(f"{shown(s.config)}: {s.help}", width=88, break_long_words=False,
                      initial_indent=f"  {s.name:<{width}}  ",
                      subsequent_indent=" " * (width + 4))
        for s in paper.full_settings)


def parse_cli(paper, argv, prog=None):
    """The options of one paper's reproduction; ``prog``: the command's name in the help
    (``reproduce-KEY`` by default)."""
    settings = {s.name: s for s in paper.full_settings}
    p = argparse.ArgumentParser(
        prog=prog or f"reproduce-{paper.key}",
        description=f"Reproduce the shape of {paper.title}.",
        formatter_class=HelpFormatter, epilog=full_settings_epilog(paper))
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--config", type=Path, default=paper.cpu_config,
                       help="scale config (JSON): systems, data, fairseq flags")
    if settings:
        first = paper.full_settings[0].name
        scale.add_argument("--full", nargs="?", const=first, choices=list(settings),
                           metavar="NAME",
                           help=f"full-size settings for GPUs, one of {', '.join(settings)} "
                                f"(listed below; a bare --full is {first})")
    else:
        scale.add_argument("--full", action="store_true",
                           help=f"full-size settings for GPUs: --config "
                                f"{shown(paper.full_config)} ({paper.full_help})")
    p.add_argument("--pairs", help="comma-separated SRC-TGT pairs (default: the config's)")
    p.add_argument("--systems", help="comma-separated system names, their runs started in "
                                     "this order (default: all of the config's systems file)")
    p.add_argument("--max-update", type=int, help="training updates (overrides the config's)")
    p.add_argument("--seeds", help="comma-separated training seeds, each system trained once per "
                                   "seed (default: the config's 'seeds', else 1); the table shows "
                                   "mean ± std over them")
    p.add_argument("--out", type=Path, help="results directory (default: the config's 'out')")
    p.add_argument("--checkpoints", type=Path,
                   help="checkpoint directory (default: the config's 'checkpoints')")
    p.add_argument("--data", help="data-bin to use instead of the config's prepared one; "
                                  "{src} and {tgt} are replaced per pair; nothing is prepared")
    p.add_argument("--threads", type=int,
                   help="CPU threads of each fairseq process (OMP_NUM_THREADS; default: the "
                        "cores over --jobs)")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at a time (trainings of different systems, seeds or pairs); on one "
                        "GPU, small models train several times faster side by side; the speed "
                        "columns then measure a shared device")
    p.add_argument("--stop-after", type=float, metavar="MINUTES",
                   help="start no run after this many minutes; the runs begun finish, the table "
                        "holds the finished ones and names the rest (rerun with --resume)")
    p.add_argument("--resume", action="store_true",
                   help="skip systems whose result exists (made with the same commands) and "
                        "let fairseq-train continue an interrupted run from checkpoint_last.pt")
    p.add_argument("--device", choices=["cpu", "cuda"],
                   help="train and decode on this device instead of the config's (its recipe "
                        "unchanged); results made on either device tabulate together "
                        "(--resume), with speed ratios only between runs on one machine")
    p.add_argument("--force", action="store_true",
                   help="replace stored results and checkpoints made with other commands (without "
                        "it the engine refuses to replace them, or to leave them out of the "
                        "table, and says which)")
    p.add_argument("--redo-postprocess", action="store_true",
                   help="with --resume --force: a run with a postprocess whose stored result was "
                        "trained and decoded by the same commands, and whose folder keeps its "
                        "decoding (generate.txt.gz), is postprocessed and scored again from it "
                        "without its checkpoint (e.g. another unknown-word replacement method); "
                        "its training and decoding figures are kept")
    p.add_argument("--rescore", action="store_true",
                   help="with --resume: score the finished runs against the references and the "
                        "data-bin here even where one changed since they were scored (without "
                        "it a changed input is refused, naming the file), and record their "
                        "SHA-256")
    p.add_argument("--dry-run", action="store_true",
                   help="print the commands (run from the checkout: its files are named relative "
                        "to it) and run nothing")
    launch.add_arguments(p)  # --launcher and its options (ran_lab.reproduce.launch)
    args = p.parse_args(argv)
    launch.check_arguments(p, args, argv)
    args.threads_given = args.threads  # --launcher slurm: the threads of a job's task
    if args.full:
        args.config = settings[args.full].config if settings else paper.full_config
    if args.max_update is not None and args.max_update < 1:
        p.error("--max-update must be at least 1")
    if args.redo_postprocess and not (args.resume and args.force):
        p.error("--redo-postprocess replaces stored results: give it with --resume --force")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if args.rescore and not args.resume:
        p.error("--rescore scores finished runs again: give it with --resume")
    if args.threads is None:
        args.threads = max(1, available_cores() // args.jobs)
    if args.threads < 1:
        p.error("--threads must be at least 1")
    if args.stop_after is not None and args.stop_after < 0:
        p.error("--stop-after must be a number of minutes >= 0")
    if args.seeds is not None:
        try:
            args.seeds = parse_seeds(args.seeds.split(","))
        except ValueError as e:
            p.error(f"--seeds: {e}")
    return args


def run_all(paper, args):
    config = load_config(args.config)
    if args.device:
        config["device"] = args.device
    pairs = parse_pairs(args.pairs or ",".join(config["pairs"]))
    systems = select_systems(config["systems"], args.systems, config["systems_file"])
    cpu_config = Path(args.config).with_name("cpu.json")
    check_device_flags(config["device"], config["train_flags"], systems, f"config {args.config}",
                       "run it on a GPU (--device cuda, or the config's 'device'), or on the CPU "
                       "with a config without the flag"
                       + (f" (e.g. {shown(cpu_config)})" if cpu_config.is_file()
                          else ""))
    seeds = args.seeds or config["seeds"]
    args.out = Path(args.out or repo_path(config["out"])).resolve()
    args.checkpoints = Path(args.checkpoints or repo_path(config["checkpoints"])).resolve()
    data_template = args.data or str(repo_path(config["data"]))
    check_data_template(data_template, "--data" if args.data else f"{args.config}: \"data\"")
    if args.data is None and config["prepare"] is None and not args.dry_run:
        raise LabError(f"config {args.config}: \"prepare\" is null (the engine prepares no "
                         f"corpus for it): give --data the folder of a data-bin ({{src}} and "
                         f"{{tgt}} replaced per pair)")
    runs = [Run(args, config, pair, system,
                Path(data_template.format(src=pair[0], tgt=pair[1])).resolve(), seed)
            for pair in pairs for seed in seeds for system in systems]
    name = f"reproduce-{paper.key}"
    slurm = None
    if args.launcher == "slurm":  # --- launcher: slurm (ran_lab.reproduce.launch) ---
        launch.require_submitit()
        from .launch import slurm
        runs, args.threads = slurm.placed(runs, args, config)
    if args.dry_run:
        for run in runs:
            print(f"# {run.pair} {run.system['name']} seed {run.seed}")
            for cmd in run.commands():
                print(shlex.join(cmd))
            if slurm is not None:
                print(slurm.sbatch_script(run, args))
        return
    refuse_links(runs, args.out, args.checkpoints)
    locks = lock_runs(runs)
    CHILDREN.stopped_by = None
    restore = (CHILDREN.install() if threading.current_thread() is threading.main_thread()
               else None)
    try:
        check_jobs(runs, args)  # a run whose Slurm job is under way is in use
        check_stored(args, config, runs, data_template, name)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
                   MKL_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
        if args.data is None:  # the named pairs, and those of the stored runs it tabulates
            for pair in [*pairs, *pairs_beside(args, config, runs, data_template)]:
                print(f"{name}: preparing {pair[0]}-{pair[1]}", file=sys.stderr, flush=True)
                prepare(config, pair, args.out / f"prepare.{pair[0]}-{pair[1]}.log", env)
        if slurm is not None:
            launcher = slurm.Slurm(args, paper)
        else:
            launcher = Local(config, args.jobs, args.threads, env, paper, args.config)
        made = make_all(runs, args, launcher, env, name)
        results, not_run, failed = made.results, made.not_run, made.failed
        if slurm is not None and not_run:  # each with its Slurm job, and why it has no result
            print(f"{name}: without a result: {'; '.join(not_run)}", file=sys.stderr)
        elif not_run:
            print(f"{name}: not run before --stop-after {args.stop_after:g} min: "
                  f"{'; '.join(not_run)} (rerun with --resume)", file=sys.stderr)
        if not results and args.launcher == "slurm" and not_run:
            if failed:  # no table to write, and an error, as below
                raise LabError(f"{len(failed)} run(s) without a result: {'; '.join(failed)}")
            print(f"{name}: no run finished yet; rerun with --resume to collect them",
                  file=sys.stderr)
            return
        if not results:
            raise LabError("no run finished before --stop-after; nothing to tabulate")
        # engines sharing --out (with different runs) write its table one at a time
        with FolderLock(args.out, "the results folder's table",
                        lock_file=args.out / ".table.lock").acquire(wait=True):
            tabulate(paper, args, config, runs, results, not_run, data_template, name)
        if failed:  # reported in the table, then an error
            raise LabError(f"{len(failed)} run(s) without a result: {'; '.join(failed)}")
    finally:
        CHILDREN.wait_all()
        if restore is not None:
            restore()
        for lock in locks:
            lock.release()


def run_paper(paper: Paper, argv: Optional[List[str]] = None, prog: Optional[str] = None):
    """One paper's reproduction with command-line arguments ``argv`` (default: sys.argv's); an
    error or a stopping signal ends the process with a message (its log lines and messages are
    ``reproduce-KEY``'s whatever ``prog`` names the command in the help)."""
    args = parse_cli(paper, sys.argv[1:] if argv is None else argv, prog)
    try:
        run_all(paper, args)
    except LabError as e:  # a refused input, or a damaged or refused file the engine read
        sys.exit(f"reproduce-{paper.key}: error: {e}")
    except OSError as e:  # a read-only folder, a full disk
        sys.exit(f"reproduce-{paper.key}: error: {os_error_line(e)}")
    except Stopped as e:
        print(f"reproduce-{paper.key}: stopped by {e}: the fairseq processes under way were "
              f"stopped with it; rerun with --resume to go on", file=sys.stderr)
        sys.exit(128 + e.signal)


def top_parser(papers) -> argparse.ArgumentParser:
    """``ran-reproduce PAPER ...``'s parser; ``papers``: those of the checkout's configs/ (None
    outside a checkout, where the help says where they are)."""
    if papers is None:
        epilog = (f"papers: those of a checkout's configs/ (ran-reproduce reads configs/ and "
                  f"writes results/ there; outside a checkout, {checkout.HOW_TO_GET_ONE})")
    else:
        epilog = "papers:\n" + "\n".join(f"  {key:<16} {title(key)}" for key in papers)
    p = argparse.ArgumentParser(
        prog="ran-reproduce", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Reproduce the shape of a paper's tables: train, decode and score every "
                    "system of its config with fairseq, and write the measured table beside "
                    "the paper's numbers.", epilog=epilog)
    p.add_argument("paper", choices=list(papers or ()) or None,
                   help="the paper (ran-reproduce PAPER --help lists its options)")
    p.add_argument("options", nargs=argparse.REMAINDER, help="the paper's options")
    return p


def main(argv: Optional[List[str]] = None):
    """``ran-reproduce PAPER [options]``: PAPER's reproduction (``ran-reproduce PAPER --help``
    lists its options)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]) and not checkout.is_checkout():
        top_parser(None).parse_args(argv)  # the help, without the papers of a checkout
    checkout.require("ran-reproduce")
    from .papers import PAPERS, load_old_names

    old_names = load_old_names()
    if argv and argv[0] in old_names:
        print(f"ran-reproduce: '{argv[0]}' is now called '{old_names[argv[0]]}' (the name of its "
              f"configs/ and results/ folders)", file=sys.stderr)
        argv[0] = old_names[argv[0]]
    if not argv or argv[0] not in PAPERS:
        top_parser(PAPERS).parse_args(argv)  # the help, or an error naming the papers
    key = argv[0]
    try:
        paper = PAPERS[key]
    except LabError as e:
        sys.exit(f"ran-reproduce: error: {e}")
    run_paper(paper, argv[1:], prog=f"ran-reproduce {key}")


def title(key):
    """A paper's title for the list of papers (its file's error where it is broken)."""
    from .papers import PAPERS

    try:
        return PAPERS[key].title
    except LabError as e:
        return f"(broken: {e})"


if __name__ == "__main__":  # python -m ran_lab.reproduce.cli: as its console script
    main()
