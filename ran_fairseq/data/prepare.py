"""Raw parallel text -> fairseq data-bin, in one place for every corpus.

Pipeline (``prepare``): read the raw splits (``corpora.Part``) -> optional language filtering of
train (``--lang-filter``: py3langid on the raw text, see ``LanguageFilter``) -> optional Moses
punctuation normalization -> Moses tokenization (sacremoses, language-specific, no XML escaping)
-> optional lowercasing -> optional length cleaning of train (Moses clean-corpus-n: token counts
and length ratio, on tokens or on BPE units) -> optional hold-out of every N-th train pair as
valid -> joint BPE (subword-nmt) learned on train source+target -> BPE applied to every split ->
``fairseq-preprocess --joined-dictionary``. With ``bpe_merges = 0`` the Moses tokens are binarized
as they are (word-level vocabularies), optionally cut to the most frequent ``nwords_src`` /
``nwords_tgt`` words (the rest become ``<unk>``) and with one dictionary per language.

The data-bin then holds, besides fairseq's ``dict.{src,tgt}.txt`` and ``{train,valid,test}.*``:
  ``code``                        the BPE merges (fairseq-generate --bpe subword_nmt --bpe-codes;
                                  none at word level)
  ``{valid,test}.tok.{src,tgt}``  the Moses-tokenized text before BPE: the references of tokenized
                                  BLEU (``ran_fairseq.reproduce``) and, at word level, the tokens
                                  the model reads (``ran_fairseq.scoring.replace_unk``)
  ``{valid,test}.raw.{src,tgt}``  untokenized text (lowercased under --lowercase) for scoring
  ``prepare-stamp.json``          the parameters, inputs and tool versions: rerunning with the same
                                  ones does nothing, with different ones rebuilds (and, under
                                  --lang-filter, how many train pairs the filter dropped)
Intermediate text (raw / tokenized / BPE, per split and language) goes to a work dir,
``<out>/prep`` by default. Tokenization and BPE application run over ``--workers`` processes.

CLI: ``python -m ran_fairseq.data.prepare {multi30k,iwslt14,custom} --help``.
"""
import argparse
import contextlib
import io
import json
import logging
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass
from importlib import metadata
from itertools import islice, zip_longest
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

from .corpora import (IWSLT14_PAIR, IWSLT14_TEST_CHOICES, MULTI30K_LANGS, MULTI30K_SPLITS,
                      MULTI30K_URL, CorpusError, Part, fetch_multi30k, iwslt14_parts,
                      missing_files, multi30k_cache, multi30k_files, multi30k_url)

REPO = Path(__file__).resolve().parents[2]


def is_checkout(root: Path = REPO) -> bool:
    """Whether the package runs from a checkout of the project rather than an installed copy."""
    return (root / "setup.py").is_file() and (root / "scripts" / "prepare-multi30k.sh").is_file()


def data_bin_root() -> Path:
    """Where data-bins go by default: the checkout's ``data-bin/``; for an installed package,
    ``./data-bin`` under the current directory (as fairseq's examples do)."""
    return REPO / "data-bin" if is_checkout() else Path.cwd() / "data-bin"


def multi30k_mirror() -> Optional[Path]:
    """The offline mirror ``shared/data/multi30k`` beside the checkout (None when installed)."""
    return REPO.parent / "shared" / "data" / "multi30k" if is_checkout() else None
SPLITS = ("train", "valid", "test")
# Optional further test sets, binarized by fairseq-preprocess as test1, test2, ... (its
# --testpref takes a comma-separated list) and decoded with fairseq-generate --gen-subset test1.
EXTRA_TESTS = ("test1",)
STAMP = "prepare-stamp.json"
STAMP_VERSION = 1
CHUNK_LINES = 2000  # sentences per job sent to a worker process
CHUNKS_IN_FLIGHT = 16  # jobs handed to the pool at once (bounds memory on large corpora)
_LANG_CODE = re.compile(r"^[a-z]{2,3}$")


