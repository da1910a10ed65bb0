"""What ties the reproduction engine's children to it (the lock that keeps its runs apart is
:class:`ran_text.textio.FolderLock`).

- :class:`Children`: the fairseq processes the engine starts. Each runs in its own process group
  (a signal reaches it and whatever it starts), gets SIGTERM when the engine dies, even by SIGKILL
  (Linux's ``PR_SET_PDEATHSIG``), and the engine's SIGTERM and SIGINT are passed on to every group
  before the engine stops.
"""
import os
import signal
import subprocess
import threading
import time

from ran_text.tied import tie_to_parent


class Children:
    """The child processes of an engine, and what its SIGTERM and SIGINT do to them."""

    def __init__(self, grace=10.0):
        self.grace = grace  # seconds a child has to stop after a forwarded signal
        self._procs = set()
        # reentrant: the signal handler (main thread) may run while the main thread holds it
        self._lock = threading.RLock()
        self.stopped_by = None  # the signal that stopped the engine, once one has

    def run(self, cmd, copy_output=None, **popen_kwargs):
        """Run ``cmd`` to its end in its own process group, tied to this process; its return
        code (negative: killed by that signal). ``copy_output``: a function given the process's
        stdout (a pipe) to read to its end. Refuses to start once a signal has come."""
        parent = os.getpid()
        with self._lock:
            if self.stopped_by is not None:
                raise Stopped(self.stopped_by)
            proc = subprocess.Popen(cmd, process_group=0,
                                    preexec_fn=lambda: tie_to_parent(parent), **popen_kwargs)
            self._procs.add(proc)
        try:
            if self.stopped_by is not None:  # a signal came while it started
                self._end(proc, self.stopped_by)
            if copy_output is not None:
                copy_output(proc.stdout)
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
        engine = os.getpid()

        def handler(sig, frame):
            if os.getpid() != engine:
                # a forked copy of the engine (a multiprocessing pool's worker: data preparation)
                # holds no children of its own and ends as the signal's default says; forwarding
                # would stop the engine's trainings, and raising Stopped would leave the worker
                # alive when its pool ends it, and the engine waiting on it
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)
                return
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
