"""Reading and writing the project's text and JSON files so that a damaged file is named.

- Lines are split on ``"\\n"`` only (a ``"\\r\\n"`` ending counts as one), never with
  ``str.splitlines()``, which also breaks at U+2028, U+0085, ``\\x0b``, ``\\x0c`` and
  ``\\x1c``-``\\x1e``: characters that may sit inside a sentence, where fairseq keeps them.
- A UTF-8 byte-order mark at the start of a file is dropped.
- Invalid UTF-8 is an error naming the file, the line and what to do.
- Every file the project writes whole is written atomically (:func:`atomic_write`: a temporary
  file of a name unique to the writer, flushed to disk, then renamed over the file), so a reader
  sees the old file or the new one, never a part, and a failed write (a full disk) leaves no
  partial file; a file that is not valid JSON (cut short, say) is an error naming it.
- One lock (:class:`FolderLock`) keeps processes that write one folder apart: the data
  preparation, the Multi30k download and the reproduction engine's runs and tables.
- One error path (:func:`one_line_errors`): an ``OSError`` on a named file (a read-only folder, a
  full disk, a missing file) and the file errors below (:class:`FileFault`) end a command with one
  line naming the file, what is wrong and what to do, and a non-zero exit status.
"""
import contextlib
import datetime
import errno
import fcntl
import functools
import json
import os
import secrets
import shlex
import shutil
import socket
import sys
from pathlib import Path

BOM = "\ufeff"


class FileFault(Exception):
    """A file the command cannot use; the message names it, what is wrong and what to do (a
    command ends with that one line, :func:`one_line_errors`)."""


class BadTextFile(FileFault, ValueError):
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


def atomic_write(path, write, binary=False, errors="strict"):
    """Make ``path`` by ``write(f)`` on a temporary file beside it, of a name unique to this writer
    (:func:`unique_tmp`), flushed to disk and renamed over ``path``: ``path`` is always the old
    file or the new one, and a write that fails (a full disk, a kill) removes its partial file.
    ``binary``: ``f`` takes bytes, else UTF-8 text (``errors`` as in :func:`open`)."""
    tmp = unique_tmp(path)
    try:
        with (open(tmp, "wb") if binary else
              open(tmp, "w", encoding="utf-8", errors=errors)) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        cause = _os_error_under(error)
        if cause is not None and cause.filename is None and cause.errno is not None:
            # a write that found no room (a full disk, a file-size limit) names no file: name it
            raise OSError(cause.errno, cause.strerror or str(cause), os.fspath(path)) from None
        if cause is not None and cause is not error:  # torch.save's RuntimeError of a full disk
            raise cause from None
        raise


def _os_error_under(error):
    """The OSError that ``error`` was raised while handling (a writer library's own error over a
    full disk), else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError):
            return error
        seen.add(id(error))
        error = error.__context__
    return None


def write_text_atomic(path, text, errors="strict"):
    """Write ``text`` to ``path`` atomically (:func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text), errors=errors)


def copy_atomic(src, dst):
    """Copy ``src`` to ``dst`` atomically (:func:`atomic_write`), its times and mode kept."""
    def copy(f):
        with open(src, "rb") as source:
            shutil.copyfileobj(source, f, 1 << 20)
    atomic_write(dst, copy, binary=True)
    shutil.copystat(src, dst)


def write_json(path, obj, indent=2):
    """``obj`` as JSON in ``path``, written atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=indent) + "\n")


# what any JSON file of the project may hold: the lab's largest (a results folder's results.json)
# is well under a megabyte and six levels deep
JSON_MAX_BYTES = 64 * 1024 * 1024
JSON_MAX_DEPTH = 64


def json_depth(value):
    """How deeply lists and objects nest in ``value`` (0 for a number or a string), counted
    without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                   else item))
    return deepest


