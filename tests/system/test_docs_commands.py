"""Every command block of README.md and docs/*.md runs as written, and keeps doing so.

A fenced block tagged ``bash``/``sh``/``python`` is a command block. It runs, unless the line
before it (blank lines aside) is a visible annotation with a reason:

    <!-- docs-test: skip (hours of training; the engine runs end to end in tests/test_reproduce*.py) -->

Blocks tagged otherwise (``text``, none) are output or file excerpts and are not run.

The blocks of one document run in order in one bash process (so variables carry over, as for a
reader pasting them), in a scratch copy of the checkout (``ran_fairseq/``, ``scripts/``,
``configs/``): README.md first, then the docs pages, which may use what the README's examples made
(checkpoints, translations). Multi30k is a small slice of the real corpus (or, without it, a
synthetic corpus in Multi30k's file layout), so that ``scripts/prepare-multi30k.sh`` runs for real.
Substitutions, to keep this to a few minutes on 2 cores, and nothing else:
  ``--max-update N`` -> ``--max-update 2``, ``--max-epoch N`` -> ``--max-epoch 1``;
  ``fairseq-train`` gets ``--data-buffer-size 0 --num-workers 0`` (docs/pitfalls.md, abort at exit);
  ``fairseq-generate`` / ``fairseq-interactive`` get ``--max-len-b 20 --num-workers 0`` (untrained
  models otherwise produce 200-token hypotheses).
The commands ``fairseq-train``, ``-generate``, ``-interactive`` and ``-preprocess`` run their
modules as their console scripts do, forked from a server that has imported torch, fairseq and the
scratch checkout's plugin once (``helpers.module_server``), which saves each about 3 CPU-seconds.
"""
import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, SKIP, blocks, make_synthetic_corpus, module_server, stop_module_server

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_TAGS = {"bash": "bash", "sh": "bash", "python": "python"}
MARKER = re.compile(r"^\s*<!--\s*docs-test")
MULTI30K = Path(os.environ.get("MULTI30K_DIR") or REPO.parent / "shared" / "data" / "multi30k")
# fairseq's console scripts, each ``MODULE:cli_main``, which ``python -m MODULE`` runs too
CONSOLE_SCRIPTS = {f"fairseq-{name}": f"fairseq_cli.{name}"
                   for name in ("train", "generate", "interactive", "preprocess")}


def substitute(code):
    code = re.sub(r"--max-update \d+", "--max-update 2", code)
    code = re.sub(r"--max-epoch \d+", "--max-epoch 1", code)
    code = re.sub(r"\bfairseq-train ", "fairseq-train --data-buffer-size 0 --num-workers 0 ", code)
    code = re.sub(r"\bfairseq-(generate|interactive) ",
                  r"fairseq-\1 --max-len-b 20 --num-workers 0 ", code)
    return code


def script(path):
    """One bash script running the document's command blocks in order; each block announces
    itself, so a failure names the block's line."""
    parts = ["set -euo pipefail"]
    for line, tag, code, skip in blocks(path):
        if tag not in RUN_TAGS or skip:
            continue
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}:{line}"
        parts.append(f"echo '=== docs-test: {where}' >&2")
        if RUN_TAGS[tag] == "bash":
            parts.append(substitute(code))
        else:
            parts.append(f"python - <<'DOCS_TEST_PYTHON_EOF'\n{code}\nDOCS_TEST_PYTHON_EOF")
    return "\n".join(parts) + "\n"


