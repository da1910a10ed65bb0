"""A fork server for the tests' fairseq command-line runs (``helpers.run_cli``).

Starting ``python -m fairseq_cli.X`` spends about 3 CPU-seconds importing torch, fairseq and the
plugin before it does anything. This process imports them once, then serves requests read from stdin,
one JSON object per line: ``{"module", "argv", "cwd", "stdout", "stderr", "fixes"}``. For each it forks a child
that behaves as ``python -m fairseq_cli.MODULE ARGV`` would (same ``sys.argv``, ``__main__`` module,
working directory, output files), and answers ``{"returncode": N}`` on stdout once the child exits.
The server runs no tensor operation itself, so the children fork from a process without thread pools.

The plugin is loaded as ``--user-dir`` loads it, with its default fixes only; a request's ``fixes``
(the RAN_FAIRSEQ_FIXES of the test that runs it) makes those opt-in fixes in its child alone.
"""
import json
import os
import runpy
import sys
import traceback

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
    module = f"fairseq_cli.{request['module']}"
    sys.argv = [module, *request["argv"]]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: B902  (the child reports every failure as the CLI would)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main():
    import ran_fairseq  # noqa: F401  (registers the plugin and makes its default fixes)
    import fairseq_cli.generate  # noqa: F401  (imports the registries of fairseq's commands)
    import fairseq_cli.train  # noqa: F401

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