def read_json(path, what="", fix="", shape=None):
    """The JSON value in ``path``. A file that is not valid JSON raises BadTextFile naming it,
    where the parser stopped, and ``fix`` (what to do; a default says to delete or restore it);
    ``what`` says what the file is. ``shape`` (``dict`` or ``list``): the value's type, else a
    BadTextFile saying so. A file over :data:`JSON_MAX_BYTES`, or nested deeper than
    :data:`JSON_MAX_DEPTH`, is a BadTextFile too: no file of the project is, and reading one would
    take the memory or the stack of the process."""
    kind = f" ({what})" if what else ""
    fix = fix or "restore it, or delete it and make it again"
    with open(path, "rb") as f:
        data = f.read(JSON_MAX_BYTES + 1)
    if len(data) > JSON_MAX_BYTES:
        raise BadTextFile(f"{path}{kind} is larger than {JSON_MAX_BYTES // 2 ** 20} MiB, more "
                          f"than any file of the project holds; it was edited or made by another "
                          f"program: {fix}")
    try:
        value = json.loads(data.decode("utf-8-sig"))
    except RecursionError:
        value = None
        deep = True
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        where = (f"line {error.lineno} column {error.colno}: {error.msg}"
                 if isinstance(error, json.JSONDecodeError) else "not UTF-8")
        if not data.strip():
            where = "it is empty"
        raise BadTextFile(f"{path}{kind} is not valid JSON ({where}); it was cut short or "
                          f"edited: {fix}") from None
    else:
        deep = json_depth(value) > JSON_MAX_DEPTH
    if deep:
        raise BadTextFile(f"{path}{kind} nests lists or objects more than {JSON_MAX_DEPTH} deep, "
                          f"deeper than any file of the project; it was edited or made by "
                          f"another program: {fix}")
    if shape is not None and not isinstance(value, shape):
        raise BadTextFile(f"{path}{kind} holds {json_kind(value)} where "
                          f"{json_kind(shape())} belongs; it was edited or made by another "
                          f"program: {fix}")
    return value


def read_json_file(path, what):
    """The JSON value in ``path``, a file the command was given or a config names (``what`` it
    is): a folder or a missing file is a :class:`FileFault` naming it, a broken one a
    :class:`BadTextFile` (:func:`read_json`)."""
    path = Path(path)
    if path.is_dir():
        raise FileFault(f"{what} {path} is a folder; name a JSON file")
    if not path.is_file():
        raise FileFault(f"{what} {path} does not exist")
    return read_json(path, what, "fix the file (or take it again from the repository)")


def json_kind(value):
    """'an object', 'a list', 'a number', ...: a JSON value's kind, for messages."""
    for kind, name in ((dict, "an object"), (list, "a list"), (str, "a string"), (bool, "true or false"),
                       ((int, float), "a number")):
        if isinstance(value, kind):
            return name
    return "null"


# ---- one lock ----------------------------------------------------------------------------------

class LinkRefused(FileFault):
    """A file to write, or a folder on its way, is a symbolic link: writing would change what it
    points to, outside the folder named; the message names the link."""


def link_message(path):
    return (f"{path} is a symbolic link: nothing is written through a link (the file it points "
            f"to, outside the folder, would change); remove the link, or put a copy of the file "
            f"in its place")


def open_no_follow(path, mode="w", encoding="utf-8"):
    """``path`` opened to write (``mode`` "w", "a", or "a+" to read and append) without following
    a symbolic link: a link there is a :class:`LinkRefused` naming it."""
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | {
        "w": os.O_WRONLY | os.O_TRUNC, "a": os.O_WRONLY | os.O_APPEND, "a+": os.O_RDWR}[mode]
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LinkRefused(link_message(path)) from None
        raise
    return os.fdopen(fd, "r+" if mode == "a+" else mode, encoding=encoding)


class LockedError(FileFault):
    """A folder is held by another process, or its lock file cannot be made; the message names
    it and what to do."""


class FolderBusy(LockedError):
    """Another process holds the lock; the message names it."""


