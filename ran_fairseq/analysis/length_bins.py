"""BLEU by source-sentence length (Zeng et al. 2021, Fig. 8).

Sentences are grouped by the length in words (whitespace-separated) of their raw source; bin
edges e_1 < ... < e_k give the bins [0, e_1), [e_1, e_2), ..., [e_k, ∞), labelled ``0-9``,
``10-19``, ..., ``40+`` for edges 10 20 30 40. Each bin gets sacreBLEU's corpus BLEU (default
settings: 13a tokenization, mixed case) of the systems' detokenized hypotheses against the raw
references of its sentences.
"""
from typing import List, Mapping, Sequence, Tuple

DEFAULT_EDGES = (10, 20, 30)


def length_bins(edges: Sequence[int]) -> List[Tuple[int, float]]:
    """``[(lo, hi), ...]``: half-open word-count intervals for increasing positive ``edges``;
    the last ``hi`` is infinity."""
    edges = list(edges)
    if not edges or any(e <= 0 for e in edges) or edges != sorted(set(edges)):
        raise ValueError(f"bin edges must be increasing positive word counts, got {edges} (--bins)")
    lows = [0, *edges]
    return list(zip(lows, [*edges, float("inf")]))


def bin_label(lo, hi):
    return f"{lo}+" if hi == float("inf") else f"{lo}-{int(hi) - 1}"


def bleu_by_length(systems: Mapping[str, Sequence[str]], refs: Sequence[str],
                   sources: Sequence[str], edges: Sequence[int] = DEFAULT_EDGES) -> List[dict]:
    """sacreBLEU per source-length bin for each system: rows ``{"system", "bin", "lo", "hi",
    "sentences", "bleu"}`` (bleu None for an empty bin). ``systems`` maps a label to its
    hypotheses, aligned line by line with ``refs`` and ``sources``."""
    from sacrebleu.metrics import BLEU

    if len(refs) != len(sources):
        raise ValueError(f"{len(refs)} references (--ref) but {len(sources)} sources (--src): they "
                         "must align line by line")
    for label, hyps in systems.items():
        if len(hyps) != len(refs):
            raise ValueError(f"system {label!r} has {len(hyps)} hypotheses but there are "
                             f"{len(refs)} references (--ref): decode the whole test set")
    lengths = [len(source.split()) for source in sources]
    rows = []
    for label, hyps in systems.items():
        for lo, hi in length_bins(edges):
            members = [i for i, n in enumerate(lengths) if lo <= n < hi]
            bleu = None
            if members:
                bleu = BLEU().corpus_score([hyps[i] for i in members],
                                           [[refs[i] for i in members]]).score
            rows.append({"system": label, "bin": bin_label(lo, hi), "lo": lo,
                         "hi": "" if hi == float("inf") else int(hi), "sentences": len(members),
                         "bleu": bleu})
    return rows
