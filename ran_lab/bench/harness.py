"""The parent of a benchmark: the systems and the data checked, one worker process per system
with its fairseq-train command line, the workers' results gathered with the machine they ran on,
written as OUT/bench.json and OUT/bench.md; a speed sweep runs the benchmark once per point."""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ran_lab.common.launcher import launched
from ran_lab.common.flags import GPU_ONLY_FLAG, check_device_flags, flag_names
from ran_lab.common.machine import bench_machine_info
from ran_lab.common.paths import REPO, shown, slug

from .report import add_ratios, markdown, progress_line, sweep_rows
from .settings import LIVE_MEMORY_MMAP_THRESHOLD, SWEEP_FIELDS, WORKER_SETTINGS
from ran_lab.common import LabError
from .systems import chosen_systems, read_systems

USER_DIR = REPO / "ran_fairseq"


def check_data(data, src, tgt):
    data = Path(data)
    if not data.is_dir():
        raise LabError(f"data directory {data} does not exist (--data)")
    langs = [src, tgt] if src and tgt else []
    missing = [f"dict.{lang}.txt" for lang in langs if not (data / f"dict.{lang}.txt").is_file()]
    if missing or not list(data.glob("dict.*.txt")):
        raise LabError(f"{data} is not a fairseq-preprocess output directory for this language "
                         f"pair: missing {', '.join(missing) or 'dict.*.txt'} (--data, "
                         f"--source-lang, --target-lang)")
    return data.resolve()


def resolve_device(device):
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise LabError("--device cuda: torch sees no CUDA device; use --device cpu")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def check_device(args, common, selected, device):
    """Refuse what the device cannot run: fairseq's --fp16 training on a CPU (from the config or
    the systems file), --fp16 or --cuda-launches without CUDA, --live-memory with it."""
    where = (f"--train-flags-of {args.train_flags_of}" if GPU_ONLY_FLAG in
             flag_names(args.config_flags) else f"{args.systems} (common_flags)")
    check_device_flags(device, args.config_flags + common, selected, where,
                       "time it on a GPU (--device cuda), or on the CPU without the flag (a "
                       "config or systems file without it)")
    if args.fp16 and device != "cuda":
        raise LabError("--fp16 trains in float16, which fairseq runs on CUDA only: drop --fp16 "
                         "or use --device cuda")
    if args.cuda_launches and device != "cuda":
        raise LabError("--cuda-launches counts GPU kernels: drop it or use --device cuda")
    if args.live_memory and device == "cuda":
        raise LabError("--live-memory applies to CPU memory; on CUDA the peak is already the "
                         "memory allocated to live tensors: drop --live-memory or use "
                         "--device cpu")


def fairseq_argv(data, system, common, args, device):
    """The fairseq-train command line (without the program name) for one system."""
    # the checkout's files relative to it (the worker runs in it), so bench.json names them so
    argv = [shown(data), "--user-dir", shown(USER_DIR), "--task", "translation",
            "--arch", system["arch"], "--max-tokens", str(args.max_tokens),
            "--seed", str(args.seed), "--num-workers", "0"]
    if args.source_lang and args.target_lang:
        argv += ["--source-lang", args.source_lang, "--target-lang", args.target_lang]
    if device == "cpu":
        argv.append("--cpu")
    if getattr(args, "fp16", False):
        argv.append("--fp16")
    return argv + args.config_flags + common + system["flags"]


def system_checkpoint(pattern, name):
    """The checkpoint of system ``name`` under ``--checkpoint PATTERN``, which must exist."""
    path = Path(pattern.replace("{system}", slug(name)))
    if not path.is_file():
        raise LabError(f"system {name!r}: no checkpoint at {path} (--checkpoint)")
    return shown(path)


# ----------------------------------------------------------------------------------------------
# Worker processes
# ----------------------------------------------------------------------------------------------

def worker_files(workdir, name):
    """The spec and result files of system ``name``'s worker in ``workdir``: a file name made of
    the system's (which may hold '/', as 'RAN-ALL w/o LN&RES'), distinct for distinct names."""
    stem = f"{slug(name)}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return Path(workdir) / f"{stem}.spec.json", Path(workdir) / f"{stem}.result.json"


def worker_env(spec):
    """The worker's environment: its threads, unbuffered output, this checkout's ran_fairseq
    first on the path, and glibc's mmap threshold under --live-memory."""
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]),
               MKL_NUM_THREADS=str(spec["threads"]), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]]
                                                       if env.get("PYTHONPATH") else []))
    if spec["live_memory"]:
        env["MALLOC_MMAP_THRESHOLD_"] = str(LIVE_MEMORY_MMAP_THRESHOLD)
    return env


def run_worker_process(spec, workdir):
    """Run one system's worker; return its result dict or raise LabError with its stderr."""
    spec_path, result_path = worker_files(workdir, spec["name"])
    spec["result_path"] = str(result_path)
    spec_path.write_text(json.dumps(spec))
    cmd, env = [sys.executable, "-m", "ran_lab.bench.worker", str(spec_path)], worker_env(spec)
    if not spec["live_memory"]:  # glibc reads the mmap threshold when a new interpreter starts
        cmd = launched(cmd, env)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    result_path = Path(spec["result_path"])
    if proc.returncode != 0 or not result_path.is_file():
        raise LabError(
            f"system {spec['name']!r} (arch {spec['arch']}) failed with exit code "
            f"{proc.returncode}\nfairseq flags: {' '.join(spec['argv'])}\n"
            f"--- worker stderr (tail) ---\n{proc.stderr[-5000:]}")
    return json.loads(result_path.read_text())


