"""Figures 4 and 5 of Elbayad et al. (2018) from a reproduction's results folder
(scripts/reproduce-pervasive.sh --out); each writes OUT/NAME.csv and OUT/NAME.png (NAME: --name,
default the command's name).

  fig4  tok BLEU (mean ± std over seeds) against the embedding size d, the growth rate g and the
        depth L: the systems whose tables include fig4-d, fig4-g, fig4-L
  fig5  sacreBLEU by source length (words) for Pervasive Attention and the baselines, averaged
        over seeds

    python scripts/analyze-pervasive.py fig4 --results results/pervasive-iwslt14 \\
        --out results/pervasive-iwslt14/figures
    python scripts/analyze-pervasive.py fig5 --results results/pervasive-iwslt14 --pair de-en \\
        --systems max-attn,RNNsearch,Transformer,ConvS2S --out results/pervasive-iwslt14/figures

The library is ran_lab.analysis.sweeps (and length_bins, plots); Fig. 6 is
python -m ran_lab.analysis.alignments.
"""
import argparse
import sys
from pathlib import Path

from .. import plots, sweeps
from ..results import read_results
from ..tables import write_csv

FIG5_SYSTEMS = "max-attn,RNNsearch,Transformer,ConvS2S"  # Table 3's rows (Fig. 5)


def fig4(args):
    rows = sweeps.sweep_rows(read_results(args.results)["results"], args.pair)
    fields = ["pair", "panel", "parameter", "value", "system", "seeds", "bleu", "bleu_std"]
    return (write_csv(args.out / f"{args.name}.csv", rows, fields),
            plots.plot_sweeps(rows, args.out / f"{args.name}.png"))


def fig5(args):
    if args.pair is None:
        raise ValueError("fig5 needs --pair (e.g. de-en)")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    rows = sweeps.length_rows(args.results, args.pair, systems, args.bins)
    fields = ["system", "bin", "lo", "hi", "sentences", "seeds", "bleu", "bleu_std"]
    return (write_csv(args.out / f"{args.name}.csv", rows, fields),
            plots.plot_length_bleu(rows, args.out / f"{args.name}.png"))


def parser(prog=None):
    intro, usage = __doc__.split("\n\n", 1)
    p = argparse.ArgumentParser(prog=prog, description=intro, epilog=usage,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name, fn, help_ in (("fig4", fig4, "BLEU against d, g and L (Fig. 4)"),
                            ("fig5", fig5, "BLEU by source length (Fig. 5)")):
        c = sub.add_parser(name, help=help_)
        c.set_defaults(fn=fn)
        c.add_argument("--results", required=True, type=Path,
                       help="a reproduction's --out folder (with results.json)")
        c.add_argument("--pair", help="language pair, e.g. de-en (fig4: default every pair)")
        c.add_argument("--out", required=True, type=Path, help="folder for NAME.csv, NAME.png")
        c.add_argument("--name", default=name, help=f"output file stem (default {name})")
        if name == "fig5":
            c.add_argument("--systems", default=FIG5_SYSTEMS,
                           help=f"comma-separated systems (default {FIG5_SYSTEMS})")
            c.add_argument("--bins", type=int, nargs="+", default=[10, 20, 30, 40, 50],
                           help="source-length bin edges in words (default 10 20 30 40 50)")
    return p


def main(argv=None, prog=None):
    args = parser(prog).parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for path in args.fn(args):
            print(path)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"analyze-pervasive {args.command}: error: {e}")

