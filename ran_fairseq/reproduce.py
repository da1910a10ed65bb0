"""The reproduction engine behind ``scripts/reproduce-*.py``: train, decode and score every system of a
paper's config with fairseq's own CLIs, and write the measured table beside the paper's numbers.

A paper script only describes its paper (a ``Paper``: title, configs, extra columns or measurements)
and calls ``main(paper)``. A scale config (JSON, e.g. ``configs/ran/cpu.json``) names the systems file
(name, arch, flags and the paper tables of each system), the paper's numbers, the data and the fairseq
flags; no hyper-parameter lives in a script. For each language pair, system and seed, with the plugin
loaded:

1. the config's ``prepare`` command (a no-op when the data-bin is up to date), unless ``--data``;
2. ``fairseq-train DATA --arch ARCH [train_flags] [system flags] --seed N`` into
   CHECKPOINTS/PAIR/SYSTEM/seedN, or nothing for a system that decodes another one's checkpoint
   (``"checkpoint_of"``); the config's ``select`` picks the checkpoint to decode: ``last``, ``loss``
   (fairseq's ``checkpoint_best.pt`` by validation loss) or ``bleu`` (the same, with validation BLEU
   computed by fairseq's ``--eval-bleu`` machinery as the metric);
3. ``fairseq-generate`` on every subset of ``gen_subset`` (a name or a list; the first is the main
   one) with the config's and the system's generate flags, keeping every sentence
   (``--required-batch-size-multiple 1``); a system's ``"postprocess"`` command may then rewrite that
   output (e.g. unknown-word replacement);
4. tokenized BLEU of the hypotheses (BPE removed) against the tokenized reference text the data
   pipeline keeps in the data-bin (``SUBSET.tok.TGT``), so a hypothesis word that a postprocess put in
   place of ``<unk>`` can match; the hypotheses detokenized with fairseq's Moses tokenizer and scored
   against the raw references with sacreBLEU (BLEU, chrF, TER); paired bootstrap resampling
   (sacrebleu's, ``significance.samples``) of each system's sacreBLEU and TER against the
   baseline's on the same pair, subset and seed;
5. parameter count, training speed (fairseq-train's words/s) and wall time, the validation curve and
   the selected checkpoint's epoch and update, and decoding speed (fairseq-generate's own timing line).

Writes OUT/PAIR/SYSTEM/seedN/{train.log, generate[.SUBSET].txt, hyp.detok[.SUBSET].txt, result.json},
OUT/results.json (every result, with settings and machine) and OUT/TABLE.md (mean ± std over seeds
where there are several). What it writes names a path inside the checkout as ``{repo}/PATH``, and
the logs it keeps have the machine's paths replaced likewise (``ran_fairseq.lab.portable``): results
made in one checkout are taken by ``--resume`` in another.

Under faults (docs/guarantees.md): each run's output and checkpoint folders are locked while it
runs (a second engine is refused, naming the holder); fairseq's processes live in their own process
groups, get the engine's SIGTERM and SIGINT and end with it; files are written atomically; stored
results and checkpoints made by other commands are not replaced without ``--force``.
"""
import argparse
import concurrent.futures
import datetime
import functools
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from . import textio
from .lab import portable
from .lab.common.flags import (CPU_FP16_FLAG, GPU_ONLY_FLAG, check_flags,  # noqa: F401
                               flag_names, flag_pairs, set_flag)
from .lab.common.flags import check_device_flags as common_device_flags
from .lab.common.flags import config_train_flags as common_train_flags
from .lab.common.jsonio import load_json, read_json, read_text_lines
from .lab.common.machine import available_cores, machine_info
from .lab.common.paths import REPO, repo_path, shown, slug
from .lab.common.systems import parse_systems, select_systems as common_select
from .lab.common import LabError
from .runguard import Children, FolderLock, LockedError, Stopped

USER_DIR = REPO / "ran_fairseq"

CONFIG_KEYS = {"systems", "paper", "pairs", "data", "prepare", "test_set", "gen_subset", "device",
               "out", "checkpoints", "select", "train_flags", "generate_flags"}
OPTIONAL_CONFIG_KEYS = {"notes", "bpe", "arch", "seeds", "significance", "paper_columns", "base",
                        "set_train_flags", "speed_bench", "continues"}
# select -> the checkpoint file decoded; "bleu" also adds fairseq's validation BLEU (train_argv).
SELECT = {"last": "checkpoint_last.pt", "loss": "checkpoint_best.pt", "bleu": "checkpoint_best.pt"}
SIGNIFICANCE = {"samples": 1000, "level": 0.01}
SYSTEM_KEYS = {"name", "arch", "flags", "tables", "checkpoint_of", "generate_flags", "postprocess",
               "notes"}
# Flags the engine sets itself, refused in a config: flag -> where its value comes from.
TRAIN_OWNED = {
    "--arch": "the system's arch (or the config's 'arch')", "-a": "the system's arch",
    "--save-dir": "--checkpoints / the config's 'checkpoints'",
    "--source-lang": "--pairs", "-s": "--pairs", "--target-lang": "--pairs", "-t": "--pairs",
    "--task": "nothing (translation)", "--user-dir": "nothing (the plugin)",
    "--cpu": "the config's 'device'", "--seed": "--seeds / the config's 'seeds'",
    "--best-checkpoint-metric": "the config's 'select'",
    "--maximize-best-checkpoint-metric": "the config's 'select'",
    "--eval-bleu": "the config's 'select' (\"bleu\")",
}
GENERATE_OWNED = dict(TRAIN_OWNED, **{
    "--path": "the config's 'checkpoint'", "--gen-subset": "the config's 'gen_subset'",
    "--post-process": "the config's 'bpe'", "--remove-bpe": "the config's 'bpe'",
    "--scoring": "nothing (the engine scores)", "--bpe": "nothing", "--tokenizer": "nothing",
    "--results-path": "nothing (OUT/PAIR/SYSTEM/seedN/generate.txt)", "--quiet": "nothing",
    "--required-batch-size-multiple": "nothing (1: every sentence is translated)",
})
POSTPROCESS_FIELDS = ("generate", "output", "data", "src", "tgt", "raw_src", "raw_ref",
                      "subset")

PARAMS_RE = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")
WPS_RE = re.compile(r"\| train \| epoch \d+ \|.*?\| wps ([\d.]+) \|")
SPEED_RE = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
                      r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")


class ReproError(LabError):
    """A problem with the input or a failed step; the message names it and what to change."""


@dataclass
class Column:
    """An extra table column: ``title`` and ``cell(result) -> str``."""
    title: str
    cell: Callable[[dict], str]


@dataclass
class FullSetting:
    """A named full-size scale config, chosen with ``--full NAME``; ``help`` says what it is."""
    name: str
    config: Path
    help: str


@dataclass
class Paper:
    """What a paper's reproduction script adds to the engine.

    The full-size settings are either one config (``full_config`` and ``full_help``: a bare
    ``--full`` flag) or several named ones (``full_settings``: ``--full [NAME]``, the first one
    without a NAME). ``measure(run, result)`` runs after a system is scored and returns extra
    result fields (e.g. FLOPs or a plot path); ``columns`` show fields of the result in the table."""
    key: str  # script name suffix: reproduce-KEY
    title: str  # heading of TABLE.md
    cpu_config: Path
    full_config: Optional[Path] = None
    full_help: str = ""
    columns: Sequence[Column] = ()
    measure: Optional[Callable[["Run", dict], dict]] = None
    notes: Sequence[str] = field(default_factory=list)  # extra bullet lines under the heading
    full_settings: Sequence[FullSetting] = ()

    def __post_init__(self):
        if (self.full_config is None) == (not self.full_settings):
            raise ValueError(f"Paper {self.key!r}: give either full_config (with full_help) or "
                             f"full_settings, not both or neither")
        names = [s.name for s in self.full_settings]
        if len(set(names)) != len(names):
            raise ValueError(f"Paper {self.key!r}: full_settings names must differ, got {names}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """An option's default after its help unless it is None or False (the help then says what
    happens); the epilog (the full-size settings) as written."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def parse_cli(paper, argv):
    settings = {s.name: s for s in paper.full_settings}
    epilog = None
    if settings:
        width = max(map(len, settings))
        epilog = "full-size settings (--full NAME):\n" + "\n".join(
            textwrap.fill(f"{shown(s.config)}: {s.help}", width=88, break_long_words=False,
                          initial_indent=f"  {s.name:<{width}}  ",
                          subsequent_indent=" " * (width + 4))
            for s in paper.full_settings)
    p = argparse.ArgumentParser(
        prog=f"reproduce-{paper.key}", description=f"Reproduce the shape of {paper.title}.",
        formatter_class=HelpFormatter, epilog=epilog)
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
    p.add_argument("--dry-run", action="store_true",
                   help="print the commands and run nothing")
    args = p.parse_args(argv)
    if args.full:
        args.config = settings[args.full].config if settings else paper.full_config
    if args.max_update is not None and args.max_update < 1:
        p.error("--max-update must be at least 1")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
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


def parse_seeds(items):
    """Distinct non-negative integer seeds, in the given order."""
    seeds = []
    for item in items:
        text = str(item).strip()
        if not text.isdigit():
            raise ValueError(f"{item!r} is not a non-negative integer (e.g. --seeds 1,2,3)")
        if int(text) in seeds:
            raise ValueError(f"seed {text} appears twice")
        seeds.append(int(text))
    if not seeds:
        raise ValueError("no seed given")
    return seeds


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

