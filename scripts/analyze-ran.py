#!/usr/bin/env python3
"""Analyses of trained translation models (Zeng et al. 2021, §4): ``ran-analyze ran`` with its
paper fixed; the commands are in ran_lab.analysis.cli.ran (``--help`` lists them)."""
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# Before fairseq is imported, whose modules would otherwise configure logging at INFO level.
logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)

from ran_lab.analysis.cli import analyze  # noqa: E402


def main(argv=None):
    return analyze("ran", argv)


if __name__ == "__main__":
    main()
