"""A fork server for the tests' fairseq command-line runs (``helpers.run_cli``).

Starting ``python -m fairseq_cli.X`` spends about 3 CPU-seconds importing torch, fairseq and the
plugin before it does anything. This process imports them once, then serves requests read from stdin,
one JSON object per line: ``{"module", "argv", "cwd", "stdout", "stderr", "fixes"}``. For each it forks a child
that behaves as ``python -m fairseq_cli.MODULE ARGV`` would (same ``sys.argv``, ``__main__`` module,
working directory, output files), and answers ``{"returncode": N}`` on stdout once the child exits.
The server runs no tensor operation itself, so the children fork from a process without thread pools.

The plugin is loaded as ``--user-dir`` loads it, with its default fixes only; a request's ``fixes``
(the RAN_FAIRSEQ_FIXES of the test that runs it) makes those opt-in fixes in its child alone.

``cli_server.py --socket PATH`` serves ``python -m MODULE ARGS`` for any module instead, several
at once, to the clients of tests/cli_client.py that connect to the Unix socket PATH: the client
is the process its starter sees (its process group, its signals, its exit status) and passes
its stdin, stdout, stderr, working directory and environment to the child forked here, which
runs the module as a new interpreter would. The reproduction engine's tests run the engine's
fairseq commands so, and the documentation's test its ``fairseq-*`` commands
(``helpers.module_server``). The server ends when its stdin closes.
"""
import json
import logging
import os
import runpy
import select
import signal
import socket
import sys
import traceback
import warnings

MODULES = ("preprocess", "train", "hydra_train", "generate", "validate", "interactive")


def child(request):
    os.chdir(request["cwd"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    if request.get("fixes"):
        from ran_fairseq import fixes

        os.environ[fixes.ENVIRONMENT] = request["fixes"]
        for fix in fixes.requested():
            fix.apply()
    run_module([f"fairseq_cli.{request['module']}", *request["argv"]])


def run_module(argv):
    """Run ``python -m argv[0] argv[1:]`` in this (forked) process and end it with the exit
    status the interpreter would have."""
    sys.argv = list(argv)
    code = 0
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: B902  (the child reports every failure as the interpreter would)
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed by the module, or a closed pipe
            pass
    os._exit(code)


def module_child(request, fds):
    """The forked child of one client: its files, folder and environment, then its module."""
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    # the module path a new interpreter would have: the working directory first (`python -m`),
    # then the request's PYTHONPATH in place of the server's
    served = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    asked = request["env"].get("PYTHONPATH", "").split(os.pathsep)
    sys.path[:] = [request["cwd"], *filter(None, asked),
                   *(p for p in sys.path[1:] if p not in served)]
    fixes_before = os.environ.get("RAN_FAIRSEQ_FIXES")
    os.environ.clear()
    os.environ.update(request["env"])
    if os.environ.get("RAN_FAIRSEQ_FIXES") != fixes_before:
        # the opt-in fixes the request's environment asks for, as importing the plugin makes them
        from ran_fairseq import fixes

        for fix in fixes.requested():
            fix.apply()
    threads = request["env"].get("OMP_NUM_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    # the server imported fairseq's commands before the module runs one as __main__ (a fresh
    # interpreter imports it once, and says nothing)
    warnings.filterwarnings("ignore", r".* found in sys\.modules after import of package",
                            RuntimeWarning)
    run_module(request["argv"])


def serve_client(conn):
    """One client's request, in a process forked for it: fork the child that runs the module, tell
    the client its pid, and then its exit status; SIGKILL the child if the client goes away."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 16)
        if not more:
            os._exit(1)
        data += more
    request = json.loads(data)
    pid = os.fork()
    if pid == 0:
        try:
            conn.close()
            module_child(request, fds)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    child, client_gone = os.pidfd_open(pid), False
    while True:
        ready, _, _ = select.select([child] + ([] if client_gone else [conn]), [], [])
        if child in ready:
            _, status = os.waitpid(pid, 0)
            if not client_gone:
                conn.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode()
                             + b"\n")
            os._exit(0)
        if not conn.recv(1):  # the client ended (killed): its child ends with it
            client_gone = True
            os.kill(pid, signal.SIGKILL)


def serve_socket(path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
            _reap()  # the per-client processes that ended (their CPU time counts as this one's)
            if sys.stdin in ready and not sys.stdin.readline():
                return  # the tests' process ended
            if listener in ready:
                conn, _ = listener.accept()
                if os.fork() == 0:
                    try:
                        listener.close()
                        serve_client(conn)
                    finally:
                        os._exit(1)
                conn.close()
    finally:
        os.unlink(path)


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import ran_fairseq  # noqa: F401  (registers the plugin and makes its default fixes)
    import fairseq_cli.generate  # noqa: F401  (imports the registries of fairseq's commands)
    import fairseq_cli.train  # noqa: F401

    if sys.argv[1:2] == ["--socket"]:
        # the root logger as a new interpreter has it: one of fairseq's library modules configures
        # it when imported (logging.basicConfig(level=DEBUG)), while a command's own setup
        # (fairseq-train's format, to stdout) comes first where the command is the program
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        serve_socket(sys.argv[2])
        return
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything the server itself prints goes to stderr, not into the replies
    replies.write(json.dumps({"ready": os.getpid()}) + "\n")
    replies.flush()
    for line in sys.stdin:
        request = json.loads(line)
        if request["module"] not in MODULES:
            replies.write(json.dumps({"error": f"unknown fairseq CLI {request['module']!r}"}) + "\n")
            replies.flush()
            continue
        pid = os.fork()
        if pid == 0:
            child(request)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