def load_systems(path, arch_override=None):
    """Systems of a systems file by name, in file order, with their links checked."""
    spec = read_json(path, "systems file (the config's 'systems')", ReproError)

    def check(system):
        name = system["name"]
        check_flags(system.get("flags", []), TRAIN_OWNED, f"{path}: system {name!r} flags",
                    ReproError)
        check_flags(system.get("generate_flags", []), GENERATE_OWNED,
                    f"{path}: system {name!r} generate_flags", ReproError)
        if system.get("postprocess") is not None:
            check_postprocess(system["postprocess"], f"{path}: system {name!r} postprocess")

    found = parse_systems(spec, path, ReproError, known=SYSTEM_KEYS, check=check)
    systems = {name: {
        "name": name, "arch": arch_override or system["arch"],
        "flags": found.common_flags + list(system.get("flags", [])),
        "tables": list(system.get("tables", [])),
        "checkpoint_of": system.get("checkpoint_of"),
        "generate_flags": list(system.get("generate_flags", [])),
        "postprocess": system.get("postprocess")} for name, system in found.systems.items()}
    if not systems:
        raise ReproError(f"{path} lists no systems")
    for system in systems.values():
        owner = system["checkpoint_of"]
        if owner is None:
            continue
        if owner not in systems or systems[owner]["checkpoint_of"] is not None:
            raise ReproError(f"{path}: system {system['name']!r} decodes the checkpoint of "
                             f"{owner!r}, which is not a trained system of this file")
        if (system["arch"], system["flags"]) != (systems[owner]["arch"], systems[owner]["flags"]):
            raise ReproError(f"{path}: system {system['name']!r} decodes {owner!r}'s checkpoint, so "
                             f"its arch and flags must equal {owner!r}'s")
    dirs = [slug(name) for name in systems]
    if len(set(dirs)) != len(dirs):
        raise ReproError(f"{path}: system names must differ in more than punctuation "
                         f"(their directories: {', '.join(dirs)})")
    baseline = spec.get("baseline")
    if baseline not in systems:
        raise ReproError(f"{path}: 'baseline' must name one of its systems ({', '.join(systems)}),"
                         f" not {baseline!r}")
    return baseline, systems


def check_postprocess(post, where):
    if not (isinstance(post, list) and post and all(isinstance(p, str) for p in post)):
        raise ReproError(f"{where} must be a non-empty list of strings: a python module and its "
                         f"arguments")
    for part in post:
        for name in re.findall(r"{(\w+)}", part):
            if name not in POSTPROCESS_FIELDS:
                raise ReproError(f"{where}: unknown placeholder {{{name}}} (known: "
                                 f"{', '.join('{' + f + '}' for f in POSTPROCESS_FIELDS)})")


def read_config(path, seen=()):
    """A config's keys, those of the config it names as ``base`` (a path from the repository root)
    filled in under its own: a GPU config is its CPU config with ``device`` and ``out`` changed."""
    config = read_json(path, "config (--config)" if not seen else "base config", ReproError)
    base = config.pop("base", None)
    if base is None:
        return config
    base_path = repo_path(base) if isinstance(base, str) else None
    if base_path is None or base_path.resolve() in seen or Path(path).resolve() == base_path.resolve():
        raise ReproError(f"config {path}: 'base' must be the path of another config, with no "
                         f"cycle, not {base!r}")
    inherited = read_config(base_path, seen + (Path(path).resolve(),))
    # the base's notes describe the base; a config that inherits says what it changes
    inherited.pop("notes", None)
    return dict(inherited, **config)


def load_config(path):
    """The scale config with its systems (in file order) and paper numbers resolved."""
    config = read_config(path)
    if "checkpoint" in config:
        raise ReproError(f"config {path}: 'checkpoint' is replaced by 'select' (one of "
                         f"{', '.join(SELECT)}: checkpoint_last.pt, or checkpoint_best.pt by "
                         f"validation loss or BLEU)")
    missing = sorted(k for k in CONFIG_KEYS if k not in config)
    if missing:
        raise ReproError(f"config {path} lacks {', '.join(missing)}")
    unknown = sorted(set(config) - CONFIG_KEYS - OPTIONAL_CONFIG_KEYS)
    if unknown:
        raise ReproError(f"config {path} has unknown key(s) {', '.join(unknown)} (known: "
                         f"{', '.join(sorted(CONFIG_KEYS | OPTIONAL_CONFIG_KEYS))})")
    if config["device"] not in ("cpu", "cuda"):
        raise ReproError(f"config {path}: device must be 'cpu' or 'cuda', not "
                         f"{config['device']!r}")
    if config.get("bpe", "subword_nmt") not in ("subword_nmt", None):
        raise ReproError(f"config {path}: bpe must be 'subword_nmt' or null (word-level data)")
    if config["select"] not in SELECT:
        raise ReproError(f"config {path}: select must be one of {', '.join(SELECT)}, not "
                         f"{config['select']!r}")
    subsets = config["gen_subset"]
    subsets = [subsets] if isinstance(subsets, str) else subsets
    if not (isinstance(subsets, list) and subsets and all(isinstance(x, str) and x for x in subsets)
            and len(set(subsets)) == len(subsets)):
        raise ReproError(f"config {path}: gen_subset must be a subset name or a list of distinct "
                         f"names (the first is the main one), not {config['gen_subset']!r}")
    try:
        seeds = parse_seeds(config.get("seeds", [1]))
    except (ValueError, TypeError) as e:
        raise ReproError(f"config {path}: seeds: {e}") from e
    significance = dict(SIGNIFICANCE, **config.get("significance", {}))
    if set(significance) != set(SIGNIFICANCE) or not isinstance(significance["samples"], int) \
            or significance["samples"] < 100 or not 0 < significance["level"] < 1:
        raise ReproError(f"config {path}: significance must be {{\"samples\": N >= 100, "
                         f"\"level\": p in (0, 1)}}, not {config['significance']!r}")
    config = dict(config, train_flags=config_train_flags(config, path))
    check_flags(config["generate_flags"], GENERATE_OWNED, f"config {path}: generate_flags",
                ReproError)
    systems_file = repo_path(config["systems"])
    baseline, systems = load_systems(systems_file, config.get("arch"))
    paper = read_json(repo_path(config["paper"]), "paper numbers (the config's 'paper')", ReproError)
    keys = [c.get("key") for c in paper.get("columns", [])]
    shown_keys = config.get("paper_columns", keys)
    unknown = [k for k in shown_keys if k not in keys] if isinstance(shown_keys, list) else None
    if unknown is None or unknown:
        raise ReproError(f"config {path}: paper_columns must list keys of {config['paper']}'s "
                         f"columns ({', '.join(map(str, keys))}); unknown: {unknown}")
    paper = dict(paper, columns=[c for c in paper.get("columns", []) if c.get("key") in shown_keys])
    speed = (load_speed_bench(config["speed_bench"], baseline, f"config {path}")
             if "speed_bench" in config else None)
    continues = continued_config(config["continues"], path) if "continues" in config else None
    return dict(config, path=str(Path(path).resolve()), systems_file=str(systems_file),
                systems=systems, baseline=baseline, paper_numbers=paper, subsets=subsets,
                seeds=seeds, significance=significance, speed_bench=speed, continues=continues)


def continued_config(name, path):
    """The config whose trainings a config's runs carry on (its ``continues``): where that config
    keeps its checkpoints and training logs."""
    where = f"config {path}: continues"
    if not isinstance(name, str) or not repo_path(name).is_file():
        raise ReproError(f"{where} must name an existing config (a path from the repository "
                         f"root, e.g. \"configs/ran/cpu.json\"), not {name!r}")
    other = read_config(repo_path(name))
    for key in ("out", "checkpoints"):
        if not isinstance(other.get(key), str):
            raise ReproError(f"{where}: {name} has no '{key}'")
    return {"config": name, "out": other["out"], "checkpoints": other["checkpoints"]}


def config_train_flags(config, path):
    """The training flags of a config (as read by :func:`read_config`): its ``train_flags`` with
    ``set_train_flags`` applied, checked against the flags the engine sets."""
    return common_train_flags(config, path, TRAIN_OWNED, ReproError)


def load_speed_bench(paths, baseline, where):
    """The training-time ratios of ``scripts/bench.py`` runs (their bench.json files: ``speed_bench``
    in a config, one path or a list): the systems timed one after another on a machine with
    nothing else running, which runs side by side (--jobs) cannot give. With several runs a
    system's ratio is the median of its ratios (a run's drift moves one run's figures). Returns
    what the table shows of them."""
    paths = [paths] if isinstance(paths, str) else paths
    if not (isinstance(paths, list) and paths and all(isinstance(x, str) for x in paths)):
        raise ReproError(f"{where}: speed_bench must be the path of a bench.json or a list of "
                         f"them, not {paths!r}")
    runs = []
    for path in paths:
        bench = read_json(repo_path(path), f"{where}: speed_bench (made by scripts/bench.py "
                                           f"--systems SYSTEMS --train-flags-of CONFIG --out DIR)", ReproError)
        try:
            tps = {r["name"]: r["metrics"]["train_tokens_per_s"] for r in bench["systems"]}
            settings, machine = bench["settings"], bench["machine"]
        except (KeyError, TypeError) as e:
            raise ReproError(f"{where}: speed_bench {path} is not a bench.py report (no {e})") \
                from e
        if not tps.get(baseline):
            raise ReproError(f"{where}: speed_bench {path} has no training speed of the baseline "
                             f"{baseline!r} (systems: {', '.join(tps)}); run bench.py with this "
                             f"config's systems file")
        runs.append((path, tps, settings, machine))
    ratios = {}
    for _, tps, _, _ in runs:
        for name, value in tps.items():
            if value:
                ratios.setdefault(name, []).append(tps[baseline] / value)
    _, _, settings, machine = runs[0]
    loads = [m.get(k) for _, _, _, m in runs for k in ("load_average_before", "load_average_after")]
    loads = [x for x in loads if x is not None]
    return {"files": [p for p, _, _, _ in runs], "device": machine.get("device"),
            "device_name": machine.get("device_name"), "threads": machine.get("threads"),
            "load_average_max": max(loads) if loads else None,
            "dates": [m.get("date") for _, _, _, m in runs],
            "train_updates": settings.get("train_updates"),
            "max_tokens": settings.get("max_tokens"),
            "train_flags_of": settings.get("train_flags_of"),
            "train_time_ratios": ratios,
            "train_time_ratio": {name: statistics.median(v) for name, v in ratios.items()}}


def parse_pairs(text):
    pairs = []
    for item in text.split(","):
        parts = item.strip().split("-")
        if len(parts) != 2 or not all(re.fullmatch(r"[a-z]{2,3}", x) for x in parts) \
                or parts[0] == parts[1]:
            raise ReproError(f"--pairs: {item.strip()!r} is not a pair like de-en")
        pairs.append(tuple(parts))
    return pairs


