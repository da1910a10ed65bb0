"""``python -m ran_lab.reproduce PAPER [options]``: as ``ran-reproduce``."""
from .cli import main

if __name__ == "__main__":
    main()
