"""The steps: tokenize, filter (languages, lengths, held-out valid), learn and apply BPE,
binarize."""
import contextlib
import io
import os
import sys
from collections import Counter, deque
from itertools import zip_longest
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

from ..corpora import Part
from .langid import language_filter
from ran_text import tied
from .options import EXTRA_TESTS, Cleaning, Options, PrepareError, say
from .parallel import (_bpe_chunk, _chunks, _count_lines, _langid_chunk, _run_jobs,
                       _tokenize_chunk, _write_lines)

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
    # tied to this process: a killed preparation leaves no fairseq-preprocess writing
    proc = tied.run(cmd, env=env, capture_output=True, text=True, cwd=folder)
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
