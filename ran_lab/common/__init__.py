"""What the reproduction engine (:mod:`ran_lab.reproduce`) and the benchmark harness both
need, written once: the checkout's paths (:mod:`.paths`), fairseq flag lists (:mod:`.flags`),
systems files (:mod:`.systems`), the files' schemas (:mod:`.schema`), the machine a measurement
ran on (:mod:`.machine`) and what runs a `python -m` command in a new interpreter's stead
(:mod:`.launcher`). A function that refuses its input raises the lab's one error,
:class:`LabError`, in one line.
"""
from .errors import LabError

__all__ = ["LabError"]
