#!/usr/bin/env python3
"""Reproduce the shape of Rosendahl et al. (2021), "Recurrent Attention for the Transformer",
Tables 1 and 2: the baseline (plain cross-attention, Eq. 1), the four expand-kv variants (Eqs. 5-8)
and the other recurrent cross-attentions (Eqs. 2-4, 9, 10), trained, decoded (beam 4) and scored
(BLEU, TER, training time relative to the baseline) on each language pair, as a markdown table
beside the paper's published numbers (``configs/recurrent_cross/paper.json``: Table 1 on the Ro-En
development set, Table 2 on the three test sets). The engine is ``ran_fairseq.reproduce``; the settings are
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

from ran_fairseq.reproduce import REPO, FullSetting, Paper, main  # noqa: E402

CONFIGS = REPO / "configs" / "recurrent_cross"
BASE = "base model"

PAPER = Paper(
    key="rosendahl",
    title="Rosendahl et al. (2021), Tables 1–2",
    cpu_config=CONFIGS / "cpu.json",
    # The paper's settings (§4): 20k joint BPE merges (8k for En-It), dropout 0.2 (Ro-En) or 0.3,
    # batches of 9,600 tokens, the best checkpoint by dev BLEU; the number of updates is ours.
    full_settings=[
        FullSetting("wmt16-ro-en", CONFIGS / "full-wmt16-ro-en.json",
                    f"WMT'16 Ro-En (Europarl v8 + SETimes2), {BASE}, 20k BPE, dropout 0.2, "
                    f"9,600-token batches, best dev BLEU; newstest2016 (Table 2) and newsdev2016 "
                    f"(Table 1); 100k updates (ours)"),
        FullSetting("wmt18-tr-en", CONFIGS / "full-wmt18-tr-en.json",
                    f"WMT'18 Tr-En (SETimes2), {BASE}, 20k BPE, dropout 0.3, 9,600-token "
                    f"batches, best dev BLEU; newstest2018; 40k updates (ours)"),
        FullSetting("iwslt17-en-it", CONFIGS / "full-iwslt17-en-it.json",
                    f"IWSLT'17 En-It (TED), {BASE}, 8k BPE, dropout 0.3, 9,600-token batches, "
                    f"best dev BLEU; TED tst2010; 40k updates (ours)"),
    ],
    notes=["**paper table** 1: the baseline and the expand-kv variants (Eqs. 5–8), scored in the "
           "paper on the Ro→En development set (newsdev2016: the valid subset); 2: the baseline "
           "and the six recurrent approaches (Eqs. 2–5, 9, 10) on the test sets, its expand-kv "
           "row being variant 1 (§5.1). Variants 1 and 2 build the extra key/value pair from "
           "the layer's full previous context: all heads' contexts, concatenated, through the "
           "attention's output projection (§3.1)."],
)

if __name__ == "__main__":
    main(PAPER)
