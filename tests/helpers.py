"""Test helpers shared by every test file: a tiny synthetic parallel corpus, binarization, and
running fairseq's own entry points (train, generate, preprocess) with this plugin loaded.

The CLIs run in subprocesses, as a user would run them; ``build_model`` builds a model in-process
from the same command-line flags for tests that look at tensors.
"""
import atexit
import importlib
import inspect
import json
import os
import random
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "ran_fairseq")
SRC, TGT = "de", "en"


def make_synthetic_corpus(raw_dir, n_train=240, n_valid=24, n_test=24, vocab=24, seed=0):
    """Write ``{train,valid,test}.{de,en}``: the target is the source with each word ``wK`` mapped
    to ``vK``, reversed in pairs, so the task is learnable. Lengths vary from 2 to 14 words."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for split, n in (("train", n_train), ("valid", n_valid), ("test", n_test)):
        src_lines, tgt_lines = [], []
        for _ in range(n):
            words = [rng.randrange(vocab) for _ in range(rng.randint(2, 14))]
            src_lines.append(" ".join(f"w{w}" for w in words))
            out = [f"v{w}" for w in words]
            for i in range(0, len(out) - 1, 2):
                out[i], out[i + 1] = out[i + 1], out[i]
            tgt_lines.append(" ".join(out))
        (raw_dir / f"{split}.{SRC}").write_text("\n".join(src_lines) + "\n")
        (raw_dir / f"{split}.{TGT}").write_text("\n".join(tgt_lines) + "\n")
    return raw_dir


def fairseq_env():
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class _ForkServer:
    """Client of tests/cli_server.py: a process that has imported fairseq and the plugin once and
    forks a child per CLI run, saving each run the ~3 CPU-seconds of imports."""

    def __init__(self):
        env = fairseq_env()
        env.pop(FIXES_VARIABLE, None)  # the server makes the default fixes only; see run()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_server.py"))], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.reply()  # {"ready": pid} once the imports are done

    def reply(self, timeout=None):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise TimeoutError if ready == [] else RuntimeError("the CLI fork server died")
        return json.loads(line)

    def run(self, cmd, module, args, cwd, timeout):
        with tempfile.TemporaryDirectory(prefix="cli-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            # the opt-in fixes this run asks for, made in its child alone
            request = {"module": module, "argv": args, "cwd": str(cwd or os.getcwd()),
                       "stdout": str(out), "stderr": str(err),
                       "fixes": os.environ.get(FIXES_VARIABLE, "")}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self.reply()["pid"]
            try:
                code = self.reply(timeout)["returncode"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self.reply()
                raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())


_SERVER = None
FIXES_VARIABLE = "RAN_FAIRSEQ_FIXES"


def opt_in_fixes(monkeypatch, *names):
    """Turn on the opt-in fixes ``names`` of ``ran_fairseq.fixes`` for one test, as a user turns
    them on with RAN_FAIRSEQ_FIXES: in this process (each attribute a fix replaces is put back when
    the test ends, so no other test sees it) and in the fairseq commands the test runs, which read
    the variable (``run_cli``, ``fairseq_env``)."""
    from ran_fairseq import fixes

    monkeypatch.setenv(FIXES_VARIABLE, ",".join(names))
    for fix in fixes.requested():
        for path in fix.replaces:
            owner, name = _owner_of(path)
            monkeypatch.setattr(owner, name, inspect.getattr_static(owner, name))
        fix.apply()


def _owner_of(path):
    """The object holding the attribute ``path`` names (``package.module.Class.attribute``), and
    the attribute's name."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise ImportError(f"no module holds {path}")


def run_cli(module, args, cwd=None, check=True, timeout=600, fresh=False):
    """Run ``python -m fairseq_cli.<module> args`` and return the CompletedProcess (text output).
    On failure the error names the command and shows the end of its output.

    Runs are forked from a process that has already imported fairseq and the plugin
    (tests/cli_server.py); ``fresh=True``, or RAN_FAIRSEQ_TESTS_NO_FORK=1 for every run, starts a
    new interpreter instead (for tests of how the plugin gets loaded)."""
    global _SERVER
    args = [str(a) for a in args]
    cmd = [sys.executable, "-m", f"fairseq_cli.{module}", *args]
    if fresh or os.environ.get("RAN_FAIRSEQ_TESTS_NO_FORK") == "1":
        proc = subprocess.run(cmd, cwd=cwd, env=fairseq_env(), capture_output=True, text=True,
                              timeout=timeout)
    else:
        if _SERVER is None or _SERVER.proc.poll() is not None:
            _SERVER = _ForkServer()
        proc = _SERVER.run(cmd, module, args, cwd, timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout (tail) ---\n{proc.stdout[-4000:]}\n--- stderr (tail) ---\n{proc.stderr[-6000:]}"
        )
    return proc


