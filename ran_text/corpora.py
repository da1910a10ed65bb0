"""Reading raw parallel corpora: plain text (optionally gzipped), WMT ``.sgm`` / IWSLT ``.xml``
segment files, and IWSLT ``train.tags`` files; plus the file layouts of Multi30k and IWSLT'14.

Every reader yields one sentence per line as a ``str`` without the newline, with carriage returns
turned into spaces and the ends stripped, so that line ``i`` of a source file stays aligned with
line ``i`` of its target file through every later step (fairseq-preprocess would split a line at
a bare ``\\r``). Nothing here tokenizes or unescapes: the text is what the corpus distributes.
"""
import codecs
import gzip
import hashlib
import os
import re
import sys
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ran_text.textio import BadTextFile, decode_line

FORMATS = ("text", "seg", "tags")

# A WMT "fake SGML" or IWSLT XML segment line: <seg id="7">text</seg>, one per line.
_SEG = re.compile(r"<seg\b[^>]*>(.*?)</seg>")
_SPACES = re.compile(r"\s+")

# IWSLT train.tags files interleave talk metadata with the transcript. As in fairseq's
# examples/translation/prepare-iwslt14.sh, lines holding these tags are dropped ...
IWSLT_DROP_TAGS = ("<url>", "<talkid>", "<keywords>")
# ... and these tags are removed, keeping the talk title and description as sentences.
IWSLT_UNWRAP_TAGS = ("<title>", "</title>", "<description>", "</description>")


class CorpusError(Exception):
    """A raw corpus is missing, unreadable or malformed; the message says which file and why."""


class ChecksumError(CorpusError):
    """A downloaded file is not the published one (its SHA-256 differs)."""


def _clean(line: str) -> str:
    return line.replace("\r", " ").strip()


def _numbered_lines(path: Path) -> Iterator[Tuple[int, str]]:
    """(line number, text) of each line of ``path`` (``.gz`` decompressed), split on ``\\n`` only
    (a stray ``\\r`` or U+2028 inside a sentence must not split it), a UTF-8 byte-order mark
    dropped. Invalid UTF-8 and a truncated or damaged gzip file are CorpusErrors naming the file
    and the line."""
    lineno = 0
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            for lineno, raw in enumerate(f, 1):
                if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]
                try:
                    text = decode_line(raw, path, lineno)
                except BadTextFile as err:
                    raise CorpusError(str(err)) from None
                yield lineno, text
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        where = f"after line {lineno}" if lineno else "at its start"
        raise CorpusError(f"{path}: the gzip file is truncated or damaged ({where}: {err}); "
                          f"download or copy it again") from None


def read_text(path) -> Iterator[str]:
    """Lines of a plain-text file (``.gz`` is decompressed)."""
    for _, line in _numbered_lines(Path(path)):
        yield _clean(line)


def read_seg(path) -> Iterator[str]:
    """The ``<seg>`` texts of a WMT ``.sgm`` or IWSLT ``.xml`` file, in file order, with runs of
    whitespace collapsed (as sacrebleu reads these files; XML entities are left as they are)."""
    path = Path(path)
    for lineno, line in _numbered_lines(path):
        if "<seg" not in line:
            continue
        match = _SEG.search(line)
        if match is None:
            raise CorpusError(f"{path}:{lineno}: a <seg> that does not close on its line: "
                              f"{line.strip()[:80]!r}")
        yield _SPACES.sub(" ", match.group(1)).strip()


def read_iwslt_tags(path) -> Iterator[str]:
    """The transcript lines of an IWSLT ``train.tags.*`` file: metadata lines with
    ``IWSLT_DROP_TAGS`` are skipped, ``IWSLT_UNWRAP_TAGS`` are deleted from the rest."""
    for line in read_text(path):
        if any(tag in line for tag in IWSLT_DROP_TAGS):
            continue
        for tag in IWSLT_UNWRAP_TAGS:
            line = line.replace(tag, "")
        yield line.strip()


def detect_format(path) -> str:
    """``seg`` for ``.sgm``/``.xml`` files, ``tags`` for IWSLT ``train.tags.*``, else ``text``."""
    name = Path(path).name
    if name.endswith((".sgm", ".xml", ".sgm.gz", ".xml.gz")):
        return "seg"
    if name.startswith("train.tags."):
        return "tags"
    return "text"


@dataclass(frozen=True)
class Part:
    """One aligned piece of a split: a source file, a target file and how to read them.
    ``fmt`` is one of ``FORMATS`` or ``auto`` (see ``detect_format``); ``ascii_apostrophe``
    replaces U+2019 by ``'``, as fairseq's IWSLT and WMT recipes do for their test sets."""

    src: Path
    tgt: Path
    fmt: str = "auto"
    ascii_apostrophe: bool = False

    def files(self) -> Tuple[Path, Path]:
        return (Path(self.src), Path(self.tgt))

    def read(self, side: int) -> Iterator[str]:
        """Lines of the source (``side=0``) or target (``side=1``) file."""
        path = self.files()[side]
        if not path.is_file():
            raise CorpusError(f"input file not found: {path}")
        fmt = detect_format(path) if self.fmt == "auto" else self.fmt
        reader = {"text": read_text, "seg": read_seg, "tags": read_iwslt_tags}.get(fmt)
        if reader is None:
            raise CorpusError(f"unknown format {fmt!r} for {path}: use one of {FORMATS}")
        for line in reader(path):
            yield line.replace("\u2019", "'") if self.ascii_apostrophe else line


