"""Speed, memory and size benchmark of fairseq translation systems on one binarized data set.

The command line of the benchmark (``ran-bench``, ``python -m ran_lab.bench``,
``scripts/bench.py``, whose docstring and docs/benchmarks.md tell its use): the options checked,
then :func:`ran_lab.bench.harness.run_parent`.
"""
import argparse
import sys

from ran_lab import checkout
from ran_lab.common.machine import available_cores

from .harness import run_parent
from .settings import LIVE_MEMORY_MMAP_THRESHOLD
from ran_lab.common import LabError
from .systems import train_flags_of
from ran_text.textio import one_line_errors

DESCRIPTION = __doc__.split("\n\n")[0]


def add_run_options(p):
    """What runs: the data, the systems, where the results go, training and decoding."""
    p.add_argument("--data", required=True, help="fairseq-preprocess output directory")
    p.add_argument("--systems", required=True, help="systems file (JSON)")
    p.add_argument("--out", required=True, help="directory for bench.json and bench.md")
    p.add_argument("--source-lang", help="source language (default: inferred from --data)")
    p.add_argument("--target-lang", help="target language (default: inferred from --data)")
    p.add_argument("--train-flags-of", metavar="CONFIG",
                   help="take the training flags of a reproduction config (e.g. "
                        "configs/recurrent_cross/cpu.json, its 'base' and 'set_train_flags' "
                        "applied) before the systems file's common flags, so that the benchmark "
                        "trains as the reproduction does; flags the harness sets itself are "
                        "left out, and the config's --max-tokens is the default of --max-tokens; "
                        "a config with an 'arch' (the full-size ones) trains every system at "
                        "that architecture, as the reproduction does")
    p.add_argument("--systems-only",
                   help="comma-separated system names to run; the baseline is always included")
    p.add_argument("--train-updates", type=int, default=20, help="timed training updates")
    p.add_argument("--warmup-updates", type=int, default=3,
                   help="untimed updates before timing (not fairseq's LR --warmup-updates, "
                        "which belongs in the systems file)")
    p.add_argument("--max-tokens", type=int,
                   help="fairseq --max-tokens per update (default: --train-flags-of's, else 4096)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--decode-batch-size", type=int, default=64, help="sentences per decoding batch")
    p.add_argument("--decode-sentences", type=int, default=200,
                   help="decode the first N sentences of --gen-subset")
    p.add_argument("--decode-repeats", type=int, default=1, metavar="K",
                   help="time K passes over the decoded sentences and report the median pass, "
                        "to damp other load on the machine (bench.json keeps every pass)")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--max-len-a", type=float, default=1.2,
                   help="hypotheses stop at max-len-a * source length + max-len-b tokens")
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--decode-length", type=int, metavar="N",
                   help="force every hypothesis to N tokens plus EOS (overrides --max-len-a/-b), "
                        "so that systems do the same decoding work whatever they predict: "
                        "compare decoding speed of untrained or unequally trained models")
    p.add_argument("--also-decode-lengths", type=int, nargs="+", metavar="N", default=[],
                   help="with --decode-length: time decoding again at each forced length N "
                        "(a table of its own in bench.md)")
    p.add_argument("--warm-shapes", action="store_true",
                   help="before timing, train one untimed update on each of the timed batches, so "
                        "that costs paid once per new batch shape (GPU libraries' per-shape plans "
                        "and autotuning, the allocator's growth) fall outside the timing: the "
                        "steady state of a long training, where shapes repeat")
    p.add_argument("--fp16", action="store_true",
                   help="train and decode in float16 (fairseq's --fp16; CUDA only)")