def binarize(raw_dir, dest_dir, src=SRC, tgt=TGT, joined=False):
    """fairseq-preprocess ``raw_dir/{train,valid,test}.{src,tgt}`` into ``dest_dir``."""
    raw_dir = Path(raw_dir)
    args = ["--source-lang", src, "--target-lang", tgt,
            "--trainpref", raw_dir / "train", "--validpref", raw_dir / "valid",
            "--testpref", raw_dir / "test", "--destdir", dest_dir, "--workers", "1"]
    if joined:
        args.append("--joined-dictionary")
    run_cli("preprocess", args)
    return Path(dest_dir)


def train_args(data_bin, save_dir, arch, extra=(), max_update=4):
    """Flags for a few CPU updates of ``arch`` on ``data_bin`` with this plugin loaded.
    ``--data-buffer-size 0`` keeps batch loading in the main thread (README, fairseq pitfalls:
    abort at exit)."""
    return [data_bin, "--user-dir", USER_DIR, "--arch", arch, "--task", "translation",
            "--source-lang", SRC, "--target-lang", TGT, "--cpu", "--seed", "1",
            "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "2", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--max-tokens", "400", "--max-update", max_update,
            "--save-dir", save_dir, "--num-workers", "0", "--data-buffer-size", "0",
            "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints",
            "--disable-validation", *extra]


def train(data_bin, save_dir, arch, extra=(), max_update=4, check=True):
    return run_cli("train", train_args(data_bin, save_dir, arch, extra, max_update), check=check)


def generate(data_bin, checkpoint, extra=(), subset="test", check=True):
    """fairseq-generate with beam search on ``subset``; returns the CompletedProcess."""
    args = [data_bin, "--user-dir", USER_DIR, "--path", checkpoint, "--task", "translation",
            "--source-lang", SRC, "--target-lang", TGT, "--gen-subset", subset, "--cpu",
            "--beam", "3", "--batch-size", "8", "--max-len-b", "20", "--num-workers", "0", *extra]
    return run_cli("generate", args, check=check)


def parse_args(arch, data_bin, extra=()):
    """The argparse Namespace fairseq-train would build for ``arch`` and ``extra`` flags."""
    from fairseq import options

    import ran_fairseq  # noqa: F401  (registers the plugin's models)

    parser = options.get_training_parser()
    argv = [str(data_bin), "--arch", arch, "--task", "translation", "--source-lang", SRC,
            "--target-lang", TGT, "--cpu", *map(str, extra)]
    return options.parse_args_and_arch(parser, argv)


def build_model(arch, data_bin, extra=(), seed=1):
    """Build ``(task, model)`` in-process exactly as fairseq-train would, in eval mode."""
    import torch
    from fairseq import tasks

    args = parse_args(arch, data_bin, extra)
    torch.manual_seed(seed)
    task = tasks.setup_task(args)
    model = task.build_model(args).eval()
    return task, model

def flag_pairs(flags):
    """{flag: value or None} of a flag list."""
    out = {}
    for i, flag in enumerate(flags):
        if flag.startswith("--"):
            nxt = flags[i + 1] if i + 1 < len(flags) else None
            out[flag] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def table_rows(table):
    """{system: {heading: cell}} of the data rows of the first markdown table in ``table``
    (headings in column order); later tables (e.g. the paper's reference rows) are not read."""
    lines = []
    for line in table.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    heads = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(heads, (c.strip() for c in line.strip("|").split("|"))))
            for line in lines[2:]]
    return {row["system"]: row for row in rows}


def scored_corpus(root):
    """A synthetic de-en corpus binarized into ``root/bin.de-en`` (joined dictionary, no BPE) with
    the raw and tokenized test and valid text beside it (the same: the corpus is space-separated
    words), as the reproduction engine scores against them."""
    raw = make_synthetic_corpus(root / "raw")
    data = binarize(raw, root / "bin.de-en", joined=True)
    for subset in ("test", "valid"):
        for lang in (SRC, TGT):
            for kind in ("raw", "tok"):
                shutil.copy(raw / f"{subset}.{lang}", data / f"{subset}.{kind}.{lang}")
    return data


_MODULE_SERVER = None
_SERVERS = []
# the engine's variable naming a launcher for its `python -m` commands (ran_lab/reproduce/process.py)
MODULE_LAUNCHER = "RAN_LAB_MODULE_LAUNCHER"


