"""BLEU by source-sentence and by target-sentence length (Zeng et al. 2021, §4.6, Fig. 8).

Sentences are grouped by the length in words (whitespace-separated) of their raw source
(``by="source"``) or of their raw reference (``by="target"``); bin edges e_1 < ... < e_k give the
bins [0, e_1), [e_1, e_2), ..., [e_k, ∞), labelled ``0-9``, ``10-19``, ..., ``60+`` for edges 10 20
... 60. Each bin gets sacreBLEU's corpus BLEU (default settings: 13a tokenization, mixed case) of
the systems' detokenized hypotheses against the raw references of its sentences.

The paper divides the WMT'14 En⇒De test set into seven bins per side; their edges are drawn in
Fig. 8 only, which the text copy of the paper lacks. ``DEFAULT_EDGES`` (every 10 words up to 60+:
seven bins) is our reading, consistent with the text's boundary at 50 words ("sentences shorter
than 50"); pass other edges with ``--bins``. Multi30k sentences are short (few above 30 words), so
its upper bins stay small or empty.
"""
from typing import List, Mapping, Sequence, Tuple

DEFAULT_EDGES = (10, 20, 30, 40, 50, 60)  # seven bins (§4.6); the edges are our reading of Fig. 8
LENGTH_OF = ("source", "target")


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
                   sources: Sequence[str], edges: Sequence[int] = DEFAULT_EDGES,
                   by: str = "source") -> List[dict]:
    """sacreBLEU per length bin for each system: rows ``{"by", "system", "bin", "lo", "hi",
    "sentences", "bleu"}`` (bleu None for an empty bin). ``systems`` maps a label to its
    hypotheses, aligned line by line with ``refs`` and ``sources``; ``by`` says whose length in
    words bins a sentence: ``"source"`` or ``"target"`` (the reference)."""
    from sacrebleu.metrics import BLEU

    from ran_text.evaluate import unk_as_one_word

    if by not in LENGTH_OF:
        raise ValueError(f"by must be one of {', '.join(LENGTH_OF)}, got {by!r} (--by)")
    if len(refs) != len(sources):
        raise ValueError(f"{len(refs)} references (--ref) but {len(sources)} sources (--src): they "
                         "must align line by line")
    for label, hyps in systems.items():
        if len(hyps) != len(refs):
            raise ValueError(f"system {label!r} has {len(hyps)} hypotheses but there are "
                             f"{len(refs)} references (--ref): decode the whole test set")
    lengths = [len(line.split()) for line in (sources if by == "source" else refs)]
    rows = []
    for label, hyps in systems.items():
        for lo, hi in length_bins(edges):
            members = [i for i, n in enumerate(lengths) if lo <= n < hi]
            bleu = None
            if members:
                bleu = BLEU().corpus_score(unk_as_one_word([hyps[i] for i in members]),
                                           [[refs[i] for i in members]]).score
            rows.append({"by": by, "system": label, "bin": bin_label(lo, hi), "lo": lo,
                         "hi": "" if hi == float("inf") else int(hi), "sentences": len(members),
                         "bleu": bleu})
    return rows
