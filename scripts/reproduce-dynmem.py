#!/usr/bin/env python3
"""Reproduce the shape of Yang et al. (2017), "Neural Machine Translation with Recurrent Attention
Modeling", Tables 2-3: RNNSearch, + window 1, + window 11 and + window 11 + UNK replace, trained,
decoded (beam 5) and scored on word-level data in each direction, as a markdown table beside the
paper's numbers. The engine is ``ran_fairseq.lab.reproduce``; the settings are ``configs/dynmem/cpu.json``
(Multi30k; ``--full wmt14-en-de``: ``configs/dynmem/full.json``, Table 2; ``--full nist-zh-en``:
``configs/dynmem/full-zh-en.json``, Table 3, data you supply) and ``configs/dynmem/systems.json``.

    python scripts/reproduce-dynmem.py --pairs de-en --systems "RNNSearch,RNNSearch + window 11"
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.lab.reproduce.cli import main_for  # noqa: E402
from ran_fairseq.lab.reproduce.papers import PAPERS  # noqa: E402

PAPER = PAPERS["dynmem"]  # its title, configs and notes: ran_fairseq/lab/reproduce/papers.py

if __name__ == "__main__":
    main_for("dynmem")
