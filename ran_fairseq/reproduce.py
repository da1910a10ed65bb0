"""The reproduction engine behind ``scripts/reproduce-*.py``: train, decode and score every system of a
paper's config with fairseq's own CLIs, and write the measured table beside the paper's numbers.

A paper script only describes its paper (a ``Paper``: title, configs, extra columns or measurements)
and calls ``main(paper)``. A scale config (JSON, e.g. ``configs/ran/cpu.json``) names the systems file
(name, arch, flags and the paper tables of each system), the paper's numbers, the data and the fairseq
flags; no hyper-parameter lives in a script. For each language pair and system, with the plugin loaded:

1. the config's ``prepare`` command (a no-op when the data-bin is up to date), unless ``--data``;
2. ``fairseq-train DATA --arch ARCH [train_flags] [system flags]`` into CHECKPOINTS/PAIR/SYSTEM, or
   nothing for a system that decodes another one's checkpoint (``"checkpoint_of"``);
3. ``fairseq-generate`` on the test set with the config's and the system's generate flags; a system's
   ``"postprocess"`` command may then rewrite that output (e.g. unknown-word replacement);
4. tokenized BLEU of the hypotheses (BPE removed) against the tokenized references, as fairseq's
   ``--scoring bleu`` computes it; the hypotheses detokenized with fairseq's Moses tokenizer and scored
   against the raw references with sacreBLEU (BLEU, chrF, TER);
5. parameter count, training speed (fairseq-train's words/s) and wall time, and decoding speed
   (fairseq-generate's own timing line).

Writes OUT/PAIR/SYSTEM/{train.log, generate.txt, hyp.detok.txt, result.json}, OUT/results.json (every
result, with settings and machine) and OUT/TABLE.md.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "ran_fairseq"

CONFIG_KEYS = {"systems", "paper", "pairs", "data", "prepare", "test_set", "gen_subset", "device",
               "out", "checkpoints", "checkpoint", "train_flags", "generate_flags"}
SYSTEM_KEYS = {"name", "arch", "flags", "tables", "checkpoint_of", "generate_flags", "postprocess",
               "notes"}
# Flags the engine sets itself, refused in a config: flag -> where its value comes from.
TRAIN_OWNED = {
    "--arch": "the system's arch (or the config's 'arch')", "-a": "the system's arch",
    "--save-dir": "--checkpoints / the config's 'checkpoints'",
    "--source-lang": "--pairs", "-s": "--pairs", "--target-lang": "--pairs", "-t": "--pairs",
    "--task": "nothing (translation)", "--user-dir": "nothing (the plugin)",
    "--cpu": "the config's 'device'",
}
GENERATE_OWNED = dict(TRAIN_OWNED, **{
    "--path": "the config's 'checkpoint'", "--gen-subset": "the config's 'gen_subset'",
    "--post-process": "the config's 'bpe'", "--remove-bpe": "the config's 'bpe'",
    "--scoring": "nothing (the engine scores)", "--bpe": "nothing", "--tokenizer": "nothing",
    "--results-path": "nothing (OUT/PAIR/SYSTEM/generate.txt)", "--quiet": "nothing",
})
POSTPROCESS_FIELDS = ("generate", "output", "data", "src", "tgt", "raw_src", "raw_ref")

PARAMS_RE = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")
WPS_RE = re.compile(r"\| train \| epoch \d+ \|.*?\| wps ([\d.]+) \|")
SPEED_RE = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
                      r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")


class ReproError(Exception):
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


def available_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


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
    p.add_argument("--systems", help="comma-separated system names (default: all of the "
                                     "config's systems file)")
    p.add_argument("--max-update", type=int, help="training updates (overrides the config's)")
    p.add_argument("--out", type=Path, help="results directory (default: the config's 'out')")
    p.add_argument("--checkpoints", type=Path,
                   help="checkpoint directory (default: the config's 'checkpoints')")
    p.add_argument("--data", help="data-bin to use instead of the config's prepared one; "
                                  "{src} and {tgt} are replaced per pair; nothing is prepared")
    p.add_argument("--threads", type=int, default=available_cores(),
                   help="CPU threads of each fairseq process (OMP_NUM_THREADS)")
    p.add_argument("--resume", action="store_true",
                   help="skip systems whose result exists (made with the same commands) and "
                        "let fairseq-train continue an interrupted run from checkpoint_last.pt")
    p.add_argument("--dry-run", action="store_true",
                   help="print the commands and run nothing")
    args = p.parse_args(argv)
    if args.full:
        args.config = settings[args.full].config if settings else paper.full_config
    if args.max_update is not None and args.max_update < 1:
        p.error("--max-update must be at least 1")
    if args.threads < 1:
        p.error("--threads must be at least 1")
    return args


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

def repo_path(path):
    """Paths in configs are relative to the repository root."""
    path = Path(path)
    return path if path.is_absolute() else REPO / path


def shown(path):
    """``path`` relative to the repository root when it lies inside it, else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def read_json(path, what):
    path = Path(path)
    if not path.is_file():
        raise ReproError(f"{what} {path} does not exist")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReproError(f"{what} {path} is not valid JSON: {e}") from e


