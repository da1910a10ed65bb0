"""The four papers the engine reproduces, by key (``ran-reproduce KEY``,
``scripts/reproduce-KEY.py``): each one's title, configs, full-size settings, notes and extra
columns. The settings themselves are data: ``configs/PAPER/*.json``."""
from ..common.paths import REPO
from .config import Column, FullSetting, Paper
from .markdown import fmt
from .measures import FIGURE_SENTENCES, pervasive_measure

CONFIGS = REPO / "configs"
BASE = "base model"

RAN = Paper(
    key="ran",
    title="Zeng et al. (2021), Tables 1–3",
    cpu_config=CONFIGS / "ran" / "cpu.json",
    full_settings=[
        FullSetting("wmt14", CONFIGS / "ran" / "wmt14-base.json",
                    "WMT'14 En-De and De-En (4.5M pairs), ran_transformer base, 250k updates, "
                    "beam 4, length penalty 0.6 (§3.1)"),
        FullSetting("wmt17-en-tr", CONFIGS / "ran" / "wmt17-en-tr-base.json",
                    "WMT'17 En-Tr and Tr-En (SETimes2, 207k pairs), ran_transformer base, 20k "
                    "updates, beam 4, length penalty 0.6 (§3.1)"),
    ],
)

ROSENDAHL = Paper(
    key="rosendahl",
    title="Rosendahl et al. (2021), Tables 1–2",
    cpu_config=CONFIGS / "recurrent_cross" / "cpu.json",
    # The paper's settings (§4): 20k joint BPE merges (8k for En-It), dropout 0.2 (Ro-En) or 0.3,
    # batches of 9,600 tokens, the best checkpoint by dev BLEU; the number of updates is ours.
    full_settings=[
        FullSetting("wmt16-ro-en", CONFIGS / "recurrent_cross" / "full-wmt16-ro-en.json",
                    f"WMT'16 Ro-En (Europarl v8 + SETimes2), {BASE}, 20k BPE, dropout 0.2, "
                    f"9,600-token batches, best dev BLEU; newstest2016 (Table 2) and newsdev2016 "
                    f"(Table 1); 100k updates (ours)"),
        FullSetting("wmt18-tr-en", CONFIGS / "recurrent_cross" / "full-wmt18-tr-en.json",
                    f"WMT'18 Tr-En (SETimes2), {BASE}, 20k BPE, dropout 0.3, 9,600-token "
                    f"batches, best dev BLEU; newstest2018; 40k updates (ours)"),
        FullSetting("iwslt17-en-it", CONFIGS / "recurrent_cross" / "full-iwslt17-en-it.json",
                    f"IWSLT'17 En-It (TED), {BASE}, 8k BPE, dropout 0.3, 9,600-token batches, "
                    f"best dev BLEU; TED tst2010; 40k updates (ours)"),
    ],
    notes=["**paper table** 1: the baseline and the expand-kv variants (Eqs. 5–8), scored in the "
           "paper on the Ro→En development set (newsdev2016: the valid subset); 2: the baseline "
           "and the six recurrent approaches (Eqs. 2–5, 9, 10) on the test sets, its expand-kv "
           "row being variant 1 (§5.1). Variants 1 and 2 build the extra key/value pair from "
           "the layer's full previous context: all heads' contexts, concatenated, through the "
           "attention's output projection (§3.1)."],
)

DYNMEM = Paper(
    key="dynmem",
    title="Yang et al. (2017), Tables 2–3",
    cpu_config=CONFIGS / "dynmem" / "cpu.json",
    full_settings=[
        FullSetting("wmt14-en-de", CONFIGS / "dynmem" / "full.json",
                    "Table 2: WMT'14 En-De at word level (50k words), test newstest2014 "
                    "(test1: newstest2015), rnnsearch_dynmem, the paper's recipe"),
        FullSetting("nist-zh-en", CONFIGS / "dynmem" / "full-zh-en.json",
                    "Table 3: NIST Zh-En (LDC data you supply in $NIST_DIR), 30k words, 18 "
                    "epochs halving every two after 10"),
    ],
    columns=[Column("UNK replace method", lambda r: unk_method(r))],
    notes=["**+ UNK replace**: the window-11 checkpoint decoded with `--print-alignment`, each "
           "`<unk>` replaced through the most-attended source word (`ran_fairseq.scoring."
           "replace_unk`); its training figures are the window-11 system's. **RNNSearch + UNK "
           "replace** does the same to the RNNSearch checkpoint. **UNK replace method**: "
           "*dictionary* (the paper's, §3.3): the word's most probable translation in a "
           "dictionary learned from eflomal word alignments of the training corpus, the word "
           "copied where it has no entry; *copy*: the word copied (docs/rnnsearch_dynmem.md)."],
)


def unk_method(result):
    """The unknown-word replacement method of a result ('' for a run without one): its record's,
    else read from its command (``--method``; ``--dictionary`` alone meant the dictionary, neither
    the copy)."""
    post = result.get("postprocess") or []
    if not post or post[0] != "ran_fairseq.scoring.replace_unk":
        return ""
    for scores in (result.get("subsets") or {}).values():
        record = scores.get("postprocess_record") or {}
        if record.get("method"):
            return record["method"]
    if "--method" in post[:-1]:
        return post[post.index("--method") + 1]
    return "dictionary" if "--dictionary" in post else "copy"

PERVASIVE = Paper(
    key="pervasive",
    title="Elbayad et al. (2018), Tables 1–3",
    cpu_config=CONFIGS / "pervasive" / "cpu.json",
    full_config=CONFIGS / "pervasive" / "full.json",
    full_help="IWSLT'14 De<->En, the paper's model sizes, the authors' published recipe",
    columns=[
        Column("params with k×k kernels", lambda r: fmt(r.get("params_dense_kernels"), ",d")),
        Column("GFLOPs/sentence", lambda r: fmt(r.get("gflops_per_sentence"), ".3f")),
        Column("Fig. 6", lambda r: r.get("alignment_png", "")),
    ],
    measure=pervasive_measure,
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

PAPERS = {paper.key: paper for paper in (RAN, ROSENDAHL, DYNMEM, PERVASIVE)}
