"""Unknown-word replacement on ``fairseq-generate --print-alignment`` output (Luong et al. 2015;
Yang et al. 2017, Tables 2-3 "+ UNK replace").

Every ``<unk>`` of a hypothesis is replaced by the source word that received the most attention
when it was generated, translated through a word dictionary when one is given and holds the word,
else copied. fairseq's own ``--replace-unk`` does not work with binarized data (fairseq issue
3533 and others), so this runs after generation:

    fairseq-generate DATA --path ckpt.pt --print-alignment > gen.txt
    python -m ran_fairseq.scoring.replace_unk --generate-output gen.txt \
        --source DATA/test.tok.de [--dictionary lex.de-en] > gen.unk.txt

The output is the input with each ``<unk>`` of the ``H-`` and ``D-`` lines replaced (everything
else unchanged, fairseq's closing BLEU line included), so ``ran_fairseq.scoring.evaluate`` and
other readers of generate output take it as they are.

- ``A-`` lines: hard alignments ``SRC-TGT`` (``--print-alignment`` or ``--print-alignment hard``),
  the argmax of the attention over the real source tokens; SRC counts the source tokens of the
  model's input from 0 whatever the padding side, TGT the hypothesis tokens from 0.
- ``--source``: one sentence per line, line N for sample id N, split on whitespace exactly as the
  model's input: the tokenized text that was binarized (BPE-segmented when the data uses BPE), not
  the ``S-`` lines, which show ``<unk>`` for out-of-vocabulary source words and may be
  detokenized. ``data-bin/X/test.tok.SRC`` of a word-level data-bin
  (``ran_fairseq.data.prepare --bpe-merges 0``) is such a file.
- ``--dictionary``: lines ``SOURCE_WORD TARGET_WORD [...]``; the first entry of a word is used.
- ``H-`` lines must hold the model's tokens (no ``--post-process``/``--remove-bpe``, which merge
  tokens so that TGT no longer indexes them); ``D-`` lines get the same replacements, the n-th
  ``<unk>`` of the line taking the n-th replacement (a detokenizer leaves ``<unk>`` whole).
"""
import argparse
import sys
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

UNK = "<unk>"


class ReplaceUnkError(ValueError):
    """Input that cannot be processed; the message names the line and what to change."""


@dataclass
class Stats:
    hypotheses: int = 0
    replaced: int = 0
    translated: int = 0  # replacements found in the dictionary (the others are copies)
    sentences: set = field(default_factory=set)


def load_dictionary(path) -> Dict[str, str]:
    """``{source word: target word}`` from lines ``SOURCE TARGET [more columns]``; the first
    entry of a source word wins; blank lines are skipped."""
    table: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            cols = line.split()
            if not cols:
                continue
            if len(cols) < 2:
                raise ReplaceUnkError(f"{path}:{number}: expected 'SOURCE_WORD TARGET_WORD', got "
                                      f"{line.strip()!r}")
            table.setdefault(cols[0], cols[1])
    return table


def read_sources(path) -> List[List[str]]:
    with open(path, encoding="utf-8") as f:
        return [line.split() for line in f]


def parse_alignment(text: str, where: str) -> Dict[int, int]:
    """``{target index: source index}`` from a hard alignment ``"s-t s-t ..."``."""
    pairs = {}
    for item in text.split():
        src, sep, tgt = item.partition("-")
        if not sep or not src.isdigit() or not tgt.isdigit():
            raise ReplaceUnkError(f"{where}: {item!r} is not a hard alignment pair 'SRC-TGT'; run "
                                  f"fairseq-generate with --print-alignment (hard), not soft")
        pairs[int(tgt)] = int(src)
    return pairs


def replacements(hypothesis: List[str], source: List[str], alignment: Dict[int, int],
                 dictionary: Dict[str, str], where: str, unk: str = UNK) -> List[Tuple[str, str]]:
    """``(source word, replacement)`` for each ``unk`` of ``hypothesis``, in order."""
    out = []
    for t, token in enumerate(hypothesis):
        if token != unk:
            continue
        if t not in alignment:
            raise ReplaceUnkError(f"{where}: hypothesis token {t} ({unk}) has no alignment; the "
                                  f"H- line must hold the model's tokens (no --post-process/"
                                  f"--remove-bpe)")
        s = alignment[t]
        if s >= len(source):
            raise ReplaceUnkError(f"{where}: the alignment points at source token {s} but the "
                                  f"--source line has {len(source)} tokens; --source must hold "
                                  f"the model's input tokens (tokenized, BPE-segmented if the data "
                                  f"uses BPE), one sentence per line in corpus order")
        out.append((source[s], dictionary.get(source[s], source[s])))
    return out


