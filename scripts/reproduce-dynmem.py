#!/usr/bin/env python3
"""Reproduce the shape of Yang et al. (2017), "Neural Machine Translation with Recurrent Attention
Modeling", Tables 2-3: RNNSearch, + window 1, + window 11 and + window 11 + UNK replace, trained,
decoded (beam 5) and scored on word-level data in each direction, as a markdown table beside the
paper's numbers. The engine is ``ran_fairseq.reproduce``; the settings are ``configs/dynmem/cpu.json``
(Multi30k; ``--full wmt14-en-de``: ``configs/dynmem/full.json``, Table 2; ``--full nist-zh-en``:
``configs/dynmem/full-zh-en.json``, Table 3, data you supply) and ``configs/dynmem/systems.json``.

    python scripts/reproduce-dynmem.py --pairs de-en --systems "RNNSearch,RNNSearch + window 11"
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.reproduce import REPO, FullSetting, Paper, main  # noqa: E402

CONFIGS = REPO / "configs" / "dynmem"

PAPER = Paper(
    key="dynmem",
    title="Yang et al. (2017), Tables 2–3",
    cpu_config=CONFIGS / "cpu.json",
    full_settings=[
        FullSetting("wmt14-en-de", CONFIGS / "full.json",
                    "Table 2: WMT'14 En-De at word level (50k words), test newstest2014 "
                    "(test1: newstest2015), rnnsearch_dynmem, the paper's recipe"),
        FullSetting("nist-zh-en", CONFIGS / "full-zh-en.json",
                    "Table 3: NIST Zh-En (LDC data you supply in $NIST_DIR), 30k words, 18 "
                    "epochs halving every two after 10"),
    ],
    notes=["**+ UNK replace**: the window-11 checkpoint decoded with `--print-alignment`, each "
           "`<unk>` replaced by the most-attended source word (`ran_fairseq.scoring.replace_unk`, "
           "copied); its training figures are the window-11 system's. **RNNSearch + UNK "
           "replace** does the same to the RNNSearch checkpoint."],
)

if __name__ == "__main__":
    main(PAPER)
