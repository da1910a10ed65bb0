#!/usr/bin/env python3
"""Remake every results table listed in ``results/REMAKE.json`` from its stored runs (nothing is
trained) and check that the files git tracks under each folder are byte-for-byte unchanged; exit
1 naming the folders that differ. The module is ``ran_lab.remake``.

    python scripts/remake-tables.py --list
    python scripts/remake-tables.py --only results/ran/gpu
    python scripts/remake-tables.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_lab.remake import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
