"""The processes the engine starts: fairseq's CLIs with their output in a log; and the
preparation of the corpus a config names (:mod:`.preparations`)."""
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from ran_text import textio
from .runguard import Children
from .. import portable
from ..common import paths
from ..common.launcher import LAUNCHER, launched  # noqa: F401  (the engine's, and its tests')
from ran_lab.common import LabError
from . import preparations


# The fairseq processes the engine starts: each in its own process group, SIGTERMed when the
# engine dies (even by SIGKILL), and sent the engine's SIGTERM or SIGINT (runguard).
CHILDREN = Children()


class Processes:
    """The engine's runner: each command a process of its own among :data:`CHILDREN`, its output
    into the log, in the checkout, with MULTI30K_DIR naming the lab's mirror where there is one."""

    def run(self, cmd, log, env, pass_fds):
        """``cmd`` (``[python, -m, MODULE, ...]``) to its end, stdout and stderr into the open file
        ``log``; its return code."""
        return run_into(launched(cmd, env), log, env, pass_fds=tuple(pass_fds))


def run_into(cmd, log, env, **popen_kwargs):
    """``cmd`` among :data:`CHILDREN`, in the checkout, its stdout and stderr written to ``log``
    line by line with the machine's paths as placeholders (``portable.copy_log``)."""
    return CHILDREN.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        encoding="utf-8", errors="replace", env=paths.multi30k_environment(env),
                        cwd=paths.REPO, copy_output=lambda out: portable.copy_log(out, log),
                        **popen_kwargs)


# The seam between the engine and fairseq's processes: every command of a run (fairseq-train,
# fairseq-generate, a postprocess) goes through RUNNER.run. Tests of the engine's own logic swap
# in a runner that writes what fairseq would (``runner``), and so run in-process.
RUNNER = Processes()


@contextlib.contextmanager
def runner(other):
    """Within the block, the runs' commands go to ``other`` (an object with ``run``, as
    :class:`Processes`)."""
    global RUNNER
    before, RUNNER = RUNNER, other
    try:
        yield other
    finally:
        RUNNER = before


# a fairseq process that stopped on a full disk: an OSError of errno 28, or torch's writer that
# could not write a checkpoint's data
DISK_FULL_RE = re.compile(r"\[Errno 28\]|No space left on device|PytorchStreamWriter failed writing")
FILE_RE = re.compile(r"\[Errno 28\][^\n']*'([^'\n]+)'")


def open_log(path, mode):
    """A log of the engine opened to write without following a link (one line naming it)."""
    try:
        return textio.open_no_follow(path, mode)
    except textio.LinkRefused as e:
        raise LabError(str(e)) from None


def run_logged(argv, log_path, env, what, append=False, pass_fds=()):
    """``python argv`` with stdout and stderr into ``log_path`` (appended to with ``append``, after a
    separator), through :data:`RUNNER` (``pass_fds``: open files it keeps, the run's locks, so
    that they stay held while it lives); return the text this run wrote."""
    cmd = [sys.executable, *argv]
    log_path = Path(log_path)
    offset = log_path.stat().st_size if append and log_path.is_file() else 0
    with open_log(log_path, "a" if append else "w") as log:
        if offset:
            log.write(f"\n===== {what}: continued (--resume) =====\n")
            log.flush()
        returncode = RUNNER.run(cmd, log, env, pass_fds)
    with open(log_path, encoding="utf-8", errors="replace") as log:
        log.seek(offset)
        text = log.read()
    if returncode != 0 and DISK_FULL_RE.search(text):
        # fairseq's chained tracebacks of a save that found no room, in one line
        saving = FILE_RE.findall(text)
        folder = argv[argv.index("--save-dir") + 1] if "--save-dir" in argv else None
        where = saving[-1] if saving else folder or log_path.parent
        raise LabError(f"{what}: the disk is full (writing {where}): free space on it, or give "
                         f"--checkpoints (--out) a folder on another disk, and rerun with "
                         f"--resume; the log: {log_path}")
    if returncode != 0:
        raise LabError(f"{what} failed with exit code {returncode}: {shlex.join(cmd)}\n"
                         f"--- {log_path} (tail) ---\n{text[-4000:]}")
    return text


PREPARE_HERE = "ran-prepare"


def prepare_here(argv, log_path, what):
    """``ran-prepare ARGV`` (``ran_text.prepare``) in this process, in the checkout (its
    relative paths, as a prepare script's, are the checkout's), its output into ``log_path``."""
    from ran_text.prepare.cli import main as prepare_main

    output = io.StringIO()
    with open_log(log_path, "w") as log:
        try:
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), \
                    contextlib.chdir(paths.REPO), _multi30k_mirror():
                returncode = prepare_main(argv)
        except SystemExit as e:  # argparse: a flag it does not take
            returncode = e.code if isinstance(e.code, int) else 2
        finally:  # written with the machine's paths as placeholders
            log.write(portable.kept_log(output.getvalue()))
    if returncode != 0:
        raise LabError(f"preparing {what} failed: {shlex.join([PREPARE_HERE, *argv])}\n--- "
                         f"{log_path} (tail) ---\n{log_path.read_text()[-3000:]}")


@contextlib.contextmanager
def _multi30k_mirror():
    """MULTI30K_DIR names the mirror beside the checkout while ran-prepare runs here (where there
    is one and no folder is named; ``paths.multi30k_environment``)."""
    before = os.environ.get("MULTI30K_DIR")
    os.environ.update(paths.multi30k_environment(os.environ))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MULTI30K_DIR", None)


def prepare(config, pair, log_path, env):
    """The corpus the config's ``prepare`` names (:mod:`.preparations`), for ``pair``, its output
    into ``log_path``: ``ran_text.prepare`` in this process, or the corpus's download script."""
    src, tgt = pair
    script, argv = preparations.command(config["prepare"], src, tgt)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if script is None:
        prepare_here(argv, log_path, f"{src}-{tgt}")
        return
    cmd = [str(paths.REPO / script), *argv]
    with open_log(log_path, "w") as log:
        returncode = run_into(cmd, log, env)
    if returncode != 0:
        raise LabError(f"preparing {src}-{tgt} failed: {shlex.join(cmd)}\n--- {log_path} "
                         f"(tail) ---\n{log_path.read_text()[-3000:]}")