def _fill_tokens(text: str, words: List[str], unk: str) -> str:
    words = iter(words)
    return " ".join(next(words) if token == unk else token for token in text.split(" "))


def _fill_text(text: str, words: List[str], unk: str, where: str) -> str:
    pieces = text.split(unk)
    if len(pieces) - 1 != len(words):
        raise ReplaceUnkError(f"{where}: the D- line has {len(pieces) - 1} {unk} but the H- line "
                              f"{len(words)}; the detokenizer changed {unk}")
    return "".join(p + w for p, w in zip(pieces, words)) + pieces[-1]


def _split(line: str):
    """``(kind, id, fields)`` of a generate output line ``K-id\\t...``, or None."""
    tag, sep, rest = line.partition("\t")
    kind, dash, idx = tag.partition("-")
    if not sep or not dash or not idx.isdigit() or kind not in ("S", "T", "H", "D", "P", "A"):
        return None
    return kind, int(idx), rest.split("\t")


def replace_unk_lines(lines: Iterable[str], sources: List[List[str]],
                      dictionary: Optional[Dict[str, str]] = None, unk: str = UNK,
                      stats: Optional[Stats] = None) -> Iterator[str]:
    """Yield the lines of fairseq-generate output (without newlines) with ``unk`` replaced in
    ``H-``/``D-`` lines. A hypothesis's lines come in the order H, D, P, A, as fairseq-generate
    prints them; its ``A-`` line is required."""
    dictionary = dictionary or {}
    stats = stats if stats is not None else Stats()
    held: List[str] = []  # the current hypothesis's lines, from its H- line to its A- line
    hyp_id = None

    def unaligned():
        return ReplaceUnkError(f"hypothesis {hyp_id}: no A- line follows its H- line; run "
                               f"fairseq-generate with --print-alignment")

    for number, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        parsed = _split(line)
        kind = parsed[0] if parsed else None
        if kind == "H":
            if held:
                raise unaligned()
            hyp_id, held = parsed[1], [line]
            continue
        if not held:
            yield line
            continue
        if kind in ("D", "P") and parsed[1] == hyp_id:
            held.append(line)
            continue
        if kind != "A" or parsed[1] != hyp_id:
            raise unaligned()
        where = f"line {number} (sample {hyp_id})"
        if hyp_id >= len(sources):
            raise ReplaceUnkError(f"{where}: sample id {hyp_id} but --source has {len(sources)} "
                                  f"lines")
        hypothesis = _split(held[0])[2][-1].split()
        alignment = parse_alignment(parsed[2][0], where)
        pairs = replacements(hypothesis, sources[hyp_id], alignment, dictionary, where, unk)
        words = [word for _, word in pairs]
        stats.hypotheses += 1
        if pairs:
            stats.replaced += len(pairs)
            stats.translated += sum(1 for src, _ in pairs if src in dictionary)
            stats.sentences.add(hyp_id)
        for held_line in held:
            k, idx, fields = _split(held_line)
            if pairs and k == "H":
                fields[-1] = _fill_tokens(fields[-1], words, unk)
            elif pairs and k == "D":
                fields[-1] = _fill_text(fields[-1], words, unk, where)
            yield f"{k}-{idx}\t" + "\t".join(fields)
        yield line
        held, hyp_id = [], None
    if held:
        raise unaligned()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ran_fairseq.scoring.replace_unk",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--generate-output", required=True,
                   help="fairseq-generate output made with --print-alignment ('-': stdin)")
    p.add_argument("--source", required=True,
                   help="the model's input tokens, one sentence per line in corpus order")
    p.add_argument("--dictionary", help="word dictionary: lines 'SOURCE_WORD TARGET_WORD'; without "
                                        "it (or for words it lacks) the source word is copied")
    p.add_argument("--unk", default=UNK, help="the unknown-word symbol (default %(default)s)")
    p.add_argument("--output", help="where to write (default: stdout)")
    args = p.parse_args(argv)
    stats = Stats()
    try:
        sources = read_sources(args.source)
        dictionary = load_dictionary(args.dictionary) if args.dictionary else {}
        inp = sys.stdin if args.generate_output == "-" else open(args.generate_output,
                                                                  encoding="utf-8")
        with inp:
            out_lines = list(replace_unk_lines(inp, sources, dictionary, args.unk, stats))
    except (OSError, ReplaceUnkError) as err:
        print(f"replace_unk: error: {err}", file=sys.stderr)
        return 1
    text = "".join(line + "\n" for line in out_lines)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print(f"replace_unk: {stats.replaced} {args.unk} replaced ({stats.translated} through the "
          f"dictionary) in {len(stats.sentences)} of {stats.hypotheses} hypotheses",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
