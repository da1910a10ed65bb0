"""The pipeline: check the inputs, then (under the data-bin's lock, unless it is up to date)
filter, tokenize, split, segment and binarize, and write the stamp."""
import json
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..corpora import Part
from .langid import LANGID_PACKAGE, language_filter
from .options import (_LANG_CODE, EXTRA_TESTS, SPLITS, Cleaning, Options, PrepareError,
                      default_workers, say)
from .parallel import _pool
from .stamp import (_STAMP_RESULTS, STAMP, _exclusive, _make_stamp, _output_names,
                    _prepare_out_dir, _read_stamp, _tool_versions, finished)
from .steps import apply_bpe_file, binarize, filter_languages, filter_pairs, learn_bpe_codes, \
    tokenize_split

def _holds_text(path: Path) -> bool:
    """Whether ``path`` (plain or gzipped) holds a character that is not white space."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            while True:
                block = f.read(1 << 16)
                if not block:
                    return False
                if block.strip():
                    return True
    except (EOFError, OSError):
        return True  # damaged: named where the file is read (corpora.read_lines)


def _check_files(splits: Dict[str, List[Part]]) -> None:
    """Refuse a pair whose source and target are one file, and an empty file, naming the file and
    its flag (a data-bin without a training sentence, or a test set without one, would be built
    and trained on without a word). Files that do not exist are named where they are read."""
    for split, parts in splits.items():
        flag = f"--{split} or --{split}-prefix"
        for part in parts:
            src, tgt = part.files()
            if src.is_file() and tgt.is_file() and src.resolve() == tgt.resolve():
                raise PrepareError(f"{src} is both the source and the target file of a {split} "
                                   f"pair ({flag}): name the {split} set's target-language file "
                                   f"as the second")
            for path in (src, tgt):
                if path.is_file() and not _holds_text(path):
                    raise PrepareError(f"{path} ({flag}) is empty: it holds no sentence; name a "
                                       f"file with the {split} set's sentences")


def _check(splits: Dict[str, List[Part]], opts: Options) -> None:
    for lang in (opts.src, opts.tgt):
        if not _LANG_CODE.match(lang):
            raise PrepareError(f"language code {lang!r} is not a 2-3 letter ISO code "
                               f"(--src/--tgt)")
    if opts.src == opts.tgt:
        raise PrepareError(f"source and target language are both {opts.src!r} (--src/--tgt)")
    if opts.bpe_merges < 0:
        raise PrepareError(f"--bpe-merges must be positive, or 0 for word-level vocabularies, "
                           f"got {opts.bpe_merges}")
    if opts.nwords_src < 0 or opts.nwords_tgt < 0:
        raise PrepareError("--nwords-src/--nwords-tgt must be positive, or 0 for all words")
    if opts.joined_dictionary and opts.nwords_tgt not in (0, opts.nwords_src):
        raise PrepareError("a joined dictionary has one size, --nwords-src; pass "
                           "--no-joined-dictionary for a separate --nwords-tgt")
    if any(splits.get(k) for k in EXTRA_TESTS) and not splits.get("test"):
        raise PrepareError("a second test set (--test1/--test1-prefix) needs a first one "
                           "(--test/--test-prefix)")
    if not splits.get("train") or not splits.get("test"):
        raise PrepareError("need train and test data (--train/--train-prefix, "
                           "--test/--test-prefix)")
    _check_files(splits)
    if bool(splits.get("valid")) == (opts.valid_every > 0):
        raise PrepareError("give either a valid set (--valid/--valid-prefix) or --valid-every N "
                           "(hold out every N-th train pair), not both or neither")
    if opts.clean is not None:
        c = opts.clean
        if c.stage not in ("tok", "bpe"):
            raise PrepareError(f"--clean-on must be 'tok' or 'bpe', got {c.stage!r}")
        if c.stage == "bpe" and opts.bpe_merges == 0:
            raise PrepareError("--clean-on bpe needs BPE: pass --clean-on tok with --bpe-merges 0")
        if not 1 <= c.min_len <= c.max_len:
            raise PrepareError(f"need 1 <= --clean-min-len <= --clean-max-len, got "
                               f"{c.min_len} and {c.max_len}")
    missing = [str(p) for parts in splits.values() for part in parts for p in part.files()
               if not p.is_file()]
    if missing:
        raise PrepareError("input files not found: " + ", ".join(missing))
    if opts.lang_filter:
        language_filter(opts.src, opts.tgt)  # py3langid installed and knows both languages


def _tokenize_splits(splits: Dict[str, List[Part]], opts: Options, work: Path, train_stem: str,
                     pool) -> None:
    """``work/{split}.{raw,tok}.{lang}`` for every split (train under ``train_stem``)."""
    for split in (*SPLITS, *EXTRA_TESTS):
        parts = splits.get(split)
        if not parts:
            continue
        step = time.time()
        stem = train_stem if split == "train" else split
        counts = [tokenize_split(parts, side, lang, opts, work / f"{stem}.raw.{lang}",
                                 work / f"{stem}.tok.{lang}", pool)
                  for side, lang in ((0, opts.src), (1, opts.tgt))]
        for part, n_src, n_tgt in zip(parts, *counts):
            if n_src != n_tgt:
                raise PrepareError(f"{split}: {part.src} has {n_src} lines but {part.tgt} has "
                                   f"{n_tgt}; the two files of a pair must be line-aligned")
        say(f"tokenized {split}: {sum(counts[0])} sentence pairs ({time.time() - step:.1f} s)")


def _filter_train_languages(parts: Sequence[Part], opts: Options, work: Path, pool) -> tuple:
    """--lang-filter: the train pairs whose languages are right, as one plain-text part
    ``work/train-lang.{src,tgt}``, and the filter's counts."""
    step = time.time()
    s, t = opts.src, opts.tgt
    out = (work / f"train-lang.{s}", work / f"train-lang.{t}")
    c = filter_languages(parts, s, t, *out, pool=pool)
    version = _tool_versions([LANGID_PACKAGE]).get(LANGID_PACKAGE, "?")
    say(f"language filter ({LANGID_PACKAGE} {version}, {s} vs {t}): {c['read']} train pairs read, "
        f"{c['dropped']} dropped ({c['src_as_tgt']} with the {s} side identified as {t}, "
        f"{c['tgt_as_src']} with the {t} side identified as {s}), {c['kept']} kept "
        f"({time.time() - step:.1f} s)")
    return Part(*out, fmt="text"), c


