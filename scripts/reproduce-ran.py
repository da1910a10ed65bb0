#!/usr/bin/env python3
"""Reproduce the shape of Zeng et al. (2021), "Recurrent Attention for Neural Machine Translation",
Tables 1-3: TransF, HC-SA, Syn-R, RAN-E, RAN-D, RAN-ALL, the positional-embedding ablations and the
transition ablations, trained, decoded (beam 4) and scored on each language pair, as a markdown
table beside the paper's published numbers. The engine is ``ran_fairseq.reproduce``; the settings are
``configs/ran/cpu.json`` (``--full``: ``configs/ran/wmt14-base.json``) and ``configs/ran/systems.json``.

    python scripts/reproduce-ran.py --pairs de-en --systems TransF,RAN-ALL --max-update 300
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.reproduce import REPO, Paper, main  # noqa: E402

PAPER = Paper(
    key="ran",
    title="Zeng et al. (2021), Tables 1–3",
    cpu_config=REPO / "configs" / "ran" / "cpu.json",
    full_config=REPO / "configs" / "ran" / "wmt14-base.json",
    full_help="WMT'14 En-De, ran_transformer base, the paper's hyper-parameters",
)

if __name__ == "__main__":
    main(PAPER)
