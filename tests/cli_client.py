"""``python cli_client.py SOCKET MODULE ARGS...`` runs ``python -m MODULE ARGS...`` in a child of
the fork server listening on SOCKET (``tests/cli_server.py --socket``), which has imported torch,
fairseq and the plugin once, and behaves as that command would for whoever started it: the child
gets this process's stdin, stdout, stderr, working directory and environment; SIGTERM, SIGINT and
SIGHUP sent here go on to the child; this process ends with the child's exit status (killed by
the same signal where the child was), and a SIGKILL here makes the server SIGKILL the child.
It imports nothing heavy: it starts in a few hundredths of a CPU-second."""
import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main():
    path, argv = sys.argv[1], sys.argv[2:]
    child, pending = None, []

    def forward(sig, frame):
        if child is None:
            pending.append(sig)
            return
        try:
            os.kill(child, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    replies = conn.makefile("rb")
    child = json.loads(replies.readline())["pid"]
    for sig in pending:
        forward(sig, None)
    line = replies.readline()
    if not line:
        sys.exit("cli_client: the fork server ended before the command did")
    code = json.loads(line)["returncode"]
    if code < 0:  # killed by a signal: end so too
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
