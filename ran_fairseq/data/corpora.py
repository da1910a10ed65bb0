"""Reading raw parallel corpora: plain text (optionally gzipped), WMT ``.sgm`` / IWSLT ``.xml``
segment files, and IWSLT ``train.tags`` files; plus the file layouts of Multi30k and IWSLT'14.

Every reader yields one sentence per line as a ``str`` without the newline, with carriage returns
turned into spaces and the ends stripped, so that line ``i`` of a source file stays aligned with
line ``i`` of its target file through every later step (fairseq-preprocess would split a line at
a bare ``\\r``). Nothing here tokenizes or unescapes: the text is what the corpus distributes.
"""
import codecs
import gzip
import re
import shutil
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Sequence, Tuple

from ..textio import BadTextFile, decode_line

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
MULTI30K_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw"


def multi30k_files(raw_dir, langs: Sequence[str]) -> List[Path]:
    """The raw files a Multi30k pair needs, split by split."""
    return [Path(raw_dir) / f"{name}.{lang}.gz"
            for name in MULTI30K_SPLITS.values() for lang in langs]


def missing_files(paths: Sequence[Path]) -> List[Path]:
    return [p for p in paths if not p.is_file()]


def download(url: str, dest: Path, timeout: float = 60.0) -> None:
    """Fetch ``url`` to ``dest`` (through ``dest.part``, so an interrupted fetch leaves no file
    that looks complete). Raises ``CorpusError`` naming the URL when the fetch fails."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError, ValueError) as err:
        part.unlink(missing_ok=True)
        raise CorpusError(f"download failed: {url}: {err}") from err
    part.replace(dest)


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
