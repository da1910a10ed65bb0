#!/usr/bin/env python3
"""Reproduce the shape of Elbayad et al. (2018), "Pervasive Attention: 2D Convolutional Neural
Networks for Sequence-to-Sequence Prediction", Tables 1-3: the aggregators (Table 1), the kernel
size and depth grid with parameters and FLOPs (Table 2) and the comparison with RNNsearch, the
Transformer and ConvS2S (Table 3), trained, decoded (beam 5) and scored in each direction, as a
markdown table beside the paper's numbers; plus a PNG of the implicit alignments of a few test
translations (Fig. 6) for each Table 1 model whose aggregator has non-uniform weights. The engine
is ``ran_fairseq.lab.reproduce``; the settings are ``configs/pervasive/cpu.json`` (Multi30k;
``--full``: ``configs/pervasive/full.json``, IWSLT'14 De<->En at the paper's sizes) and their
systems files.

    python scripts/reproduce-pervasive.py --pairs de-en --systems max,Transformer --max-update 300 \\
        --out runs/try --checkpoints runs/try/checkpoints
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.lab.reproduce.cli import main_for  # noqa: E402
from ran_fairseq.lab.reproduce.papers import PAPERS  # noqa: E402

PAPER = PAPERS["pervasive"]  # its title, configs and notes: ran_fairseq/lab/reproduce/papers.py

if __name__ == "__main__":
    main_for("pervasive")