def check_flags(flags, owned, where, error=ReproError, verb="the script controls"):
    """Refuse a flag list that is not a list of strings or sets a flag in ``owned`` (flag -> where
    its value comes from)."""
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise error(f"{where} must be a list of strings")
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in owned:
            raise error(f"{where} sets {name}, which {verb}; remove it (its value comes from "
                        f"{owned[name]})")


def load_systems(path, arch_override=None):
    """Systems of a systems file by name, in file order, with their links checked."""
    spec = read_json(path, "systems file (the config's 'systems')")
    systems = {}
    for i, system in enumerate(spec.get("systems", [])):
        if not all(isinstance(system.get(k), str) and system[k] for k in ("name", "arch")):
            raise ReproError(f"{path}: systems[{i}] needs string fields 'name' and 'arch'")
        name = system["name"]
        unknown = sorted(set(system) - SYSTEM_KEYS)
        if unknown:
            raise ReproError(f"{path}: system {name!r} has unknown field(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(SYSTEM_KEYS))})")
        if name in systems:
            raise ReproError(f"{path}: system name {name!r} appears twice")
        check_flags(system.get("flags", []), TRAIN_OWNED, f"{path}: system {name!r} flags")
        check_flags(system.get("generate_flags", []), GENERATE_OWNED,
                    f"{path}: system {name!r} generate_flags")
        post = system.get("postprocess")
        if post is not None:
            check_postprocess(post, f"{path}: system {name!r} postprocess")
        systems[name] = {
            "name": name, "arch": arch_override or system["arch"],
            "flags": list(spec.get("common_flags", [])) + list(system.get("flags", [])),
            "tables": list(system.get("tables", [])),
            "checkpoint_of": system.get("checkpoint_of"),
            "generate_flags": list(system.get("generate_flags", [])), "postprocess": post}
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


def load_config(path):
    """The scale config with its systems (in file order) and paper numbers resolved."""
    config = read_json(path, "config (--config)")
    missing = sorted(k for k in CONFIG_KEYS if k not in config)
    if missing:
        raise ReproError(f"config {path} lacks {', '.join(missing)}")
    if config["device"] not in ("cpu", "cuda"):
        raise ReproError(f"config {path}: device must be 'cpu' or 'cuda', not "
                         f"{config['device']!r}")
    if config.get("bpe", "subword_nmt") not in ("subword_nmt", None):
        raise ReproError(f"config {path}: bpe must be 'subword_nmt' or null (word-level data)")
    check_flags(config["train_flags"], TRAIN_OWNED, f"config {path}: train_flags")
    check_flags(config["generate_flags"], GENERATE_OWNED, f"config {path}: generate_flags")
    systems_file = repo_path(config["systems"])
    baseline, systems = load_systems(systems_file, config.get("arch"))
    paper = read_json(repo_path(config["paper"]), "paper numbers (the config's 'paper')")
    return dict(config, path=str(Path(path).resolve()), systems_file=str(systems_file),
                systems=systems, baseline=baseline, paper_numbers=paper)


def parse_pairs(text):
    pairs = []
    for item in text.split(","):
        parts = item.strip().split("-")
        if len(parts) != 2 or not all(re.fullmatch(r"[a-z]{2,3}", x) for x in parts) \
                or parts[0] == parts[1]:
            raise ReproError(f"--pairs: {item.strip()!r} is not a pair like de-en")
        pairs.append(tuple(parts))
    return pairs


