"""JSON and text files read with an error that names the file, where it is broken and what to do
(:mod:`ran_text.textio` reads them)."""
from pathlib import Path

from ran_text import textio
from .errors import LabError


def read_json(path, what, error=LabError):
    """The JSON value in ``path``; ``error`` naming ``what`` the file is when it does not exist."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{what} {path} is a folder; name a JSON file")
    if not path.is_file():
        raise error(f"{what} {path} does not exist")
    return load_json(path, what, "fix the file (or take it again from the repository)", error)


def load_json(path, what, fix, error=LabError, shape=None):
    """The JSON value in ``path``; an ``error`` naming the file, where it is broken and ``fix``
    (what to do) when it is not valid JSON (cut short by a full disk, say), or not of ``shape``
    (``dict`` or ``list``)."""
    try:
        return textio.read_json(path, what, fix, shape)
    except textio.BadTextFile as e:
        raise error(str(e)) from None


def read_text_lines(path, error=LabError):
    """The lines of a text file the engine scores with, split on "\\n" only (a sentence may hold
    U+2028 or another character that str.splitlines() would split at), a byte-order mark dropped;
    invalid UTF-8 is an ``error`` naming the file and the line."""
    try:
        return textio.read_lines(path)
    except textio.BadTextFile as e:
        raise error(str(e)) from None
