"""``ran-analyze PAPER ...``: the command line of the analyses, one set of commands per paper.

  ran        Zeng et al. (2021), §4: entropy, js, histogram, heatmap, length-bleu (``.ran``)
  pervasive  Elbayad et al. (2018), Figs. 4 and 5: fig4, fig5 (``.pervasive``)

``ran-analyze PAPER --help`` lists a paper's commands. ``scripts/analyze-ran.py`` and
``scripts/analyze-pervasive.py`` are the same commands with their paper fixed; this is also
``python -m ran_lab.analysis.cli``.
"""
import argparse
import importlib
import logging
import sys
from typing import Optional, Sequence

from ran_text.textio import one_line_errors
from ran_lab import plugin

PROG = "ran-analyze"
PAPERS = {
    "ran": "Zeng et al. (2021), §4: attention entropy, JS divergence, weight histograms, "
           "heatmaps, BLEU by length",
    "pervasive": "Elbayad et al. (2018), Figs. 4 and 5: BLEU against d, g and L, BLEU by source "
                 "length",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Analyses of trained translation models and of reproductions' "
                               "results, one set of commands per paper; each writes a CSV and "
                               "a PNG.",
        epilog=f"{PROG} PAPER --help lists the commands of a paper.")
    sub = p.add_subparsers(dest="paper", required=True, metavar="PAPER")
    for name, help_ in PAPERS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return p


def analyze(paper: str, argv: Optional[Sequence[str]] = None, prog: Optional[str] = None):
    """Run the command line of ``paper`` (a key of ``PAPERS``) on ``argv`` (default
    ``sys.argv[1:]``); ``prog`` names it in usage lines (default the script's name)."""
    # Before the analyses import fairseq, whose modules would otherwise log at INFO level.
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    plugin.load()
    module = importlib.import_module(f"{__name__}.{paper}")
    return module.main(argv, prog=prog)


@one_line_errors("analyze")
def main(argv: Optional[Sequence[str]] = None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in PAPERS:
        build_parser().parse_args(argv[:1])  # --help, or an error naming the papers
        build_parser().error(f"give the paper first, one of: {', '.join(PAPERS)}")
    return analyze(argv[0], argv[1:], prog=f"{PROG} {argv[0]}")
