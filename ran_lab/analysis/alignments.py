"""Soft alignments of a model's own translations (Elbayad et al. 2018, Fig. 6).

``decoded_alignments(task, model, subset, sentences, beam, reading)`` translates the first
sentences of a data-bin subset with fairseq's beam search and returns, for each, the best
hypothesis with an alignment of its tokens to the source:

- ``reading="eq7"`` (default): for a max-pooling ``pervasive_attention`` model (``--aggregator``
  max, or the max half of max-attn), Eq. 7 as written, α_ij = Σ_{d ∈ B_ij} E_wd H_ijd with w the
  token the hypothesis has at position i (the paper visualises α for the output tokens, Fig. 6):
  the contribution of source token j to that token's logit, recomputed from the hypothesis with
  teacher forcing (:func:`eq7_alignment`). Other models keep the weights of ``"share"``.
- ``reading="share"``: the attention the model returned at each beam-search step: for max
  pooling, each source token's share of the positive pooled features, clamped at 0 and
  renormalised, without E_w (a token-independent reading of Eq. 7); attn: ρ (Eq. 8); max-attn:
  the mean of the two; an encoder-decoder model: its (layer-averaged) cross-attention.

Each :class:`Alignment` holds the (sub-word) source and target tokens and ``weights``
(|t| + 1, |s| + 1): a row per generated token and the final EOS, a column per source token and
EOS, source padding removed; ``reading`` says which of the two the weights are.

    python -m ran_lab.analysis.alignments --checkpoint checkpoints/pa/checkpoint_last.pt \\
        --subset test --sentences 3 --out alignments.png
"""
import argparse
import logging
import sys
from typing import List, NamedTuple

import torch

from fairseq.dataclass.configs import GenerationConfig

from . import checkpoints


READINGS = ("eq7", "share")
MAX_POOLING = ("max", "max-attn")


class Alignment(NamedTuple):
    source: List[str]  # source tokens and "</s>"
    target: List[str]  # hypothesis tokens and "</s>"
    weights: torch.Tensor  # (len(target), len(source)); "share": rows sum to 1 where normalized
    reading: str = "share"  # "eq7": logit contributions α of Eq. 7; "share": the model's weights


def uses_eq7(model, reading: str) -> bool:
    """Whether ``reading`` gives Eq. 7 for ``model``: a max-pooling pervasive_attention model."""
    if reading not in READINGS:
        raise ValueError(f"--alignment must be one of {', '.join(READINGS)}, got {reading!r}")
    aggregator = getattr(getattr(model, "decoder", None), "aggregator", None)
    return reading == "eq7" and getattr(aggregator, "kind", None) in MAX_POOLING


@torch.no_grad()
def eq7_alignment(model, src_tokens: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """α (T, S) of Eq. 7 for one sentence pair: ``src_tokens`` (S,) the source without padding,
    ``tokens`` (T,) the output tokens ending with EOS, each row i scored for ``tokens[i]``
    (teacher forcing on EOS + tokens[:-1], in evaluation mode, where a row's features equal those
    of incremental decoding). For max-attn, the channels of the max-pooled half."""
    from ran_fairseq.modules.aggregators import eq7_contributions

    if src_tokens.dim() != 1 or tokens.dim() != 1:
        raise ValueError("eq7_alignment takes one sentence: 1-D source and output tokens")
    decoder = model.decoder
    eos = decoder.dictionary.eos()
    prev = torch.cat([tokens.new_full((1,), eos), tokens[:-1]])[None]
    captured = []
    hook = decoder.densenet.register_forward_hook(lambda m, args, out: captured.append(out))
    was_training = model.training
    try:
        model.eval()
        model(src_tokens[None], torch.tensor([src_tokens.numel()]), prev)
    finally:
        hook.remove()
        model.train(was_training)
    features = captured[0]  # H^L (1, C, T, S)
    rows = decoder.output_rows(tokens[None])[..., :features.size(1)]
    padding = torch.zeros(1, src_tokens.numel(), dtype=torch.bool, device=src_tokens.device)
    return eq7_contributions(features, padding, rows)[0]


@torch.no_grad()
def decoded_alignments(task, model, subset="test", sentences=3, beam=5,
                       max_len_a=1.2, max_len_b=10, reading="eq7") -> List[Alignment]:
    """The best beam-search hypothesis and its alignment (``reading``, see the module docstring)
    for the first ``sentences`` sentences of ``subset`` (in corpus order; sentences beyond the
    model's length limits are skipped)."""
    if sentences < 1:
        raise ValueError(f"--sentences must be positive, got {sentences}")
    eq7 = uses_eq7(model, reading)
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
            if eq7:
                weights = eq7_alignment(model, src[real], hypo["tokens"]).cpu()
            else:
                weights = hypo["attention"][real].t().float()  # (|t| + 1, |s| + 1)
            result[int(sample["id"][i])] = Alignment(  # the collater sorts by length
                source=[src_dict[t] for t in src[real].tolist()],
                target=[tgt_dict[t] for t in hypo["tokens"].tolist()],
                weights=weights, reading="eq7" if eq7 else "share")
    return [result[i] for i in sorted(result)]


def main(argv=None):
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    p = argparse.ArgumentParser(
        prog="python -m ran_lab.analysis.alignments",
        description="PNG of the soft alignments of a checkpoint's own translations of the first "
                    "sentences of a subset (Elbayad et al. 2018, Fig. 6).")
    p.add_argument("--checkpoint", required=True, help="a fairseq-train checkpoint")
    p.add_argument("--data", help="data-bin (default: the one recorded in the checkpoint)")
    p.add_argument("--subset", default="test")
    p.add_argument("--sentences", type=int, default=3, help="how many sentences (default 3)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--alignment", choices=READINGS, default="eq7",
                   help="eq7 (default): for max pooling, Eq. 7 as written, each source token's "
                        "contribution to the logit of the generated token; share: the weights "
                        "the model returns while decoding (for max pooling: shares of the "
                        "positive pooled features, without E_w)")
    p.add_argument("--title", help="figure title (default: the checkpoint path)")
    p.add_argument("--out", required=True, help="PNG path")
    args = p.parse_args(argv)
    from .plots import plot_alignments

    try:
        task, model = checkpoints.load_checkpoint(args.checkpoint, args.data)
        alignments = decoded_alignments(task, model, args.subset, args.sentences, args.beam,
                                        reading=args.alignment)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"{p.prog}: error: {e}")
    plot_alignments(alignments, args.out, args.title or args.checkpoint)
    print(args.out)


if __name__ == "__main__":
    main()