# ----------------------------------------------------------------------------------------------
# Multi30k (task 1, raw): {train,val,test_2016_flickr}.{en,de,fr,cs}.gz, line-aligned.
MULTI30K_LANGS = ("en", "de", "fr", "cs")
MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
# Where the files are published; the environment variable MULTI30K_URL replaces it (a mirror).
MULTI30K_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw"
# The SHA-256 of each published file: a download that does not match is refused.
MULTI30K_SHA256: Dict[str, str] = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
}


def multi30k_files(raw_dir, langs: Sequence[str]) -> List[Path]:
    """The raw files a Multi30k pair needs, split by split."""
    return [Path(raw_dir) / f"{name}.{lang}.gz"
            for name in MULTI30K_SPLITS.values() for lang in langs]


def missing_files(paths: Sequence[Path]) -> List[Path]:
    return [p for p in paths if not p.is_file()]


def multi30k_url() -> str:
    """The base URL Multi30k is downloaded from: ``$MULTI30K_URL``, else :data:`MULTI30K_URL`."""
    return (os.environ.get("MULTI30K_URL") or MULTI30K_URL).rstrip("/")


def multi30k_cache() -> Path:
    """The user cache Multi30k is downloaded into: ``$XDG_CACHE_HOME/ran_fairseq/multi30k``, else
    ``~/.cache/ran_fairseq/multi30k``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ran_fairseq" / "multi30k"


def _kb(n: int) -> str:
    return f"{n / 1000:,.0f} kB"


class Progress:
    """One progress line per download: rewritten in place on a terminal, else written once when
    the file is complete (a log gets one line per file, not one per block)."""

    def __init__(self, name: str, stream=None, interval: float = 0.2):
        self.name, self.stream, self.interval = name, stream or sys.stdout, interval
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.last = 0.0

    def __call__(self, done: int, total: Optional[int], final: bool = False) -> None:
        if not (final or self.tty) or (not final and time.monotonic() - self.last < self.interval):
            return
        self.last = time.monotonic()
        of = f" of {_kb(total)} ({100 * done // total}%)" if total else ""
        line = f"prepare:   {self.name} {_kb(done)}{of}"
        self.stream.write(("\r" + line + ("\n" if final else "")) if self.tty else line + "\n")
        self.stream.flush()


def download(url: str, dest: Path, timeout: float = 60.0, sha256: Optional[str] = None,
             progress: Optional[Callable[..., None]] = None) -> None:
    """Fetch ``url`` to ``dest`` (through ``dest.part``, so an interrupted fetch leaves no file
    that looks complete). Raises ``CorpusError`` naming the URL when the fetch fails and, given
    ``sha256``, when the file's SHA-256 differs (the partial file is deleted). ``progress(done,
    total)`` is called as blocks arrive, and with ``final=True`` at the end."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as out:
            length = response.headers.get("Content-Length") if response.headers else None
            total = int(length) if length and length.isdigit() else None
            done = 0
            for block in iter(lambda: response.read(1 << 16), b""):
                out.write(block)
                digest.update(block)
                done += len(block)
                if progress is not None:
                    progress(done, total)
        if progress is not None:
            progress(done, total, final=True)
    except (urllib.error.URLError, OSError, ValueError) as err:
        part.unlink(missing_ok=True)
        raise CorpusError(f"download failed: {url}: {err}") from err
    actual = digest.hexdigest()
    if sha256 is not None and actual != sha256:
        part.unlink(missing_ok=True)
        raise ChecksumError(f"checksum mismatch for {dest.name} downloaded from {url}: expected "
                            f"SHA-256 {sha256}, got {actual}; the file was deleted. The server "
                            f"does not serve the published file: set MULTI30K_URL to a mirror "
                            f"that does (the default is {MULTI30K_URL}), or copy the published "
                            f"files into a folder and set MULTI30K_DIR to it")
    part.replace(dest)


