#!/usr/bin/env python3
"""Figures 4 and 5 of Elbayad et al. (2018) from a reproduction's results folder: ``ran-analyze
pervasive`` with its paper fixed; the commands are in ran_lab.analysis.cli.pervasive
(``--help`` lists them)."""
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)

from ran_lab.analysis.cli import analyze  # noqa: E402


def main(argv=None):
    return analyze("pervasive", argv)


if __name__ == "__main__":
    main()
