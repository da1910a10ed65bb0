"""``python -m ran_text.prepare``: the command line of ``cli``."""
import sys

from .cli import main

sys.exit(main())