def module_server(env=None):
    """Start a fork server that imports torch, fairseq and the plugin once (``tests/cli_server.py
    --socket``) in ``env`` (default: ``fairseq_env()`` with the default fixes only), and return
    ``(launcher, server)``: a command line that runs ``MODULE ARGS`` as ``python -m MODULE ARGS``
    would, in a child of the server, through the small client ``tests/cli_client.py`` (the process
    its starter sees: its process group, signals and exit status), and the server's process
    (``stop_module_server`` ends it; it ends with this process otherwise)."""
    if env is None:
        env = fairseq_env()
        env.pop(FIXES_VARIABLE, None)  # the server makes the default fixes only
    _SERVERS.append(None)
    path = Path(tempfile.gettempdir()) / f"ran-cli-{os.getpid()}-{len(_SERVERS)}.sock"
    path.unlink(missing_ok=True)  # left by a server of an earlier process of this pid
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("cli_server.py")),
                             "--socket", str(path)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    if not proc.stdout.readline():
        raise RuntimeError("the module fork server did not start")
    atexit.register(stop_module_server, proc)
    launcher = shlex.join([sys.executable, str(Path(__file__).with_name("cli_client.py")),
                           str(path)])
    return launcher, proc


def stop_module_server(server):
    """End a fork server (it ends when its stdin closes) and wait for it."""
    if not server.stdin.closed:
        server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def module_launcher():
    """The launcher of :func:`module_server`, whose server starts once per test process."""
    global _MODULE_SERVER
    if _MODULE_SERVER is None or _MODULE_SERVER[1].poll() is not None:
        _MODULE_SERVER = module_server()
    return _MODULE_SERVER[0]


def run_reproduction(script, *args, timeout=300, fork_server=True):
    """Run a ``scripts/reproduce-*.sh`` script with this Python and one thread per fairseq
    process; the CompletedProcess (output captured). The engine's fairseq commands are forked
    from a server that has imported fairseq (``module_launcher``), each saving ~3 CPU-seconds;
    ``fork_server=False`` where the engine runs none (the server costs as much to start)."""
    cmd = ["bash", str(script), "--threads", "1", *map(str, args)]
    env = dict(fairseq_env(), PYTHON=sys.executable)
    if fork_server:
        env[MODULE_LAUNCHER] = module_launcher()
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def short_reproduction(script, cpu_config, root, systems, **overrides):
    """Run ``script`` on the corpus of :func:`scored_corpus` under ``root`` (de-en, 2 updates)
    with a copy of ``cpu_config`` (word level, checkpoints under ``root``, ``overrides`` applied);
    return the output directory."""
    cfg = json.loads(Path(cpu_config).read_text())
    cfg.update(checkpoints=str(root / "ckpt"), bpe=None, **overrides)
    (root / "cpu.json").write_text(json.dumps(cfg))
    out = root / "out"
    proc = run_reproduction(script, "--config", root / "cpu.json",
                            "--data", str(root / "bin.{src}-{tgt}"), "--pairs", "de-en",
                            "--systems", ",".join(systems), "--max-update", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return out



class _RunsCode:
    """Pickled into a checkpoint, runs ``echo ran-code`` when unpickled freely."""

    def __reduce__(self):
        return (os.system, ("echo ran-code",))


def bad_checkpoints(root):
    """``root/evil.pt``, a checkpoint that asks to run code when loaded; ``root/good.pt``, a plain
    one of 40 kB; ``root/cut.pt``, its first half. Returns ``root``."""
    import torch

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {}, "args": None, "evil": _RunsCode()}, root / "evil.pt")
    torch.save({"model": {"w": torch.zeros(10000)}}, root / "good.pt")
    data = (root / "good.pt").read_bytes()
    (root / "cut.pt").write_bytes(data[:len(data) // 2])
    return root


# ---- the documentation's command blocks -----------------------------------------------------------

# a block the documentation test does not run is marked on the line before it, with the reason
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\s*\((?P<reason>.*\S.*)\)\s*-->\s*$")


def blocks(path):
    """``[(line, tag, code, skip_reason or None)]`` of the fenced blocks of ``path``."""
    lines = path.read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"^```\s*(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        assert end < len(lines), f"{path.name}:{i + 1}: unclosed code block"
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        skip = SKIP.match(prev.strip())
        found.append((i + 1, m.group(1).lower(), "\n".join(lines[i + 1:end]),
                      skip.group("reason").strip() if skip else None))
        i = end + 1
    return found
