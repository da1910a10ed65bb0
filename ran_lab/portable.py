"""Portable records: what the reproduction engine and the benchmark write names files relative to
the checkout, never by the absolute path of the machine that made it.

A record (result.json, results.json, train_argv.json, bench.json) writes a path inside the checkout
as ``{repo}/PATH`` (``{repo}/data-bin/multi30k.de-en``), and the engine expands ``{repo}`` to the
checkout it runs in (:func:`expand`); a path outside the checkout (a ``--checkpoints`` or
``--data`` elsewhere) stays as given. A log the engine or the benchmark keeps (fairseq's
train.log, fairseq-generate's output, bench.log) is stored with these placeholders in place of the
absolute paths fairseq and Python print (:func:`log_text`):

``{repo}``
    the checkout's root folder (where ``ran_fairseq/`` and ``scripts/`` are);
``{site-packages}``
    a folder Python packages were installed in (a virtual environment's ``site-packages``, or a
    folder on ``PYTHONPATH`` holding fairseq or torch);
``~``
    the home folder of the user that made the record;
``{scratch}``
    a folder outside the checkout named by hand (``--replace PATH={scratch}``).

fairseq's own defaults that it logs (its plasma store's ``/tmp/plasma``) are no machine's paths and
stay. ``python -m ran_lab.portable FOLDER...`` rewrites files made before (or on another
machine) to this form, and ``--check`` lists the files that still hold a machine's path:

    python -m ran_lab.portable results/ configs/            # rewrite in place
    python -m ran_lab.portable --check results/ configs/    # list, exit 1 if any
    python -m ran_lab.portable --checkout /old/checkout --replace /mnt/ckpt={scratch} \\
        results/new-folder                                          # a record made elsewhere
"""
import argparse
import functools
import importlib.util
import json
import os
import re
import site
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from ran_lab import checkout

REPO = checkout.ROOT
REPO_MARK = "{repo}"
SITE_MARK = "{site-packages}"
HOME_MARK = "~"
SCRATCH_MARK = "{scratch}"

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
# The beginnings of the absolute paths records were found to hold (checkouts, virtual
# environments, temporary package folders, home folders): what --check looks for besides the
# current checkout and Python's package folders.
MACHINE_PREFIXES = ("/work/", "/home/", "/root/", "/Users/", "/tmp/pytest", "/tmp/offline-gpu-site",
                    "/tmp/site/", "/scratch/", "/mnt/", "/private/")
# fairseq's defaults that it logs, not paths of the machine
NOT_MACHINE_PATHS = ("/tmp/plasma",)


def prefix_pattern(path) -> "re.Pattern":
    """A pattern of ``path`` as the whole beginning of a path in text."""
    return re.compile(_BEFORE + re.escape(str(path).rstrip("/")) + _AFTER)


# ----------------------------------------------------------------------------------------------
# Records (JSON values): {repo} in and out
# ----------------------------------------------------------------------------------------------

def _walk(value, change):
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {key: _walk(item, change) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(item, change) for item in value]
    return value


def record(value, repo=None):
    """``value`` (a string, or a JSON value of them) with each path inside the checkout ``repo``
    (default: this one) written ``{repo}/PATH``."""
    pattern = prefix_pattern(Path(repo or REPO))
    return _walk(value, lambda text: pattern.sub(lambda _: REPO_MARK, text))


def expand(value, repo=None):
    """``value`` with ``{repo}`` replaced by the checkout ``repo`` (default: this one)."""
    root = str(Path(repo or REPO))
    return _walk(value, lambda text: text.replace(REPO_MARK, root))


def expand_path(text, repo=None) -> Path:
    """A recorded path as a path of this machine."""
    return Path(expand(str(text), repo))


def upgrade_result(result, repo=None):
    """A stored result as this engine records one: one made before paths were recorded relative
    to the checkout holds the checkout it was made in as ``repo`` and absolute paths inside it;
    those become ``{repo}/PATH`` (``repo`` itself is dropped)."""
    if not isinstance(result, dict):
        return result
    made_in = result.get("repo")
    result = {k: v for k, v in result.items() if k != "repo"}
    if isinstance(made_in, str) and made_in.startswith("/"):
        result = record(result, made_in)
    return record(result, repo)