class PrepareError(Exception):
    """Bad input or a failed step; the message names the problem and the flag to change."""


def say(msg: str) -> None:
    print(f"prepare: {msg}", flush=True)


@dataclass(frozen=True)
class Cleaning:
    """Moses clean-corpus-n on train pairs: keep a pair when both sides are non-empty, have
    ``min_len``..``max_len`` tokens, and neither side is more than ``ratio`` times as long as the
    other (``ratio <= 0``: no ratio test). ``stage`` counts Moses tokens (``tok``) or BPE units
    (``bpe``; fairseq's WMT'14 recipe)."""

    max_len: int
    min_len: int = 1
    ratio: float = 1.5
    stage: str = "tok"

    def keep(self, n_src: int, n_tgt: int) -> bool:
        if n_src == 0 or n_tgt == 0:
            return False
        if not (self.min_len <= n_src <= self.max_len and self.min_len <= n_tgt <= self.max_len):
            return False
        return self.ratio <= 0 or (n_src / n_tgt <= self.ratio and n_tgt / n_src <= self.ratio)


@dataclass(frozen=True)
class Options:
    """What the data-bin depends on (everything here goes into the stamp)."""

    src: str
    tgt: str
    bpe_merges: int = 10000
    lowercase: bool = False
    normalize_punct: bool = False
    aggressive_dash_splits: bool = False
    clean: Optional[Cleaning] = None
    valid_every: int = 0  # > 0: valid = every N-th (kept) train pair, held out of train
    # Added after stamp version 1: recorded in the stamp only when they differ from these
    # defaults, so that data-bins made before them stay up to date.
    nwords_src: int = 0  # > 0: fairseq-preprocess --nwordssrc (specials included)
    nwords_tgt: int = 0  # > 0: fairseq-preprocess --nwordstgt
    joined_dictionary: bool = True
    lang_filter: bool = False  # drop train pairs whose sides py3langid puts in the wrong language


_LATER_OPTIONS = {"nwords_src": 0, "nwords_tgt": 0, "joined_dictionary": True,
                  "lang_filter": False}
# What a build found rather than what it was asked for: kept in the stamp, not compared.
_STAMP_RESULTS = ("outputs", "language_filter")


# ---------------------------------------------------------------------------------------------
# Language identification of train pairs (--lang-filter).
LANGID_PACKAGE = "py3langid"
LANGID_MISSING = (f"--lang-filter needs the Python package {LANGID_PACKAGE} (offline language "
                  f"identification, a maintained fork of langid.py), which is not installed. "
                  f"Install it into this environment with: pip install {LANGID_PACKAGE} "
                  f"'numpy<2' (the pin keeps fairseq's NumPy; scripts/setup-env.sh installs it "
                  f"with the project), or drop --lang-filter")
_LANGID: Dict[tuple, "LanguageFilter"] = {}


def _import_langid():
    try:
        from py3langid import langid
    except ImportError as err:
        raise PrepareError(LANGID_MISSING) from err
    return langid


