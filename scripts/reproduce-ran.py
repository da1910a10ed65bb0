#!/usr/bin/env python3
"""Reproduce the shape of Zeng et al. (2021), "Recurrent Attention for Neural Machine
Translation", Tables 1-3: every system trained, decoded and scored on each language pair, as a
markdown table beside the paper's published numbers.

A scale config (``configs/ran/cpu.json``; ``--full``: ``configs/ran/wmt14-base.json``) names the
systems file (``configs/ran/systems.json``: name, arch, flags and the paper tables of each system),
the paper's numbers (``configs/ran/paper.json``), the data and the fairseq flags; no
hyper-parameter lives in this script. For each pair and system, with the plugin loaded:

1. the config's ``prepare`` command (a no-op when the data-bin is up to date), unless ``--data``;
2. ``fairseq-train DATA --arch ARCH [train_flags] [system flags]`` into CHECKPOINTS/PAIR/SYSTEM;
3. ``fairseq-generate`` on the test set with the config's flags (beam 4), ``--post-process
   subword_nmt --scoring bleu``: fairseq's BLEU of the Moses-tokenized hypotheses, BPE removed,
   against the tokenized references ("tok BLEU");
4. those hypotheses detokenized by fairseq's Moses tokenizer and scored against the raw
   references with sacreBLEU by ``python -m ran_fairseq.scoring.evaluate``;
5. the parameter count from fairseq-train's log and the decoding speed from fairseq-generate's
   own timing line.

Writes OUT/PAIR/SYSTEM/{train.log, generate.txt, hyp.detok.txt, result.json}, OUT/results.json
(every result, with settings and machine) and OUT/TABLE.md.

    python scripts/reproduce-ran.py --pairs de-en --systems TransF,RAN-ALL --max-update 300
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "ran_fairseq"
CPU_CONFIG = REPO / "configs" / "ran" / "cpu.json"
FULL_CONFIG = REPO / "configs" / "ran" / "wmt14-base.json"
BASELINE = "TransF"  # speed ratios are to this system of the same pair

CONFIG_KEYS = {"systems", "paper", "pairs", "data", "prepare", "test_set", "gen_subset", "device",
               "out", "checkpoints", "checkpoint", "train_flags", "generate_flags"}
# Flags the script sets itself, refused in a config: flag -> where its value comes from.
TRAIN_OWNED = {
    "--arch": "the system's arch (or the config's 'arch')", "-a": "the system's arch",
    "--save-dir": "--checkpoints / the config's 'checkpoints'",
    "--source-lang": "--pairs", "-s": "--pairs", "--target-lang": "--pairs", "-t": "--pairs",
    "--task": "nothing (translation)", "--user-dir": "nothing (the plugin)",
    "--cpu": "the config's 'device'",
}
GENERATE_OWNED = dict(TRAIN_OWNED, **{
    "--path": "the config's 'checkpoint'", "--gen-subset": "the config's 'gen_subset'",
    "--post-process": "nothing (subword_nmt, for tokenized BLEU)", "--remove-bpe": "nothing",
    "--scoring": "nothing (bleu)", "--bpe": "nothing", "--tokenizer": "nothing",
    "--results-path": "nothing (OUT/PAIR/SYSTEM/generate.txt)", "--quiet": "nothing",
})

PARAMS_RE = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")
BLEU_RE = re.compile(r"^Generate \S+ with beam=\d+: BLEU4 = ([\d.]+)(.*)$", re.M)
SPEED_RE = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
                      r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")


class ReproError(Exception):
    """A problem with the input or a failed step; the message names it and what to change."""


def available_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def parse_cli(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--config", type=Path, default=CPU_CONFIG,
                       help="scale config (JSON): systems, data, fairseq flags")
    scale.add_argument("--full", action="store_true",
                       help=f"full-size settings for GPUs: --config {FULL_CONFIG.relative_to(REPO)}"
                            " (WMT'14 En-De, ran_transformer base, the paper's hyper-parameters)")
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
        args.config = FULL_CONFIG
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


def read_json(path, what):
    path = Path(path)
    if not path.is_file():
        raise ReproError(f"{what} {path} does not exist")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReproError(f"{what} {path} is not valid JSON: {e}") from e


def check_flags(flags, owned, where):
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ReproError(f"{where} must be a list of strings")
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in owned:
            raise ReproError(f"{where} sets {name}, which the script controls; remove it "
                             f"(its value comes from {owned[name]})")


def load_config(path):
    """The scale config with its systems (in file order) and paper numbers resolved."""
    config = read_json(path, "config (--config)")
    missing = sorted(k for k in CONFIG_KEYS if k not in config)
    if missing:
        raise ReproError(f"config {path} lacks {', '.join(missing)}")
    if config["device"] not in ("cpu", "cuda"):
        raise ReproError(f"config {path}: device must be 'cpu' or 'cuda', not "
                         f"{config['device']!r}")
    check_flags(config["train_flags"], TRAIN_OWNED, f"config {path}: train_flags")
    check_flags(config["generate_flags"], GENERATE_OWNED, f"config {path}: generate_flags")
    systems_file = repo_path(config["systems"])
    spec = read_json(systems_file, "systems file (the config's 'systems')")
    systems = {}
    for i, system in enumerate(spec.get("systems", [])):
        if not all(isinstance(system.get(k), str) and system[k] for k in ("name", "arch")):
            raise ReproError(f"{systems_file}: systems[{i}] needs string fields 'name' and 'arch'")
        check_flags(system.get("flags", []), TRAIN_OWNED,
                    f"{systems_file}: system {system['name']!r} flags")
        systems[system["name"]] = {
            "name": system["name"], "arch": config.get("arch", system["arch"]),
            "flags": list(spec.get("common_flags", [])) + list(system.get("flags", [])),
            "tables": list(system.get("tables", []))}
    if not systems:
        raise ReproError(f"{systems_file} lists no systems")
    dirs = [slug(name) for name in systems]
    if len(set(dirs)) != len(dirs):
        raise ReproError(f"{systems_file}: system names must differ in more than punctuation "
                         f"(their directories: {', '.join(dirs)})")
    paper = read_json(repo_path(config["paper"]), "paper numbers (the config's 'paper')")
    return dict(config, path=str(Path(path).resolve()), systems_file=str(systems_file),
                systems=systems, paper_numbers=paper)


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
    if wanted is None:
        return list(systems.values())
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in systems]
    if unknown or not names:
        raise ReproError(f"--systems: unknown system(s) {', '.join(map(repr, unknown)) or '(none)'}"
                         f"; {config_path} has: {', '.join(systems)}")
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
        self.save_dir = Path(args.checkpoints) / self.pair / slug(system["name"])
        common = [str(data), "--user-dir", str(USER_DIR), "--task", "translation",
                  "--source-lang", src, "--target-lang", tgt]
        device = ["--cpu"] if config["device"] == "cpu" else []
        train_flags = config["train_flags"]
        if args.max_update is not None:
            train_flags = set_flag(train_flags, "--max-update", args.max_update)
        self.train_argv = (common + ["--arch", system["arch"], "--save-dir", str(self.save_dir)]
                           + device + train_flags + system["flags"])
        self.generate_argv = (common + ["--path", str(self.save_dir / config["checkpoint"]),
                                        "--gen-subset", config["gen_subset"],
                                        "--post-process", "subword_nmt", "--scoring", "bleu"]
                              + device + config["generate_flags"])
        self.raw_ref = Path(data) / f"{config['gen_subset']}.raw.{tgt}"

    def commands(self):
        return [["fairseq-train"] + self.train_argv, ["fairseq-generate"] + self.generate_argv]


def run_logged(module, argv, log_path, env, what):
    """``python -m module argv`` with stdout and stderr into ``log_path``; return the log text."""
    cmd = [sys.executable, "-m", module, *argv]
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


def sacrebleu_score(hyp_path, ref_path, env):
    cmd = [sys.executable, "-m", "ran_fairseq.scoring.evaluate", "--hyp", str(hyp_path),
           "--ref", str(ref_path), "--metrics", "bleu", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise ReproError(f"scoring failed: {shlex.join(cmd)}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)["bleu"]


def execute(run, env):
    """Train, decode and score one (pair, system); return its result dict."""
    from ran_fairseq.scoring.evaluate import read_generate_output

    if not run.raw_ref.is_file():
        raise ReproError(f"{run.raw_ref} is missing: the data-bin needs the raw references "
                         f"that scripts/prepare-*.sh write (--data)")
    run.dir.mkdir(parents=True, exist_ok=True)
    run.save_dir.mkdir(parents=True, exist_ok=True)
    argv_file = run.save_dir / "train_argv.json"
    if argv_file.is_file() and json.loads(argv_file.read_text()) != run.train_argv:
        raise ReproError(f"{run.save_dir} holds checkpoints trained with other flags; delete it "
                         f"or rerun without --resume")
    argv_file.write_text(json.dumps(run.train_argv))

    start = time.perf_counter()
    log = run_logged("fairseq_cli.train", run.train_argv, run.dir / "train.log", env,
                     f"fairseq-train ({run.pair}, {run.system['name']})")
    train_seconds = time.perf_counter() - start
    params = PARAMS_RE.search(log)
    if not params:
        raise ReproError(f"no parameter count in {run.dir / 'train.log'}")

    start = time.perf_counter()
    gen = run_logged("fairseq_cli.generate", run.generate_argv, run.dir / "generate.txt", env,
                     f"fairseq-generate ({run.pair}, {run.system['name']})")
    generate_seconds = time.perf_counter() - start
    bleu, speed = BLEU_RE.search(gen), SPEED_RE.search(gen)
    if not (bleu and speed):
        raise ReproError(f"no BLEU or timing line in {run.dir / 'generate.txt'}")

    hyps = detokenize(read_generate_output(run.dir / "generate.txt", prefix="H"),
                      run.src, run.tgt)
    hyp_path = run.dir / "hyp.detok.txt"
    hyp_path.write_text("".join(h + "\n" for h in hyps))
    sacre = sacrebleu_score(hyp_path, run.raw_ref, env)

    def number(text):
        return float(text.replace(",", ""))

    return {
        "pair": run.pair, "system": run.system["name"], "arch": run.system["arch"],
        "flags": run.system["flags"], "tables": run.system["tables"],
        "params": int(number(params.group(1))), "params_trained": int(number(params.group(2))),
        "tok_bleu": float(bleu.group(1)), "tok_bleu_line": bleu.group(0).strip(),
        "sacrebleu": sacre["score"], "sacrebleu_signature": sacre["signature"],
        "decode": {"sentences": int(number(speed.group(1))),
                   "tokens": int(number(speed.group(2))), "seconds": number(speed.group(3)),
                   "sentences_per_s": number(speed.group(4)),
                   "tokens_per_s": number(speed.group(5))},
        "train_seconds": train_seconds, "generate_seconds": generate_seconds,
        "train_argv": run.train_argv, "generate_argv": run.generate_argv,
    }


def previous_result(run):
    """The stored result of ``run`` if it was made by the same commands; error if by others."""
    path = run.dir / "result.json"
    if not path.is_file():
        return None
    old = json.loads(path.read_text())
    if old.get("train_argv") != run.train_argv or old.get("generate_argv") != run.generate_argv:
        raise ReproError(f"{path} was made with other settings; rerun without --resume to "
                         f"redo it, or pick another --out")
    return old


# ----------------------------------------------------------------------------------------------
# Table
# ----------------------------------------------------------------------------------------------

def shown(path):
    """``path`` relative to the repository root when it lies inside it, else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def fmt(value, spec):
    return "" if value is None else format(value, spec)


