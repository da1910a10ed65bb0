"""The translation dictionary of unknown-word replacement as Yang et al. (2017, section 3.3) use it,
after Jean et al. (2014) and Luong et al. (2014): each source word of the training corpus with its
most probable target word, learned from word alignments of that corpus.

The paper names neither the aligner nor how the alignments become a dictionary; our choices:

- the aligner is eflomal (Östling and Tiedemann 2016; the ``align`` extra of setup.py), run on the
  tokenized training text that the model's vocabulary was built from, both directions;
- the links counted are the *intersection* of the forward and reverse alignments by default (the
  one-to-one links both directions agree on), or one direction alone (``--links``);
- a source word's entry is the target word it is linked to most often, ties broken by the target
  word's sort order so that the same links give the same dictionary. A source word with no link has
  no entry (its replacement copies it).

eflomal samples from a random state it does not let us seed, so two builds can differ in a few
rare words' entries; the dictionary is therefore built once per data-bin and direction and cached
in the data-bin (``unk-dict.SRC-TGT.LINKS.txt``, with a ``.json`` stamp naming the training files'
hashes, the links and eflomal's version), and a result records the dictionary's hash.

    python -m ran_text.unk_dictionary --data DATA --src en --tgt de
"""
import argparse
import hashlib
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ran_text.textio import atomic_write, write_text_atomic

LINKS = ("intersection", "forward", "reverse")
INSTALL = ("pip install 'ran_fairseq[align]' (or pip install eflomal); --method copy needs "
           "nothing")


class DictionaryError(ValueError):
    """A dictionary that cannot be built; the message says what to change."""


def require_aligner():
    """The eflomal module, or a one-line error saying how to install it."""
    try:
        import eflomal
    except ImportError:
        raise DictionaryError(f"the dictionary method needs the word aligner eflomal, which is "
                              f"not installed: {INSTALL}") from None
    return eflomal


def parse_links(line: str, where: str) -> Set[Tuple[int, int]]:
    """``{(source index, target index)}`` of an alignment line ``"i-j i-j ..."``."""
    links = set()
    for item in line.split():
        i, sep, j = item.partition("-")
        if not sep or not i.isdigit() or not j.isdigit():
            raise DictionaryError(f"{where}: {item!r} is not a link 'SRC-TGT'")
        links.add((int(i), int(j)))
    return links


def count_links(sources: Sequence[str], targets: Sequence[str], forward: Sequence[str],
                reverse: Sequence[str], links: str = "intersection") -> Dict[str, Counter]:
    """``{source word: Counter(target word: links)}`` over a corpus and its two alignments (lines
    ``i-j``: source token i, target token j), counting the links that ``links`` names."""
    if links not in LINKS:
        raise DictionaryError(f"--links must be one of {', '.join(LINKS)}, not {links!r}")
    n = len(sources)
    if not (len(targets) == len(forward) == len(reverse) == n):
        raise DictionaryError(f"{n} source, {len(targets)} target, {len(forward)} forward and "
                              f"{len(reverse)} reverse alignment lines: they must be equal")
    counts: Dict[str, Counter] = defaultdict(Counter)
    for number, (s, t, f, r) in enumerate(zip(sources, targets, forward, reverse), 1):
        src, tgt = s.split(), t.split()
        fwd, rev = (parse_links(f, f"forward alignment line {number}"),
                    parse_links(r, f"reverse alignment line {number}"))
        chosen = {"intersection": fwd & rev, "forward": fwd, "reverse": rev}[links]
        for i, j in chosen:
            if i >= len(src) or j >= len(tgt):
                raise DictionaryError(f"alignment line {number}: link {i}-{j} outside a pair of "
                                      f"{len(src)} and {len(tgt)} words")
            counts[src[i]][tgt[j]] += 1
    return counts


def most_probable(counts: Dict[str, Counter]) -> Dict[str, Tuple[str, int, int]]:
    """``{source word: (target word, its links, the source word's links)}``: the target word with
    the most links (the highest p(target | source) by relative frequency), the first in sort order
    among equals."""
    table = {}
    for word, targets in counts.items():
        best = min(targets.items(), key=lambda kv: (-kv[1], kv[0]))
        table[word] = (best[0], best[1], sum(targets.values()))
    return table


def align(source_path, target_path) -> Tuple[List[str], List[str]]:
    """eflomal's forward and reverse alignments (lines ``i-j``) of two tokenized files."""
    eflomal = require_aligner()
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        with open(source_path, encoding="utf-8") as s, open(target_path, encoding="utf-8") as t:
            eflomal.Aligner().align(s, t, links_filename_fwd=str(fwd), links_filename_rev=str(rev))
        return (fwd.read_text(encoding="utf-8").splitlines(),
                rev.read_text(encoding="utf-8").splitlines())