class LanguageFilter:
    """Is a train pair in its two languages? py3langid (langid.py's naive Bayes model over byte
    n-grams, bundled with the package, offline) with its candidates restricted to the pair's two
    languages decides, for each side, which of the two it is more likely to be. A pair is dropped
    when its source side is identified as the target language or its target side as the source
    language: swapped pairs, untranslated copies, and text in a third language that resembles the
    wrong side (a third language is always mapped onto one of the two, so French that looks more
    English than German passes on an English side). A side without letters, or on which the two
    scores tie (nothing the model knows), is not judged."""

    def __init__(self, src: str, tgt: str):
        langid = _import_langid()
        cls = langid.LanguageIdentifier
        # py3langid 0.4 ships an npz model (from_model_file); 0.2-0.3 a pickled one.
        load = getattr(cls, "from_model_file", None) or getattr(cls, "from_pickled_model", None)
        if load is None:
            raise PrepareError(f"--lang-filter: this version of {LANGID_PACKAGE} has neither "
                               f"LanguageIdentifier.from_model_file nor from_pickled_model; "
                               f"install a version between 0.2.2 and 0.4")
        self.identifier = load(langid.MODEL_FILE)
        logging.getLogger(langid.__name__).setLevel(logging.INFO)  # no debug line per call
        try:
            self.identifier.set_languages([src, tgt])
        except ValueError as err:
            raise PrepareError(f"--lang-filter: {LANGID_PACKAGE} cannot identify the languages "
                               f"{src!r} and {tgt!r} (--src/--tgt): {err}") from err
        self.src, self.tgt = src, tgt

    def language(self, text: str) -> Optional[str]:
        """``src`` or ``tgt``, whichever ``text`` is more likely in; None without evidence."""
        if not any(c.isalpha() for c in text):
            return None
        (best, score), (_, other) = self.identifier.rank(text)[:2]
        return None if score == other else best

    def verdict(self, src_line: str, tgt_line: str) -> int:
        """0: keep the pair; else bit 1: the source side is in the target language, bit 2: the
        target side is in the source language."""
        src_wrong = self.language(src_line) == self.tgt
        tgt_wrong = self.language(tgt_line) == self.src
        return int(src_wrong) + 2 * int(tgt_wrong)

    def keep(self, src_line: str, tgt_line: str) -> bool:
        return self.verdict(src_line, tgt_line) == 0


def language_filter(src: str, tgt: str) -> LanguageFilter:
    """The ``LanguageFilter`` of a pair, loaded once per process (forked workers inherit it)."""
    if (src, tgt) not in _LANGID:
        _LANGID[(src, tgt)] = LanguageFilter(src, tgt)
    return _LANGID[(src, tgt)]


# ---------------------------------------------------------------------------------------------
# Worker-side functions (run in pool processes; module-level so they can be pickled).
_TOKENIZERS: Dict[tuple, object] = {}
_BPE_CACHE: Dict[tuple, object] = {}


def _tokenize_chunk(job) -> List[str]:
    lang, lowercase, normalize, aggressive, lines = job
    key = (lang, normalize)
    if key not in _TOKENIZERS:
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        norm = MosesPunctNormalizer(lang, post_remove_control_chars=True) if normalize else None
        _TOKENIZERS[key] = (norm, MosesTokenizer(lang))
    norm, tok = _TOKENIZERS[key]
    out = []
    for line in lines:
        if norm is not None:
            line = norm.normalize(line)
        line = tok.tokenize(line, aggressive_dash_splits=aggressive, return_str=True,
                            escape=False)
        out.append(line.lower() if lowercase else line)
    return out


def _langid_chunk(job) -> List[int]:
    src, tgt, pairs = job
    lf = language_filter(src, tgt)
    return [lf.verdict(s, t) for s, t in pairs]


def _bpe_chunk(job) -> List[str]:
    codes_key, lines = job  # codes_key = (path, size, mtime_ns): a rewritten file is reloaded
    if codes_key not in _BPE_CACHE:
        from subword_nmt.apply_bpe import BPE

        with open(codes_key[0], encoding="utf-8") as f:
            _BPE_CACHE[codes_key] = BPE(f)
    bpe = _BPE_CACHE[codes_key]
    return [bpe.segment(line) for line in lines]


@contextlib.contextmanager
def _pool(workers: int):
    if workers <= 1:
        yield None
        return
    # fork: workers inherit the imported modules instead of re-importing torch/fairseq.
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ctx.Pool(workers) as pool:
        yield pool


def _run_jobs(pool, fn, jobs: Iterator) -> Iterator[List[str]]:
    """``map(fn, jobs)`` in order, over the pool when there is one, a bounded batch at a time."""
    if pool is None:
        yield from map(fn, jobs)
        return
    while True:
        batch = list(islice(jobs, CHUNKS_IN_FLIGHT))
        if not batch:
            return
        yield from pool.imap(fn, batch)