# ----------------------------------------------------------------------------------------------
# Logs (text): every machine path fairseq and Python print
# ----------------------------------------------------------------------------------------------

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


def log_text(text: str, repo=None, checkouts: Sequence[str] = (),
             replace: Sequence[Tuple[str, str]] = ()) -> str:
    """``text`` (a log, or any file) with the absolute paths of the machine that wrote it replaced
    by placeholders: package folders by ``{site-packages}``, the checkout ``repo`` (default: this
    one) and the former ``checkouts`` by ``{repo}``, home folders by ``~``, and each (old, new) of
    ``replace``. Longer prefixes go first, so a virtual environment inside the checkout is a
    package folder, and a checkout inside a home folder is the checkout."""
    return _replacer(str(Path(repo or REPO)), tuple(map(str, checkouts)),
                     tuple(map(tuple, replace)))(text)


@functools.lru_cache(maxsize=64)
def _replacer(repo: str, checkouts: Tuple[str, ...], replace: Tuple[Tuple[str, str], ...]):
    prefixes = ([(p, SITE_MARK) for p in site_dirs()]
                + [(c.rstrip("/"), REPO_MARK) for c in (repo, *checkouts)]
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


def rewrite_log(path, repo=None):
    """Rewrite the log ``path`` with :func:`log_text` (atomically; a log without a machine path is
    not touched), fairseq-generate's sentence lines left as they are. Returns whether it
    changed."""
    from ran_text import textio

    path = Path(path)
    if not path.is_file():
        return False
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    new = "\n".join(line if SENTENCE_LINE.match(line) else log_text(line, repo)
                    for line in text.split("\n"))
    if new == text:
        return False
    textio.write_text_atomic(path, new, errors="surrogateescape")
    return True


# ----------------------------------------------------------------------------------------------
# Finding machine paths (the check) and rewriting files made before
# ----------------------------------------------------------------------------------------------

def machine_patterns(repo=None) -> List["re.Pattern"]:
    """Patterns of the absolute paths a file of the project must not hold: the checkout's own
    path, this Python's package folders and virtual environment, any site-packages folder, and
    the beginnings in :data:`MACHINE_PREFIXES` (not fairseq's defaults, :data:`NOT_MACHINE_PATHS`)."""
    exact = {str(Path(repo or REPO)), *site_dirs()}
    if sys.prefix != sys.base_prefix:  # a virtual environment
        exact.add(str(Path(sys.prefix).resolve()))
    patterns = [prefix_pattern(p) for p in sorted(exact, key=len, reverse=True)]
    patterns.append(SITE_BY_NAME)
    allowed = "".join(f"(?!{re.escape(p)})" for p in NOT_MACHINE_PATHS)
    patterns.append(re.compile(_BEFORE + allowed + "(?:" + "|".join(
        re.escape(p) for p in MACHINE_PREFIXES) + ")"))
    return patterns


def machine_paths(text: str, repo=None) -> List[str]:
    """The machine paths in ``text`` (each as it appears, up to the end of the path)."""
    found = []
    for pattern in machine_patterns(repo):
        for match in pattern.finditer(text):
            end = re.match(_IN_PATH + "*", text[match.end():]).end()
            found.append(text[match.start():match.end() + end])
    return sorted(set(found))


def project_files(paths: Iterable, repo=None) -> List[Path]:
    """The files under ``paths`` that the project keeps: those git tracks or would add (not
    ignored), or every file where the folder is not in a git checkout."""
    files = []
    for path in map(Path, paths):
        if path.is_file():
            files.append(path)
            continue
        proc = subprocess.run(["git", "-C", str(path), "ls-files", "-z", "--cached", "--others",
                               "--exclude-standard", "--full-name", "."],
                              capture_output=True)
        if proc.returncode != 0:
            files += sorted(p for p in path.rglob("*") if p.is_file())
            continue
        top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True).stdout.strip()
        files += sorted(Path(top) / name for name in
                        proc.stdout.decode("utf-8", "surrogateescape").split("\0")
                        if name and (Path(top) / name).is_file())
    return list(dict.fromkeys(files))


