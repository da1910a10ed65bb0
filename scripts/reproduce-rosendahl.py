#!/usr/bin/env python3
"""Reproduce the shape of Rosendahl et al. (2021), "Recurrent Attention for the Transformer",
Tables 1 and 2: the baseline (plain cross-attention, Eq. 1), the four expand-kv variants (Eqs. 5-8)
and the other recurrent cross-attentions (Eqs. 2-4, 9, 10), trained, decoded (beam 4) and scored
(BLEU, TER, training time relative to the baseline) on each language pair, as a markdown table
beside the paper's published numbers (``configs/recurrent_cross/paper.json``: Table 1 on the Ro-En
development set, Table 2 on the three test sets). The engine is ``ran_fairseq.lab.reproduce``; the settings are
``configs/recurrent_cross/cpu.json`` (Multi30k) or, with ``--full NAME``, the paper's tasks at base
size: ``full-wmt16-ro-en.json`` (the default), ``full-wmt18-tr-en.json``, ``full-iwslt17-en-it.json``;
the systems are ``configs/recurrent_cross/systems.json``.

    python scripts/reproduce-rosendahl.py --pairs de-en --systems baseline,coverage --max-update 300 \\
        --out runs/try --checkpoints runs/try/checkpoints
    python scripts/reproduce-rosendahl.py --full iwslt17-en-it --dry-run
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.lab.reproduce.cli import main_for  # noqa: E402
from ran_fairseq.lab.reproduce.papers import PAPERS  # noqa: E402

PAPER = PAPERS["rosendahl"]  # its title, configs and notes: ran_fairseq/lab/reproduce/papers.py

if __name__ == "__main__":
    main_for("rosendahl")