def _chunks(lines: Iterable[str], size: int = CHUNK_LINES) -> Iterator[List[str]]:
    it = iter(lines)
    while True:
        chunk = list(islice(it, size))
        if not chunk:
            return
        yield chunk


def _write_lines(f, lines: Sequence[str]) -> None:
    if lines:
        f.write("\n".join(lines))
        f.write("\n")


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


# ---------------------------------------------------------------------------------------------
# Steps.
def tokenize_split(parts: Sequence[Part], side: int, lang: str, opts: Options, raw_out: Path,
                   tok_out: Path, pool=None) -> List[int]:
    """Write the raw lines (lowercased under ``opts.lowercase``) of one side of a split to
    ``raw_out`` and their Moses tokenization to ``tok_out``; return the line count per part."""
    counts = []

    def raw_chunks(raw_f):
        for part in parts:
            counts.append(0)
            for chunk in _chunks(part.read(side)):
                counts[-1] += len(chunk)
                _write_lines(raw_f, [s.lower() for s in chunk] if opts.lowercase else chunk)
                yield chunk

    with open(raw_out, "w", encoding="utf-8") as raw_f, \
            open(tok_out, "w", encoding="utf-8") as tok_f:
        jobs = ((lang, opts.lowercase, opts.normalize_punct, opts.aggressive_dash_splits, chunk)
                for chunk in raw_chunks(raw_f))
        for tokens in _run_jobs(pool, _tokenize_chunk, jobs):
            _write_lines(tok_f, tokens)
    return counts


def _read_pairs(part: Part, split: str) -> Iterator[tuple]:
    """The (source, target) lines of ``part``; an error when the two files differ in length."""
    src_lines, tgt_lines = part.read(0), part.read(1)
    n = 0
    for s, t in zip_longest(src_lines, tgt_lines):
        if s is None or t is None:
            n_src = n + (s is not None) + sum(1 for _ in src_lines)
            n_tgt = n + (t is not None) + sum(1 for _ in tgt_lines)
            raise PrepareError(f"{split}: {part.src} has {n_src} lines but {part.tgt} has "
                               f"{n_tgt}; the two files of a pair must be line-aligned")
        n += 1
        yield s, t


def filter_languages(parts: Sequence[Part], src: str, tgt: str, src_out: Path, tgt_out: Path,
                     pool=None) -> Dict[str, int]:
    """Write the pairs of ``parts`` (concatenated) that ``LanguageFilter(src, tgt)`` keeps to the
    plain-text files ``src_out`` / ``tgt_out``. Returns the counts ``read``, ``dropped``, ``kept``
    and, among the dropped, ``src_as_tgt`` (source side identified as ``tgt``) and ``tgt_as_src``
    (a pair with both sides swapped counts in both)."""
    counts = dict(read=0, dropped=0, kept=0, src_as_tgt=0, tgt_as_src=0)
    language_filter(src, tgt)  # an error before reading, without py3langid (prepare()
    # loads it in _check, before its pool forks, so that the workers inherit it)
    pending = deque()  # the chunks whose verdicts are on their way, in order

    def jobs():
        for part in parts:
            for chunk in _chunks(_read_pairs(part, "train")):
                pending.append(chunk)
                yield src, tgt, chunk

    with open(src_out, "w", encoding="utf-8") as f_src, \
            open(tgt_out, "w", encoding="utf-8") as f_tgt:
        for verdicts in _run_jobs(pool, _langid_chunk, jobs()):
            chunk = pending.popleft()
            kept = [pair for pair, v in zip(chunk, verdicts) if v == 0]
            _write_lines(f_src, [s for s, _ in kept])
            _write_lines(f_tgt, [t for _, t in kept])
            counts["read"] += len(chunk)
            counts["kept"] += len(kept)
            counts["src_as_tgt"] += sum(v & 1 for v in verdicts)
            counts["tgt_as_src"] += sum(v >> 1 for v in verdicts)
    counts["dropped"] = counts["read"] - counts["kept"]
    return counts