def select_systems(systems, wanted, config_path):
    """The wanted systems in file order, with the systems whose checkpoints they decode."""
    if wanted is None:
        return list(systems.values())
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in systems]
    if unknown or not names:
        raise ReproError(f"--systems: unknown system(s) {', '.join(map(repr, unknown)) or '(none)'}"
                         f"; {config_path} has: {', '.join(systems)}")
    names += [systems[n]["checkpoint_of"] for n in names if systems[n]["checkpoint_of"]]
    return [s for name, s in systems.items() if name in names]


def set_flag(flags, flag, value):
    """``flags`` with ``flag``'s value replaced by ``value`` (appended if absent)."""
    flags = list(flags)
    if flag in flags:
        flags[flags.index(flag) + 1] = str(value)
    else:
        flags += [flag, str(value)]
    return flags


def slug(name):
    """A directory name for a system: 'RAN-ALL w/o LN&RES' -> 'RAN-ALL_w-o_LN-RES'."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name.replace(" ", "_")).strip("-")


# ----------------------------------------------------------------------------------------------
# One system on one pair
# ----------------------------------------------------------------------------------------------

class Run:
    """Commands and paths of one (pair, system)."""

    def __init__(self, args, config, pair, system, data):
        src, tgt = pair
        self.pair, self.src, self.tgt, self.system = f"{src}-{tgt}", src, tgt, system
        self.data = data
        self.dir = Path(args.out) / self.pair / slug(system["name"])
        trained = system["checkpoint_of"] or system["name"]
        self.save_dir = Path(args.checkpoints) / self.pair / slug(trained)
        self.trains = system["checkpoint_of"] is None
        common = [str(data), "--user-dir", str(USER_DIR), "--task", "translation",
                  "--source-lang", src, "--target-lang", tgt]
        device = ["--cpu"] if config["device"] == "cpu" else []
        train_flags = config["train_flags"]
        if args.max_update is not None:
            train_flags = set_flag(train_flags, "--max-update", args.max_update)
        self.train_argv = (common + ["--arch", system["arch"], "--save-dir", str(self.save_dir)]
                           + device + train_flags + system["flags"])
        bpe = config.get("bpe", "subword_nmt")
        self.generate_argv = (common + ["--path", str(self.save_dir / config["checkpoint"]),
                                        "--gen-subset", config["gen_subset"]]
                              + (["--post-process", bpe] if bpe else [])
                              + device + config["generate_flags"] + system["generate_flags"])
        self.raw_src = Path(data) / f"{config['gen_subset']}.raw.{src}"
        self.raw_ref = Path(data) / f"{config['gen_subset']}.raw.{tgt}"
        self.postprocess = None
        if system["postprocess"]:
            fields = {"generate": self.dir / "generate.txt", "output": self.dir / "generate.post.txt",
                      "data": data, "src": src, "tgt": tgt, "raw_src": self.raw_src,
                      "raw_ref": self.raw_ref}
            self.postprocess = [part.format(**{k: str(v) for k, v in fields.items()})
                                for part in system["postprocess"]]

    def commands(self):
        cmds = [["fairseq-train"] + self.train_argv] if self.trains else []
        cmds.append(["fairseq-generate"] + self.generate_argv)
        if self.postprocess:
            cmds.append(["python", "-m"] + self.postprocess)
        return cmds


def run_logged(argv, log_path, env, what):
    """``python argv`` with stdout and stderr into ``log_path``; return the log text."""
    cmd = [sys.executable, *argv]
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    text = Path(log_path).read_text()
    if proc.returncode != 0:
        raise ReproError(f"{what} failed with exit code {proc.returncode}: {shlex.join(cmd)}\n"
                         f"--- {log_path} (tail) ---\n{text[-4000:]}")
    return text


def detokenize(hyps, src, tgt):
    """Moses-tokenized hypotheses back to plain text, as ``fairseq-generate --tokenizer moses``
    would print them."""
    from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig

    moses = MosesTokenizer(MosesTokenizerConfig(source_lang=src, target_lang=tgt))
    return [moses.decode(h) for h in hyps]


def tokenized_bleu(hyps, refs):
    """BLEU of tokenized hypotheses against tokenized references split on spaces, as fairseq's
    ``--scoring bleu`` computes it from the H- and T- lines (a reference's ``<<unk>>`` matches
    nothing)."""
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyps, [refs]).score


def training_speed(log):
    """Mean target words/s of fairseq-train's end-of-epoch summaries (None if it logged none)."""
    rates = [float(x) for x in WPS_RE.findall(log)]
    return sum(rates) / len(rates) if rates else None