def _raw_multi30k(dest):
    """Multi30k's file layout (``{train,val,test_2016_flickr}.{de,en}.gz``) with few lines: a slice
    of the real corpus when it is here, else the synthetic corpus of tests/helpers.py."""
    dest.mkdir(parents=True)
    sizes = {"train": 300, "val": 24, "test_2016_flickr": 20}
    if (MULTI30K / "train.de.gz").is_file():
        for name, n in sizes.items():
            for lang in ("de", "en"):
                with gzip.open(MULTI30K / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                    lines = [next(f) for _ in range(n)]
                with gzip.open(dest / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.writelines(lines)
    else:
        synth = make_synthetic_corpus(dest / "synthetic", n_train=300, n_valid=24, n_test=20)
        for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
            for lang in ("de", "en"):
                with gzip.open(dest / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write((synth / f"{split}.{lang}").read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A scratch checkout (copies, not links: the pipeline writes under its package's parent)."""
    root = tmp_path_factory.mktemp("docs-commands")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("ran_fairseq", "scripts", "configs"):
        shutil.copytree(REPO / name, root / name, ignore=ignore)
    shutil.copy2(REPO / "setup.py", root / "setup.py")  # a checkout's mark (ran_lab.checkout)
    # the quiet benchmark runs that configs name as their speed_bench
    for bench in REPO.glob("results/*/speed-cpu"):
        shutil.copytree(bench, root / bench.relative_to(REPO), ignore=ignore)
    _raw_multi30k(root / "raw-multi30k")
    env = dict(os.environ)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHON=sys.executable, PYTHONPATH=str(root), MULTI30K_DIR=str(root / "raw-multi30k"),
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MULTI30K_DOWNLOAD="0")
    # fairseq's commands, first on the PATH: their modules forked from a server of this
    # environment (the scratch checkout's plugin), outside the scratch checkout
    launcher, server = module_server(dict(env))
    shims = tmp_path_factory.mktemp("docs-commands-bin")
    for command, module in CONSOLE_SCRIPTS.items():
        (shims / command).write_text(f'#!/bin/sh\nexec {launcher} {module} "$@"\n')
        (shims / command).chmod(0o755)
    env["PATH"] = f"{shims}{os.pathsep}{env['PATH']}"
    yield root, env
    stop_module_server(server)


def run_document(path, workdir):
    root, env = workdir
    proc = subprocess.run(["bash", "-c", script(path)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        ran = [l for l in proc.stderr.splitlines() if l.startswith("=== docs-test:")]
        raise AssertionError(
            f"a command block of {path.name} failed ({proc.returncode}); last block started: "
            f"{ran[-1] if ran else '(none)'}\n--- stdout (tail) ---\n{proc.stdout[-3000:]}\n"
            f"--- stderr (tail) ---\n{proc.stderr[-6000:]}")
    return proc


def test_every_command_block_runs_or_is_skipped_with_a_reason():
    """Skip markers carry a reason and sit right before a command block; documents have blocks."""
    for path in DOCS:
        text = path.read_text(encoding="utf-8").split("\n")
        marked = [i for i, l in enumerate(text) if MARKER.search(l)]
        starts = {line - 1: (tag, skip) for line, tag, _, skip in blocks(path)}
        for i in marked:
            assert SKIP.match(text[i].strip()), \
                f"{path.name}:{i + 1}: a docs-test marker must read <!-- docs-test: skip (reason) -->"
            nxt = next(k for k in range(i + 1, len(text)) if text[k].strip())
            assert nxt in starts and starts[nxt][0] in RUN_TAGS, \
                f"{path.name}:{i + 1}: a skip marker must come right before a command block"
    readme = blocks(REPO / "README.md")
    assert sum(1 for _, tag, _, skip in readme if tag in RUN_TAGS and not skip) >= 2


def test_substitutions():
    code = "fairseq-train $DATA --max-update 2000 --max-epoch 12\nfairseq-generate $DATA --beam 5"
    out = substitute(code)
    assert "--max-update 2 " in out and "--max-epoch 1" in out and "--max-update 2000" not in out
    assert "fairseq-train --data-buffer-size 0" in out
    assert "fairseq-generate --max-len-b 20" in out


def test_a_failing_block_fails_and_a_skipped_one_does_not_run(tmp_path):
    """The runner itself: a skipped block does not run; a failing command (even mid-pipeline) fails
    the document and names its block."""
    doc = tmp_path / "doc.md"
    doc.write_text("x\n\n<!-- docs-test: skip (would fail) -->\n```bash\nexit 3\n```\n\n"
                   "```text\nexit 4\n```\n\n```bash\nA=1\n```\n\n```python\nprint('py ok')\n```\n\n"
                   "```bash\necho $A\n```\n")
    proc = run_document(doc, (tmp_path, dict(os.environ)))
    assert proc.stdout.split() == ["py", "ok", "1"]
    doc.write_text(doc.read_text() + "\n```bash\nfalse | cat\necho unreachable\n```\n")
    with pytest.raises(AssertionError, match=r"doc.md:20"):
        run_document(doc, (tmp_path, dict(os.environ)))


@pytest.fixture(scope="module")
def readme_ran(workdir):
    """The README's blocks, run once; the docs pages build on what they made."""
    try:
        return run_document(REPO / "README.md", workdir), None
    except AssertionError as e:
        return None, e


def test_readme_commands(readme_ran, workdir):
    proc, error = readme_ran
    if error:
        raise error
    root, _ = workdir
    assert (root / "checkpoints" / "ran-all" / "checkpoint_last.pt").is_file()
    # the example's score line (evaluate prints BLEU); the other architectures' examples open
    # their pages, run by test_docs_page_commands
    assert proc.stdout.count("BLEU") >= 1, proc.stdout[-3000:]


@pytest.mark.parametrize("path", [p for p in DOCS if p.name != "README.md"], ids=lambda p: p.name)
def test_docs_page_commands(path, request):
    if not any(tag in RUN_TAGS and not skip for _, tag, _, skip in blocks(path)):
        pytest.skip(f"{path.name}: every command block is annotated as skipped")
    readme_ran, workdir = request.getfixturevalue("readme_ran"), request.getfixturevalue("workdir")
    if readme_ran[1] is not None:
        pytest.fail("the README's commands failed (see test_readme_commands); pages use its outputs")
    run_document(path, workdir)
