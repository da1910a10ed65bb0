"""``python -m ran_fairseq.analysis.cli PAPER ...``: see ``ran_fairseq.analysis.cli``."""
import sys

from . import main

sys.exit(main())
