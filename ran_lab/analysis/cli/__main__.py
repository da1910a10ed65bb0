"""``python -m ran_lab.analysis.cli PAPER ...``: see ``ran_lab.analysis.cli``."""
import sys

from . import main

sys.exit(main())