def add_measure_options(p):
    """What is measured beside the timings, on which device, and the sweeps."""
    p.add_argument("--count-kernels", action="store_true",
                   help="add each system's kernel counts (ran_lab/bench/kernels.py: aten "
                        "operators dispatched on the CPU in float32, views excluded) per "
                        "decoding step of the first decoding batch at --decode-length, and per "
                        "training step (forward and backward) over the first --count-sentences "
                        "sentences of --count-subset, by component; beside the decoding "
                        "count, the Python calls per step (cProfile)")
    p.add_argument("--count-sentences", type=int, default=64,
                   help="sentences of the training step --count-kernels counts")
    p.add_argument("--count-subset", default="valid",
                   help="the split whose first sentences --count-kernels trains on")
    p.add_argument("--cuda-launches", action="store_true",
                   help="CUDA: also count the kernels the GPU ran in one decoding batch per "
                        "forced length (torch.profiler), per decoding step")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=available_cores(),
                   help="torch CPU threads per worker")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--decode-breakdown", action="store_true",
                   help="time one more decoding pass by part (encoder, self-attention and its "
                        "value/output projections, cross-attention, feed-forward, output "
                        "projection, cache reorder, rest) and add a table of the shares")
    p.add_argument("--checkpoint", metavar="PATTERN",
                   help="decode trained weights: the checkpoint at PATTERN, '{system}' replaced "
                        "by each system's folder name (its name with spaces as '_' and other "
                        "signs as '-', as the reproduction engine names it)")
    p.add_argument("--sweep-batch-sizes", type=int, nargs="+", metavar="N",
                   help="Fig. 3: run once per decoding batch size N (at --beam) and plot "
                        "decoding speed against it (OUT/speed-sweep.csv and .png)")
    p.add_argument("--sweep-beams", type=int, nargs="+", metavar="K",
                   help="Fig. 3: run once per beam size K (at --decode-batch-size) and plot "
                        "decoding speed against it")
    p.add_argument("--live-memory", action="store_true",
                   help="CPU: run the workers with glibc's MALLOC_MMAP_THRESHOLD_=%d, so that "
                        "freed tensors go back to the system and the resident set follows the "
                        "memory in use, as CUDA's max_memory_allocated does, instead of also "
                        "holding freed heap (allocation gets slower)" % LIVE_MEMORY_MMAP_THRESHOLD)


def parser(prog=None):
    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_run_options(p)
    add_measure_options(p)
    return p


def take_config_flags(p, args):
    """--train-flags-of: the config's training flags, its --max-tokens and its arch on ``args``;
    then --max-tokens's default."""
    args.config_flags, args.config_max_tokens, args.config_arch = [], None, None
    if args.train_flags_of:
        try:
            args.config_flags, args.config_max_tokens, args.config_arch = \
                train_flags_of(args.train_flags_of)
        except LabError as e:
            p.error(str(e))
    if args.max_tokens is None:
        args.max_tokens = args.config_max_tokens or 4096


def check_args(p, args):
    """Refuse values out of range and options that need another one."""
    for flag in ("train_updates", "max_tokens", "beam", "decode_batch_size", "decode_sentences",
                 "decode_repeats", "threads"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.warmup_updates < 0:
        p.error("--warmup-updates must be at least 0")
    if args.decode_length is not None and args.decode_length < 1:
        p.error("--decode-length must be at least 1")
    if args.also_decode_lengths and args.decode_length is None:
        p.error("--also-decode-lengths needs --decode-length (the first forced length)")
    if any(n < 1 for n in args.also_decode_lengths):
        p.error("--also-decode-lengths takes lengths of at least 1")
    if args.count_kernels and args.decode_length is None:
        p.error("--count-kernels counts per decoding step of a forced length: add "
                "--decode-length N")
    if args.count_sentences < 1:
        p.error("--count-sentences must be at least 1")
    for flag in ("sweep_batch_sizes", "sweep_beams"):
        values = getattr(args, flag) or []
        if any(v < 1 for v in values) or len(set(values)) != len(values):
            p.error(f"--{flag.replace('_', '-')} takes distinct values of at least 1")
    if args.checkpoint is not None and "{system}" not in args.checkpoint:
        p.error("--checkpoint needs '{system}' in its pattern, e.g. "
                "checkpoints/ran/de-en/{system}/seed1/checkpoint_best.pt")


def parse_cli(argv, prog=None, command=None):
    """The options of ``argv``; with ``command``, a console script's name, outside a checkout
    anything but --help exits naming it (before --train-flags-of reads a config)."""
    p = parser(prog)
    args = p.parse_args(argv)
    if command is not None:
        checkout.require(command)
    take_config_flags(p, args)
    check_args(p, args)
    return args


@one_line_errors("ran-bench")
def main(argv=None, prog=None):
    """Run the benchmark; ``prog``: the program name usage and help show (default: the script's)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        run_parent(parse_cli(argv, prog, command=prog or "ran-bench"))
    except LabError as e:
        sys.exit(f"{prog or 'ran-bench'}: error: {e}")


if __name__ == "__main__":  # python -m ran_lab.bench.cli: as its console script
    main()