def _split_train(opts: Options, work: Path, clean: Optional[Cleaning]) -> None:
    """``train-all`` -> ``train`` (cleaned on tokens) and, under ``valid_every``, ``valid``."""
    names = [f"{kind}.{lang}" for kind in ("tok", "raw") for lang in (opts.src, opts.tgt)]
    c = filter_pairs([work / f"train-all.{n}" for n in names], [work / f"train.{n}" for n in names],
                     [work / f"valid.{n}" for n in names] if opts.valid_every else None,
                     clean, opts.valid_every)
    held_out = (f", {c['valid']} held out as valid (every {opts.valid_every}th)"
                if opts.valid_every else "")
    say(f"train: {c['read']} pairs read, {c['dropped']} dropped by length cleaning, "
        f"{c['train']} kept{held_out}")


def _bpe_splits(opts: Options, work: Path, codes: Path, clean: Optional[Cleaning], pool,
                extra_tests: Sequence[str] = ()) -> None:
    """Learn ``codes`` on ``train.tok``, write ``{split}.bpe.{lang}``; with ``clean`` (on BPE
    units) train is segmented to ``train-all.bpe`` and cleaned into ``train.bpe``."""
    s, t = opts.src, opts.tgt
    step = time.time()
    say(f"learning {opts.bpe_merges} BPE merges on train {s}+{t}")
    learned = learn_bpe_codes([work / f"train.tok.{s}", work / f"train.tok.{t}"], codes,
                              opts.bpe_merges)
    if learned < opts.bpe_merges:
        say(f"learned only {learned} merges: no symbol pair occurs twice any more")
    say(f"learned BPE ({time.time() - step:.1f} s)")
    step = time.time()
    for split in (*SPLITS, *extra_tests):
        stem = "train-all" if split == "train" and clean is not None else split
        for lang in (s, t):
            apply_bpe_file(codes, work / f"{split}.tok.{lang}", work / f"{stem}.bpe.{lang}", pool)
    say(f"applied BPE ({time.time() - step:.1f} s)")
    if clean is not None:
        c = filter_pairs([work / f"train-all.bpe.{s}", work / f"train-all.bpe.{t}"],
                         [work / f"train.bpe.{s}", work / f"train.bpe.{t}"], None, clean)
        say(f"train: {c['read']} pairs, {c['dropped']} dropped by length cleaning on BPE units, "
            f"{c['train']} kept")


