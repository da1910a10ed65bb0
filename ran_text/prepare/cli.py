"""The command line: ``python -m ran_text.prepare {multi30k,iwslt14,custom}`` (also the
console script ``ran-prepare``)."""
import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..corpora import (IWSLT14_PAIR, IWSLT14_TEST_CHOICES, MULTI30K_LANGS, MULTI30K_URL,
                       CorpusError, Part, iwslt14_parts)
from .langid import _import_langid
from .multi30k import prepare_multi30k
from .options import EXTRA_TESTS, SPLITS, Cleaning, Options, PrepareError, data_bin_root, \
    default_workers
from .pipeline import prepare
from ran_text.textio import one_line_errors

def _add_common(p: argparse.ArgumentParser, bpe_merges=10000, lowercase=False, normalize=False,
                aggressive=False, clean_max_len=0, clean_on="tok") -> None:
    g = p.add_argument_group("processing (everything here is recorded in the stamp)")
    g.add_argument("--bpe-merges", type=int, default=bpe_merges, metavar="N",
                   help="joint BPE merge operations learned on train source+target; 0: no BPE, "
                        "word-level vocabularies (default %(default)s)")
    g.add_argument("--nwords-src", type=int, default=0, metavar="N",
                   help="keep the N most frequent source words, specials included, the rest "
                        "becoming <unk> (fairseq-preprocess --nwordssrc; with a joined "
                        "dictionary its size); 0: all (default)")
    g.add_argument("--nwords-tgt", type=int, default=0, metavar="N",
                   help="as --nwords-src for the target (needs --no-joined-dictionary)")
    g.add_argument("--joined-dictionary", action=argparse.BooleanOptionalAction, default=True,
                   help="one dictionary for both languages (default %(default)s)")
    g.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=lowercase,
                   help="lowercase all text, raw references included (default %(default)s)")
    g.add_argument("--normalize-punct", action=argparse.BooleanOptionalAction, default=normalize,
                   help="Moses punctuation normalization and removal of non-printing characters "
                        "before tokenizing (default %(default)s)")
    g.add_argument("--aggressive-dash-splits", action=argparse.BooleanOptionalAction,
                   default=aggressive, help="Moses -a: split hyphenated words as 'a @-@ b' "
                                            "(default %(default)s)")
    g.add_argument("--clean-max-len", type=int, default=clean_max_len, metavar="N",
                   help="length cleaning of train (Moses clean-corpus-n): drop pairs with a side "
                        "longer than this; 0 turns cleaning off (default %(default)s)")
    g.add_argument("--clean-min-len", type=int, default=1, metavar="N",
                   help="drop train pairs with a side shorter than this (default %(default)s)")
    g.add_argument("--clean-ratio", type=float, default=1.5, metavar="R",
                   help="drop train pairs whose longer side has more than this times the tokens "
                        "of the shorter; 0 disables (default %(default)s)")
    g.add_argument("--clean-on", choices=("tok", "bpe"), default=clean_on,
                   help="count tokens after Moses tokenization or after BPE (default "
                        "%(default)s)")
    g.add_argument("--lang-filter", action=argparse.BooleanOptionalAction, default=False,
                   help="drop train pairs whose source side is identified as the target "
                        "language or whose target side as the source language, by py3langid "
                        "(langid.py's model, offline) choosing between the two languages on the "
                        "raw text, before tokenization; valid and test are never filtered. "
                        "Needs the package py3langid (default %(default)s)")
    r = p.add_argument_group("running (not recorded)")
    r.add_argument("--work-dir", type=Path, metavar="DIR", help="intermediate text (default <out>/prep)")
    r.add_argument("--workers", type=int, default=default_workers(), metavar="N",
                   help="processes for tokenization, BPE and fairseq-preprocess (default: the "
                        "number of cores, %(default)s)")
    r.add_argument("--force", action="store_true", help="rebuild even when up to date")


def _options(args, valid_every: int = 0) -> Options:
    clean = None
    if args.clean_max_len > 0:
        clean = Cleaning(max_len=args.clean_max_len, min_len=args.clean_min_len,
                         ratio=args.clean_ratio, stage=args.clean_on)
    return Options(args.src, args.tgt, bpe_merges=args.bpe_merges, lowercase=args.lowercase,
                   normalize_punct=args.normalize_punct,
                   aggressive_dash_splits=args.aggressive_dash_splits, clean=clean,
                   valid_every=valid_every, nwords_src=args.nwords_src,
                   nwords_tgt=args.nwords_tgt, joined_dictionary=args.joined_dictionary,
                   lang_filter=args.lang_filter)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ran_text.prepare",
        description="Tokenize (sacremoses), learn and apply joint BPE (subword-nmt) and binarize "
                    "(fairseq-preprocess --joined-dictionary) a parallel corpus into a data-bin.")
    sub = parser.add_subparsers(dest="corpus", required=True)
    _add_multi30k(sub)
    _add_iwslt14(sub)
    _add_custom(sub)
    return parser


def _add_multi30k(sub) -> None:
    p = sub.add_parser("multi30k", help="Multi30k task 1 (en, de, fr, cs; any direction)",
                       description="Multi30k task 1: train / val (valid) / test_2016_flickr "
                                   "(test).")
    p.add_argument("--src", required=True, help=f"source language: {', '.join(MULTI30K_LANGS)}")
    p.add_argument("--tgt", required=True, help=f"target language: {', '.join(MULTI30K_LANGS)}")
    p.add_argument("--raw-dir", type=Path,
                   help="directory with {train,val,test_2016_flickr}.LANG.gz (default "
                        "$MULTI30K_DIR; else shared/data/multi30k beside the checkout, else the "
                        "cache $XDG_CACHE_HOME/ran_fairseq/multi30k (~/.cache/...), else a "
                        "download into that cache, each file checked against its SHA-256)")
    p.add_argument("--out", type=Path, help="data-bin (default data-bin/multi30k.SRC-TGT, in the "
                                            "checkout or, installed, the current directory)")
    p.add_argument("--download", action="store_true",
                   help="fetch the files --raw-dir / MULTI30K_DIR lacks into the cache (also "
                        "MULTI30K_DOWNLOAD=1; without a named directory the cache is filled "
                        "anyway, unless MULTI30K_DOWNLOAD=0)")
    p.add_argument("--download-url", default=None,
                   help=f"where NAME.LANG.gz is downloaded from (default $MULTI30K_URL, else "
                        f"{MULTI30K_URL})")
    _add_common(p)


