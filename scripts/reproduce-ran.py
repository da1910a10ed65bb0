#!/usr/bin/env python3
"""Reproduce the shape of Zeng et al. (2021), "Recurrent Attention for Neural Machine Translation",
Tables 1-3: TransF, HC-SA, Syn-R, RAN-E, RAN-D, RAN-ALL, the positional-embedding ablations and the
transition ablations, trained, decoded (beam 4) and scored on each language pair, as a markdown
table beside the paper's published numbers. The engine is ``ran_fairseq.lab.reproduce``; the settings are
``configs/ran/cpu.json`` (Multi30k) or, with ``--full NAME``, the paper's tasks at base size that
have a prepare script here: ``wmt14-base.json`` (WMT'14 En-De both ways, the default) and
``wmt17-en-tr-base.json`` (WMT'17 En-Tr both ways); the systems are ``configs/ran/systems.json``.

    python scripts/reproduce-ran.py --pairs de-en --systems TransF,RAN-ALL --max-update 300 \\
        --out runs/try --checkpoints runs/try/checkpoints
    python scripts/reproduce-ran.py --full wmt17-en-tr --dry-run
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.lab.reproduce.cli import main_for  # noqa: E402
from ran_fairseq.lab.reproduce.papers import PAPERS  # noqa: E402

PAPER = PAPERS["ran"]  # its title, configs and notes: ran_fairseq/lab/reproduce/papers.py

if __name__ == "__main__":
    main_for("ran")