def filter_pairs(inputs: Sequence[Path], train_out: Sequence[Path],
                 valid_out: Optional[Sequence[Path]], clean: Optional[Cleaning],
                 valid_every: int = 0) -> Dict[str, int]:
    """Stream aligned files line by line: ``inputs[0]``/``inputs[1]`` are the source/target whose
    whitespace token counts decide ``clean``; any further inputs (e.g. the raw text) are carried
    along. Kept pairs go to ``train_out``, except every ``valid_every``-th kept pair, which goes
    to ``valid_out``. Returns the counts ``read``, ``dropped``, ``train``, ``valid``."""
    counts = dict(read=0, dropped=0, train=0, valid=0)
    with contextlib.ExitStack() as stack:
        ins = [stack.enter_context(open(p, encoding="utf-8", newline="\n")) for p in inputs]
        t_out = [stack.enter_context(open(p, "w", encoding="utf-8")) for p in train_out]
        v_out = [stack.enter_context(open(p, "w", encoding="utf-8")) for p in valid_out or ()]
        for lines in zip(*ins):
            counts["read"] += 1
            if clean is not None and not clean.keep(len(lines[0].split()), len(lines[1].split())):
                counts["dropped"] += 1
                continue
            kept = counts["train"] + counts["valid"] + 1
            to_valid = valid_every > 0 and kept % valid_every == 0
            counts["valid" if to_valid else "train"] += 1
            for f, line in zip(v_out if to_valid else t_out, lines):
                f.write(line)
    return counts


def learn_bpe_codes(train_files: Sequence[Path], codes_out: Path, merges: int) -> int:
    """Learn ``merges`` joint BPE merges (subword-nmt) on the concatenation of ``train_files``
    (tokenized text) and write them to ``codes_out``; return how many were learned (fewer when no
    pair occurs twice any more)."""
    from subword_nmt.learn_bpe import learn_bpe

    # The word counts of the concatenated files, in first-occurrence order: what
    # `subword-nmt learn-bpe < cat(files)` would count, without writing the concatenation.
    vocab = Counter()
    for path in train_files:
        with open(path, encoding="utf-8", newline="\n") as f:
            for line in f:
                vocab.update(line.split())
    vocab_text = io.StringIO("".join(f"{w} {c}\n" for w, c in vocab.items()))
    with open(codes_out, "w", encoding="utf-8") as out, \
            contextlib.redirect_stderr(io.StringIO()):  # subword-nmt's per-merge progress bar
        learn_bpe(vocab_text, out, merges, is_dict=True)
    return _count_lines(codes_out) - 1  # minus the "#version" header


def apply_bpe_file(codes: Path, inp: Path, out: Path, pool=None) -> None:
    """Segment every line of ``inp`` with the BPE ``codes`` into ``out``."""
    stat = codes.stat()
    key = (str(codes), stat.st_size, stat.st_mtime_ns)
    with open(inp, encoding="utf-8", newline="\n") as f_in, \
            open(out, "w", encoding="utf-8") as f_out:
        lines = (line.rstrip("\n") for line in f_in)
        jobs = ((key, chunk) for chunk in _chunks(lines))
        for segmented in _run_jobs(pool, _bpe_chunk, jobs):
            _write_lines(f_out, segmented)


