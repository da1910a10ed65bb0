"""Soft alignments of a model's own translations (Elbayad et al. 2018, Fig. 6).

``decoded_alignments(task, model, subset, sentences, beam)`` translates the first sentences of a
data-bin subset with fairseq's beam search and returns, for each, the best hypothesis with the
attention the model returned at every step: for ``pervasive_attention`` the implicit alignment of
its aggregator (max: each source token's share of the pooled features, Eq. 7; attn: ρ, Eq. 9),
for an encoder-decoder model its (layer-averaged) cross-attention. Each :class:`Alignment` holds
the (sub-word) source and target tokens and ``weights`` (|t| + 1, |s| + 1): a row per generated
token and the final EOS, a column per source token and EOS, source padding removed.

    python -m ran_fairseq.analysis.alignments --checkpoint checkpoints/pa/checkpoint_last.pt \\
        --subset test --sentences 3 --out alignments.png
"""
import argparse
import logging
import sys
from typing import List, NamedTuple

import torch

from fairseq.dataclass.configs import GenerationConfig

from . import checkpoints


class Alignment(NamedTuple):
    source: List[str]  # source tokens and "</s>"
    target: List[str]  # hypothesis tokens and "</s>"
    weights: torch.Tensor  # (len(target), len(source)), rows sum to 1 where the model normalizes


@torch.no_grad()
def decoded_alignments(task, model, subset="test", sentences=3, beam=5,
                       max_len_a=1.2, max_len_b=10) -> List[Alignment]:
    """The best beam-search hypothesis and its attention for the first ``sentences`` sentences of
    ``subset`` (in corpus order; sentences beyond the model's length limits are skipped)."""
    if sentences < 1:
        raise ValueError(f"--sentences must be positive, got {sentences}")
    samples = checkpoints.teacher_forced_samples(task, model, subset, sentences, sentences)
    generator = task.build_generator(
        [model], GenerationConfig(beam=beam, max_len_a=max_len_a, max_len_b=max_len_b))
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    result = {}
    for sample in samples:
        hypos = task.inference_step(generator, [model], sample)
        for i, hypo in enumerate(h[0] for h in hypos):
            if hypo["attention"].numel() == 0:
                raise ValueError(f"{type(model).__name__} returns no attention to plot "
                                 "(a model with cross-attention or pervasive_attention is "
                                 "needed)")
            src = sample["net_input"]["src_tokens"][i]
            real = src.ne(src_dict.pad())
            weights = hypo["attention"][real].t().float()  # (|t| + 1, |s| + 1)
            result[int(sample["id"][i])] = Alignment(  # the collater sorts by length
                source=[src_dict[t] for t in src[real].tolist()],
                target=[tgt_dict[t] for t in hypo["tokens"].tolist()],
                weights=weights)
    return [result[i] for i in sorted(result)]


def main(argv=None):
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    p = argparse.ArgumentParser(
        prog="python -m ran_fairseq.analysis.alignments",
        description="PNG of the soft alignments of a checkpoint's own translations of the first "
                    "sentences of a subset (Elbayad et al. 2018, Fig. 6).")
    p.add_argument("--checkpoint", required=True, help="a fairseq-train checkpoint")
    p.add_argument("--data", help="data-bin (default: the one recorded in the checkpoint)")
    p.add_argument("--subset", default="test")
    p.add_argument("--sentences", type=int, default=3, help="how many sentences (default 3)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--title", help="figure title (default: the checkpoint path)")
    p.add_argument("--out", required=True, help="PNG path")
    args = p.parse_args(argv)
    from .plots import plot_alignments

    try:
        task, model = checkpoints.load_checkpoint(args.checkpoint, args.data)
        alignments = decoded_alignments(task, model, args.subset, args.sentences, args.beam)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"{p.prog}: error: {e}")
    plot_alignments(alignments, args.out, args.title or args.checkpoint)
    print(args.out)


if __name__ == "__main__":
    main()
