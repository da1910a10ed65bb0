"""Score detokenized translations with sacreBLEU (BLEU, chrF, TER).

``fairseq-score`` does not work with sacrebleu 2.6, so this is the project's scoring path:

    python -m ran_text.evaluate --generate-output gen.out --ref data-bin/X/test.raw.en
    python -m ran_text.evaluate --hyp hyp.txt --ref ref.txt [--metrics bleu ter]

``--generate-output`` reads the detokenized ``D-<id>`` lines of ``fairseq-generate`` output
(run with ``--bpe``/``--tokenizer`` so they are detokenized) and puts them back in corpus order.
"""
import argparse
import json
import sys

from ran_text.textio import BOM, decode_line, read_lines  # noqa: F401  (read_lines: this module's API)
from ran_text.textio import one_line_errors

METRICS = ("bleu", "chrf", "ter")


# fairseq-generate's line kinds: S-/T- carry text only; H-/D- a score, then text; P- scores only.
TEXT_ONLY = ("S", "T")


def read_generate_output(path, prefix="D"):
    """Lines of ``fairseq-generate`` output in corpus order: the text of the ``{prefix}-<id>`` lines.

    ``H-``/``D-`` lines are ``<tag>\t<score>\t<text>`` (the best hypothesis comes first for each id);
    ``S-``/``T-`` lines (source, reference) are ``<tag>\t<text>`` with no score column. Raises
    ValueError if no such line exists or if ids are missing."""
    texts = {}
    with open(path, "rb") as f:
        # split on "\n" only: a hypothesis may hold U+2028 or another character that
        # str.splitlines() (or text mode's "\r") would take for a line break
        for lineno, raw in enumerate(f, 1):
            line = decode_line(raw, path, lineno).removesuffix("\n").removesuffix("\r")
            if lineno == 1:
                line = line.removeprefix(BOM)
            tag, sep, rest = line.partition("\t")
            if not sep or not tag.startswith(prefix + "-") or not tag[len(prefix) + 1:].isdigit():
                continue
            idx = int(tag[len(prefix) + 1:])
            if idx in texts:
                continue
            if prefix in TEXT_ONLY:
                texts[idx] = rest
            else:
                texts[idx] = rest.split("\t", 1)[1] if "\t" in rest else ""
    if not texts:
        raise ValueError(f"no '{prefix}-<id>' lines in {path}: is it fairseq-generate output?")
    missing = sorted(set(range(max(texts) + 1)) - texts.keys())
    if missing:
        raise ValueError(f"{path} lacks hypotheses for {len(missing)} sentence ids, e.g. "
                         f"{missing[:5]}: was a batch dropped (fairseq-generate needs "
                         f"--required-batch-size-multiple 1) or a sentence skipped as too long?")
    return [texts[i] for i in range(len(texts))]


# A word-level model writes <unk> for a word outside its vocabulary. sacreBLEU's 13a tokenizer
# splits it into "<", "unk" and ">": three wrong tokens where tokenized BLEU (multi-bleu.perl, the
# papers' metric) counts one, which cost a word-level system about 3 BLEU on Multi30k en-de and
# made unknown-word replacement look that much better. Scored here as one symbol (U+2047, the mark
# SentencePiece prints for its unknown piece) that no reference word equals.
UNK, UNK_MARK = "<unk>", "\u2047"


def unk_as_one_word(hyps):
    """``hyps`` with every ``<unk>`` written as one symbol no reference contains."""
    return [h.replace(UNK, UNK_MARK) for h in hyps]


def score(hyps, refs, metrics=METRICS, lowercase=False, literal_unk=False):
    """``{metric: (score, signature)}`` of detokenized ``hyps`` against one reference each; a
    ``<unk>`` counts as one wrong word (``unk_as_one_word``) unless ``literal_unk``."""
    from sacrebleu.metrics import BLEU, CHRF, TER

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: they must align line by line")
    if not hyps:
        raise ValueError("no hypotheses and no references: nothing to score")
    if not literal_unk:
        hyps = unk_as_one_word(hyps)
    # TER as TERCom computes it by default (sacrebleu's TER defaults: case-insensitive, no
    # normalization, punctuation kept), the TER of the papers; BLEU is case-sensitive unless
    # ``lowercase``.
    makers = {"bleu": lambda: BLEU(lowercase=lowercase), "chrf": CHRF, "ter": TER}
    out = {}
    for name in metrics:
        metric = makers[name]()
        out[name] = (metric.corpus_score(hyps, [refs]).score, str(metric.get_signature()))
    return out


@one_line_errors("ran-evaluate")
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--generate-output", help="fairseq-generate output (detokenized D- lines)")
    src.add_argument("--hyp", help="one detokenized hypothesis per line")
    p.add_argument("--ref", required=True, help="one raw (detokenized) reference per line")
    p.add_argument("--metrics", nargs="+", choices=METRICS, default=list(METRICS))
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU (TER is case-insensitive anyway: TERCom's default)")
    p.add_argument("--literal-unk", action="store_true",
                   help="score <unk> as sacreBLEU's tokenizer splits it (three tokens) instead of "
                        "as one wrong word")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = p.parse_args(argv)
    try:
        hyps = read_generate_output(args.generate_output) if args.generate_output else read_lines(args.hyp)
        refs = read_lines(args.ref)
        if not hyps and not refs:
            raise ValueError(f"{args.generate_output or args.hyp} and {args.ref} are empty: nothing to score; pass the "
                             f"hypotheses and references of a test set")
        result = score(hyps, refs, args.metrics, args.lowercase, args.literal_unk)
    except ValueError as e:
        sys.exit(f"ran-evaluate: error: {e}")
    if args.json:
        print(json.dumps({k: {"score": v[0], "signature": v[1]} for k, v in result.items()}))
    else:
        for name, (value, sig) in result.items():
            print(f"{name.upper():5s} {value:6.2f}  {sig}")


if __name__ == "__main__":
    main()