def binarize(prefixes: Dict[str, Path], src: str, tgt: str, dest: Path, workers: int,
             joined: bool = True, nwords_src: int = 0, nwords_tgt: int = 0) -> None:
    """``fairseq-preprocess [--joined-dictionary]`` of ``{prefix}.{src,tgt}`` per split (the
    ``EXTRA_TESTS`` present become fairseq's test1, ...), keeping
    the ``nwords_*`` most frequent words (specials included; 0: all)."""
    # fairseq-preprocess splits --validpref and --testpref on commas: the prefixes are given
    # relative to the folder that holds them (run there), so a comma in --out or --work-dir
    # (that folder's path) does not split them
    folder = Path(prefixes["train"]).parent
    names = {k: (Path(p).name if Path(p).parent == folder else str(p)) for k, p in prefixes.items()}
    commas = [p for p in names.values() if "," in p]
    if commas:
        raise PrepareError(f"fairseq-preprocess splits its file prefixes on commas, and "
                           f"{commas[0]} has one: use a work folder (--work-dir) without a comma")
    tests = ",".join(names[k] for k in ("test", *EXTRA_TESTS) if k in names)
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src,
           "--target-lang", tgt, "--trainpref", names["train"],
           "--validpref", names["valid"],
           "--testpref", tests,
           "--destdir", str(Path(dest).resolve()), "--workers", str(max(1, workers))]
    cmd += ["--joined-dictionary"] if joined else []
    cmd += ["--nwordssrc", str(nwords_src)] if nwords_src > 0 else []
    cmd += ["--nwordstgt", str(nwords_tgt)] if nwords_tgt > 0 else []
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=folder)
    log = (proc.stdout + proc.stderr).split("\n")
    if proc.returncode != 0:
        tail = "\n".join(log[-30:])
        raise PrepareError(f"fairseq-preprocess failed (exit {proc.returncode}): "
                           f"{' '.join(cmd)}\n{tail}")
    shown = set()
    for line in log:
        msg = line.split("fairseq_cli.preprocess", 1)[-1].lstrip(" |:")
        if ("Dictionary:" in msg or "sents," in msg) and msg not in shown:
            shown.add(msg)
            say("fairseq-preprocess: " + msg)


# ---------------------------------------------------------------------------------------------
# The stamp: what a data-bin was built from.
def _tool_versions(extra: Sequence[str] = ()) -> Dict[str, str]:
    versions = {}
    for name in ("sacremoses", "subword-nmt", "fairseq", "fairseq-fixed", *extra):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def _output_names(opts: Options, extra_tests: Sequence[str] = ()) -> List[str]:
    s, t = opts.src, opts.tgt
    scored = ("valid", "test", *extra_tests)
    names = [f"dict.{s}.txt", f"dict.{t}.txt", "preprocess.log"]
    if opts.bpe_merges > 0:
        names.append("code")
    names += [f"{split}.tok.{lang}" for split in scored for lang in (s, t)]
    names += [f"{split}.{s}-{t}.{lang}.{ext}" for split in (*SPLITS, *extra_tests)
              for lang in (s, t)
              for ext in ("bin", "idx")]
    names += [f"{split}.raw.{lang}" for split in scored for lang in (s, t)]
    return names


def _make_stamp(splits: Dict[str, List[Part]], opts: Options, corpus: str) -> dict:
    inputs = {}
    for parts in splits.values():
        for part in parts:
            for path in part.files():
                st = path.stat()
                inputs[str(path.resolve())] = [st.st_size, st.st_mtime_ns]
    return {
        "version": STAMP_VERSION,
        "corpus": corpus,
        "options": {k: v for k, v in asdict(opts).items()
                    if k not in _LATER_OPTIONS or v != _LATER_OPTIONS[k]},
        "splits": {split: [[str(Path(p.src).resolve()), str(Path(p.tgt).resolve()), p.fmt,
                            p.ascii_apostrophe] for p in parts]
                   for split, parts in splits.items()},
        "inputs": inputs,
        "tools": _tool_versions([LANGID_PACKAGE] if opts.lang_filter else []),
    }


