"""Both unknown-word replacement methods on the decoding a run folder keeps, scored as the engine
scores them, without writing into the folder:

    python -m ran_lab.reproduce.compare_unk OUT/en-de/SYSTEM/seed1 [...] \\
        --data data-bin/multi30k-word.en-de --src en --tgt de [--cache DICT | --dictionary FILE]

For each folder: its ``generate[.SUBSET].txt.gz`` (or ``.txt``, made with ``--print-alignment``)
with no replacement, ``--method copy`` and ``--method dictionary``: the ``<unk>`` count, how many
came from the dictionary and how many were copied, tok BLEU (against ``DATA/SUBSET.tok.TGT``) and
sacreBLEU (detokenized, against ``DATA/SUBSET.raw.TGT``). ``--json FILE`` keeps the numbers."""
import argparse
import json
import sys
import tempfile
from pathlib import Path

from ran_text import replace_unk
from ran_text import unk_dictionary
from ran_text import textio
from ran_lab.common import LabError
from .scores import detokenize, tokenized_bleu


def decoding_of(folder, subset):
    suffix = "" if subset == "test" else f".{subset}"
    for name in (f"generate{suffix}.txt.gz", f"generate{suffix}.txt"):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    raise LabError(f"{folder} keeps no generate{suffix}.txt.gz or generate{suffix}.txt")


def score_file(path, data, src, tgt, subset):
    """(tok BLEU, sacreBLEU) of the H- lines of a generate output, as the engine scores them."""
    from ran_text.evaluate import read_generate_output, score

    hyps_tok = read_generate_output(str(path), prefix="H")
    refs = textio.read_lines(Path(data) / f"{subset}.raw.{tgt}")
    tok_refs = textio.read_lines(Path(data) / f"{subset}.tok.{tgt}")
    return (tokenized_bleu(hyps_tok, tok_refs),
            score(detokenize(hyps_tok, src, tgt), refs)["bleu"][0])


def compare(folder, args, dictionary):
    gen = decoding_of(folder, args.subset)
    source = Path(args.data) / f"{args.subset}.tok.{args.src}"
    row = {"folder": str(folder), "generate": gen.name}
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "generate.txt"
        with replace_unk.open_text(gen) as f:
            plain.write_text(f.read(), encoding="utf-8")
        row["none"] = dict(zip(("tok_bleu", "sacrebleu"),
                               score_file(plain, args.data, args.src, args.tgt, args.subset)))
        table = replace_unk.load_dictionary(dictionary)
        for method, path, lex in (("copy", None, {}), ("dictionary", dictionary, table)):
            out = Path(tmp) / f"{method}.txt"
            record = replace_unk.apply(plain, source, out, method, path, lex)
            tok, sacre = score_file(out, args.data, args.src, args.tgt, args.subset)
            row[method] = dict(record, tok_bleu=tok, sacrebleu=sacre)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ran_lab.reproduce.compare_unk",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="run folders (OUT/PAIR/SYSTEM/seedN)")
    p.add_argument("--subset", default="test")
    p.add_argument("--json", help="write the numbers here too")
    p.add_argument("--dictionary", help="a ready dictionary instead of the one learned from --data")
    unk_dictionary.add_arguments(p)
    args = p.parse_args(argv)
    try:
        dictionary = Path(args.dictionary) if args.dictionary else unk_dictionary.from_args(
            args, lambda text: print(f"compare_unk: {text}", file=sys.stderr, flush=True))
        rows = [compare(folder, args, dictionary) for folder in args.folders]
    except (OSError, ValueError) as e:
        print(f"compare_unk: error: {e}", file=sys.stderr)
        return 1
    for row in rows:
        d = row["dictionary"]
        print(f"{row['folder']}: {d['unk']} <unk> in {d['hypotheses_with_unk']} of "
              f"{d['hypotheses']} hypotheses; dictionary method: {d['from_dictionary']} from the "
              f"dictionary, {d['copied']} copied")
        for method in ("none", "copy", "dictionary"):
            print(f"  {method:>10}: tok BLEU {row[method]['tok_bleu']:.2f}, sacreBLEU "
                  f"{row[method]['sacrebleu']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"dictionary": str(dictionary), "runs": rows},
                                              indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