def check_device_flags(device, train_flags, systems, where, change):
    """:func:`ran_fairseq.lab.common.flags.check_device_flags`, refusing with a ReproError."""
    common_device_flags(device, train_flags, systems, where, change, ReproError)


def select_systems(systems, wanted, config_path):
    """The wanted systems in the order ``wanted`` names them (all of them, in file order, where it
    is None), each system whose checkpoint another decodes just before that one unless named
    earlier: the order in which their runs start (the table keeps the file's order)."""
    def refuse(names, unknown):
        if unknown or not names:
            return ReproError(f"--systems: unknown system(s) "
                              f"{', '.join(map(repr, unknown)) or '(none)'}; {config_path} has: "
                              f"{', '.join(systems)}")
        return None

    return common_select(systems, wanted, refuse)


# ----------------------------------------------------------------------------------------------
# One system on one pair
# ----------------------------------------------------------------------------------------------

class Run:
    """Commands and paths of one (pair, system, seed)."""

    def __init__(self, args, config, pair, system, data, seed):
        src, tgt = pair
        self.pair, self.src, self.tgt, self.system, self.seed = f"{src}-{tgt}", src, tgt, system, seed
        self.data = data
        self.dir = Path(args.out) / self.pair / slug(system["name"]) / f"seed{seed}"
        trained = system["checkpoint_of"] or system["name"]
        self.save_dir = Path(args.checkpoints) / self.pair / slug(trained) / f"seed{seed}"
        self.trains = system["checkpoint_of"] is None
        self.checkpoint = self.save_dir / SELECT[config["select"]]
        self.lock_fds = ()  # the open lock files of its folders, once locked (lock_runs)
        # the same (pair, system, seed) of the config this one continues (its 'continues')
        cont = config.get("continues")
        self.continues = None if cont is None else {
            "config": cont["config"],
            "save_dir": repo_path(cont["checkpoints"]) / self.pair / slug(trained) / f"seed{seed}",
            "dir": repo_path(cont["out"]) / self.pair / slug(trained) / f"seed{seed}"}
        common = [str(data), "--user-dir", str(USER_DIR), "--task", "translation",
                  "--source-lang", src, "--target-lang", tgt]
        device = ["--cpu"] if config["device"] == "cpu" else []
        train_flags = config["train_flags"]
        if args.max_update is not None:
            train_flags = set_flag(train_flags, "--max-update", args.max_update)
        bpe = config.get("bpe", "subword_nmt")
        generate_flags = config["generate_flags"] + system["generate_flags"]
        self.train_argv = (common + ["--arch", system["arch"], "--save-dir", str(self.save_dir)]
                           + device + train_flags + system["flags"] + ["--seed", str(seed)]
                           + selection_flags(config["select"], generate_flags, bpe, tgt))
        self.subsets = config["subsets"]
        self.generate_argv, self.raw_src, self.raw_ref, self.tok_ref = {}, {}, {}, {}
        self.output, self.post_output, self.hyp_file, self.postprocess = {}, {}, {}, {}
        for subset in self.subsets:
            suffix = "" if subset == self.subsets[0] else f".{subset}"
            self.generate_argv[subset] = (
                common + ["--path", str(self.checkpoint), "--gen-subset", subset,
                          "--required-batch-size-multiple", "1"]
                + (["--post-process", bpe] if bpe else []) + device + generate_flags)
            self.raw_src[subset] = Path(data) / f"{subset}.raw.{src}"
            self.raw_ref[subset] = Path(data) / f"{subset}.raw.{tgt}"
            self.tok_ref[subset] = Path(data) / f"{subset}.tok.{tgt}"
            self.output[subset] = self.dir / f"generate{suffix}.txt"
            self.post_output[subset] = self.dir / f"generate{suffix}.post.txt"
            self.hyp_file[subset] = self.dir / f"hyp.detok{suffix}.txt"
            self.postprocess[subset] = None
            if system["postprocess"]:
                fields = {"generate": self.output[subset],
                          "output": self.post_output[subset], "data": data,
                          "src": src, "tgt": tgt, "raw_src": self.raw_src[subset],
                          "raw_ref": self.raw_ref[subset], "subset": subset}
                self.postprocess[subset] = [part.format(**{k: str(v) for k, v in fields.items()})
                                            for part in system["postprocess"]]

    def commands(self):
        cmds = [["fairseq-train"] + self.train_argv] if self.trains else []
        for subset in self.subsets:
            cmds.append(["fairseq-generate"] + self.generate_argv[subset])
            if self.postprocess[subset]:
                cmds.append(["python", "-m"] + self.postprocess[subset])
        return cmds

    def recorded(self):
        """What makes a stored result this run's: every command it runs."""
        return {"train": self.train_argv, "generate": self.generate_argv,
                "postprocess": self.postprocess}


def selection_flags(select, generate_flags, bpe, tgt):
    """fairseq-train flags that make ``checkpoint_best.pt`` the best checkpoint by validation BLEU
    (fairseq's ``--eval-bleu``: the validation set decoded with the config's beam and length
    settings, detokenized with Moses, BPE removed); none for ``last`` and ``loss`` (fairseq keeps
    ``checkpoint_best.pt`` by validation loss by default)."""
    if select != "bleu":
        return []
    gen = flag_pairs(generate_flags)
    args = {"beam": int(gen.get("--beam", 5))}
    for flag, key, kind in (("--lenpen", "lenpen", float), ("--max-len-a", "max_len_a", float),
                            ("--max-len-b", "max_len_b", int)):
        if flag in gen:
            args[key] = kind(gen[flag])
    flags = ["--eval-bleu", "--eval-bleu-args", json.dumps(args, sort_keys=True),
             "--eval-bleu-detok", "moses",
             "--eval-bleu-detok-args", json.dumps({"target_lang": tgt}),
             "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]
    if bpe:
        flags += ["--eval-bleu-remove-bpe", "@@ "]
    return flags


# The fairseq processes the engine starts: each in its own process group, SIGTERMed when the
# engine dies (even by SIGKILL), and sent the engine's SIGTERM or SIGINT (ran_fairseq.runguard).
CHILDREN = Children()


def run_logged(argv, log_path, env, what, append=False, pass_fds=()):
    """``python argv`` with stdout and stderr into ``log_path`` (appended to with ``append``, after a
    separator), as one of :data:`CHILDREN` (``pass_fds``: open files it keeps, the run's locks, so
    that they stay held while it lives); return the text this run wrote."""
    cmd = [sys.executable, *argv]
    log_path = Path(log_path)
    offset = log_path.stat().st_size if append and log_path.is_file() else 0
    with open(log_path, "a" if append else "w") as log:
        if offset:
            log.write(f"\n===== {what}: continued (--resume) =====\n")
            log.flush()
        returncode = CHILDREN.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                  pass_fds=tuple(pass_fds))
    with open(log_path, encoding="utf-8", errors="replace") as log:
        log.seek(offset)
        text = log.read()
    # the log is kept with the checkout's and the packages' paths as placeholders
    portable.rewrite_log(log_path, REPO)
    if returncode != 0:
        raise ReproError(f"{what} failed with exit code {returncode}: {shlex.join(cmd)}\n"
                         f"--- {log_path} (tail) ---\n{text[-4000:]}")
    return text


def detokenize(hyps, src, tgt):
    """Moses-tokenized hypotheses back to plain text, as ``fairseq-generate --tokenizer moses``
    would print them."""
    from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig

    moses = MosesTokenizer(MosesTokenizerConfig(source_lang=src, target_lang=tgt))
    return [moses.decode(h) for h in hyps]


def tokenized_bleu(hyps, refs):
    """BLEU of tokenized hypotheses against tokenized references, both split on spaces: the
    statistics of fairseq's ``--scoring bleu``, but against the reference text itself, so that a
    word the model could not produce (``<unk>`` in fairseq's T- lines) counts when a postprocess
    restores it."""
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyps, [refs]).score


BOOTSTRAP_METRICS = ("BLEU", "TER")


def paired_bootstrap(baseline_hyps, system_hyps, refs, samples, metric="BLEU"):
    """sacreBLEU's paired bootstrap resampling of ``system_hyps`` against ``baseline_hyps`` on
    ``metric`` (one of :data:`BOOTSTRAP_METRICS`, each with sacrebleu's default settings, as
    ``ran_fairseq.scoring.evaluate`` scores them): ``(p_value, (mean, 95% half-width) of the
    system, of the baseline)``."""
    from sacrebleu.metrics import BLEU, TER
    from sacrebleu.significance import PairedTest

    from .scoring.evaluate import unk_as_one_word

    if metric not in BOOTSTRAP_METRICS:
        raise ValueError(f"no paired bootstrap for {metric!r}: the metric must be one of "
                         f"{', '.join(BOOTSTRAP_METRICS)}")
    baseline_hyps, system_hyps = unk_as_one_word(baseline_hyps), unk_as_one_word(system_hyps)
    scorer = (BLEU if metric == "BLEU" else TER)(references=[refs])
    test = PairedTest([("baseline", baseline_hyps), ("system", system_hyps)],
                      {metric: scorer}, references=None, test_type="bs", n_samples=samples)
    _, scores = test()
    base, system = scores[metric]
    return system.p_value, (system.mean, system.ci), (base.mean, base.ci)


def training_speed(log):
    """Mean target words/s of fairseq-train's end-of-epoch summaries (None if it logged none)."""
    rates = [float(x) for x in WPS_RE.findall(log)]
    return sum(rates) / len(rates) if rates else None


# fairseq-train's end-of-epoch line: time in training steps, and wall time since the start
# "| train_wall 39 | wall 4575" on a CPU; a GPU logs "| gb_free 78.3 " between the two
WALL_RE = re.compile(r"\| train \| epoch \d+ \|.*?\| train_wall ([\d.]+) (?:\|.*?)?\| wall ([\d.]+)")
VALID_RE = re.compile(r"\| valid \| (.*)$", re.M)


