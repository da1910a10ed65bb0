"""Unknown-word replacement on ``fairseq-generate --print-alignment`` output (Yang et al. 2017,
section 3.3 and Tables 2-3 "+ UNK replace", after Jean et al. 2014 and Luong et al. 2014).

Every ``<unk>`` of a hypothesis is replaced through the source word that received the most
attention when it was generated (the ``A-`` line's link of that position). Two methods:

- ``--method dictionary`` (the paper's): the source word's most probable target word in a
  translation dictionary learned from word alignments of the training corpus
  (:mod:`ran_text.unk_dictionary`: eflomal, the ``align`` extra; built once per
  data-bin from ``--data``/``--src``/``--tgt`` and cached there, or a ready ``--dictionary FILE``),
  the source word copied when the dictionary has no entry for it;
- ``--method copy`` (the default, and the method before the dictionary existed): the source word
  copied. Needs nothing installed.

fairseq's own ``--replace-unk`` does not work with binarized data (fairseq issue 3533 and others),
so this runs after generation:

    fairseq-generate DATA --path ckpt.pt --print-alignment > gen.txt
    python -m ran_text.replace_unk --generate-output gen.txt \
        --source DATA/test.tok.de --method dictionary --data DATA --src de --tgt en > gen.unk.txt

With ``--output FILE``, ``FILE.json`` records the method, the dictionary (path and sha256) and the
counts: ``<unk>`` tokens, replaced from the dictionary, copied.

The output is the input with each ``<unk>`` of the ``H-`` and ``D-`` lines replaced (everything
else unchanged, fairseq's closing BLEU line included), so ``ran_text.evaluate`` and
other readers of generate output take it as they are.

- ``A-`` lines: hard alignments ``SRC-TGT`` (``--print-alignment`` or ``--print-alignment hard``),
  the argmax of the attention over the real source tokens; SRC counts the source tokens of the
  model's input from 0 whatever the padding side, TGT the hypothesis tokens from 0.
- ``--source``: one sentence per line, line N for sample id N, split on whitespace exactly as the
  model's input: the tokenized text that was binarized (BPE-segmented when the data uses BPE), not
  the ``S-`` lines, which show ``<unk>`` for out-of-vocabulary source words and may be
  detokenized. ``data-bin/X/test.tok.SRC`` of a word-level data-bin
  (``ran_text.prepare --bpe-merges 0``) is such a file.
- ``--dictionary``: lines ``SOURCE_WORD TARGET_WORD [...]``; the first entry of a word is used.
- ``--generate-output`` may be gzip-compressed (``.gz``), as the engine keeps it.
- ``H-`` lines must hold the model's tokens (no ``--post-process``/``--remove-bpe``, which merge
  tokens so that TGT no longer indexes them); ``D-`` lines get the same replacements, the n-th
  ``<unk>`` of the line taking the n-th replacement (a detokenizer leaves ``<unk>`` whole).
"""
import argparse
import gzip
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from ran_text import unk_dictionary

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


METHODS = ("copy", "dictionary")


def open_text(path):
    """A text file for reading, gzip-compressed when its name ends in ``.gz``; ``-``: stdin."""
    if path == "-":
        return sys.stdin
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def resolve_dictionary(args, say) -> Tuple[Optional[Path], Dict[str, str]]:
    """(the dictionary file, its table) of ``args.method``: none for ``copy``."""
    if args.method == "copy":
        if args.dictionary or args.data:
            raise ReplaceUnkError("--method copy uses no dictionary: drop --dictionary/--data, or "
                                  "use --method dictionary")
        return None, {}
    path = Path(args.dictionary) if args.dictionary else unk_dictionary.from_args(args, say)
    return path, load_dictionary(path)


def apply(generate_output, source, output, method="copy", dictionary_path=None, table=None,
          unk=UNK) -> dict:
    """Replace the ``<unk>`` of ``generate_output`` (a path, ``.gz`` read as gzip) into ``output``
    (None: stdout) and return the record of what was done (written to ``OUTPUT.json`` too)."""
    stats = Stats()
    sources = read_sources(source)
    with open_text(generate_output) as inp:
        out_lines = list(replace_unk_lines(inp, sources, table or {}, unk, stats))
    text = "".join(line + "\n" for line in out_lines)
    record = {"method": method, "unk": stats.replaced, "from_dictionary": stats.translated,
              "copied": stats.replaced - stats.translated, "hypotheses": stats.hypotheses,
              "hypotheses_with_unk": len(stats.sentences),
              "dictionary": str(dictionary_path) if dictionary_path else None,
              "dictionary_sha256": (unk_dictionary.file_digest(dictionary_path)
                                    if dictionary_path else None)}
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
        with open(f"{output}.json", "w", encoding="utf-8") as f:
            f.write(json.dumps(record, indent=1) + "\n")
    else:
        sys.stdout.write(text)
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ran_text.replace_unk",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--generate-output", required=True,
                   help="fairseq-generate output made with --print-alignment ('-': stdin; .gz: "
                        "gzip)")
    p.add_argument("--source", required=True,
                   help="the model's input tokens, one sentence per line in corpus order")
    p.add_argument("--method", choices=METHODS, default=None,
                   help="copy: the attended source word; dictionary: its most probable "
                        "translation from word alignments of the training corpus, copied when "
                        "absent (Yang et al. 2017). Default: dictionary with --dictionary, else "
                        "copy")
    p.add_argument("--dictionary", help="a ready word dictionary (lines 'SOURCE_WORD "
                                        "TARGET_WORD') instead of the one learned from --data")
    unk_dictionary.add_arguments(p)
    p.add_argument("--unk", default=UNK, help="the unknown-word symbol (default %(default)s)")
    p.add_argument("--output", help="where to write (default: stdout); OUTPUT.json records the "
                                    "method and the counts")
    args = p.parse_args(argv)
    if args.method is None:
        args.method = "dictionary" if args.dictionary else "copy"

    def say(text):
        print(f"replace_unk: {text}", file=sys.stderr, flush=True)

    try:
        path, table = resolve_dictionary(args, say)
        record = apply(args.generate_output, args.source, args.output, args.method, path, table,
                       args.unk)
    except (OSError, ReplaceUnkError, unk_dictionary.DictionaryError) as err:
        print(f"replace_unk: error: {err}", file=sys.stderr)
        return 1
    print(f"replace_unk: {record['unk']} {args.unk} replaced ({record['from_dictionary']} through "
          f"the dictionary) in {record['hypotheses_with_unk']} of {record['hypotheses']} "
          f"hypotheses; method {args.method}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