def _read_stamp(out_dir: Path) -> Optional[dict]:
    try:
        return json.loads((out_dir / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _prepare_out_dir(out_dir: Path, outputs: List[str], old: Optional[dict], force: bool) -> None:
    """Remove the files a previous build left (those named by its stamp and ours), refusing to
    overwrite a data-bin this tool did not make unless ``force``."""
    dicts = [n for n in outputs if n.startswith("dict.")]
    if old is None and not force and any((out_dir / n).exists() for n in dicts):
        raise PrepareError(f"{out_dir} already holds a data-bin without {STAMP} (not made by "
                           f"this tool): choose another --out, or pass --force to overwrite it")
    (out_dir / STAMP).unlink(missing_ok=True)
    names = set(outputs) | set((old or {}).get("outputs", []))
    for name in names:
        if Path(name).name == name:  # plain file names only, never a path out of out_dir
            (out_dir / name).unlink(missing_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------
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


@contextlib.contextmanager
def _exclusive(out_dir: Path):
    """Hold an exclusive lock on ``out_dir`` (a lock file beside it) so that two processes that
    prepare the same data-bin at once (two reproductions, say) build it one after the other
    instead of writing the same files together; the second then finds it up to date."""
    import fcntl

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(out_dir.parent / f".{out_dir.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process that prepares {out_dir}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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
    s, t = opts.src, opts.tgt
    stamp = _make_stamp(splits, opts, corpus)
    extra = tuple(k for k in EXTRA_TESTS if splits.get(k))
    outputs = _output_names(opts, extra)
    old = _read_stamp(out_dir)
    if not force and old is not None \
            and {k: v for k, v in old.items() if k not in _STAMP_RESULTS} == stamp \
            and all((out_dir / n).exists() for n in outputs):
        say(f"{out_dir} is up to date (same inputs and parameters); nothing to do "
            f"(--force rebuilds)")
        return False
    _prepare_out_dir(out_dir, outputs, old, force)
    work.mkdir(parents=True, exist_ok=True)
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
    say(f"wrote {out_dir} in {time.time() - start:.1f} s")
    return True


# ---------------------------------------------------------------------------------------------
# Corpora.
def _multi30k_default_download() -> Optional[bool]:
    """MULTI30K_DOWNLOAD: 1 downloads what a named --raw-dir / MULTI30K_DIR lacks, 0 never
    downloads; unset (None) downloads only when no folder has the files."""
    value = os.environ.get("MULTI30K_DOWNLOAD", "")
    return None if value == "" else value != "0"


def resolve_multi30k_raw(raw_dir: Optional[Path], work: Path, langs: Sequence[str],
                         download: Optional[bool] = None, url: Optional[str] = None) -> Path:
    """The directory holding the Multi30k files for ``langs``, the first of:

    1. ``raw_dir`` (--raw-dir, else $MULTI30K_DIR) when one is named; it must have the files,
       unless ``download`` is True (--download, MULTI30K_DOWNLOAD=1): then the cache (4-5) does;
    2. the offline mirror ``shared/data/multi30k`` beside the checkout (``multi30k_mirror``);
    3. an earlier download into ``work/raw`` (where data-bins made before the cache fetched to);
    4. the user cache (``multi30k_cache``: $XDG_CACHE_HOME/ran_fairseq/multi30k, else
       ~/.cache/ran_fairseq/multi30k), when it has the files (no request is made);
    5. a download into that cache from ``url`` (default $MULTI30K_URL, else ``MULTI30K_URL``),
       each file checked against its published SHA-256; not when ``download`` is False
       (MULTI30K_DOWNLOAD=0)."""
    url = (url or multi30k_url()).rstrip("/")
    cache = multi30k_cache()
    files = f"{{{','.join(MULTI30K_SPLITS.values())}}}.{{{','.join(langs)}}}.gz"
    named = ""
    if raw_dir is not None:
        raw_dir = Path(raw_dir).resolve()
        missing = missing_files(multi30k_files(raw_dir, langs))
        if not missing:
            return raw_dir
        named = (f"Multi30k raw files not found in {raw_dir} (--raw-dir or MULTI30K_DIR): "
                 f"missing {', '.join(p.name for p in missing)}")
        if not download:
            raise PrepareError(
                f"{named}. Point --raw-dir (or the MULTI30K_DIR environment variable) at a "
                f"directory with {files}, or unset it to use the download cache {cache}, or pass "
                f"--download (or set MULTI30K_DOWNLOAD=1) to fetch the missing files from {url} "
                f"into that cache.")
    else:
        mirror = multi30k_mirror()
        if mirror is not None and not missing_files(multi30k_files(mirror, langs)):
            say(f"reading Multi30k from {mirror}")
            return mirror
        fetched = work / "raw"
        if not missing_files(multi30k_files(fetched, langs)):
            say(f"using the Multi30k files downloaded earlier to {fetched}")
            return fetched
    if not missing_files(multi30k_files(cache, langs)):
        say(f"reading Multi30k from the cache {cache}")
        return cache
    if download is False:
        raise PrepareError(
            f"Multi30k raw files not found (in MULTI30K_DIR or --raw-dir, beside the checkout, "
            f"or in the cache {cache}) and MULTI30K_DOWNLOAD=0 forbids downloading them from "
            f"{url}: set MULTI30K_DIR to a directory with {files}, or unset MULTI30K_DOWNLOAD.")
    try:
        return fetch_multi30k(cache, langs, url)
    except CorpusError as err:
        raise PrepareError(f"{named}, and {err}" if named else str(err)) from err


def prepare_multi30k(opts: Options, raw_dir=None, out_dir=None, work_dir=None,
                     download_missing: Optional[bool] = None, download_url: Optional[str] = None,
                     workers: Optional[int] = None, force: bool = False) -> bool:
    """Multi30k task 1 ``opts.src``->``opts.tgt`` (en, de, fr, cs): train / val -> valid /
    test_2016_flickr -> test. Raw files come from ``raw_dir`` (default ``$MULTI30K_DIR``), else
    the mirror beside the checkout, else the user cache, else a download into that cache
    (``download_missing``: default from MULTI30K_DOWNLOAD); see ``resolve_multi30k_raw``."""
    src, tgt = opts.src, opts.tgt
    for flag, lang in (("--src", src), ("--tgt", tgt)):
        if lang not in MULTI30K_LANGS:
            raise PrepareError(f"unsupported Multi30k language {lang!r} ({flag}): choose from "
                               f"{', '.join(MULTI30K_LANGS)}")
    if src == tgt:
        raise PrepareError(f"source and target language are both {src!r} (--src/--tgt)")
    if raw_dir is None:
        raw_dir = os.environ.get("MULTI30K_DIR") or None
    if out_dir is None:
        out_dir = data_bin_root() / f"multi30k.{src}-{tgt}"
    out_dir = Path(out_dir).resolve()
    work = Path(work_dir).resolve() if work_dir else out_dir / "prep"
    if download_missing is None:
        download_missing = _multi30k_default_download()
    raw = resolve_multi30k_raw(raw_dir, work, (src, tgt), download_missing, download_url)
    splits = {split: [Part(raw / f"{name}.{src}.gz", raw / f"{name}.{tgt}.gz", fmt="text")]
              for split, name in MULTI30K_SPLITS.items()}
    return prepare(splits, out_dir, opts, work, workers, force, corpus="multi30k")


# ---------------------------------------------------------------------------------------------
# Command line.
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
        prog="python -m ran_fairseq.data.prepare",
        description="Tokenize (sacremoses), learn and apply joint BPE (subword-nmt) and binarize "
                    "(fairseq-preprocess --joined-dictionary) a parallel corpus into a data-bin.")
    sub = parser.add_subparsers(dest="corpus", required=True)

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
    return parser


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (PrepareError, CorpusError) as err:
        print(f"prepare: error: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