def markdown(report):
    paper, settings = report["paper"], report["settings"]
    columns = paper.get("columns", [])
    heads = (["paper table", "system", "params", "tok BLEU", "sacreBLEU", "decode sent/s",
              "decode tok/s", f"sent/s ×{BASELINE}", "train min"] + [c["title"] for c in columns])
    m = report["machine"]
    lines = [
        "# Zeng et al. (2021), Tables 1–3: measured beside the paper",
        "",
        f"Scale config `{settings['config']}`; test set: {settings['test_set']}; "
        f"{settings['max_update']} training updates; {m['device']} ({m['device_name']}), "
        f"{settings['threads']} thread(s) per fairseq process; {m['date']}.",
        "",
        "- **tok BLEU**: fairseq's BLEU (`fairseq-generate --scoring bleu --post-process "
        "subword_nmt`) of the Moses-tokenized hypotheses, BPE removed, against the tokenized "
        "references (unknown reference words never match).",
        f"- **sacreBLEU**: the hypotheses detokenized by fairseq's Moses tokenizer against the "
        f"raw references (`python -m ran_fairseq.scoring.evaluate`), "
        f"`{settings['sacrebleu_signature']}`.",
        f"- **decode**: fairseq-generate's own timing line (`{shlex.join(settings['generate_flags'])}`"
        f"); ×{BASELINE}: sentences/s over {BASELINE}'s on the same pair. **params**: "
        f"fairseq-train's count, and how many are trained where fewer are (the 'fixed' ablation). "
        f"**train min**: wall-clock minutes of fairseq-train.",
        f"- **paper**: `{settings['paper_file']}`; {paper.get('source', '')}. A blank cell is "
        f"a number that file does not have. {paper.get('status', '')}",
    ]
    for pair in settings["pairs"]:
        rows = [r for r in report["results"] if r["pair"] == pair]
        base = next((r for r in rows if r["system"] == BASELINE), None)
        lines += ["", f"## {pair}", "", "| " + " | ".join(heads) + " |",
                  "|---|---|" + "---:|" * (len(heads) - 2)]
        for r in rows:
            ratio = (r["decode"]["sentences_per_s"] / base["decode"]["sentences_per_s"]
                     if base else None)
            params = fmt(r["params"], ",d")
            if r["params_trained"] != r["params"]:
                params += f" ({r['params_trained']:,d} trained)"
            cells = [", ".join(r["tables"]), r["system"], params,
                     fmt(r["tok_bleu"], ".2f"), fmt(r["sacrebleu"], ".2f"),
                     fmt(r["decode"]["sentences_per_s"], ".2f"),
                     fmt(r["decode"]["tokens_per_s"], ",.1f"), fmt(ratio, ".2f"),
                     fmt(r["train_seconds"] / 60, ".1f")]
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


