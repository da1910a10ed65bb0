"""Analyses of trained translation models (Zeng et al. 2021, §4); each writes OUT/NAME.csv and
OUT/NAME.png (NAME: --name, default the analysis name).

  entropy      attention entropy per layer and side (Fig. 4, Eq. 5), one or more checkpoints
  js           Jensen-Shannon divergence between every pair of layers per side (Fig. 7)
  histogram    histograms of self-attention weights per layer (Fig. 5), one or more checkpoints
  heatmap      self-attention weights per layer and head for one sentence length (Fig. 6)
  length-bleu  sacreBLEU per source-length and per target-length bin (Fig. 8), from a
               reproduction's results folder or from fairseq-generate outputs

    python scripts/analyze-ran.py entropy --checkpoint ran=checkpoints/ran/checkpoint_best.pt \\
        --checkpoint transf=checkpoints/transf/checkpoint_best.pt --subset test --out analysis
    python scripts/analyze-ran.py histogram --subset test --out results/ran/analysis \\
        --checkpoint TransF=checkpoints/ran/de-en/TransF/seed1/checkpoint_best.pt \\
        --checkpoint Syn-R=checkpoints/ran/de-en/Syn-R/seed1/checkpoint_best.pt \\
        --checkpoint RAN-ALL=checkpoints/ran/de-en/RAN-ALL/seed1/checkpoint_best.pt
    python scripts/analyze-ran.py length-bleu --results results/ran/short --pair de-en \\
        --systems TransF,RAN-E,RAN-D,RAN-ALL --out results/ran/analysis
    python scripts/analyze-ran.py length-bleu --system ran=gen-ran.txt --system transf=gen-tf.txt \\
        --ref data-bin/multi30k.de-en/test.raw.en --src data-bin/multi30k.de-en/test.raw.de \\
        --out analysis

Checkpoints are any fairseq-train checkpoint with attention (ran_transformer, transformer, ...),
given as LABEL=PATH or PATH (labelled by its folder); the data-bin recorded in the checkpoint is
used unless --data is given. The library is ran_lab.analysis.
"""
import argparse
import sys
from pathlib import Path

from ran_text.evaluate import read_generate_output, read_lines
from .. import attention_stats, checkpoints, heatmaps, histograms, length_bins, plots, results
from ..tables import write_csv


def data_options(p):
    p.add_argument("--data", help="data-bin (default: the one recorded in the checkpoint)")
    p.add_argument("--subset", default="valid", help="data-bin subset to run on (default valid)")
    p.add_argument("--max-sentences", type=int, default=500, metavar="N",
                   help="first N sentences of the subset (default 500; 0: all)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")


def load(spec, args):
    """(label, task, model, samples) of one --checkpoint."""
    label, path = checkpoints.labelled(spec)
    task, model = checkpoints.load_checkpoint(path, args.data)
    checkpoints.require_attention(model, f"checkpoint {path}")
    samples = checkpoints.teacher_forced_samples(task, model, args.subset,
                                                 args.max_sentences or None, args.batch_size)
    return label, model, samples, task.target_dictionary.pad()


def entropy(args):
    rows = []
    for spec in args.checkpoint:
        label, model, samples, pad = load(spec, args)
        rows += [{"system": label, **row}
                 for row in attention_stats.layer_entropy(model, samples, pad)]
    return (write_csv(args.out / f"{args.name}.csv", rows,
                      ["system", "side", "layer", "entropy", "queries"]),
            plots.plot_entropy(rows, args.out / f"{args.name}.png"))


def js(args):
    results, rows = [], []
    for spec in args.checkpoint:
        label, model, samples, pad = load(spec, args)
        for side, div in attention_stats.layer_js(model, samples, pad, args.heads).items():
            results.append((label, side, div))
            rows += [{"system": label, "side": side, "layer_a": a, "layer_b": b,
                      "js": float(div.js[i, j]), "queries": div.queries}
                     for i, a in enumerate(div.layers) for j, b in enumerate(div.layers)]
    return (write_csv(args.out / f"{args.name}.csv", rows,
                      ["system", "side", "layer_a", "layer_b", "js", "queries"]),
            plots.plot_js(results, args.out / f"{args.name}.png"))


