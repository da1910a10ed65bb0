"""``python -m ran_lab.bench``: the benchmark's command line (:mod:`.cli`)."""
from .cli import main

main(prog="python -m ran_lab.bench")
