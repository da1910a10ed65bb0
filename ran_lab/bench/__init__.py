"""The speed, memory and size benchmark of fairseq translation systems.

:mod:`.cli` (the command line: ``ran-bench``, ``python -m ran_lab.bench``,
``scripts/bench.py``) → :mod:`.harness` (systems and data checked, one worker process per system,
bench.json and bench.md written) → :mod:`.worker` (one system timed in its own process) →
:mod:`.report` (ratios and markdown). :mod:`.settings`: what they share; :mod:`.systems`: the
systems file and ``--train-flags-of``, read with :mod:`ran_lab.common` as the reproduction
engine reads them; :mod:`.kernels`: kernel counts.
"""