class FolderLock:
    """An exclusive lock on ``folder`` through the file ``lock_file`` (``folder`` / ``.lock`` by
    default; ``fcntl``: the kernel frees it when its holder dies, however it dies) that names its
    holder: process id, host, command and start time; ``what`` names the folder in messages. Use
    as a context manager or with :meth:`acquire` / :meth:`release`. The lock file stays (removing
    it would let a process that opened it before the removal and one that creates it anew hold
    the lock together)."""

    def __init__(self, folder, what="folder", lock_file=None):
        self.folder = os.fspath(folder)
        self.what = what
        self.path = os.fspath(lock_file) if lock_file else os.path.join(self.folder, ".lock")
        self._file = None

    def acquire(self, wait=False):
        """Take the lock; if another process holds it, wait for it (``wait``) or raise
        :class:`LockedError` naming the holder. A lock file that cannot be made (a read-only
        folder, a full disk) is a :class:`LockedError` naming it."""
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            f = open_no_follow(self.path, "a+")
        except LinkRefused as error:
            raise LockedError(f"cannot lock {self.what} {self.folder}: {error}") from None
        except OSError as error:
            raise LockedError(f"cannot lock {self.what} {self.folder}: {os_error_line(error)}") \
                from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            f.seek(0)
            holder = f.read()
            f.close()
            raise FolderBusy(f"{self.what} {self.folder} is in use by {describe(holder)} "
                              f"(lock file {self.path}); wait for it to end, or stop it, or use "
                              f"another folder") from None
        try:
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                "command": shlex.join(sys.argv),
                                "started": datetime.datetime.now().isoformat(timespec="seconds")})
                    + "\n")
            f.flush()
        except OSError:
            pass  # the lock is held; only its holder's name is missing (a full disk)
        self._file = f
        return self

    def release(self):
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def fileno(self):
        return self._file.fileno()

    def __enter__(self):
        return self if self._file is not None else self.acquire()

    def __exit__(self, *exc):
        self.release()


@contextlib.contextmanager
def waiting_lock(folder, what, lock_file, say):
    """Hold ``folder``'s :class:`FolderLock`, waiting for another holder; ``say(message)`` is told
    when it waits."""
    lock = FolderLock(folder, what, lock_file)
    try:
        lock.acquire()
    except FolderBusy:
        say(f"waiting for another process that uses {folder}")
        lock.acquire(wait=True)
    try:
        yield lock
    finally:
        lock.release()


def describe(holder_text):
    """A lock file's text as 'process 123 on host, started ..., running: COMMAND'."""
    try:
        holder = json.loads(holder_text)
        return (f"process {holder['pid']} on {holder['host']}, started {holder['started']}, "
                f"running: {holder['command']}")
    except (ValueError, KeyError, TypeError):
        return "another process (it has not written its name yet)"


# ---- one error path ----------------------------------------------------------------------------

_WHAT_TO_DO = {
    errno.EROFS: "the file system is read-only: write to another folder",
    errno.EACCES: "make it writable (or readable) for this user, or use another folder",
    errno.EPERM: "make it writable (or readable) for this user, or use another folder",
    errno.ENOSPC: "the disk is full: free space on it or write to another disk",
    errno.EDQUOT: "the disk quota is used up: free space or write to another disk",
    errno.ENOENT: "check the path (a file or folder named there does not exist)",
    errno.ENOTDIR: "check the path (a part of it is a file, not a folder)",
    errno.EISDIR: "name a file, not a folder",
}


def os_error_line(error):
    """An OSError as one line: the file, what is wrong and what to do."""
    if error.filename is None and error.errno is None:
        return str(error)  # a message of the project's own, naming the file
    names = " → ".join(str(n) for n in (error.filename, error.filename2) if n is not None)
    what = error.strerror or str(error)
    todo = _WHAT_TO_DO.get(error.errno, "check the file and the disk it is on")
    return f"{names or 'a file'}: {what}; {todo}"


def one_line_errors(prog):
    """A decorator for a command's ``main``: an ``OSError`` (a read-only folder, a full disk) and a
    :class:`FileFault` (a damaged or refused file) end it with one line, ``PROG: error: ...``,
    naming the file, what is wrong and what to do, and exit status 1, instead of a traceback.
    Every other error keeps its traceback (it is a bug to report)."""
    def wrap(main):
        @functools.wraps(main)
        def guarded(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except FileFault as error:
                sys.exit(f"{prog}: error: {error}")
            except OSError as error:
                sys.exit(f"{prog}: error: {os_error_line(error)}")
        return guarded
    return wrap
