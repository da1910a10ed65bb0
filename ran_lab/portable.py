"""Portable logs: what the reproduction engine and the benchmark keep names no machine's paths.

Their records (result.json, results.json, train_argv.json, bench.json) need nothing of this
module: their commands run in the checkout, so they name its files relative to it
(``data-bin/multi30k.de-en``), from the moment they are written, and a reader opens them relative
to its own checkout (``paths.repo_path``); a path outside the checkout (a ``--checkpoints`` or
``--data`` elsewhere) is absolute. A log the engine or the benchmark keeps (fairseq's train.log,
fairseq-generate's output, bench.log) is kept with placeholders in place of the absolute paths
fairseq and Python print (:func:`log_text`), line by line as it is written (:func:`copy_log`):

``{repo}``
    the checkout's root folder (where ``ran_fairseq/`` and ``scripts/`` are);
``{site-packages}``
    a folder Python packages were installed in (a virtual environment's ``site-packages``, or a
    folder on ``PYTHONPATH`` holding fairseq or torch);
``~``
    the home folder of the user that made the record.

fairseq's own defaults that it logs (its plasma store's ``/tmp/plasma``) are no machine's paths and
stay. ``COMMAND 2>&1 | python -m ran_lab.portable > LOG`` keeps a command's log in this form as
it is written; ``tests/unit/test_portable.py`` checks that no committed file holds a machine's path.
"""
import functools
import importlib.util
import os
import re
import site
import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

from ran_lab.common.paths import REPO

REPO_MARK = "{repo}"
SITE_MARK = "{site-packages}"
HOME_MARK = "~"

# A path's characters, and what may not come just before a path that is replaced (it would then be
# the tail of a longer path: /mnt/work/main is not /work/main) or just after it (/work/main-old).
_NAME = r"[\w.+~-]"
_BEFORE = r"(?<![\w.+~}-])"
# a path found by its shape starts a path of its own, not the path of a URL (https://host/home/...)
_START = r"(?<![\w.+~}/:-])"
_AFTER = r"(?![\w.+~-])"
_IN_PATH = r"[^\s'\"(),:;=\[\]{}<>|`*?]"
# Top-level packages whose folder is a package folder wherever it is (a log names their files).
PACKAGES = ("fairseq", "fairseq_cli", "torch", "hydra", "omegaconf", "numpy", "sacrebleu",
            "sacremoses", "subword_nmt", "torchaudio")
# A folder of installed packages by its name, and one on PYTHONPATH by what it holds.
SITE_BY_NAME = re.compile(_START + r"/" + _IN_PATH + r"*?/(?:site|dist)-packages" + _AFTER)
SITE_BY_PACKAGE = re.compile(_START + r"(?:/" + _NAME + r"+)+?(?=/(?:"
                             + "|".join(PACKAGES) + r")/)")
HOME = re.compile(_START + r"(?:/root|/home/" + _NAME + r"+|/Users/" + _NAME + r"+)" + _AFTER)

def prefix_pattern(path) -> "re.Pattern":
    """A pattern of ``path`` as the whole beginning of a path in text."""
    return re.compile(_BEFORE + re.escape(str(path).rstrip("/")) + _AFTER)


@functools.lru_cache(maxsize=None)
def site_dirs() -> Tuple[str, ...]:
    """The folders this Python takes packages from (its site-packages, its user site, and the
    folders holding fairseq and torch, e.g. one on PYTHONPATH), without the checkout itself or a
    folder the checkout is in."""
    found = set()
    try:
        found.update(site.getsitepackages())
    except AttributeError:  # some virtualenvs' site module
        pass
    found.add(site.getusersitepackages())
    found.update(p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages")))
    for name in ("fairseq", "torch"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            # site-packages/torch/__init__.py: the folder that holds the package folder
            found.add(str(Path(spec.origin).resolve().parent.parent))
    dirs = []
    for path in found:
        if not path or not os.path.isdir(path):
            continue
        resolved = Path(path).resolve()
        if resolved == REPO or REPO.is_relative_to(resolved):
            continue
        dirs += [str(resolved)] + ([path.rstrip("/")] if str(resolved) != path.rstrip("/") else [])
    return tuple(sorted(set(dirs), key=len, reverse=True))


def home_dir() -> Optional[str]:
    home = os.path.expanduser("~")
    return home.rstrip("/") if home and home.rstrip("/") not in ("", "/") else None


def log_text(text: str, repo=None, replace: Sequence[Tuple[str, str]] = ()) -> str:
    """``text`` (a log, or any file) with the absolute paths of the machine that wrote it replaced
    by placeholders: package folders by ``{site-packages}``, the checkout ``repo`` (default: this
    one) by ``{repo}``, home folders by ``~``, and each (old, new) of ``replace``. Longer prefixes go first, so a virtual environment inside the checkout is a
    package folder, and a checkout inside a home folder is the checkout."""
    return _replacer(str(Path(repo or REPO)), tuple(map(tuple, replace)))(text)


@functools.lru_cache(maxsize=64)
def _replacer(repo: str, replace: Tuple[Tuple[str, str], ...]):
    prefixes = ([(p, SITE_MARK) for p in site_dirs()] + [(repo.rstrip("/"), REPO_MARK)]
                + [(old.rstrip("/"), new) for old, new in replace])
    steps = [(SITE_BY_NAME, SITE_MARK)]  # package folders by name first: one inside a checkout
    seen = set()
    for old, new in sorted(prefixes, key=lambda p: len(p[0]), reverse=True):
        if old and old not in seen:
            seen.add(old)
            steps.append((prefix_pattern(old), new))
    steps.append((SITE_BY_PACKAGE, SITE_MARK))
    home = home_dir()
    if home:
        steps.append((prefix_pattern(home), HOME_MARK))
    steps.append((HOME, HOME_MARK))

    def change(text):
        if "/" not in text:
            return text
        for pattern, new in steps:
            text = pattern.sub(lambda _: new, text)
        return text
    return change


# fairseq-generate's lines of a sentence (S-, T-, H-, D-, P-, A- and E- lines): text of the corpus,
# kept as it is (a sentence may hold what looks like a path)
SENTENCE_LINE = re.compile(r"[A-Z]-\d+\t")


def log_line(line, repo=None):
    """A line of a log as it is kept: :func:`log_text`, but a sentence line as it is."""
    return line if SENTENCE_LINE.match(line) else log_text(line, repo)


def kept_log(text):
    """``text`` (a process's whole output) as a log keeps it: each line by :func:`log_line`."""
    return "".join(log_line(line) for line in text.splitlines(keepends=True))


def copy_log(stream, log):
    """Each line of ``stream`` (a process's output) written to ``log`` as it is kept
    (:func:`log_line`), as it comes."""
    for line in stream:
        log.write(log_line(line))
        log.flush()


if __name__ == "__main__":
    # a filter: the log a command prints, kept as it is written (scripts/gpu-speed.sh)
    sys.stdin.reconfigure(errors="surrogateescape")
    sys.stdout.reconfigure(errors="surrogateescape")
    copy_log(sys.stdin, sys.stdout)