def run_systems(selected, data, common, args, device, settings):
    """One worker per system, one after another; their results in the same order."""
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
        for system in selected:
            print(f"bench: {system['name']} ({system['arch']}) ...", file=sys.stderr, flush=True)
            spec = dict(system, argv=fairseq_argv(data, system, common, args, device),
                        device=device, threads=args.threads, live_memory=args.live_memory,
                        **{k: settings[k] for k in WORKER_SETTINGS})
            if args.checkpoint:
                spec["checkpoint"] = system_checkpoint(args.checkpoint, system["name"])
            results.append(run_worker_process(spec, workdir))
            print(f"bench: {system['name']}: {progress_line(results[-1])}", file=sys.stderr,
                  flush=True)
    return results


# ----------------------------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------------------------

def bench_settings(args, data, baseline, common, device):
    """The settings bench.json records (WORKER_SETTINGS among them)."""
    return {
        "data": shown(data), "systems_file": shown(args.systems),
        "baseline": baseline, "common_flags": common,
        "train_flags_of": args.train_flags_of, "config_flags": args.config_flags,
        "config_arch": args.config_arch,
        "source_lang": args.source_lang, "target_lang": args.target_lang,
        "train_updates": args.train_updates, "warmup_updates": args.warmup_updates,
        "max_tokens": args.max_tokens, "beam": args.beam,
        "decode_batch_size": args.decode_batch_size, "decode_sentences": args.decode_sentences,
        "decode_repeats": args.decode_repeats, "gen_subset": args.gen_subset,
        "max_len_a": args.max_len_a, "max_len_b": args.max_len_b,
        "decode_length": args.decode_length, "seed": args.seed,
        "also_decode_lengths": args.also_decode_lengths, "fp16": args.fp16,
        "warm_shapes": args.warm_shapes,
        "count_kernels": args.count_kernels, "count_sentences": args.count_sentences,
        "count_subset": args.count_subset, "cuda_launches": args.cuda_launches,
        "decode_breakdown": args.decode_breakdown,
        "checkpoint": args.checkpoint,
        "memory": ("torch.cuda.max_memory_allocated; increment over memory_allocated at the "
                   "phase start" if device == "cuda" else
                   "peak resident set size (VmHWM, reset at each phase start); increment over "
                   "the RSS at the phase start"),
        "live_memory": args.live_memory,
    }


def run_benchmark(args, out):
    """One benchmark run of every selected system into ``out``; returns the report."""
    systems = read_systems(args.systems)
    baseline, common = systems.baseline, systems.common_flags
    if args.config_arch:  # as the reproduction engine trains a config with an 'arch'
        for system in systems.systems.values():
            system["arch"] = args.config_arch
    selected = chosen_systems(systems, args.systems_only)
    data = check_data(args.data, args.source_lang, args.target_lang)
    device = resolve_device(args.device)
    check_device(args, common, selected, device)
    settings = bench_settings(args, data, baseline, common, device)
    load_before = os.getloadavg()[0]
    results = run_systems(selected, data, common, args, device, settings)
    if not all(r["train"]["mem_peak_since_phase_start"] for r in results):
        settings["memory"] = ("process-lifetime peak resident set size (ru_maxrss; this kernel "
                              "cannot reset VmHWM); increment over the RSS at the phase start")
    add_ratios(results, baseline)
    env = [r.pop("environment") for r in results][0]
    threshold = env["malloc_mmap_threshold"]  # set by --live-memory or by the user
    if device == "cpu" and threshold:
        settings["memory"] += (f", with MALLOC_MMAP_THRESHOLD_={threshold} (freed tensors are "
                               "returned to the system)")
    report = {"machine": bench_machine_info(device, args.threads, env, load_before),
              "settings": settings, "systems": results}
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (out / "bench.md").write_text(table)
    print(table)
    return report


def run_parent(args):
    """The benchmark into --out, or once per point of --sweep-batch-sizes and --sweep-beams into
    OUT/batch-N and OUT/beam-K with the sweep's CSV and plot."""
    if not (args.sweep_batch_sizes or args.sweep_beams):
        return run_benchmark(args, Path(args.out))
    from ran_lab.analysis.plots import plot_speed_sweep
    from ran_lab.analysis.tables import write_csv

    out = Path(args.out)
    points = ([("batch", dict(decode_batch_size=n), f"batch-{n}")
               for n in args.sweep_batch_sizes or []]
              + [("beam", dict(beam=k), f"beam-{k}") for k in args.sweep_beams or []])
    rows = []
    for sweep, change, folder in points:
        print(f"bench: sweep point {folder}", file=sys.stderr, flush=True)
        report = run_benchmark(argparse.Namespace(**{**vars(args), **change}), out / folder)
        rows += sweep_rows(sweep, report)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "speed-sweep.csv", rows, SWEEP_FIELDS)
    plot_speed_sweep(rows, out / "speed-sweep.png")
    print(out / "speed-sweep.csv")
    print(out / "speed-sweep.png")
