#!/usr/bin/env python3
"""Reproduce the shape of Elbayad et al. (2018), "Pervasive Attention: 2D Convolutional Neural
Networks for Sequence-to-Sequence Prediction", Tables 1-3: the aggregators (Table 1), the kernel
size and depth grid with parameters and FLOPs (Table 2) and the comparison with RNNsearch, the
Transformer and ConvS2S (Table 3), trained, decoded (beam 5) and scored in each direction, as a
markdown table beside the paper's numbers; plus a PNG of the implicit alignments of a few test
translations (Fig. 6) for each Table 1 model whose aggregator has non-uniform weights. The engine
is ``ran_fairseq.reproduce``; the settings are ``configs/pervasive/cpu.json`` (Multi30k;
``--full``: ``configs/pervasive/full.json``, IWSLT'14 De<->En at the paper's sizes) and their
systems files.

    python scripts/reproduce-pervasive.py --pairs de-en --systems max,Transformer --max-update 300 \\
        --out runs/try --checkpoints runs/try/checkpoints
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ran_fairseq.reproduce import REPO, Column, Paper, fmt, main  # noqa: E402

FIGURE_SENTENCES = 3


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def measure(run, result):
    """Table 2's columns for Pervasive Attention systems: the parameter count with the masked
    half of each k×k kernel (the paper's count), and the mean forward FLOPs per test sentence
    pair; Fig. 6 for Table 1 systems with an informative alignment."""
    if not result["arch"].startswith("pervasive_attention"):
        return {}
    from ran_fairseq.analysis import checkpoints
    from ran_fairseq.analysis.alignments import decoded_alignments
    from ran_fairseq.analysis.plots import plot_alignments

    argv = run.generate_argv[run.subsets[0]]
    task, model = checkpoints.load_checkpoint(flag_value(argv, "--path"), str(run.data))
    subset = flag_value(argv, "--gen-subset")
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    pairs = list(zip(dataset.src_sizes.tolist(), dataset.tgt_sizes.tolist()))
    flops = sum(model.complexity(s, t)["flops"] for s, t in pairs) / len(pairs)
    measured = {"params_dense_kernels": model.complexity(1, 1, include_masked_weights=True)
                ["parameters"], "gflops_per_sentence": flops / 1e9}
    if "1" in result["tables"] and model.decoder.aggregator.kind != "avg":
        png = run.dir / "alignments.png"
        beam = int(flag_value(argv, "--beam") or 5)
        plot_alignments(decoded_alignments(task, model, subset, FIGURE_SENTENCES, beam), png,
                        f"{run.pair} {run.system['name']}: implicit alignments (Fig. 6)")
        measured["alignment_png"] = str(png.relative_to(run.dir.parents[2]))
    return measured


PAPER = Paper(
    key="pervasive",
    title="Elbayad et al. (2018), Tables 1–3",
    cpu_config=REPO / "configs" / "pervasive" / "cpu.json",
    full_config=REPO / "configs" / "pervasive" / "full.json",
    full_help="IWSLT'14 De<->En, the paper's model sizes, the authors' published recipe",
    columns=[
        Column("params with k×k kernels", lambda r: fmt(r.get("params_dense_kernels"), ",d")),
        Column("GFLOPs/sentence", lambda r: fmt(r.get("gflops_per_sentence"), ".3f")),
        Column("Fig. 6", lambda r: r.get("alignment_png", "")),
    ],
    measure=measure,
    notes=["**params with k×k kernels**: Pervasive Attention's parameters counting the always-zero "
           "future half of each masked k×k kernel, as a dense masked implementation stores them "
           "(the paper's count, see the README); **params** holds only the cropped kernels that "
           "are trained. **GFLOPs/sentence**: 2 × the multiply-adds of one teacher-forced "
           "forward pass (convolutions at every grid cell, the attention aggregator, the output "
           "projection), averaged over the test sentence pairs' BPE lengths (EOS included).",
           f"**Fig. 6**: the best beam hypothesis of the first {FIGURE_SENTENCES} test sentences "
           "and its alignment to the source, under OUT: for max pooling (max, and the max half "
           "of max-attn) α of Eq. 7 as written, each source token's contribution to the logit "
           "of the generated token (ran_fairseq.analysis.alignments, --alignment eq7); for attn "
           "the weights ρ of Eq. 8."],
)

if __name__ == "__main__":
    main(PAPER)