def execute(run, env, trained):
    """Train (unless ``trained`` holds the result of the system whose checkpoint it decodes),
    decode and score one (pair, system); return its result dict."""
    from .scoring.evaluate import read_generate_output, score

    for path in (run.raw_src, run.raw_ref):
        if not path.is_file():
            raise ReproError(f"{path} is missing: the data-bin needs the raw test text that "
                             f"scripts/prepare-*.sh write (--data)")
    run.dir.mkdir(parents=True, exist_ok=True)
    label = f"({run.pair}, {run.system['name']})"
    if run.trains:
        run.save_dir.mkdir(parents=True, exist_ok=True)
        argv_file = run.save_dir / "train_argv.json"
        if argv_file.is_file() and json.loads(argv_file.read_text()) != run.train_argv:
            raise ReproError(f"{run.save_dir} holds checkpoints trained with other flags; delete "
                             f"it or rerun without --resume")
        argv_file.write_text(json.dumps(run.train_argv))
        start = time.perf_counter()
        log = run_logged(["-m", "fairseq_cli.train", *run.train_argv], run.dir / "train.log", env,
                         f"fairseq-train {label}")
        params = PARAMS_RE.search(log)
        if not params:
            raise ReproError(f"no parameter count in {run.dir / 'train.log'}")
        training = {"params": int(params.group(1).replace(",", "")),
                    "params_trained": int(params.group(2).replace(",", "")),
                    "train_seconds": time.perf_counter() - start,
                    "train_words_per_s": training_speed(log)}
    else:
        training = {k: trained[k] for k in ("params", "params_trained", "train_seconds",
                                            "train_words_per_s")}

    start = time.perf_counter()
    gen = run_logged(["-m", "fairseq_cli.generate", *run.generate_argv], run.dir / "generate.txt",
                     env, f"fairseq-generate {label}")
    generate_seconds = time.perf_counter() - start
    speed = SPEED_RE.search(gen)
    if not speed:
        raise ReproError(f"no timing line in {run.dir / 'generate.txt'}")
    output = run.dir / "generate.txt"
    if run.postprocess:
        run_logged(["-m", *run.postprocess], run.dir / "postprocess.log", env,
                   f"postprocessing {label}")
        output = run.dir / "generate.post.txt"
        if not output.is_file():
            raise ReproError(f"the postprocess command of {label} wrote no {output}")

    hyps_tok = read_generate_output(output, prefix="H")
    refs_tok = read_generate_output(output, prefix="T")
    hyps = detokenize(hyps_tok, run.src, run.tgt)
    hyp_path = run.dir / "hyp.detok.txt"
    hyp_path.write_text("".join(h + "\n" for h in hyps))
    refs = run.raw_ref.read_text(encoding="utf-8").splitlines()
    try:
        sacre = score(hyps, refs)
    except ValueError as e:
        raise ReproError(f"{label}: {e} ({run.raw_ref})") from e

    def number(text):
        return float(text.replace(",", ""))

    return {
        "pair": run.pair, "system": run.system["name"], "arch": run.system["arch"],
        "flags": run.system["flags"], "tables": run.system["tables"],
        "checkpoint_of": run.system["checkpoint_of"], **training,
        "tok_bleu": tokenized_bleu(hyps_tok, refs_tok),
        "sacrebleu": sacre["bleu"][0], "chrf": sacre["chrf"][0], "ter": sacre["ter"][0],
        "signatures": {k: v[1] for k, v in sacre.items()},
        "decode": {"sentences": int(number(speed.group(1))),
                   "tokens": int(number(speed.group(2))), "seconds": number(speed.group(3)),
                   "sentences_per_s": number(speed.group(4)),
                   "tokens_per_s": number(speed.group(5))},
        "generate_seconds": generate_seconds,
        "train_argv": run.train_argv, "generate_argv": run.generate_argv,
        "postprocess": run.postprocess,
    }


