#!/usr/bin/env python3
"""Reproduce the shape of Zeng et al. (2021), "Recurrent Attention for Neural Machine Translation",
Tables 1-3: TransF, HC-SA, Syn-R, RAN-E, RAN-D, RAN-ALL, the positional-embedding ablations and the
transition ablations, trained, decoded (beam 4) and scored on each language pair, as a markdown
table beside the paper's published numbers. The engine is ``ran_fairseq.reproduce``; the settings are
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

from ran_fairseq.reproduce import REPO, FullSetting, Paper, main  # noqa: E402

CONFIGS = REPO / "configs" / "ran"

PAPER = Paper(
    key="ran",
    title="Zeng et al. (2021), Tables 1–3",
    cpu_config=CONFIGS / "cpu.json",
    full_settings=[
        FullSetting("wmt14", CONFIGS / "wmt14-base.json",
                    "WMT'14 En-De and De-En (4.5M pairs), ran_transformer base, 250k updates, "
                    "beam 4, length penalty 0.6 (§3.1)"),
        FullSetting("wmt17-en-tr", CONFIGS / "wmt17-en-tr-base.json",
                    "WMT'17 En-Tr and Tr-En (SETimes2, 207k pairs), ran_transformer base, 20k "
                    "updates, beam 4, length penalty 0.6 (§3.1)"),
    ],
)

if __name__ == "__main__":
    main(PAPER)
