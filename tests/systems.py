"""The systems every shared test runs on: one entry per architecture and variant.

A new architecture or variant joins the conformance suite (tests/integration/test_conformance.py) by adding a
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

# ran_transformer (Zeng et al. 2021): the paper's systems and ablations at tiny sizes; every id
# starts with "ran-" so that `-k ran` selects them all.
TINY_RAN = (*TINY_TRANSFORMER, "--max-attention-positions", "32")
SYSTEMS += [
    System("ran-all", "ran_transformer", TINY_RAN),
    System("ran-e", "ran_transformer", (*TINY_RAN, "--decoder-self-attention", "dot")),
    System("ran-d", "ran_transformer", (*TINY_RAN, "--encoder-self-attention", "dot")),
    System("ran-hc-sa", "ran_transformer",
           (*TINY_RAN, "--encoder-self-attention", "gaussian",
            "--decoder-self-attention", "gaussian")),
    System("ran-syn-r", "ran_transformer",
           (*TINY_RAN, "--encoder-self-attention", "synthesizer",
            "--decoder-self-attention", "synthesizer")),
    System("ran-fixed", "ran_transformer", (*TINY_RAN, "--ran-fixed-initial-matrices")),
    System("ran-no-ln-res", "ran_transformer", (*TINY_RAN, "--ran-no-layernorm-residual")),
    System("ran-no-pos-emb", "ran_transformer",
           (*TINY_RAN, "--no-encoder-positional-embeddings", "--no-decoder-positional-embeddings")),
    # the decoder's whole-row transition (the computation of every RAN decoder before this option
    # existed, through the CLI checks all along): model-level checks only
    System("ran-a0-full", "ran_transformer", (*TINY_RAN, "--ran-decoder-initial", "full"),
           slow_checks=False),
    System("ran-ffn", "ran_transformer", (*TINY_RAN, "--ran-transition", "ffn")),
]

# recurrent_cross_transformer (Rosendahl et al. 2021): every id starts with "rct-".
# A window of 1 keeps Eq. 9's window narrower than the test sentences.
SYSTEMS += [
    System("rct-dot", "recurrent_cross_transformer",
           (*TINY_TRANSFORMER, "--cross-attention", "dot")),
    *(System(f"rct-{v}", "recurrent_cross_transformer",
             (*TINY_TRANSFORMER, "--cross-attention", v))
      for v in ("prev-context", "prev-weight", "prev-accum-weight", "coverage")),
    *(System(f"rct-expand-kv{n}", "recurrent_cross_transformer",
             (*TINY_TRANSFORMER, "--cross-attention", "expand-kv", "--kv-variant", str(n)))
      for n in (1, 2, 3, 4)),
    System("rct-continuous", "recurrent_cross_transformer",
           (*TINY_TRANSFORMER, "--cross-attention", "continuous", "--rescale-window", "1")),
]

# rnnsearch_dynmem (Yang et al. 2017): every id starts with "dynmem-".
TINY_DYNMEM = (
    "--encoder-embed-dim", "16", "--encoder-hidden-size", "16",
    "--decoder-embed-dim", "16", "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16",
    "--attention-dim", "16", "--dynamic-memory-dim", "8",
    # At the paper's init range (0.1) the memory's effect on tiny models stays below the suite's
    # tolerance, so that a missing reorder of the memory would go unseen; at 1.0 it shows.
    "--init-range", "1.0",
)
SYSTEMS += [
    System("dynmem-rnnsearch", "rnnsearch_dynmem", (*TINY_DYNMEM, "--no-dynamic-memory")),
    System("dynmem-k0", "rnnsearch_dynmem", (*TINY_DYNMEM, "--dynamic-memory-window", "0")),
    System("dynmem-k5", "rnnsearch_dynmem", (*TINY_DYNMEM, "--dynamic-memory-window", "5")),
]

# pervasive_attention (Elbayad et al. 2018): every id starts with "pa-". k = 5 in most entries,
# so that the cached steps keep two past rows per masked convolution.
TINY_PA = ("--num-layers", "3", "--growth-rate", "4", "--kernel-size", "5",
           "--encoder-embed-dim", "8", "--decoder-embed-dim", "8")
SYSTEMS += [
    System("pa-max", "pervasive_attention", (*TINY_PA, "--aggregator", "max")),
    System("pa-avg", "pervasive_attention",
           (*TINY_PA, "--aggregator", "avg", "--kernel-size", "3",
            "--positional-embeddings", "learned")),
    System("pa-attn", "pervasive_attention",
           (*TINY_PA, "--aggregator", "attn", "--memory-efficient-densenet",
            "--share-decoder-input-output-embed")),
    System("pa-max-attn", "pervasive_attention",
           (*TINY_PA, "--aggregator", "max-attn", "--positional-embeddings", "sinusoidal")),
    System("pa-max-gated", "pervasive_attention",
           (*TINY_PA, "--aggregator", "max", "--gated-convolutions")),
    System("pa-max-gated-both", "pervasive_attention",
           (*TINY_PA, "--gated-convolutions", "both", "--aggregator", "max")),
]
