#!/usr/bin/env python3
"""Reproduce the shape of Yang et al. (2017), "Neural Machine Translation with Recurrent Attention
Modeling", Tables 2-3: RNNSearch, + window 1, + window 11 and + window 11 + UNK replace, trained,
decoded (beam 5) and scored on word-level data in each direction, as a markdown table beside the
paper's numbers. The engine is ``ran_fairseq.reproduce``; the settings are ``configs/dynmem/cpu.json``
(Multi30k; ``--full``: ``configs/dynmem/full.json``, WMT'14 En-De) and ``configs/dynmem/systems.json``.

    python scripts/reproduce-dynmem.py --pairs de-en --systems "RNNSearch,RNNSearch + window 11"
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.reproduce import REPO, Paper, main  # noqa: E402

PAPER = Paper(
    key="dynmem",
    title="Yang et al. (2017), Tables 2–3",
    cpu_config=REPO / "configs" / "dynmem" / "cpu.json",
    full_config=REPO / "configs" / "dynmem" / "full.json",
    full_help="WMT'14 En-De at word level (50k words), rnnsearch_dynmem, the paper's recipe",
    notes=["**+ UNK replace**: the window-11 checkpoint decoded with `--print-alignment`, each "
           "`<unk>` replaced by the most-attended source word (`ran_fairseq.scoring.replace_unk`, "
           "copied); its training figures are the window-11 system's."],
)

if __name__ == "__main__":
    main(PAPER)