def heatmap(args):
    label, path = checkpoints.labelled(args.checkpoint)
    task, model = checkpoints.load_checkpoint(path, args.data)
    samples = None
    if any(heatmaps.input_independent(model, side) is None for side in args.sides):
        checkpoints.require_attention(model, f"checkpoint {path}")
        samples = checkpoints.teacher_forced_samples(task, model, args.subset,
                                                     args.max_sentences or None, args.batch_size)
    weights = heatmaps.self_attention_weights(model, args.length, args.sides, samples,
                                              task.target_dictionary.pad())
    rows = [{"side": side, "attention": entry.attention, "sentences": entry.sentences,
             "layer": layer + 1, "head": head + 1, "query": query + 1, "key": key + 1,
             "weight": float(entry.weights[layer, head, query, key])}
            for side, entry in weights.items()
            for layer in range(entry.weights.shape[0]) for head in range(entry.weights.shape[1])
            for query in range(args.length) for key in range(args.length)]
    fields = ["side", "attention", "sentences", "layer", "head", "query", "key", "weight"]
    return (write_csv(args.out / f"{args.name}.csv", rows, fields),
            plots.plot_heatmaps(weights, args.out / f"{args.name}.png",
                                f"{label}: self-attention weights, length {args.length}"))


def histogram(args):
    rows = []
    for spec in args.checkpoint:
        label, model, samples, pad = load(spec, args)
        rows += [{"system": label, **row}
                 for row in histograms.weight_histograms(model, samples, pad, args.bins,
                                                         args.sides, args.layers)]
    return (write_csv(args.out / f"{args.name}.csv", rows,
                      ["system", "side", "layer", "bin", "lo", "hi", "count", "fraction"]),
            plots.plot_weight_histograms(rows, args.out / f"{args.name}.png"))


def length_bleu(args):
    if args.results is not None:
        if args.system:
            sys.exit("analyze-ran length-bleu: give --results or --system, not both")
        if args.pair is None:
            sys.exit("analyze-ran length-bleu: --results needs --pair (e.g. de-en)")
        wanted = [n.strip() for n in args.systems.split(",") if n.strip()] if args.systems else None
        outputs = results.reproduction_outputs(args.results, args.pair, args.seed, wanted)
        hyps = outputs.hypotheses
        refs = read_lines(args.ref) if args.ref else outputs.refs
        sources = read_lines(args.src) if args.src else outputs.sources
    else:
        if not (args.system and args.ref and args.src):
            sys.exit("analyze-ran length-bleu: give --results DIR --pair PAIR, or --system "
                     "(repeated) with --ref and --src")
        systems = dict(checkpoints.labelled(spec) for spec in args.system)
        if len(systems) != len(args.system):
            sys.exit("analyze-ran: two --system entries have the same label; name them LABEL=PATH")
        hyps = {label: read_generate_output(path) for label, path in systems.items()}
        refs, sources = read_lines(args.ref), read_lines(args.src)
    rows = [row for by in args.by
            for row in length_bins.bleu_by_length(hyps, refs, sources, args.bins, by)]
    return (write_csv(args.out / f"{args.name}.csv", rows,
                      ["by", "system", "bin", "lo", "hi", "sentences", "bleu"]),
            plots.plot_length_bleu(rows, args.out / f"{args.name}.png"))