def _add_iwslt14(sub) -> None:
    p = sub.add_parser("iwslt14", help="IWSLT'14 De-En from the extracted de-en.tgz",
                       description="IWSLT'14 De-En as fairseq's prepare-iwslt14.sh: lowercased, "
                                   "train cleaned to 175 tokens (ratio 1.5), every 23rd train "
                                   "pair held out as valid, test = TED dev2010 + TEDX dev2012 + "
                                   "TED tst2010-2012 (6,750 pairs; --test-sets elbayad2018: "
                                   "dev2010 + tst2010-2013, 6,578 pairs), joint BPE 10000.")
    p.add_argument("--orig-dir", type=Path, required=True,
                   help="the extracted de-en directory (train.tags.de-en.*, IWSLT14.*.xml)")
    p.add_argument("--src", default="de", help="de or en (default %(default)s)")
    p.add_argument("--tgt", default="en", help="en or de (default %(default)s)")
    p.add_argument("--out", type=Path, help="data-bin (default data-bin/iwslt14.SRC-TGT)")
    p.add_argument("--valid-every", type=int, default=23, metavar="N",
                   help="hold out every N-th cleaned train pair as valid (default %(default)s)")
    p.add_argument("--test-sets", choices=sorted(IWSLT14_TEST_CHOICES), default="fairseq",
                   help="fairseq (default): TED dev2010, TEDX dev2012, TED tst2010-2012 (6,750 "
                        "pairs); elbayad2018: TED dev2010 and tst2010-2013 (6,578 pairs, "
                        "Elbayad et al. 2018, 4.1), tst2013 from the IWSLT'15 release "
                        "(IWSLT15.TED.tst2013.de-en.{de,en}.xml in --orig-dir or "
                        "--extra-test-dir)")
    p.add_argument("--extra-test-dir", type=Path, action="append", default=[], metavar="DIR",
                   help="another directory to look for test-set xml files in (repeatable)")
    _add_common(p, lowercase=True, clean_max_len=175)


def _add_custom(sub) -> None:
    p = sub.add_parser("custom", help="any parallel corpus from files",
                       description="Any parallel corpus. Files ending .sgm/.xml are read as "
                                   "<seg> files, train.tags.* as IWSLT tagged text, others as "
                                   "plain text (.gz allowed). A split made of several pairs is "
                                   "their concatenation: the --SPLIT pairs in the order given, "
                                   "then the --SPLIT-prefix ones.")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--out", type=Path, required=True, help="data-bin directory")
    for split in (*SPLITS, *EXTRA_TESTS):
        what = "second test set (fairseq's test1)" if split == "test1" else split
        p.add_argument(f"--{split}", nargs=2, action="append", default=[],
                       metavar=("SRC_FILE", "TGT_FILE"), help=f"a {what} pair (repeatable)")
        p.add_argument(f"--{split}-prefix", action="append", default=[], metavar="PREFIX",
                       help=f"a {what} pair PREFIX.SRC / PREFIX.TGT (repeatable)")
    p.add_argument("--valid-every", type=int, default=0, metavar="N",
                   help="instead of a valid set: hold out every N-th (cleaned) train pair")
    _add_common(p)


def run(args) -> bool:
    if args.lang_filter:
        _import_langid()  # before anything is read or downloaded
    if args.corpus == "multi30k":
        return prepare_multi30k(_options(args), args.raw_dir, args.out, args.work_dir,
                                download_missing=True if args.download else None,
                                download_url=args.download_url, workers=args.workers,
                                force=args.force)
    if args.corpus == "iwslt14":
        if {args.src, args.tgt} != set(IWSLT14_PAIR.split("-")):
            raise PrepareError(f"IWSLT'14 is {IWSLT14_PAIR}: --src/--tgt must be de and en in "
                               f"either order, got {args.src} and {args.tgt}")
        train, tests = iwslt14_parts(args.orig_dir, args.src, args.tgt, args.test_sets,
                                     args.extra_test_dir)
        out = args.out or data_bin_root() / f"iwslt14.{args.src}-{args.tgt}"
        opts = _options(args, valid_every=args.valid_every)
        return prepare({"train": [train], "test": tests}, out, opts, args.work_dir,
                       args.workers, args.force, corpus="iwslt14")
    splits = {}
    for split in (*SPLITS, *EXTRA_TESTS):
        parts = [Part(Path(a), Path(b)) for a, b in getattr(args, split)]
        parts += [Part(Path(f"{pre}.{args.src}"), Path(f"{pre}.{args.tgt}"))
                  for pre in getattr(args, f"{split}_prefix")]
        if parts or split in SPLITS:  # no empty test1: the stamps of older data-bins stay valid
            splits[split] = parts
    opts = _options(args, valid_every=args.valid_every)
    return prepare(splits, args.out, opts, args.work_dir, args.workers, args.force)


@one_line_errors("prepare")
def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (PrepareError, CorpusError) as err:
        print(f"prepare: error: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":  # python -m ran_text.prepare.cli: as its console script
    main()