def validation_curve(log):
    """fairseq-train's end-of-validation lines as dicts (epoch, num_updates, loss, and bleu where
    it computed it), in log order."""
    curve = []
    for fields in VALID_RE.findall(log):
        entry = {}
        for part in fields.split(" | "):  # "epoch 003 | valid on 'valid' subset | loss 6.05 | ..."
            key, _, value = part.strip().partition(" ")
            if key in ("epoch", "num_updates"):
                entry[key] = int(value)
            elif key in ("loss", "nll_loss", "ppl", "bleu", "best_loss", "best_bleu"):
                entry[key] = float(value)
        curve.append(entry)
    return curve


def loss_trend(curve, epochs=3):
    """How fast the validation loss still moved at the end of training: its change per epoch
    over the last ``epochs`` epoch ends of ``curve`` (validation_curve's entries), in percent of
    the last loss (losses summed per sentence and averaged per token compare alike), or None with
    fewer. A last validation after a short partial epoch (fairseq validates again when
    --max-update ends training mid-epoch) is left out: it adds a few updates, not an epoch."""
    points = [(c["num_updates"], c["loss"]) for c in curve or []
              if c.get("num_updates") is not None and c.get("loss") is not None]
    if len(points) < 2:
        return None
    steps = sorted(b[0] - a[0] for a, b in zip(points, points[1:]))
    epoch = steps[len(steps) // 2]  # updates per epoch
    if epoch <= 0:
        return None
    if points[-1][0] - points[-2][0] < epoch / 2:
        points = points[:-1]
    if len(points) < epochs:
        return None
    (u0, l0), (u1, l1) = points[-epochs], points[-1]
    return 100 * (l1 - l0) / ((u1 - u0) / epoch) / l1 if u1 > u0 and l1 else None


def training_seconds(save_dir, walls, seconds):
    """Wall-clock seconds of a whole training: fairseq's own count, which checkpoint_last.pt keeps
    across resumes (``previous_training_time``; the ``wall`` of the epoch lines starts again, or
    stays 0, in a resumed fairseq-train); else the last epoch line's ``wall``; else ``seconds``
    (the engine's timing of its last fairseq-train)."""
    path = Path(save_dir) / "checkpoint_last.pt"
    if path.is_file():
        state = load_checkpoint(path)
        total = (state.get("extra_state") or {}).get("previous_training_time")
        if total:
            return float(total)
    return float(walls[-1][1]) if walls else seconds


STOP_FLAGS = ("--max-update",)


def start_from_continued(run, label):
    """Start ``run``'s training where the continued config's training of the same (pair, system,
    seed) stopped: copy its checkpoints and its training log. fairseq-train then resumes from
    checkpoint_last.pt, restoring the model, the optimizer, the learning-rate schedule and the
    place in the epoch's batches, and seeds dropout by update number. One thing differs from a
    single run to the larger --max-update: fairseq groups sentences into batches once per process
    (ties among equal lengths broken by a draw from the seed and the starting epoch), so the
    batches after the resume group sentences differently. Only a finished training with the same
    flags except --save-dir and a smaller --max-update is taken; otherwise the run trains from the
    start, and says why."""
    cont = run.continues
    finished = cont["save_dir"] / "train_finished.json"
    old_log = cont["dir"] / "train.log"

    def comparable(argv):
        return {k: v for k, v in flag_pairs(argv).items() if k not in STOP_FLAGS + ("--save-dir",)}

    why = None
    if not finished.is_file() or not (cont["save_dir"] / "checkpoint_last.pt").is_file():
        why = f"{cont['save_dir']} holds no finished training"
    elif not old_log.is_file():
        why = f"{old_log} is missing"
    else:
        old = portable.expand(
            load_json(finished, "the continued training's record", FIX_FINISHED, ReproError).get("argv"), REPO)
        if comparable(old) != comparable(run.train_argv):
            diff = sorted(set(comparable(old).items()) ^ set(comparable(run.train_argv).items()),
                          key=str)
            why = (f"its training used other flags "
                   f"({', '.join(f'{k} {v}' if v else k for k, v in diff[:6])})")
        else:
            before, after = (int(flag_pairs(argv).get("--max-update") or 0)
                             for argv in (old, run.train_argv))
            if not 0 < before < after:
                why = f"its --max-update {before or 'unset'} is not below this run's {after}"
    if why:
        print(f"reproduce: {label}: trains from the start, not from {cont['config']}'s run: {why}",
              file=sys.stderr, flush=True)
        return
    copy_atomic(old_log, run.dir / "train.log")
    textio.write_json(run.dir / "continued_from.json", {
        "config": cont["config"], "checkpoints": shown(cont["save_dir"]),
        "train_log": shown(old_log), "max_update": before})
    # checkpoint_last.pt last: once it is there, --resume goes on from this run's own files
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        if (cont["save_dir"] / name).is_file():
            copy_atomic(cont["save_dir"] / name, run.save_dir / name)
    print(f"reproduce: {label}: continues {cont['config']}'s training from update {before}",
          file=sys.stderr, flush=True)


def copy_atomic(src, dst):
    """Copy ``src`` to ``dst`` through a temporary file of a name unique to this writer, renamed
    over ``dst``; a failed copy leaves no partial file."""
    tmp = textio.unique_tmp(dst)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path):
    """A fairseq checkpoint, unpickled with torch's weights-only loader (classes allowed by
    ran_fairseq.compat only), whatever torch's default."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def checkpoint_updates(path):
    """The number of updates a fairseq checkpoint was saved at (None if it records none)."""
    history = load_checkpoint(path).get("optimizer_history") or [{}]
    return history[-1].get("num_updates")


def selected_checkpoint(path):
    """Epoch, update and validation score stored in a fairseq checkpoint (what ``select`` chose)."""
    state = load_checkpoint(path)
    extra = state.get("extra_state") or {}
    history = state.get("optimizer_history") or [{}]
    return {"file": Path(path).name, "epoch": (extra.get("train_iterator") or {}).get("epoch"),
            "num_updates": history[-1].get("num_updates"), "val_score": extra.get("val_loss")}


def score_subset(run, subset, env, label):
    """Decode ``subset`` with the selected checkpoint, postprocess, and score it."""
    from .scoring.evaluate import read_generate_output, score

    for path in (run.raw_src[subset], run.raw_ref[subset], run.tok_ref[subset]):
        if not path.is_file():
            raise ReproError(f"{path} is missing: the data-bin needs the raw and tokenized text "
                             f"that scripts/prepare-*.sh write (data-bins made before tokenized "
                             f"references were kept need a rebuild: add --force)")
    refs = read_text_lines(run.raw_ref[subset], ReproError)
    start = time.perf_counter()
    gen = run_logged(["-m", "ran_fairseq.quiet_cli", "generate", *run.generate_argv[subset]],
                     run.output[subset], env, f"fairseq-generate {label} on {subset}")
    seconds = time.perf_counter() - start
    speed = SPEED_RE.search(gen)
    if not speed:
        raise ReproError(f"no timing line in {run.output[subset]}")

    def number(text):
        return float(text.replace(",", ""))

    translated = int(number(speed.group(1)))
    if translated != len(refs):
        raise ReproError(f"{label}: fairseq-generate translated {translated} of the {len(refs)} "
                         f"sentences of {subset} ({run.output[subset]}); a sentence longer than "
                         f"the model's max positions is skipped or refused: see its log")
    output = run.output[subset]
    if run.postprocess[subset]:
        run_logged(["-m", *run.postprocess[subset]], run.dir / f"postprocess.{subset}.log", env,
                   f"postprocessing {label} on {subset}")
        output = run.post_output[subset]
        if not output.is_file():
            raise ReproError(f"the postprocess command of {label} wrote no {output}")
    try:
        hyps_tok = read_generate_output(output, prefix="H")
        # fairseq writes a reference word outside the vocabulary as <<unk>> in its T- lines
        ref_unks = sum(line.split().count("<<unk>>")
                       for line in read_generate_output(run.output[subset], prefix="T"))
    except ValueError as e:
        raise ReproError(f"{label}: {e}") from e
    hyps = detokenize(hyps_tok, run.src, run.tgt)
    textio.write_text_atomic(run.hyp_file[subset], "".join(h + "\n" for h in hyps))
    tok_refs = read_text_lines(run.tok_ref[subset], ReproError)
    try:
        sacre = score(hyps, refs)
        tok = tokenized_bleu(hyps_tok, tok_refs) if len(tok_refs) == len(hyps_tok) else None
    except ValueError as e:
        raise ReproError(f"{label}: {e} ({run.raw_ref[subset]})") from e
    if tok is None:
        raise ReproError(f"{label}: {run.tok_ref[subset]} has {len(tok_refs)} lines for "
                         f"{len(hyps_tok)} hypotheses")
    return {
        "tok_bleu": tok, "sacrebleu": sacre["bleu"][0], "chrf": sacre["chrf"][0],
        "ter": sacre["ter"][0], "signatures": {k: v[1] for k, v in sacre.items()},
        "ref_unk_words": ref_unks, "ref_words": sum(len(line.split()) for line in tok_refs),
        "hyp_unk_words": sum(line.split().count("<unk>") for line in hyps_tok),
        "hyp_file": run.hyp_file[subset].name, "raw_ref": str(run.raw_ref[subset]),
        "decode": {"sentences": translated, "tokens": int(number(speed.group(2))),
                   "seconds": number(speed.group(3)),
                   "sentences_per_s": number(speed.group(4)),
                   "tokens_per_s": number(speed.group(5))},
        "generate_seconds": seconds,
    }


FIX_FINISHED = ("delete it: --resume then compares checkpoint_last.pt's update count with the "
                "budget, and trains only if it falls short")
PARTIAL = re.compile(r".+\.pt\.tmp(-\d+-[0-9a-f]+)?$")


def remove_partial_files(save_dir):
    """Remove the partial checkpoints (``*.pt.tmp``, ``*.pt.tmp-PID-RANDOM``) a killed training
    left in ``save_dir`` (the caller holds the folder's lock: no writer is alive)."""
    for path in Path(save_dir).iterdir():
        if PARTIAL.fullmatch(path.name) and path.is_file():
            path.unlink(missing_ok=True)


def stored_train_argv(run):
    """The training command recorded in ``run``'s checkpoint folder (None if none)."""
    path = run.save_dir / "train_argv.json"
    if not path.is_file():
        return None
    return portable.expand(load_json(
        path, "the training command of the folder's checkpoints",
        f"delete it if the checkpoints beside it were trained by this run's command "
        f"({shown(run.save_dir)}), else delete the folder", ReproError), REPO)


def finished_at_budget(run, label):
    """The training seconds of ``run``'s training if its checkpoint_last.pt is already at the
    budget (``--max-update``) though no record says the training finished (its engine was killed
    as fairseq-train ended, say): fairseq-train would take one more update. None where the
    training must run (no checkpoint, no budget, fewer updates). A checkpoint past the budget is
    an error."""
    last = run.save_dir / "checkpoint_last.pt"
    budget = int(flag_pairs(run.train_argv).get("--max-update") or 0)
    if budget <= 0 or not last.is_file():
        return None
    state = load_checkpoint(last)
    updates = ((state.get("optimizer_history") or [{}])[-1]).get("num_updates")
    if updates is None or updates < budget:
        return None
    if updates > budget:
        raise ReproError(f"{label}: {last} is at update {updates}, past this run's --max-update "
                         f"{budget} (a training went on beyond it); rerun without --resume to "
                         f"train it again from the start")
    print(f"reproduce: {label}: {shown(last)} is at update {updates} of {budget}: its training "
          f"had finished; not trained again", file=sys.stderr, flush=True)
    return float((state.get("extra_state") or {}).get("previous_training_time") or 0.0)


def execute(run, env, trained):
    """Train (unless ``trained`` holds the result of the system whose checkpoint it decodes),
    decode and score one (pair, system, seed) on every subset; return its result dict."""
    run.dir.mkdir(parents=True, exist_ok=True)
    label = f"({run.pair}, {run.system['name']}, seed {run.seed})"
    if run.trains:
        run.save_dir.mkdir(parents=True, exist_ok=True)
        remove_partial_files(run.save_dir)
        if stored_train_argv(run) not in (None, run.train_argv):
            raise ReproError(f"{run.save_dir} holds checkpoints trained with other flags; they "
                             f"are kept: rerun with --force to train there again, or pass "
                             f"--checkpoints DIR")
        textio.write_json(run.save_dir / "train_argv.json", portable.record(run.train_argv, REPO),
                          indent=None)
        if run.continues and not (run.save_dir / "checkpoint_last.pt").is_file():
            start_from_continued(run, label)
        # A finished training is not restarted: fairseq-train, given a checkpoint at its
        # --max-update, would still take one more step before it stops.
        finished = run.save_dir / "train_finished.json"
        record = (load_json(finished, "the record of a finished training", FIX_FINISHED, ReproError)
                  if finished.is_file() else {})
        if portable.expand(record.get("argv"), REPO) == run.train_argv:
            seconds = record["seconds"]
        else:
            seconds = finished_at_budget(run, label)
            if seconds is None:
                start = time.perf_counter()
                run_logged(["-m", "ran_fairseq.quiet_cli", "train", *run.train_argv],
                           run.dir / "train.log",
                           env, f"fairseq-train {label}", append=True, pass_fds=run.lock_fds)
                seconds = time.perf_counter() - start
            textio.write_json(finished, {"argv": portable.record(run.train_argv, REPO),
                                         "seconds": seconds}, indent=None)
        log = (run.dir / "train.log").read_text(encoding="utf-8", errors="replace")
        params = PARAMS_RE.search(log)
        if not params:
            raise ReproError(f"no parameter count in {run.dir / 'train.log'}")
        walls = WALL_RE.findall(log)
        training = {"params": int(params.group(1).replace(",", "")),
                    "params_trained": int(params.group(2).replace(",", "")),
                    "train_seconds": training_seconds(run.save_dir, walls, seconds),
                    "train_step_seconds": float(walls[-1][0]) if walls else None,
                    "train_words_per_s": training_speed(log),
                    "valid_curve": validation_curve(log)}
        started = run.dir / "continued_from.json"
        if started.is_file():
            training["continued_from"] = load_json(
                started, "where the training was continued from",
                f"delete {run.dir} and rerun with --resume (the training's checkpoints are kept)", ReproError)
    else:
        training = {k: trained.get(k) for k in ("params", "params_trained", "train_seconds",
                                                "train_step_seconds", "train_words_per_s",
                                                "valid_curve", "continued_from")}
        if training["continued_from"] is None:
            del training["continued_from"]
    if not run.checkpoint.is_file():
        raise ReproError(f"{label}: training left no {run.checkpoint} (select: "
                         f"{run.checkpoint.name}); see {run.dir / 'train.log'}")
    selected = selected_checkpoint(run.checkpoint)
    # fairseq stores the epoch its data iterator will start next; name the validation's instead
    selected["epoch"] = next((p["epoch"] for p in training.get("valid_curve") or []
                              if p.get("num_updates") == selected["num_updates"]
                              and "epoch" in p), selected["epoch"])
    scores = {subset: score_subset(run, subset, env, label) for subset in run.subsets}
    main_scores = scores[run.subsets[0]]
    return {
        "pair": run.pair, "system": run.system["name"], "seed": run.seed,
        "arch": run.system["arch"], "flags": run.system["flags"],
        "tables": run.system["tables"], "checkpoint_of": run.system["checkpoint_of"],
        **training, "selected": selected,
        **{k: main_scores[k] for k in ("tok_bleu", "sacrebleu", "chrf", "ter", "signatures",
                                       "decode", "generate_seconds")},
        "subsets": scores,
        "train_argv": run.train_argv, "generate_argv": run.generate_argv[run.subsets[0]],
        "postprocess": run.postprocess[run.subsets[0]], "commands": run.recorded(),
    }


def device_free(commands):
    """``commands`` without fairseq's ``--cpu``: the device is where a recipe ran, not part of it,
    so a GPU config's stored results and a CPU run of the same recipe (``--device``) go together."""
    if isinstance(commands, dict):
        return {key: device_free(value) for key, value in commands.items()}
    if isinstance(commands, list):
        return [device_free(c) for c in commands if c != "--cpu"]
    return commands


FIX_RESULT = ("delete it: --resume then decodes and scores the run again (its training is "
              "kept)")


def flags_difference(old, new, most=4):
    """'--max-update 1300 → 300, --seed 1 → 2': the flags whose values differ between two
    command lines (a flag without a value shows as 'set', an absent one as 'unset')."""
    a, b = flag_pairs(old or []), flag_pairs(new or [])

    def value(flags, key):
        return "unset" if key not in flags else ("set" if flags[key] is None else flags[key])

    keys = [k for k in dict.fromkeys(list(a) + list(b))
            if value(a, k) != value(b, k) and k.startswith("-")]
    parts = [f"{k} {value(a, k)} → {value(b, k)}" for k in keys[:most]]
    if len(keys) > most:
        parts.append(f"{len(keys) - most} more")
    return ", ".join(parts) or "the same flags in another order or with other data"


def difference(run, old):
    """None if the stored result ``old`` was made by ``run``'s commands (on any device, in any
    checkout: both sides name the checkout's files as ``{repo}/PATH``), else what differs, e.g.
    'training: --max-update 1300 → 300'."""
    mine = portable.record(device_free(run.recorded()), REPO)
    theirs = device_free(portable.upgrade_result(old, REPO).get("commands"))
    if mine == theirs:
        return None
    if not isinstance(theirs, dict):
        return "commands not recorded"
    if theirs.get("train") != mine["train"]:
        return f"training: {flags_difference(theirs.get('train'), mine['train'])}"
    generate = theirs.get("generate") or {}
    for subset in dict.fromkeys(list(mine["generate"]) + list(generate)):
        if generate.get(subset) != mine["generate"].get(subset):
            return (f"decoding {subset}: "
                    f"{flags_difference(generate.get(subset), mine['generate'].get(subset))}")
    return "another postprocess command"


def read_result(run):
    """``run``'s stored result.json (None if there is none), as this engine records one: a result
    made before paths were recorded relative to the checkout (with the checkout it was made in as
    its ``repo``) names them as ``{repo}/PATH`` too (:func:`portable.upgrade_result`)."""
    path = run.dir / "result.json"
    if not path.is_file():
        return None
    return portable.upgrade_result(load_json(path, "a run's result", FIX_RESULT, ReproError), REPO)


def previous_result(run, force=False):
    """The stored result of ``run`` if it was made by the same commands (on any device); error if
    by others, or, with ``force``, None (the run is made again)."""
    old = read_result(run)
    if old is None:
        return None
    diff = difference(run, old)
    if diff is not None:
        if force:
            return None
        raise ReproError(f"{run.dir / 'result.json'} was made with other settings ({diff}); it is "
                         f"kept: rerun with --force to replace it, or pick another --out")
    return old


def stored_result(run, force=False):
    """(``run``'s stored result, rescored in place and on disk by :func:`rescore`, True if that
    changed it), or (None, False) where it has none (or, with ``force``, one made by other
    commands); error if made by other commands."""
    old = previous_result(run, force)
    if old is None:
        return None, False
    rescored = rescore(run, old)
    if rescored:
        textio.write_json(run.dir / "result.json", old)
    return old, rescored


def stored_report(out):
    """The folder's results.json ({} if there is none)."""
    path = Path(out) / "results.json"
    if not path.is_file():
        return {}
    return load_json(path, "the folder's table data",
                     "delete it: the engine writes it again from the runs' result.json", ReproError)


def other_runs(args, config, runs, data_template):
    """The config's runs in --out that this invocation did not select (every system of its
    systems file, its pairs and seeds, these, and those of the folder's last table) and that hold
    a result.json."""
    chosen = {(run.pair, run.system["name"], run.seed) for run in runs}
    tabulated = stored_report(args.out).get("results") or []  # the folder's last table's runs
    pairs = list(dict.fromkeys(parse_pairs(",".join(config["pairs"]))
                               + [(run.src, run.tgt) for run in runs]
                               + [tuple(r["pair"].split("-")) for r in tabulated
                                  if re.fullmatch(r"[a-z]{2,3}-[a-z]{2,3}", str(r.get("pair")))]))
    seeds = list(dict.fromkeys(list(config["seeds"]) + [run.seed for run in runs]
                               + [r["seed"] for r in tabulated if isinstance(r.get("seed"), int)]))
    for src, tgt in pairs:
        data = Path(data_template.format(src=src, tgt=tgt)).resolve()
        for seed in seeds:
            for system in config["systems"].values():
                run = Run(args, config, (src, tgt), system, data, seed)
                if (run.pair, system["name"], seed) not in chosen \
                        and (run.dir / "result.json").is_file():
                    yield run


def finished_beside(args, config, runs, data_template, name):
    """The stored results in --out of the config's other runs (:func:`other_runs`) made by the
    same commands: [(run, result)]. So the table holds every finished run of its folder, and two
    engines training different systems into one folder each leave a table of both. One made by
    other commands is left out (which needs --force: :func:`check_stored`), and the log says so."""
    found = []
    for run in other_runs(args, config, runs, data_template):
        old = read_result(run)
        diff = difference(run, old)
        if diff is not None:
            print(f"{name}: {shown(run.dir / 'result.json')} left out of the table: made with "
                  f"other settings ({diff})", file=sys.stderr)
            continue
        if rescore(run, old):
            textio.write_json(run.dir / "result.json", old)
        found.append((run, old))
    return found


def check_stored(args, config, runs, data_template, name):
    """Refuse, unless ``--force``, to replace what --out and --checkpoints hold that was made by
    other commands: a selected run's result (replaced by a new one), a checkpoint folder trained
    with other flags (trained again), another run's result (left out of the table), and rows of
    the folder's results.json and TABLE.md that the new ones would not hold (made by another
    systems file, say). With ``--force``, say what is replaced."""
    found = []
    for run in runs:
        old = read_result(run)
        diff = None if old is None else difference(run, old)
        if diff is not None:
            found.append(f"{shown(run.dir / 'result.json')} was made with other settings "
                         f"({diff}) and would be replaced")
        elif old is not None and args.resume:
            continue  # skipped: its checkpoints are not touched
        argv = stored_train_argv(run) if run.trains else None
        if argv is not None and argv != run.train_argv:
            found.append(f"the checkpoints in {shown(run.save_dir)} were trained with other "
                         f"flags ({flags_difference(argv, run.train_argv)}) and would be "
                         f"trained again")
    kept = {(run.pair, run.system["name"], run.seed) for run in runs}
    for run in other_runs(args, config, runs, data_template):
        diff = difference(run, read_result(run))
        if diff is not None:
            found.append(f"{shown(run.dir / 'result.json')} was made with other settings "
                         f"({diff}) and would be left out of the table")
        else:
            kept.add((run.pair, run.system["name"], run.seed))
    lost = [f"{r.get('pair')} {r.get('system')} seed {r.get('seed')}"
            for r in stored_report(args.out).get("results") or []
            if (r.get("pair"), r.get("system"), r.get("seed")) not in kept]
    if lost:
        found.append(f"{shown(args.out / 'results.json')} and TABLE.md hold runs that this "
                     f"config does not make or find in the folder ({', '.join(lost[:4])}"
                     f"{f' and {len(lost) - 4} more' if len(lost) > 4 else ''}), which would be "
                     f"dropped from them")
    if not found:
        return
    listed = "; ".join(found[:8]) + (f"; and {len(found) - 8} more" if len(found) > 8 else "")
    if not args.force:
        raise ReproError(f"nothing was changed: {listed}. Rerun with --force to go on, or with "
                         f"another --out (and --checkpoints) to keep them")
    print(f"{name}: --force: {listed}", file=sys.stderr, flush=True)


def rescore(run, old):
    """Recompute a stored result's sacreBLEU, chrF and TER from its hypotheses with this checkout's
    scoring (so a fix to scoring reaches finished runs through ``--resume``), in place; True if a
    value changed. A subset whose hypotheses or references are not here keeps its scores."""
    from .scoring.evaluate import score

    changed = False
    for subset, scores in old.get("subsets", {}).items():
        hyps, refs = run.dir / scores.get("hyp_file", ""), run.raw_ref.get(subset)
        if not (scores.get("hyp_file") and hyps.is_file() and refs and refs.is_file()):
            continue
        new = score(read_text_lines(hyps, ReproError), read_text_lines(refs, ReproError))
        values = {"sacrebleu": new["bleu"][0], "chrf": new["chrf"][0], "ter": new["ter"][0]}
        if any(scores.get(k) is None or abs(scores[k] - v) > 1e-9 for k, v in values.items()):
            scores.update(values, signatures={k: v[1] for k, v in new.items()})
            changed = True
    main = old.get("subsets", {}).get(run.subsets[0])
    if changed and main is not None:
        old.update({k: main[k] for k in ("sacrebleu", "chrf", "ter", "signatures")})
    return changed


def add_significance(results, baseline, significance, out, refs=None):
    """Paired bootstrap of every result against the baseline's on the same pair, subset and seed,
    per subset, in place: ``p_value`` and ``better`` (sacreBLEU above the baseline's), and
    ``ter_p_value`` and ``ter_better`` (TER below the baseline's). ``refs``: (pair, subset) ->
    the raw references here (a result's own path may be another machine's)."""
    by_key = {(r["pair"], r["system"], r["seed"]): r for r in results}
    for r in results:
        base = by_key.get((r["pair"], baseline, r["seed"]))
        for subset, scores in r["subsets"].items():
            for key in ("p_value", "better", "ter_p_value", "ter_better"):
                scores[key] = None
            if base is None or r is base:
                continue
            run_dir = Path(out) / r["pair"]
            hyps = run_dir / slug(r["system"]) / f"seed{r['seed']}" / scores["hyp_file"]
            base_hyps = (run_dir / slug(baseline) / f"seed{r['seed']}" /
                         base["subsets"][subset]["hyp_file"])
            ref_file = Path((refs or {}).get((r["pair"], subset))
                            or portable.expand_path(scores["raw_ref"], REPO))
            if not (hyps.is_file() and base_hyps.is_file() and ref_file.is_file()):
                continue
            texts = [read_text_lines(f, ReproError) for f in (base_hyps, hyps, ref_file)]
            scores["p_value"], _, _ = paired_bootstrap(*texts, significance["samples"])
            delta = scores["sacrebleu"] - base["subsets"][subset]["sacrebleu"]
            scores["better"] = None if delta == 0 else delta > 0
            scores["ter_p_value"], _, _ = paired_bootstrap(*texts, significance["samples"], "TER")
            delta = scores["ter"] - base["subsets"][subset]["ter"]
            scores["ter_better"] = None if delta == 0 else delta < 0  # TER: lower is better


# ----------------------------------------------------------------------------------------------
# Table
# ----------------------------------------------------------------------------------------------

def fmt(value, spec):
    return "" if value is None else format(value, spec)


def ratio(value, base):
    return None if value is None or not base else value / base


def mean_std(values, spec):
    """``mean`` or ``mean ± std`` (sample std) of the non-None values, formatted."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return format(mean, spec)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{format(mean, spec)} ± {format(std, spec)}"


def significance_mark(scores_per_seed, level, metric=""):
    """'†' when every seed's system is significantly better than the baseline's (p < level),
    '↓' when every seed's is significantly worse, else ''; ``metric`` "" for sacreBLEU (the keys
    ``p_value``, ``better``), "ter" for TER (``ter_p_value``, ``ter_better``). (sacrebleu gives a
    system equal to the baseline a small p-value, so a system with the baseline's score gets no
    mark.)"""
    prefix = f"{metric}_" if metric else ""
    marks = set()
    for scores in scores_per_seed:
        p, better = scores.get(f"{prefix}p_value"), scores.get(f"{prefix}better")
        if p is None or p >= level or better is None:
            return ""
        marks.add("†" if better else "↓")
    return marks.pop() if len(marks) == 1 else ""


def continued_legend(results, max_update):
    """The legend's line on runs that carried on another config's trainings (its 'continues')."""
    starts = {}
    for r in results:
        if r.get("continued_from") and r.get("checkpoint_of") is None:
            c = r["continued_from"]
            starts.setdefault((c["config"], c["max_update"]), []).append(
                f"{r['system']} (seed {r['seed']})")
    return [f"- **continued trainings**: {', '.join(names)} went on from the checkpoint_last.pt "
            f"of the same system and seed trained by `{config}` to update {updates}, instead of "
            f"starting again. fairseq-train's resume restores the model, the optimizer, the "
            f"learning-rate schedule and the place in the epoch, and seeds dropout by update "
            f"number; what differs from one run to {max_update} updates is how sentences of "
            f"equal length are grouped into batches from then on (fairseq draws that grouping "
            f"once per process, from the seed and the epoch it starts in). Train words/s, train "
            f"min and the validation curve cover the whole training."
            for (config, updates), names in starts.items()]


def _group_not_run(labels):
    """'de-en HC-SA seed 2; de-en Syn-R seed 2' as 'de-en, seed 2: HC-SA, Syn-R': one group per
    pair and seed, in the order the runs were listed (a label of another shape stays as it is)."""
    groups = {}
    for text in labels:
        found = re.fullmatch(r"(\S+) (.+) seed (\d+)", text)
        key, name = ((found[1], found[3]), found[2]) if found else ((text, None), None)
        groups.setdefault(key, []).extend([name] if name else [])
    return "; ".join(f"{pair}, seed {seed}: {', '.join(names)}" if names else pair
                     for (pair, seed), names in groups.items())


def markdown(paper, report):
    numbers, settings = report["paper"], report["settings"]
    baseline = settings["baseline"]
    level = settings["significance"]["level"]
    columns = numbers.get("columns", [])
    # the seeds the table holds (runs of other seeds may be missing: --stop-after)
    seeds = sorted({r["seed"] for r in report["results"]}) or settings["seeds"]
    bench = settings.get("speed_bench")
    heads = (["paper table", "system"] + (["seeds"] if len(seeds) > 1 else [])
             + ["params", "tok BLEU", "sacreBLEU", "chrF", "TER",
              "decode sent/s", f"sent/s ×{baseline}", "train words/s", "train min",
              f"train time ×{baseline}"]
             + ([f"train time ×{baseline}, quiet {bench['device']} bench"] if bench else [])
             + ["selected (epoch/update)", "valid loss Δ % per epoch (last 3)"]
             + [c.title for c in paper.columns] + [c["title"] for c in columns])
    m = report["machine"]
    # runs side by side: this invocation's --jobs, or those the stored results were made with
    jobs = max([settings.get("jobs", 1)] + [r.get("machine", {}).get("jobs", 1)
                                            for r in report["results"]])
    # runs tabulated together may come from several invocations (--resume): name every thread
    # count and the span of dates they were made in
    made = [r["machine"] for r in report["results"] if r.get("machine")]
    threads = sorted({x["threads"] for x in made}) or [m.get("threads", settings["threads"])]
    threads = ("/".join(map(str, threads)) + " (each run's in results.json)" if len(threads) > 1
               else str(threads[0]))
    days = sorted({x["date"][:10] for x in made})
    date = f"{days[0]} to {days[-1]}" if len(days) > 1 else m["date"]
    spread = (f"mean ± standard deviation over the seeds in a row's 'seeds' column "
              f"(seeds {', '.join(map(str, seeds))})" if len(seeds) > 1 else f"seed {seeds[0]}")
    lines = [
        f"# {paper.title}: measured beside the paper",
        "",
        f"Scale config `{settings['config']}`; test set: {settings['test_set']}; "
        f"{settings['max_update']} training updates; checkpoint: {settings['select_text']}; "
        f"{spread}; {machines_text(report['results'], m)}, {threads} thread(s) per fairseq process"
        + (f", up to {jobs} runs at a time (the speed columns measure a shared machine)"
           if jobs > 1 else "")
        + f"; {date}.",
        *(["", f"**Not run** (stopped by --stop-after; rerun with --resume): "
           f"{_group_not_run(settings['not_run'])}."] if settings.get("not_run") else []),
        "",
        "- **tok BLEU**: BLEU of the tokenized hypotheses (BPE removed) against the tokenized "
        "reference text (the data-bin's `SUBSET.tok.TGT`), with fairseq's `--scoring bleu` "
        "statistics.",
        f"- **sacreBLEU, chrF, TER**: the hypotheses detokenized by fairseq's Moses tokenizer "
        f"against the raw references (`ran_fairseq.scoring.evaluate`), "
        f"`{settings['signatures'].get('bleu', '')}`, `{settings['signatures'].get('ter', '')}`. "
        f"**†** / **↓** on sacreBLEU and TER: significantly better / worse than {baseline}'s "
        f"(sacreBLEU above / below, TER below / above; paired bootstrap "
        f"resampling, sacrebleu's, {settings['significance']['samples']} samples, p < {level}"
        f"{', in every seed' if len(seeds) > 1 else ''}).",
        f"- **decode**: fairseq-generate's own timing line (`{shlex.join(settings['generate_flags'])}`"
        f"); ×{baseline}: sentences/s over {baseline}'s on the same pair. **params**: "
        f"fairseq-train's count, and how many are trained where fewer are.",
        f"- **train words/s**: the mean of fairseq-train's end-of-epoch `wps`; **train min**: "
        f"wall-clock minutes of fairseq-train; **train time ×{baseline}**: that time over "
        f"{baseline}'s (a paper's 'relative training time', where its table has one); the two "
        f"×{baseline} ratios (decoding, training) divide by {baseline}'s runs of the row's "
        f"seeds on the row's machine, or, marked **°**, by its runs of other seeds on that "
        f"machine where it has none of the row's there, and are blank for a system made on a machine {baseline} never ran on; "
        f"**selected**: the epoch and update of the decoded checkpoint; **valid loss Δ % per epoch**: how much the validation loss "
        f"still changed per epoch over the last three epochs of training, in percent of the last "
        f"value (a partial last epoch left out). We read less than 0.5 % per epoch as a "
        f"flattened curve: where {baseline}'s falls faster, the budget stops while the models "
        f"still learn.",
        *continued_legend(report["results"], settings["max_update"]),
        *([f"- **quiet {bench['device']} bench**: {baseline}'s training tokens/s over the "
           f"system's, from {', '.join(f'`{f}`' for f in bench['files'])}"
           + (f" (the median of the {len(bench['files'])} runs)" if len(bench["files"]) > 1
              else "")
           + f": `scripts/bench.py` timing {bench['train_updates']} updates of "
           f"{bench['max_tokens']} tokens of each system in turn"
           + (f" with the training flags of `{bench['train_flags_of']}`"
              if bench.get("train_flags_of") else "")
           + f", on {bench['device_name']} with {bench['threads']} thread(s) and nothing else "
           f"running (load average at most {fmt(bench['load_average_max'], '.1f')}; "
           f"{', '.join(d or '?' for d in bench['dates'])}). Unlike the runs' own train time, no "
           f"other run shares the machine; a blank cell is a system the bench did not time."]
          if bench else []),
        *(f"- {note}" for note in paper.notes),
        f"- **paper**: `{settings['paper_file']}`; {numbers.get('source', '')}. A blank cell is "
        f"a number that file does not have. {numbers.get('status', '')}",
    ]
    for pair in settings["pairs"]:
        for subset in settings["subsets"]:
            lines += ["", f"## {pair}" + (f" ({subset})" if len(settings["subsets"]) > 1 else ""),
                      "", "| " + " | ".join(heads) + " |",
                      "|---|---|" + "---:|" * (len(heads) - 2)]
            groups = {}
            for r in report["results"]:
                if r["pair"] == pair:
                    groups.setdefault(r["system"], []).append(r)
            for name, runs in groups.items():
                # speed ratios against the baseline's runs on the row's machine (rows may have
                # fewer seeds than the baseline, or seeds made elsewhere)
                base, other_seeds = speed_baseline(runs, groups.get(baseline, []))
                base_sps = [r["subsets"][subset]["decode"]["sentences_per_s"] for r in base]
                base_sps = sum(base_sps) / len(base_sps) if base_sps else None
                base_time = [r["train_seconds"] for r in base if r["train_seconds"] is not None]
                base_time = sum(base_time) / len(base_time) if base_time else None
                sub = [r["subsets"][subset] for r in runs]
                first = runs[0]
                params = fmt(first["params"], ",d")
                if first["params_trained"] != first["params"]:
                    params += f" ({first['params_trained']:,d} trained)"
                sps = [s["decode"]["sentences_per_s"] for s in sub]
                times = [r["train_seconds"] for r in runs]
                selected = "; ".join(f"{r['selected']['epoch']}/{r['selected']['num_updates']}"
                                     for r in runs)
                cells = [", ".join(first["tables"]), name,
                         *([", ".join(str(r["seed"]) for r in runs)] if len(seeds) > 1 else []),
                         params,
                         mean_std([s["tok_bleu"] for s in sub], ".2f"),
                         mean_std([s["sacrebleu"] for s in sub], ".2f")
                         + significance_mark(sub, level),
                         mean_std([s["chrf"] for s in sub], ".2f"),
                         mean_std([s["ter"] for s in sub], ".2f")
                         + significance_mark(sub, level, "ter"),
                         mean_std(sps, ".2f"),
                         marked(fmt(ratio(sum(sps) / len(sps), base_sps), ".2f"), other_seeds),
                         mean_std([r["train_words_per_s"] for r in runs], ",.0f"),
                         mean_std([t / 60 if t is not None else None for t in times], ".1f"),
                         marked(fmt(ratio(sum(times) / len(times) if None not in times else None,
                                          base_time), ".2f"), other_seeds)]
                if bench:
                    cells.append(fmt(bench["train_time_ratio"].get(name), ".2f"))
                cells.append(selected)
                cells.append(mean_std([loss_trend(r.get("valid_curve")) for r in runs], "+.1f"))
                cells += [c.cell(first) for c in paper.columns]
                cells += [paper_cell(c, name) for c in columns]
                lines.append("| " + " | ".join(cells) + " |")
    lines += reference_rows(numbers)
    return "\n".join(lines) + "\n"


def paper_cell(column, system):
    """A paper number as printed, with the paper's own significance mark (its ``significant``)."""
    value = column["values"].get(system)
    if value is None:
        return ""
    return f"{value}{'†' if system in column.get('significant', []) else ''}"


