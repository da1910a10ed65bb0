"""Criterions; importing registers them with fairseq."""
from . import label_smoothed_cross_entropy_with_entropy  # noqa: F401
