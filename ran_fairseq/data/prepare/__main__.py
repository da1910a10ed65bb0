"""``python -m ran_fairseq.data.prepare``: the command line of ``cli``."""
import sys

from .cli import main

sys.exit(main())
