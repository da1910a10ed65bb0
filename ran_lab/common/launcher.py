"""A command line (split as a shell splits it) that, given ``MODULE ARGS``, runs what
``python -m MODULE ARGS`` runs, in its stead: the reproduction engine's fairseq commands and the
benchmark's workers go through it where the environment names one. The tests set it to run them
through a fork server that has imported torch and fairseq once (tests/cli_client.py); unset, as
for users, each command is a new interpreter."""
import os
import shlex
import sys

LAUNCHER = "RAN_LAB_MODULE_LAUNCHER"


def launched(cmd, env):
    """``cmd`` (``[python, -m, MODULE, ...]``) as the launcher of ``env`` (default: this process's
    environment) runs it, if it names one; any other command as it is."""
    launcher = (os.environ if env is None else env).get(LAUNCHER)
    if launcher and cmd[:2] == [sys.executable, "-m"]:
        return [*shlex.split(launcher), *cmd[2:]]
    return cmd
