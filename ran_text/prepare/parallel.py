"""Worker-side functions (run in pool processes; module-level so they can be pickled), the pool
and the chunking of text into jobs."""
import contextlib
import multiprocessing
import os
import signal
from itertools import islice
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Sequence

from ran_text import tied
from .langid import language_filter

CHUNK_LINES = 2000  # sentences per job sent to a worker process
CHUNKS_IN_FLIGHT = 16  # jobs handed to the pool at once (bounds memory on large corpora)
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


def _worker_signals(parent: int):
    """A worker ends at once on SIGTERM and SIGINT (the kernel's default action), whatever Python
    handlers it inherited from its parent (the reproduction engine's): a Python handler runs only
    between bytecodes, so a signal that comes as a worker enters its blocking wait for the next
    job is not acted on until that wait ends, and the pool that sent it (its ``terminate``) waits
    on the worker forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    tied.tie_to_parent(parent)  # and ends with the preparation, even one killed by SIGKILL


@contextlib.contextmanager
def _pool(workers: int):
    if workers <= 1:
        yield None
        return
    # fork: workers inherit the imported modules instead of re-importing torch/fairseq.
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ctx.Pool(workers, initializer=_worker_signals, initargs=(os.getpid(),)) as pool:
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
