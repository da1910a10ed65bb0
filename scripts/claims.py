#!/usr/bin/env python3
"""Each paper's claims (``configs/PAPER/claims.json``) against a results folder: writes the
folder's CLAIMS.md (and CLAIMS.json) with one verdict per claim by the rule in
``ran_lab/claims/rule.py``, and fills the spans of README.md and docs/ that quote them.

    python scripts/claims.py --results results/ran/long
    python scripts/claims.py --all --fill README.md docs/results.md
    python scripts/claims.py --all --fill README.md docs/results.md --check
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_lab.claims.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
