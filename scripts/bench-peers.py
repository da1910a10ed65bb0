#!/usr/bin/env python3
"""The plugin against the authors' own code (Elbayad et al.'s attn2d for Pervasive Attention,
Zeng et al.'s thseq for RAN): training steps and greedy decoding side by side, interleaved, at the
same sizes, with each side's peak memory; see ran_lab/bench/peers.py and docs/benchmarks.md.

    python scripts/bench-peers.py --attn2d ~/src/attn2d --out results/bench/peers/cpu-run1
    python scripts/bench-peers.py --thseq ~/src/RAN --cases ran-cpu,ran-cpu-padded --out OUT
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_lab.bench.peers import main  # noqa: E402

if __name__ == "__main__":
    main()