def read_text(path: Path) -> Optional[str]:
    """A file's text, or None for a binary file (a PNG, a checkpoint)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _is_result(value) -> bool:
    return isinstance(value, dict) and "commands" in value and "system" in value


def portable_json(value, repo=None, checkouts=(), replace=()):
    """A JSON record made before (a result.json, results.json or bench.json) in portable form:
    the checkout it names in a result's ``repo`` (and ``checkouts``) as ``{repo}`` (``repo``
    dropped), every other machine path as :func:`log_text` writes it."""
    def fix(item, made_in=()):
        if _is_result(item):
            here = [item["repo"]] if isinstance(item.get("repo"), str) else []
            item = {k: v for k, v in item.items() if k != "repo"}
            made_in = (*made_in, *here)
        if isinstance(item, dict):
            return {k: fix(v, made_in) for k, v in item.items()}
        if isinstance(item, list):
            return [fix(v, made_in) for v in item]
        if isinstance(item, str):
            return log_text(item, repo, [*checkouts, *made_in], replace)
        return item
    return fix(value)


def recorded_checkouts(files: Iterable[Path]) -> List[str]:
    """The checkouts that results among ``files`` say they were made in (their ``repo``)."""
    found = []
    for path in files:
        if path.suffix != ".json":
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        results = data.get("results") if isinstance(data, dict) else None
        items = [data] + (results if isinstance(results, list) else [])
        found += [r["repo"] for r in items if _is_result(r) and isinstance(r.get("repo"), str)]
    return list(dict.fromkeys(found))


def portable_file(path: Path, repo=None, checkouts=(), replace=()) -> Optional[str]:
    """The portable text of the file ``path`` (None where it is binary or needs no change). A
    JSON file the project wrote (``json.dumps(..., indent=2)``) is rewritten as JSON, so a
    result's ``repo`` goes; any other file as text."""
    text = read_text(path)
    if text is None:
        return None
    new = None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        if data is not None:
            for indent, end in ((2, "\n"), (2, ""), (None, "\n"), (None, "")):
                if json.dumps(data, indent=indent) + end == text:
                    new = json.dumps(portable_json(data, repo, checkouts, replace),
                                     indent=indent) + end
                    break
    if new is None:
        new = log_text(text, repo, checkouts, replace)
    return new if new != text else None


def parse_replace(items) -> List[Tuple[str, str]]:
    pairs = []
    for item in items or []:
        old, sep, new = item.partition("=")
        if not (sep and old.startswith("/") and new):
            raise SystemExit(f"portable: --replace takes /OLD/PATH=NEW (e.g. /mnt/ckpt={SCRATCH_MARK}),"
                             f" not {item!r}")
        pairs.append((old, new))
    return pairs


def _shown(path: Path) -> str:
    """``path`` relative to the working folder where it lies under it."""
    path = Path(path).absolute()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ran_lab.portable",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("paths", nargs="+", type=Path,
                   help="files or folders (a folder's files that git keeps or would add)")
    p.add_argument("--check", action="store_true",
                   help="change nothing: list each file that holds an absolute path of a machine "
                        "and exit 1 if there is one")
    p.add_argument("--checkout", action="append", default=[], metavar="PATH",
                   help="a checkout the files were made in, written {repo} (besides this one and "
                        "those the results name in their 'repo')")
    p.add_argument("--replace", action="append", default=[], metavar="OLD=NEW",
                   help=f"write the path OLD as NEW (e.g. a checkpoint folder outside the "
                        f"checkout: /mnt/ckpt={SCRATCH_MARK})")
    args = p.parse_args(argv)
    files = project_files(args.paths)
    if args.check:
        bad = 0
        for path in files:
            text = read_text(path)
            found = machine_paths(text) if text is not None else []
            if found:
                bad += 1
                shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3
                                                 else "")
                print(f"{_shown(path)}: {shown}")
        print(f"portable: {bad} of {len(files)} files hold a machine's absolute path"
              + (": rewrite them with python -m ran_lab.portable PATH..." if bad else ""),
              file=sys.stderr)
        return 1 if bad else 0
    replace = parse_replace(args.replace)
    checkouts = [*args.checkout, *recorded_checkouts(files)]
    changed = 0
    for path in files:
        new = portable_file(path, checkouts=checkouts, replace=replace)
        if new is not None:
            from ran_text import textio

            textio.write_text_atomic(path, new)
            changed += 1
            print(_shown(path))
    print(f"portable: rewrote {changed} of {len(files)} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
