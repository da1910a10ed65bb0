#!/usr/bin/env python3
"""fairseq's own tests (a checkout at the installed fairseq's tag, v0.12.2) run twice, without and
with the plugin loaded; writes results/fairseq-tests/ (README.md, outcomes.json) and exits 1 when
an outcome differs. About an hour on two cores.

    git clone --branch v0.12.2 https://github.com/facebookresearch/fairseq /tmp/fairseq-v0.12.2
    python scripts/fairseq-tests.py /tmp/fairseq-v0.12.2
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_lab.upstream import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