def parser(prog=None):
    intro, usage = __doc__.split("\n\n", 1)
    p = argparse.ArgumentParser(prog=prog, description=intro, epilog=usage,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="analysis", required=True)

    def command(name, run, help):
        c = sub.add_parser(name, help=help)
        c.add_argument("--out", type=Path, required=True, help="output folder")
        c.add_argument("--name", default=name, help=f"output file stem (default {name})")
        c.set_defaults(run=run)
        return c

    c = command("entropy", entropy, "attention entropy per layer (Fig. 4, Eq. 5)")
    c.add_argument("--checkpoint", action="append", required=True, metavar="[LABEL=]PATH",
                   help="a checkpoint; repeat to compare systems in one plot")
    data_options(c)

    c = command("js", js, "JS divergence between layers (Fig. 7)")
    c.add_argument("--checkpoint", action="append", required=True, metavar="[LABEL=]PATH",
                   help="a checkpoint; repeat to compare systems")
    c.add_argument("--heads", choices=attention_stats.HEAD_MODES, default="mean",
                   help="mean: compare head-averaged rows (default); matched: head k with head k")
    data_options(c)

    c = command("histogram", histogram, "histograms of self-attention weights (Fig. 5)")
    c.add_argument("--checkpoint", action="append", required=True, metavar="[LABEL=]PATH",
                   help="a checkpoint; repeat to compare systems in one plot")
    c.add_argument("--layers", type=int, nargs="+", metavar="L",
                   help="1-based layers to show (default: first, middle and last: 1 3 6 of six "
                        "layers as in the paper, 1 2 3 of three)")
    c.add_argument("--sides", nargs="+", choices=list(histograms.SELF_SIDES),
                   default=list(histograms.SELF_SIDES))
    c.add_argument("--bins", type=int, default=50, help="equal bins over [0, 1] (default 50)")
    data_options(c)
    c.epilog = ("Counts every head's weights on real keys (decoder: keys up to the query) of the "
                "subset's first --max-sentences sentences, teacher-forced.")

    c = command("heatmap", heatmap, "self-attention weights per layer and head (Fig. 6)")
    c.add_argument("--checkpoint", required=True, metavar="[LABEL=]PATH")
    c.add_argument("--length", type=int, default=20,
                   help="sentence length in tokens, end of sentence included (default 20)")
    c.add_argument("--sides", nargs="+", choices=list(heatmaps.SELF_SIDES), default=["enc", "dec"])
    data_options(c)
    c.epilog = ("Dot-product sides have no input-independent matrices: their weights are averaged "
                "over the subset's sentences of exactly --length tokens.")

    c = command("length-bleu", length_bleu, "BLEU by source and target length bins (Fig. 8)")
    c.add_argument("--results", type=Path, metavar="DIR",
                   help="a reproduction's --out folder (results.json and each system's "
                        "hypotheses; references and sources from the data-bin it was scored "
                        "with)")
    c.add_argument("--pair", help="with --results: the language pair, e.g. de-en")
    c.add_argument("--seed", type=int, default=1, help="with --results: the seed (default 1)")
    c.add_argument("--systems", help="with --results: comma-separated system names (default: "
                                     "every system of the pair)")
    c.add_argument("--system", action="append", metavar="[LABEL=]GENERATE_OUTPUT",
                   help="instead of --results: fairseq-generate output with detokenized D- "
                        "lines; repeat per system (needs --ref and --src)")
    c.add_argument("--ref", help="raw references, one per line (default with --results: the "
                                 "data-bin's)")
    c.add_argument("--src", help="raw sources, one per line (default with --results: the "
                                 "data-bin's)")
    c.add_argument("--by", nargs="+", choices=list(length_bins.LENGTH_OF),
                   default=list(length_bins.LENGTH_OF),
                   help="bin by source length, target (reference) length or both (default)")
    c.add_argument("--bins", type=int, nargs="+", default=list(length_bins.DEFAULT_EDGES),
                   metavar="EDGE", help="bin edges in words (default 10 20 30 40 50 60: the "
                                        "paper's seven bins, 0-9, ..., 50-59, 60+)")
    return p


def main(argv=None, prog=None):
    args = parser(prog).parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        written = args.run(args)
    except (OSError, ValueError, ImportError) as e:
        sys.exit(f"analyze-ran {args.analysis}: {e}")
    for path in written:
        print(path)

