"""fairseq-train, killed (SIGKILL) halfway through writing a copy of a checkpoint to
``checkpoint_last.pt``: ``python tests/kill_during_copy.py <fairseq-train flags>``
(``KILL_DURING_COPY_OF=checkpoint_best`` kills during the copy to ``checkpoint_best.pt`` instead).
fairseq copies its first checkpoint of a save to the others with ``shutil.copyfile`` (the
plugin's atomic copy, ran_text.textio.copy_atomic, with ``shutil.copyfileobj`` into a temporary
file beside it); this stand-in writes half the bytes to the destination it is given and kills the
process, as a kill -9 during the copy would leave it."""
import os
import shutil
import signal
import sys

_copyfile = shutil.copyfile
TARGET = os.environ.get("KILL_DURING_COPY_OF", "checkpoint_last")


def _copy_half_then_die(src, dst, *args, **kwargs):
    if os.path.basename(str(dst)).startswith(TARGET):
        with open(src, "rb") as f:
            data = f.read()
        with open(dst, "wb") as f:
            f.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return _copyfile(src, dst, *args, **kwargs)


_copyfileobj = shutil.copyfileobj


def _copy_half_obj_then_die(fsrc, fdst, *args, **kwargs):
    if os.path.basename(str(getattr(fdst, "name", ""))).startswith(TARGET):
        data = fsrc.read()
        fdst.write(data[: len(data) // 2])
        fdst.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return _copyfileobj(fsrc, fdst, *args, **kwargs)


shutil.copyfile = _copy_half_then_die
shutil.copyfileobj = _copy_half_obj_then_die

if __name__ == "__main__":
    sys.argv = ["fairseq-train", *sys.argv[1:]]
    from fairseq_cli.train import cli_main

    cli_main()
