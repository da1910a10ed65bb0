"""The systems every shared test runs on: one entry per architecture and variant.

A new architecture or variant joins the conformance suite (tests/test_conformance.py) by adding a
``System`` here. Dimensions are tiny so that each check takes seconds on a CPU.
"""
from dataclasses import dataclass, field
from typing import Tuple


@dataclass(frozen=True)
class System:
    id: str  # pytest id
    arch: str  # --arch
    flags: Tuple[str, ...] = ()  # model flags (fairseq-train command line)
    alignment: bool = True  # the decoder returns attention, so --print-alignment works
    slow_checks: bool = True  # also run the CLI checks (resume, fp16, generate) for this entry
    extra: dict = field(default_factory=dict, compare=False)


TINY_TRANSFORMER = (
    "--encoder-layers", "2", "--decoder-layers", "2",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
)

TINY_LSTM = (
    "--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--encoder-layers", "2",
    "--encoder-bidirectional",
    "--decoder-embed-dim", "16", "--decoder-hidden-size", "16", "--decoder-layers", "2",
    "--decoder-out-embed-dim", "16",
)

SYSTEMS = [
    # fairseq's own models: the suite is proven on known-good implementations first.
    System("transformer", "transformer", TINY_TRANSFORMER),
    System("lstm", "lstm", TINY_LSTM),
]
