"""Child processes that end with the process that started them: on Linux a child gets SIGTERM
when the thread that started it ends, even when its parent is killed by SIGKILL
(``PR_SET_PDEATHSIG``), and exits at once if that parent is already gone. Data preparation starts
fairseq-preprocess and its pool workers so, and the reproduction engine its fairseq processes: a
killed run leaves no process writing a data-bin or a checkpoint behind it."""
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # looked up here, not in a forked child


def tie_to_parent(parent: int) -> None:
    """Run in a child (between fork and exec, or first in a forked worker): SIGTERM when the
    thread that started it ends, and an exit if ``parent`` is already gone."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def tied_to_this_process():
    """A ``preexec_fn`` for ``subprocess`` that ties the child to this process."""
    parent = os.getpid()
    return lambda: tie_to_parent(parent)


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **kwargs)``, the child tied to this process."""
    return subprocess.run(cmd, preexec_fn=tied_to_this_process(), **kwargs)