def write_table(path, table: Dict[str, Tuple[str, int, int]]):
    """Lines ``SOURCE TARGET LINKS SOURCE_LINKS`` sorted by source word (what
    ``replace_unk.load_dictionary`` reads), written atomically."""
    def lines(f):
        for word in sorted(table):
            target, links, total = table[word]
            f.write(f"{word}\t{target}\t{links}\t{total}\n")

    atomic_write(path, lines)


def file_digest(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build(source_path, target_path, out, links: str = "intersection") -> Dict[str, Tuple]:
    """Align the training files, count, and write the dictionary to ``out``."""
    sources = Path(source_path).read_text(encoding="utf-8").splitlines()
    targets = Path(target_path).read_text(encoding="utf-8").splitlines()
    if len(sources) != len(targets):
        raise DictionaryError(f"{source_path} has {len(sources)} lines and {target_path} "
                              f"{len(targets)}: the training text must be parallel")
    forward, reverse = align(source_path, target_path)
    table = most_probable(count_links(sources, targets, forward, reverse, links))
    write_table(out, table)
    return table


def training_files(data, src, tgt, train_prefix=None) -> Tuple[Path, Path]:
    """The tokenized training text of a data-bin: ``PREFIX.SRC`` and ``PREFIX.TGT``, by default
    ``DATA/prep/train.tok`` where ``ran_text.prepare`` keeps it."""
    prefix = Path(train_prefix) if train_prefix else Path(data) / "prep" / "train.tok"
    files = (Path(f"{prefix}.{src}"), Path(f"{prefix}.{tgt}"))
    for path in files:
        if not path.is_file():
            raise DictionaryError(f"{path} is missing: the dictionary is learned from the "
                                  f"tokenized training text the data-bin was built from (kept by "
                                  f"ran_text.prepare in DATA/prep); give --train-prefix")
    return files


def cached(data, src, tgt, train_prefix=None, links: str = "intersection", cache=None,
           say=None) -> Path:
    """The dictionary of a data-bin's direction, built on first use and kept at ``cache``
    (default ``DATA/unk-dict.SRC-TGT.LINKS.txt``) with a stamp; rebuilt when the training text,
    the links or eflomal's version changed."""
    if links not in LINKS:
        raise DictionaryError(f"--links must be one of {', '.join(LINKS)}, not {links!r}")
    src_file, tgt_file = training_files(data, src, tgt, train_prefix)
    path = Path(cache) if cache else Path(data) / f"unk-dict.{src}-{tgt}.{links}.txt"
    stamp_path = path.with_name(path.name + ".json")
    eflomal = require_aligner()
    from importlib.metadata import PackageNotFoundError, version
    try:
        aligner = f"eflomal {version('eflomal')}"
    except PackageNotFoundError:
        aligner = f"eflomal {getattr(eflomal, '__version__', 'unknown')}"
    stamp = {"source": str(src_file), "target": str(tgt_file),
             "source_sha256": file_digest(src_file), "target_sha256": file_digest(tgt_file),
             "links": links, "aligner": aligner}
    if path.is_file() and stamp_path.is_file():
        try:
            old = json.loads(stamp_path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        keys = ("source_sha256", "target_sha256", "links", "aligner")
        if old and all(old.get(k) == stamp[k] for k in keys):
            return path
    if say:
        say(f"building the dictionary {path} from {src_file} and {tgt_file} (eflomal, {links} "
            f"links)")
    try:
        build(src_file, tgt_file, path, links)
    except OSError as e:
        raise DictionaryError(f"cannot write the dictionary {path} ({e.strerror}): give --cache "
                              f"a writable path") from e
    write_text_atomic(stamp_path, json.dumps(stamp, indent=1) + "\n")
    return path


def add_arguments(p: argparse.ArgumentParser):
    """The flags that locate a dictionary to build or reuse (shared with replace_unk)."""
    p.add_argument("--data", help="the data-bin: the dictionary is learned from its tokenized "
                                  "training text and cached in it")
    p.add_argument("--src", help="source language (the data-bin's)")
    p.add_argument("--tgt", help="target language")
    p.add_argument("--train-prefix", help="tokenized training text PREFIX.SRC / PREFIX.TGT "
                                          "(default DATA/prep/train.tok)")
    p.add_argument("--links", default="intersection", choices=LINKS,
                   help="which eflomal links are counted (default %(default)s)")
    p.add_argument("--cache", help="where the dictionary is kept (default "
                                   "DATA/unk-dict.SRC-TGT.LINKS.txt)")


def from_args(args, say=None) -> Path:
    missing = [f"--{k}" for k in ("data", "src", "tgt") if not getattr(args, k)]
    if missing:
        raise DictionaryError(f"the dictionary method needs {', '.join(missing)} (or "
                              f"--dictionary FILE)")
    return cached(args.data, args.src, args.tgt, args.train_prefix, args.links, args.cache, say)


def main(argv: Optional[Iterable[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ran_text.unk_dictionary",
                                description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)

    def say(text):
        print(f"unk_dictionary: {text}", file=sys.stderr, flush=True)

    try:
        path = from_args(args, say)
    except DictionaryError as e:
        print(f"unk_dictionary: error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
