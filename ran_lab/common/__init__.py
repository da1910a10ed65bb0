"""What the reproduction engine (:mod:`ran_lab.reproduce`) and the benchmark harness both
need, written once: the checkout's paths (:mod:`.paths`), JSON and text files read with errors that
name the file (:mod:`.jsonio`), fairseq flag lists (:mod:`.flags`), systems files
(:mod:`.systems`) and the machine a measurement ran on (:mod:`.machine`).

A function that refuses its input raises the error class its caller passes (``error``), a
subclass of :class:`LabError`: the engine's ``ReproError``, the benchmark's ``BenchError``.
"""
from .errors import LabError

__all__ = ["LabError"]