def main_run(args):
    config = load_config(args.config)
    pairs = parse_pairs(args.pairs or ",".join(config["pairs"]))
    systems = select_systems(config["systems"], args.systems, config["systems_file"])
    args.out = Path(args.out or repo_path(config["out"])).resolve()
    args.checkpoints = Path(args.checkpoints or repo_path(config["checkpoints"])).resolve()
    data_template = args.data or str(repo_path(config["data"]))
    runs = [Run(args, config, pair, system,
                Path(data_template.format(src=pair[0], tgt=pair[1])).resolve())
            for pair in pairs for system in systems]
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
            print(f"reproduce-ran: preparing {pair[0]}-{pair[1]}", file=sys.stderr, flush=True)
            prepare(config, pair, args.out / f"prepare.{pair[0]}-{pair[1]}.log", env)
    results = []
    for run in runs:
        label = f"{run.pair} {run.system['name']}"
        old = previous_result(run) if args.resume else None
        if old is not None:
            print(f"reproduce-ran: {label}: done before, skipped (--resume)", file=sys.stderr)
            results.append(old)
            continue
        if not args.resume:
            shutil.rmtree(run.save_dir, ignore_errors=True)
            shutil.rmtree(run.dir, ignore_errors=True)
        print(f"reproduce-ran: {label} ...", file=sys.stderr, flush=True)
        result = execute(run, env)
        (run.dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"reproduce-ran: {label}: tok BLEU {result['tok_bleu']:.2f}, sacreBLEU "
              f"{result['sacrebleu']:.2f}, {result['decode']['sentences_per_s']:.2f} sent/s, "
              f"{result['train_seconds'] / 60:.1f} min training", file=sys.stderr, flush=True)
        results.append(result)

    train_argv = runs[0].train_argv
    max_update = (train_argv[train_argv.index("--max-update") + 1]
                  if "--max-update" in train_argv else "fairseq's default number of")
    report = {
        "settings": {
            "config": shown(config["path"]), "test_set": config["test_set"],
            "paper_file": shown(repo_path(config["paper"])),
            "data": data_template, "pairs": [f"{s}-{t}" for s, t in pairs],
            "systems": [s["name"] for s in systems],
            "max_update": max_update, "threads": args.threads,
            "generate_flags": config["generate_flags"],
            "sacrebleu_signature": results[0]["sacrebleu_signature"]},
        "machine": machine_info(config["device"], args.threads),
        "paper": config["paper_numbers"], "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (args.out / "TABLE.md").write_text(table)
    print(table)


def main(argv=None):
    args = parse_cli(sys.argv[1:] if argv is None else argv)
    try:
        main_run(args)
    except ReproError as e:
        sys.exit(f"reproduce-ran: error: {e}")


if __name__ == "__main__":
    main()