def previous_result(run):
    """The stored result of ``run`` if it was made by the same commands; error if by others."""
    path = run.dir / "result.json"
    if not path.is_file():
        return None
    old = json.loads(path.read_text())
    if (old.get("train_argv"), old.get("generate_argv"), old.get("postprocess")) != \
            (run.train_argv, run.generate_argv, run.postprocess):
        raise ReproError(f"{path} was made with other settings; rerun without --resume to "
                         f"redo it, or pick another --out")
    return old


# ----------------------------------------------------------------------------------------------
# Table
# ----------------------------------------------------------------------------------------------

def fmt(value, spec):
    return "" if value is None else format(value, spec)


def ratio(value, base):
    return None if value is None or not base else value / base


def markdown(paper, report):
    numbers, settings = report["paper"], report["settings"]
    baseline = settings["baseline"]
    columns = numbers.get("columns", [])
    heads = (["paper table", "system", "params", "tok BLEU", "sacreBLEU", "chrF", "TER",
              "decode sent/s", "decode tok/s", f"sent/s ×{baseline}", "train words/s",
              "train min", f"train time ×{baseline}"]
             + [c.title for c in paper.columns] + [c["title"] for c in columns])
    m = report["machine"]
    lines = [
        f"# {paper.title}: measured beside the paper",
        "",
        f"Scale config `{settings['config']}`; test set: {settings['test_set']}; "
        f"{settings['max_update']} training updates; {m['device']} ({m['device_name']}), "
        f"{settings['threads']} thread(s) per fairseq process; {m['date']}.",
        "",
        "- **tok BLEU**: BLEU of the tokenized hypotheses against the tokenized references "
        "(fairseq-generate's H- and T- lines, BPE removed; an unknown reference word matches "
        "nothing), as `fairseq-generate --scoring bleu` computes it.",
        f"- **sacreBLEU, chrF, TER**: the hypotheses detokenized by fairseq's Moses tokenizer "
        f"against the raw references (`ran_fairseq.scoring.evaluate`), "
        f"`{settings['signatures'].get('bleu', '')}`, `{settings['signatures'].get('ter', '')}`.",
        f"- **decode**: fairseq-generate's own timing line (`{shlex.join(settings['generate_flags'])}`"
        f"); ×{baseline}: sentences/s over {baseline}'s on the same pair. **params**: "
        f"fairseq-train's count, and how many are trained where fewer are.",
        f"- **train words/s**: the mean of fairseq-train's end-of-epoch `wps`; **train min**: "
        f"wall-clock minutes of fairseq-train; **train time ×{baseline}**: that time over "
        f"{baseline}'s (the paper's 'relative training time').",
        *(f"- {note}" for note in paper.notes),
        f"- **paper**: `{settings['paper_file']}`; {numbers.get('source', '')}. A blank cell is "
        f"a number that file does not have. {numbers.get('status', '')}",
    ]
    for pair in settings["pairs"]:
        rows = [r for r in report["results"] if r["pair"] == pair]
        base = next((r for r in rows if r["system"] == baseline), None)
        lines += ["", f"## {pair}", "", "| " + " | ".join(heads) + " |",
                  "|---|---|" + "---:|" * (len(heads) - 2)]
        for r in rows:
            params = fmt(r["params"], ",d")
            if r["params_trained"] != r["params"]:
                params += f" ({r['params_trained']:,d} trained)"
            decode = r["decode"]
            cells = [", ".join(r["tables"]), r["system"], params,
                     fmt(r["tok_bleu"], ".2f"), fmt(r["sacrebleu"], ".2f"), fmt(r["chrf"], ".2f"),
                     fmt(r["ter"], ".2f"), fmt(decode["sentences_per_s"], ".2f"),
                     fmt(decode["tokens_per_s"], ",.1f"),
                     fmt(ratio(decode["sentences_per_s"],
                               base and base["decode"]["sentences_per_s"]), ".2f"),
                     fmt(r["train_words_per_s"], ",.0f"), fmt(r["train_seconds"] / 60, ".1f"),
                     fmt(ratio(r["train_seconds"], base and base["train_seconds"]), ".2f")]
            cells += [c.cell(r) for c in paper.columns]
            cells += [fmt(c["values"].get(r["system"]), "") for c in columns]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def machine_info(device, threads):
    import torch

    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        cpu = found.group(1).strip() if found else cpu
    return {"device": device,
            "device_name": torch.cuda.get_device_name() if device == "cuda" else cpu,
            "cores": available_cores(), "threads": threads, "torch": torch.__version__,
            "python": platform.python_version(), "load_average": os.getloadavg()[0],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

def prepare(config, pair, log_path, env):
    src, tgt = pair
    cmd = [part.format(src=src, tgt=tgt) for part in config["prepare"]]
    cmd[0] = str(repo_path(cmd[0]))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise ReproError(f"preparing {src}-{tgt} failed: {shlex.join(cmd)}\n--- {log_path} "
                         f"(tail) ---\n{log_path.read_text()[-3000:]}")


def run_all(paper, args):
    config = load_config(args.config)
    pairs = parse_pairs(args.pairs or ",".join(config["pairs"]))
    systems = select_systems(config["systems"], args.systems, config["systems_file"])
    args.out = Path(args.out or repo_path(config["out"])).resolve()
    args.checkpoints = Path(args.checkpoints or repo_path(config["checkpoints"])).resolve()
    data_template = args.data or str(repo_path(config["data"]))
    runs = [Run(args, config, pair, system,
                Path(data_template.format(src=pair[0], tgt=pair[1])).resolve())
            for pair in pairs for system in systems]
    name = f"reproduce-{paper.key}"
    if args.dry_run:
        for run in runs:
            print(f"# {run.pair} {run.system['name']}")
            for cmd in run.commands():
                print(shlex.join(cmd))
        return
    if config["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ReproError(f"{args.config} trains on a GPU and torch sees none; use "
                             f"--dry-run to print the commands, or the CPU config")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               PYTHONUNBUFFERED="1")
    if args.data is None:
        for pair in pairs:
            print(f"{name}: preparing {pair[0]}-{pair[1]}", file=sys.stderr, flush=True)
            prepare(config, pair, args.out / f"prepare.{pair[0]}-{pair[1]}.log", env)
    results, done = [], {}
    for run in runs:
        label = f"{run.pair} {run.system['name']}"
        old = previous_result(run) if args.resume else None
        if old is not None:
            print(f"{name}: {label}: done before, skipped (--resume)", file=sys.stderr)
        else:
            if not args.resume:
                if run.trains:
                    shutil.rmtree(run.save_dir, ignore_errors=True)
                shutil.rmtree(run.dir, ignore_errors=True)
            print(f"{name}: {label} ...", file=sys.stderr, flush=True)
            trained = done.get((run.pair, run.system["checkpoint_of"]))
            old = execute(run, env, trained)
            if paper.measure is not None:
                old.update(paper.measure(run, old))
            (run.dir / "result.json").write_text(json.dumps(old, indent=2) + "\n")
            print(f"{name}: {label}: tok BLEU {old['tok_bleu']:.2f}, sacreBLEU "
                  f"{old['sacrebleu']:.2f}, TER {old['ter']:.2f}, "
                  f"{old['decode']['sentences_per_s']:.2f} sent/s, "
                  f"{old['train_seconds'] / 60:.1f} min training", file=sys.stderr, flush=True)
        done[(run.pair, run.system["name"])] = old
        results.append(old)

    train_argv = runs[0].train_argv
    max_update = (train_argv[train_argv.index("--max-update") + 1]
                  if "--max-update" in train_argv else "fairseq's default number of")
    report = {
        "settings": {
            "config": shown(config["path"]), "test_set": config["test_set"],
            "paper_file": shown(repo_path(config["paper"])), "baseline": config["baseline"],
            "data": data_template, "pairs": [f"{s}-{t}" for s, t in pairs],
            "systems": [s["name"] for s in systems],
            "max_update": max_update, "threads": args.threads,
            "generate_flags": config["generate_flags"],
            "signatures": results[0]["signatures"]},
        "machine": machine_info(config["device"], args.threads),
        "paper": config["paper_numbers"], "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(paper, report)
    (args.out / "TABLE.md").write_text(table)
    print(table)


def main(paper: Paper, argv: Optional[List[str]] = None):
    args = parse_cli(paper, sys.argv[1:] if argv is None else argv)
    try:
        run_all(paper, args)
    except ReproError as e:
        sys.exit(f"reproduce-{paper.key}: error: {e}")
