"""What keeps the reproduction engine's runs apart and its children tied to it.

- :class:`FolderLock`: an exclusive lock on a folder, held through a lock file beside it (``fcntl``:
  the kernel frees it when its holder dies, however it dies) that names the holder: process id,
  host, command and start time. A second process asking for it gets an error naming the holder.
- :class:`Children`: the fairseq processes the engine starts. Each runs in its own process group
  (a signal reaches it and whatever it starts), gets SIGTERM when the engine dies, even by SIGKILL
  (Linux's ``PR_SET_PDEATHSIG``), and the engine's SIGTERM and SIGINT are passed on to every group
  before the engine stops.
"""
import ctypes
import ctypes.util
import datetime
import fcntl
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class LockedError(Exception):
    """A folder is held by another process; the message names it."""


class FolderLock:
    """An exclusive, non-blocking lock on ``folder`` through the file ``lock_file`` (``folder`` /
    ``.lock`` by default); ``what`` names the folder in messages. Use as a context manager or with
    :meth:`acquire` / :meth:`release`. The lock file stays (removing it would let a process that
    opened it before the removal and one that creates it anew hold the lock together)."""

    def __init__(self, folder, what="folder", lock_file=None):
        self.folder = os.fspath(folder)
        self.what = what
        self.path = os.fspath(lock_file) if lock_file else os.path.join(self.folder, ".lock")
        self._file = None

    def acquire(self, wait=False):
        """Take the lock; if another process holds it, wait for it (``wait``) or raise
        :class:`LockedError` naming the holder."""
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        f = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            f.seek(0)
            holder = f.read()
            f.close()
            raise LockedError(f"{self.what} {self.folder} is in use by {describe(holder)} "
                              f"(lock file {self.path}); wait for it to end, or stop it, or use "
                              f"another folder") from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                            "command": shlex.join(sys.argv),
                            "started": datetime.datetime.now().isoformat(timespec="seconds")})
                + "\n")
        f.flush()
        self._file = f
        return self

    def release(self):
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self):
        return self if self._file is not None else self.acquire()

    def __exit__(self, *exc):
        self.release()


def describe(holder_text):
    """A lock file's text as 'process 123 on host, started ..., running: COMMAND'."""
    try:
        holder = json.loads(holder_text)
        return (f"process {holder['pid']} on {holder['host']}, started {holder['started']}, "
                f"running: {holder['command']}")
    except (ValueError, KeyError, TypeError):
        return "another process (it has not written its name yet)"


# ---- children ----------------------------------------------------------------------------------

def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # looked up here, not in the forked child


def _tie_to_parent(parent):
    """Run in the child between fork and exec: SIGTERM when the thread that started it ends (its
    engine's, which waits for it), and an exit if that parent is already gone."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class Children:
    """The child processes of an engine, and what its SIGTERM and SIGINT do to them."""

    def __init__(self, grace=10.0):
        self.grace = grace  # seconds a child has to stop after a forwarded signal
        self._procs = set()
        # reentrant: the signal handler (main thread) may run while the main thread holds it
        self._lock = threading.RLock()
        self.stopped_by = None  # the signal that stopped the engine, once one has

    def run(self, cmd, **popen_kwargs):
        """Run ``cmd`` to its end in its own process group, tied to this process; its return
        code (negative: killed by that signal). Refuses to start once a signal has come."""
        parent = os.getpid()
        with self._lock:
            if self.stopped_by is not None:
                raise Stopped(self.stopped_by)
            proc = subprocess.Popen(cmd, process_group=0,
                                    preexec_fn=lambda: _tie_to_parent(parent), **popen_kwargs)
            self._procs.add(proc)
        try:
            if self.stopped_by is not None:  # a signal came while it started
                self._end(proc, self.stopped_by)
            return proc.wait()
        except BaseException:
            self._end(proc, signal.SIGTERM)
            raise
        finally:
            with self._lock:
                self._procs.discard(proc)

    def _end(self, proc, sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(self.grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def forward(self, sig):
        """Send ``sig`` to every child's process group and start no more children."""
        with self._lock:
            self.stopped_by = sig
            procs = list(self._procs)
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def wait_all(self):
        """Wait until every child has ended; SIGKILL the groups still there after the grace."""
        deadline = time.monotonic() + self.grace
        while True:
            with self._lock:
                procs = list(self._procs)
            if not procs:
                return
            if time.monotonic() > deadline:
                for proc in procs:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                return
            time.sleep(0.05)

    def install(self):
        """Forward SIGTERM and SIGINT to the children, then stop this process: the handler raises
        :class:`Stopped` in the main thread. Returns a function that restores the old handlers.
        Call from the main thread."""
        old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def handler(sig, frame):
            self.forward(sig)
            raise Stopped(sig)

        for sig in old:
            signal.signal(sig, handler)

        def restore():
            for sig, previous in old.items():
                signal.signal(sig, previous)
        return restore


class Stopped(Exception):
    """The engine got SIGTERM or SIGINT; ``signal`` is which."""

    def __init__(self, sig):
        super().__init__(signal.Signals(sig).name)
        self.signal = sig