def reference_rows(numbers):
    """The paper's literature rows (``reference_rows``: reference values no system of ours
    reproduces) as a small table after the measured ones."""
    ref = numbers.get("reference_rows")
    if not ref:
        return []
    titles = {c["key"]: c["title"] for c in numbers.get("columns", [])}
    if isinstance(ref, dict):  # {"note", "columns": [keys], "rows": [{"source", "system", "values"}]}
        keys = ref.get("columns", [])
        rows = [[f"{r.get('system', '')} ({r.get('source', '')})"] +
                [fmt(v, "") for v in r.get("values", [])] for r in ref.get("rows", [])]
        note = ref.get("note", "")
    else:  # [{"name": ..., field: value, ...}]
        keys = list(dict.fromkeys(k for r in ref for k in r if k != "name"))
        rows = [[r.get("name", "")] + [fmt(r.get(k), "") for k in keys] for r in ref]
        note = ""
    lines = ["", "## Reference rows of the paper (other papers' systems)", ""]
    if note:
        lines += [note, ""]
    lines += ["| system | " + " | ".join(titles.get(k, k) for k in keys) + " |",
              "|---|" + "---:|" * len(keys)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def speed_baseline(runs, baseline_runs):
    """The baseline's runs that a row's speed ratios divide by, and whether they are of other
    seeds: its runs of the row's seeds on the row's machines; where it has none of those there,
    its runs of any seed on those machines (a run's speed depends on the machine, not on the
    seed beyond the order of its batches); none where it never ran on the row's machines (a
    GPU's runs and a CPU's tabulate together, their speeds do not compare)."""
    seeds, machines = {r["seed"] for r in runs}, {machine_of(r) for r in runs}
    there = [r for r in baseline_runs if machine_of(r) in machines]
    same_seeds = [r for r in there if r["seed"] in seeds]
    if same_seeds or not there:
        return same_seeds, False
    return there, True


def marked(cell, other_seeds):
    """A speed ratio against the baseline's runs of other seeds: '°' after it."""
    return f"{cell}°" if cell and other_seeds else cell


def machine_of(result):
    """(device, its name) where a stored result was made; (None, None) when not recorded."""
    machine = result.get("machine") or {}
    return machine.get("device"), machine.get("device_name")


def machines_text(results, default):
    """'cuda (NVIDIA H100)' for a table made on one machine; with several, each machine and the
    systems made on it (a system on several: each of its seeds' machines)."""
    made = {}
    for r in results:
        if r.get("machine"):
            made.setdefault(machine_of(r), []).append(r["system"])
    if len(made) < 2:
        device, name = next(iter(made), (default["device"], default["device_name"]))
        return f"{device} ({name})"
    return "; ".join(f"{device} ({name}) for {', '.join(dict.fromkeys(systems))}"
                     for (device, name), systems in made.items())


SELECT_TEXT = {"last": "the last (checkpoint_last.pt)",
               "loss": "the best on validation loss (checkpoint_best.pt)",
               "bleu": "the best on validation BLEU (checkpoint_best.pt, fairseq's --eval-bleu)"}


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

def prepare(config, pair, log_path, env):
    src, tgt = pair
    cmd = [part.format(src=src, tgt=tgt) for part in config["prepare"]]
    cmd[0] = str(repo_path(cmd[0]))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        returncode = CHILDREN.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    portable.rewrite_log(log_path, REPO)
    if returncode != 0:
        raise ReproError(f"preparing {src}-{tgt} failed: {shlex.join(cmd)}\n--- {log_path} "
                         f"(tail) ---\n{log_path.read_text()[-3000:]}")


def made_otherwise(run):
    """Whether ``run``'s folders hold a result or checkpoints made by other commands."""
    old = read_result(run)
    if old is not None and difference(run, old) is not None:
        return True
    argv = stored_train_argv(run) if run.trains else None
    return argv is not None and argv != run.train_argv


def execute_all(runs, args, config, env, paper, name):
    """Every run, ``args.jobs`` at a time, in ``runs``' order; return (results of the finished
    runs in that order, labels of the runs not started before ``--stop-after``). A run that decodes
    another's checkpoint waits for it. The first failure starts no further run; the runs under way
    finish, then it is raised."""
    start = time.monotonic()
    lock = threading.Lock()
    failures = []
    results = {}
    trained_by = {}  # (pair, system, seed) -> Future of a training run

    def label(run):
        return f"{run.pair} {run.system['name']} seed {run.seed}"

    def say(text):
        with lock:
            print(f"{name}: {text}", file=sys.stderr, flush=True)

    @functools.lru_cache(maxsize=None)
    def here():
        if config["device"] == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ReproError(f"{args.config} trains on a GPU and torch sees none; use "
                                 f"--dry-run to print the commands, or the CPU config")
        return dict(machine_info(config["device"], args.threads), jobs=args.jobs)

    def one(run, trainer):
        trained = trainer.result() if trainer is not None else None
        if trainer is not None and trained is None:
            return None  # its checkpoint's training did not run
        try:
            old, rescored = stored_result(run, args.force) if args.resume else (None, False)
            if old is not None:
                say(f"{label(run)}: done before, skipped (--resume)"
                    + (f"; rescored: sacreBLEU {old['sacrebleu']:.2f}" if rescored else ""))
                return old
            if failures or CHILDREN.stopped_by is not None or (
                    args.stop_after is not None
                    and time.monotonic() - start > 60 * args.stop_after):
                return None
            machine = here()
            if not args.resume or (args.force and made_otherwise(run)):
                # made again from the start (check_stored refused other commands' files
                # unless --force)
                if run.trains:
                    shutil.rmtree(run.save_dir, ignore_errors=True)
                shutil.rmtree(run.dir, ignore_errors=True)
            say(f"{label(run)} ...")
            old = dict(execute(run, env, trained), machine=machine)
            if paper.measure is not None:
                old.update(paper.measure(run, old))
            # recorded with the checkout's files as {repo}/PATH
            old = portable.record(old, REPO)
        except Exception as e:  # noqa: BLE001  (kept, raised after the runs under way)
            with lock:
                failures.append(e)
            return None
        textio.write_json(run.dir / "result.json", old)
        say(f"{label(run)}: tok BLEU {old['tok_bleu']:.2f}, sacreBLEU {old['sacrebleu']:.2f}, "
            f"TER {old['ter']:.2f}, {old['decode']['sentences_per_s']:.2f} sent/s, "
            f"{old['train_seconds'] / 60:.1f} min training")
        return old

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {}
        # trainings first, so that a decode-only run never holds a worker waiting for one
        for run in sorted(runs, key=lambda r: not r.trains):
            trainer = None
            if not run.trains:
                trainer = trained_by.get((run.pair, run.system["checkpoint_of"], run.seed))
            futures[id(run)] = pool.submit(one, run, trainer)
            if run.trains:
                trained_by[(run.pair, run.system["name"], run.seed)] = futures[id(run)]
        for run in runs:
            results[id(run)] = futures[id(run)].result()
    if failures:
        raise failures[0]
    not_run = [label(run) for run in runs if results[id(run)] is None]
    if not_run:
        print(f"{name}: not run before --stop-after {args.stop_after:g} min: "
              f"{'; '.join(not_run)} (rerun with --resume)", file=sys.stderr)
    return [results[id(run)] for run in runs if results[id(run)] is not None], not_run


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
            run.lock_fds = tuple(lock._file.fileno() for lock in mine)
            locks += mine
    except LockedError as e:
        for lock in locks:
            lock.release()
        raise ReproError(str(e)) from None
    return locks


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
    runs = [Run(args, config, pair, system,
                Path(data_template.format(src=pair[0], tgt=pair[1])).resolve(), seed)
            for pair in pairs for seed in seeds for system in systems]
    name = f"reproduce-{paper.key}"
    if args.dry_run:
        for run in runs:
            print(f"# {run.pair} {run.system['name']} seed {run.seed}")
            for cmd in run.commands():
                print(shlex.join(cmd))
        return
    locks = lock_runs(runs)
    CHILDREN.stopped_by = None
    restore = (CHILDREN.install() if threading.current_thread() is threading.main_thread()
               else None)
    try:
        check_stored(args, config, runs, data_template, name)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
                   MKL_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
        if args.data is None:
            for pair in pairs:
                print(f"{name}: preparing {pair[0]}-{pair[1]}", file=sys.stderr, flush=True)
                prepare(config, pair, args.out / f"prepare.{pair[0]}-{pair[1]}.log", env)
        results, not_run = execute_all(runs, args, config, env, paper, name)
        if not results:
            raise ReproError("no run finished before --stop-after; nothing to tabulate")
        # engines sharing --out (with different runs) write its table one at a time
        with FolderLock(args.out, "the results folder's table",
                        lock_file=args.out / ".table.lock").acquire(wait=True):
            tabulate(paper, args, config, runs, results, not_run, data_template, name)
    finally:
        CHILDREN.wait_all()
        if restore is not None:
            restore()
        for lock in locks:
            lock.release()


def tabulate(paper, args, config, runs, results, not_run, data_template, name):
    """Write OUT/results.json and OUT/TABLE.md from this invocation's ``results`` and the
    finished runs beside them, and print the table."""
    beside = finished_beside(args, config, runs, data_template, name)
    if beside:
        found = "; ".join(f"{run.pair} {run.system['name']} seed {run.seed}" for run, _ in beside)
        print(f"{name}: tabulated beside this invocation's runs, the finished ones in "
              f"{shown(args.out)}: {found}", file=sys.stderr)
    every = runs + [run for run, _ in beside]
    results += [old for _, old in beside]
    # rows in the systems file's order, each system's seeds together
    order = {name: i for i, name in enumerate(config["systems"])}
    pair_order = {pair: i for i, pair in enumerate(dict.fromkeys(run.pair for run in every))}
    results.sort(key=lambda r: (pair_order[r["pair"]], order.get(r["system"], len(order)),
                                r["seed"]))
    refs = {(run.pair, subset): run.raw_ref[subset] for run in every for subset in run.subsets}
    add_significance(results, config["baseline"], config["significance"], args.out, refs)

    train_argv = runs[0].train_argv
    max_update = (train_argv[train_argv.index("--max-update") + 1]
                  if "--max-update" in train_argv else "fairseq's default number of")
    report = {
        "settings": {
            "config": shown(config["path"]), "test_set": config["test_set"],
            "paper_file": shown(repo_path(config["paper"])), "baseline": config["baseline"],
            "data": portable.record(data_template, REPO), "pairs": list(pair_order),
            "systems": [name for name in config["systems"]
                        if any(run.system["name"] == name for run in every)],
            "seeds": sorted({run.seed for run in every}),
            "subsets": config["subsets"], "select": config["select"],
            "select_text": SELECT_TEXT[config["select"]],
            "significance": config["significance"],
            "max_update": max_update, "threads": args.threads, "jobs": args.jobs,
            "not_run": not_run,
            "generate_flags": config["generate_flags"],
            "speed_bench": config["speed_bench"],
            "signatures": results[0]["signatures"]},
        # where the runs were made (--resume can tabulate another machine's results)
        "machine": next((r["machine"] for r in results if "machine" in r), None)
        or machine_info("cpu" if config["device"] == "cuda" else config["device"], args.threads),
        "paper": config["paper_numbers"], "results": results}
    report = portable.record(report, REPO)  # the checkout's files as {repo}/PATH
    args.out.mkdir(parents=True, exist_ok=True)
    textio.write_json(args.out / "results.json", report)
    table = markdown(paper, report)
    textio.write_text_atomic(args.out / "TABLE.md", table)
    claims = repo_path(config["paper"]).parent / "claims.json"
    if claims.is_file():  # CLAIMS.md beside TABLE.md: each claim's verdict (ran_fairseq.lab.claims)
        from .lab.claims import write_claims
        try:
            print(f"{name}: {shown(write_claims(claims, args.out, refs))}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 (a table is never lost to its claims)
            print(f"{name}: no CLAIMS.md: {e}", file=sys.stderr)
    print(table)


def main(paper: Paper, argv: Optional[List[str]] = None):
    args = parse_cli(paper, sys.argv[1:] if argv is None else argv)
    try:
        run_all(paper, args)
    except ReproError as e:
        sys.exit(f"reproduce-{paper.key}: error: {e}")
    except Stopped as e:
        print(f"reproduce-{paper.key}: stopped by {e}: the fairseq processes under way were "
              f"stopped with it; rerun with --resume to go on", file=sys.stderr)
        sys.exit(128 + e.signal)