def prepare(splits: Dict[str, List[Part]], out_dir, opts: Options, work_dir=None,
            workers: Optional[int] = None, force: bool = False, corpus: str = "custom") -> bool:
    """Build the data-bin ``out_dir`` from ``splits`` ({"train"|"valid"|"test": [Part, ...]},
    parts of a split concatenated in order). Returns False (and does nothing) when ``out_dir``
    is up to date with the same inputs and options, True after a build. Concurrent calls for the
    same ``out_dir`` wait for each other."""
    _check(splits, opts)
    with _exclusive(Path(out_dir).resolve()):
        return _prepare(splits, out_dir, opts, work_dir, workers, force, corpus)


def _prepare(splits, out_dir, opts, work_dir, workers, force, corpus) -> bool:
    start = time.time()
    out_dir = Path(out_dir).resolve()
    work = Path(work_dir).resolve() if work_dir else out_dir / "prep"
    workers = workers or default_workers()
    stamp = _make_stamp(splits, opts, corpus)
    extra = tuple(k for k in EXTRA_TESTS if splits.get(k))
    outputs = _output_names(opts, extra)
    old = _read_stamp(out_dir, force)
    if not force and old is not None \
            and {k: v for k, v in old.items() if k not in _STAMP_RESULTS} == stamp \
            and all((out_dir / n).exists() for n in outputs):
        say(f"{out_dir} is up to date (same inputs and parameters); nothing to do "
            f"(--force rebuilds)")
        finished(out_dir)  # (a build killed after its stamp was written)
        return False
    _prepare_out_dir(out_dir, outputs, old, force)
    made_work = not work.exists()
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _build(splits, out_dir, opts, work, workers, stamp, extra, outputs, start)
    except BaseException:
        if made_work:  # a failed build (a full disk) leaves no work folder filling the disk
            shutil.rmtree(work, ignore_errors=True)
        raise


def _build(splits, out_dir, opts, work, workers, stamp, extra, outputs, start) -> bool:
    s, t = opts.src, opts.tgt
    units = f"{opts.bpe_merges} BPE merges" if opts.bpe_merges > 0 else "words"
    say(f"building {out_dir} ({s}->{t}, {units}"
        f"{', lowercased' if opts.lowercase else ''}; work dir {work}; {workers} workers)")

    clean_tok = opts.clean if opts.clean is not None and opts.clean.stage == "tok" else None
    clean_bpe = opts.clean if opts.clean is not None and opts.clean.stage == "bpe" else None
    # Train goes through a filter when it is cleaned on tokens or valid is held out of it.
    filter_train = clean_tok is not None or opts.valid_every > 0
    with _pool(workers) as pool:
        if opts.lang_filter:
            train, stamp["language_filter"] = _filter_train_languages(splits["train"], opts, work,
                                                                      pool)
            splits = dict(splits, train=[train])
        _tokenize_splits(splits, opts, work, "train-all" if filter_train else "train", pool)
        if filter_train:
            _split_train(opts, work, clean_tok)
        if opts.bpe_merges > 0:
            _bpe_splits(opts, work, out_dir / "code", clean_bpe, pool, extra)
    units = "bpe" if opts.bpe_merges > 0 else "tok"
    for split in ("valid", "test", *extra):
        for lang in (s, t):
            shutil.copyfile(work / f"{split}.raw.{lang}", out_dir / f"{split}.raw.{lang}")
            shutil.copyfile(work / f"{split}.tok.{lang}", out_dir / f"{split}.tok.{lang}")
    step = time.time()
    binarize({split: work / f"{split}.{units}" for split in (*SPLITS, *extra)}, s, t, out_dir,
             workers, opts.joined_dictionary, opts.nwords_src, opts.nwords_tgt)
    say(f"binarized ({time.time() - step:.1f} s)")
    stamp["outputs"] = outputs
    (out_dir / STAMP).write_text(json.dumps(stamp, indent=1) + "\n", encoding="utf-8")
    finished(out_dir)
    say(f"wrote {out_dir} in {time.time() - start:.1f} s")
    return True
