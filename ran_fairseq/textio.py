"""Reading and writing the project's text and JSON files so that a damaged file is named.

- Lines are split on ``"\\n"`` only (a ``"\\r\\n"`` ending counts as one), never with
  ``str.splitlines()``, which also breaks at U+2028, U+0085, ``\\x0b``, ``\\x0c`` and
  ``\\x1c``-``\\x1e``: characters that may sit inside a sentence, where fairseq keeps them.
- A UTF-8 byte-order mark at the start of a file is dropped.
- Invalid UTF-8 is an error naming the file, the line and what to do.
- JSON files are written atomically (a temporary file of a name unique to the writer, then a
  rename), so a reader sees the old file or the new one, never a part; a file that is not valid
  JSON (cut short by a full disk, say) is an error naming it.
"""
import json
import os
import secrets

BOM = "\ufeff"


class BadTextFile(ValueError):
    """A file that cannot be read as the text it should hold; the message names the file, what is
    wrong and what to do."""


def unique_tmp(path):
    """A temporary name beside ``path``, unique to this writer (process id and a random part), so
    that two writers never share one."""
    return f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


def _not_utf8(path, lineno, byte, column):
    return BadTextFile(f"{path}: line {lineno} is not valid UTF-8 (byte 0x{byte:02x} at column "
                       f"{column}); convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8) "
                       f"or fix that line")


def decode_line(raw, path, lineno):
    """``raw`` (bytes of line ``lineno`` of ``path``, 1-based) as text; invalid UTF-8 raises
    BadTextFile naming the file, the line and the byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _not_utf8(path, lineno, raw[error.start], error.start + 1) from None


def split_lines(text):
    """The lines of ``text``: split on ``"\\n"`` only, a final newline ending the last line, a
    ``"\\r"`` before a newline dropped, a leading byte-order mark dropped."""
    if text.startswith(BOM):
        text = text[1:]
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path):
    """The lines of the UTF-8 text file ``path`` (see :func:`split_lines`); invalid UTF-8 is a
    :class:`BadTextFile` naming the file and the line."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        start = data.rfind(b"\n", 0, error.start) + 1
        raise _not_utf8(path, data.count(b"\n", 0, error.start) + 1, data[error.start],
                        error.start - start + 1) from None
    return split_lines(text)


def write_text_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file of a unique name, renamed over it."""
    tmp = unique_tmp(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path, obj, indent=2):
    """``obj`` as JSON in ``path``, written atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=indent) + "\n")


def read_json(path, what="", fix=""):
    """The JSON value in ``path``. A file that is not valid JSON raises BadTextFile naming it,
    where the parser stopped, and ``fix`` (what to do; a default says to delete or restore it);
    ``what`` says what the file is."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        kind = f" ({what})" if what else ""
        where = (f"line {error.lineno} column {error.colno}: {error.msg}"
                 if isinstance(error, json.JSONDecodeError) else "not UTF-8")
        if not data.strip():
            where = "it is empty"
        raise BadTextFile(f"{path}{kind} is not valid JSON ({where}); it was cut short or "
                          f"edited: {fix or 'restore it, or delete it and make it again'}") \
            from None