def fetch_multi30k(dest_dir: Path, langs: Sequence[str], url: Optional[str] = None,
                   timeout: float = 60.0, stream=None) -> Path:
    """Download the Multi30k files of ``langs`` that ``dest_dir`` lacks from ``url`` (default
    :func:`multi30k_url`), each checked against :data:`MULTI30K_SHA256`, with a progress line per
    file. Returns ``dest_dir``. Raises ``CorpusError`` naming the URL, MULTI30K_DIR and
    MULTI30K_URL when a file cannot be fetched."""
    from ran_text.textio import waiting_lock

    url = (url or multi30k_url()).rstrip("/")
    stream = stream or sys.stdout
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    # two processes that download at once take turns; the second finds the files there
    with waiting_lock(dest_dir, "the Multi30k folder", dest_dir / ".download.lock",
                      lambda message: print(f"prepare: {message}", file=stream, flush=True)):
        missing = missing_files(multi30k_files(dest_dir, langs))
        if missing:
            stream.write(f"prepare: downloading Multi30k ({len(missing)} files) from {url} into "
                         f"{dest_dir}, once: later runs read it there\n")
            stream.flush()
        for path in missing:
            try:
                download(f"{url}/{path.name}", path, timeout,
                         sha256=MULTI30K_SHA256.get(path.name),
                         progress=Progress(path.name, stream))
            except ChecksumError:
                raise
            except CorpusError as err:
                names = ",".join(MULTI30K_SPLITS.values())
                raise CorpusError(
                    f"{err}. Multi30k could not be downloaded from {url} into {dest_dir}. "
                    f"Without internet, copy {{{names}}}.{{{','.join(langs)}}}.gz (published at "
                    f"{MULTI30K_URL}) into a folder and set MULTI30K_DIR to it (or pass "
                    f"--raw-dir), or set MULTI30K_URL to a mirror that serves them") from err
    return dest_dir


# ----------------------------------------------------------------------------------------------
# IWSLT'14 De-En (the 2014-01 TED release, de-en.tgz, extracted into a directory ``de-en``).
IWSLT14_PAIR = "de-en"
# fairseq's test set: the TED dev/tst sets of the release (its `ls IWSLT14.TED*` also picks up
# TEDX.dev2012), concatenated in this order: 6,750 sentences.
IWSLT14_TEST_SETS = ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")
# Named test sets (--test-sets): fairseq's, and Elbayad et al. (2018, §4.1): dev2010 and
# tst2010-2013, 6,578 pairs (the setup of the authors' own preparation script). The 2014-01
# release has no tst2013: it comes from the IWSLT'15 release (2015-01 texts/de/en/de-en.tgz,
# IWSLT15.TED.tst2013.de-en.{de,en}.xml), looked for in the orig directory and --extra-test-dir.
IWSLT14_TEST_CHOICES = {
    "fairseq": IWSLT14_TEST_SETS,
    "elbayad2018": ("TED.dev2010", "TED.tst2010", "TED.tst2011", "TED.tst2012", "TED.tst2013"),
}
IWSLT14_RELEASES = ("IWSLT14", "IWSLT15")  # file name prefixes tried, in this order


def _iwslt_test_part(dirs: Sequence[Path], name: str, src: str, tgt: str,
                     required: bool) -> Part:
    tried = []
    for directory in dirs:
        for release in IWSLT14_RELEASES:
            pair = [directory / f"{release}.{name}.{IWSLT14_PAIR}.{lang}.xml" for lang in (src, tgt)]
            if not missing_files(pair):
                return Part(*pair, fmt="seg", ascii_apostrophe=True)
            tried.append(f"{directory}/{release}.{name}.{IWSLT14_PAIR}.{{{src},{tgt}}}.xml")
    if required:
        raise CorpusError(f"test set {name} not found (tried {', '.join(tried)}): the IWSLT'14 "
                          f"release has no tst2013; take IWSLT15.TED.tst2013.de-en.de.xml and "
                          f"...en.xml from the IWSLT'15 release (2015-01 texts/de/en/de-en.tgz) "
                          f"and put them in one of those directories (--extra-test-dir DIR), or "
                          f"use --test-sets fairseq")
    first = dirs[0]  # the release's own names; a missing file is reported by the pipeline
    return Part(first / f"IWSLT14.{name}.{IWSLT14_PAIR}.{src}.xml",
                first / f"IWSLT14.{name}.{IWSLT14_PAIR}.{tgt}.xml", fmt="seg",
                ascii_apostrophe=True)


def iwslt14_parts(orig_dir, src: str, tgt: str, test_sets: str = "fairseq",
                  extra_dirs: Sequence = ()) -> Tuple[Part, List[Part]]:
    """(train part, test parts) of an extracted IWSLT'14 ``de-en`` directory, for ``src``->``tgt``
    (either direction); ``test_sets`` names the test sets' list in :data:`IWSLT14_TEST_CHOICES`,
    found as IWSLT14.* or IWSLT15.* files in ``orig_dir`` and then ``extra_dirs``. The valid set
    is held out from train by the pipeline."""
    if test_sets not in IWSLT14_TEST_CHOICES:
        raise CorpusError(f"--test-sets must be one of {', '.join(IWSLT14_TEST_CHOICES)}, got "
                          f"{test_sets!r}")
    orig = Path(orig_dir)
    dirs = [orig, *map(Path, extra_dirs)]
    train = Part(orig / f"train.tags.{IWSLT14_PAIR}.{src}",
                 orig / f"train.tags.{IWSLT14_PAIR}.{tgt}", fmt="tags")
    tests = [_iwslt_test_part(dirs, name, src, tgt, required=name not in IWSLT14_TEST_SETS)
             for name in IWSLT14_TEST_CHOICES[test_sets]]
    return train, tests
