"""fairseq's own tests with and without the plugin loaded (``scripts/fairseq-tests.py``).

The plugin promises that importing it changes fairseq only by registering and by the default
fixes of ``ran_fairseq/fixes.py``. This runs the tests of a fairseq checkout (the tag the
installed fairseq was built from, v0.12.2) twice with the same pytest: once as they are, once
with ``-p ran_fairseq`` (pytest imports the plugin before it collects, as ``--user-dir`` would),
and writes each test's outcome in both runs and the tests whose outcome differs.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

from ran_text.textio import write_text_atomic
from ran_lab.tables import markdown_table

# Left out, with the reason the summary gives: tests that need what a CPU machine without network
# has not, or whose end-to-end trainings take hours on a few cores.
LEFT_OUT = {
    "tests/gpu": "CUDA only",
    "tests/speech": "downloads models and audio",
    "tests/speech_recognition": "speech: needs torchaudio and downloads",
    "tests/test_hf_hub.py": "downloads from the Hugging Face hub",
    "tests/test_plasma_utils.py": "needs pyarrow's plasma store",
    "tests/test_binaries.py": "trains about 80 models end to end (hours on a CPU)",
}


def outcomes(junit: Path) -> tuple:
    """(test id -> passed / failed / error / skipped, test id -> the first line of why it failed),
    from pytest's JUnit XML."""
    found, why = {}, {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag: child for child in case}
        kind = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        found[name] = {"failure": "failed"}.get(kind, kind)
        if kind in ("failure", "error"):
            why[name] = (kinds[kind].get("message") or "").strip().splitlines()[:1]
            why[name] = why[name][0][:200] if why[name] else ""
    return found, why


def run_once(fairseq_repo: Path, out: Path, label: str, with_plugin: bool, timeout: int) -> dict:
    junit = out.resolve() / f"{label}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "--continue-on-collection-errors", "--junitxml",
           str(junit), "tests", *(f"--ignore={p}" for p in LEFT_OUT)]
    if with_plugin:
        cmd[cmd.index("--junitxml"):cmd.index("--junitxml")] = ["-p", "ran_fairseq"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RAN_FAIRSEQ_FIXES", None)  # the plugin as a user loads it: its default fixes only
    start = time.time()
    proc = subprocess.run(cmd, cwd=fairseq_repo, env=env, capture_output=True, text=True,
                          timeout=timeout)
    (out / f"{label}.log").write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
    if not junit.is_file():
        raise SystemExit(f"fairseq-tests: error: pytest wrote no report ({label}, exit "
                         f"{proc.returncode}); see {out / (label + '.log')}")
    found, why = outcomes(junit)
    shown = ["OUT/" + Path(a).name if a == str(junit) else a for a in cmd[1:]]
    return {"command": " ".join(shown), "seconds": round(time.time() - start),
            "outcomes": found, "why": why}


def summary(plain: dict, plugin: dict) -> dict:
    names = sorted(set(plain["outcomes"]) | set(plugin["outcomes"]))
    differ = {n: [plain["outcomes"].get(n, "absent"), plugin["outcomes"].get(n, "absent")]
              for n in names if plain["outcomes"].get(n) != plugin["outcomes"].get(n)}

    def counts(run):
        return dict(sorted(Counter(run["outcomes"].values()).items()))

    return {"tests": len(names), "without_plugin": counts(plain), "with_plugin": counts(plugin),
            "differ": differ}


def report(result: dict) -> str:
    s = result["summary"]
    lines = [
        "# fairseq's own tests with the plugin loaded",
        "",
        f"fairseq's tests at {result['fairseq_tag']} (commit {result['fairseq_commit']}), run "
        f"with the installed fairseq {result['fairseq_version']}, torch {result['torch']}, "
        f"Python {result['python']}, {result['machine']}, one thread; made by "
        f"`{result['made_by']}`.",
        "",
        *markdown_table(["run", "command", "outcomes", "seconds"], [
            [title, f"`{result[key]['command']}`",
             ", ".join(f"{k} {v}" for k, v in s[key].items()), result[key]["seconds"]]
            for key, title in [("without_plugin", "without the plugin"),
                               ("with_plugin", "with the plugin (`-p ran_fairseq`: imported "
                                               "before collection, default fixes)")]],
            text_columns=3),
        "",
        f"Tests whose outcome differs: {len(s['differ'])} of {s['tests']}"
        + (":" if s["differ"] else "."),
        "",
    ]
    for name, (a, b) in s["differ"].items():
        reason = (result["without_plugin"]["why"].get(name) or result["with_plugin"]["why"].get(name)
                  or "")
        lines.append(f"- `{name}`: {a} without, {b} with the plugin"
                     + (f" (the failure: {reason})" if reason else ""))
    lines += ["", "Left out:", ""]
    lines += [f"- `{path}`: {why}" for path, why in LEFT_OUT.items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="fairseq-tests.py", description=__doc__.split("\n\n")[0])
    p.add_argument("fairseq_repo", type=Path, help="a checkout of fairseq at the tag of the "
                   "installed fairseq (git clone --branch v0.12.2 "
                   "https://github.com/facebookresearch/fairseq)")
    p.add_argument("--out", type=Path, default=Path("results/fairseq-tests"))
    p.add_argument("--tag", default="v0.12.2")
    p.add_argument("--commit", default="4a388e64cd646ed7d7ad8de8fae55df2b8eea91d")
    p.add_argument("--timeout", type=int, default=7200, help="seconds per run")
    args = p.parse_args(argv)
    if not (args.fairseq_repo / "tests" / "test_train.py").is_file():
        p.error(f"{args.fairseq_repo} holds no fairseq tests (tests/test_train.py): clone fairseq "
                f"at {args.tag} there")
    import fairseq
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    plain = run_once(args.fairseq_repo, args.out, "without-plugin", False, args.timeout)
    plugin = run_once(args.fairseq_repo, args.out, "with-plugin", True, args.timeout)
    result = {"fairseq_tag": args.tag, "fairseq_commit": args.commit,
              "fairseq_version": fairseq.__version__, "torch": torch.__version__,
              "python": platform.python_version(),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "made_by": "python scripts/fairseq-tests.py FAIRSEQ_CHECKOUT",
              "without_plugin": plain, "with_plugin": plugin,
              "summary": summary(plain, plugin)}
    write_text_atomic(args.out / "outcomes.json", json.dumps(result, indent=1) + "\n")
    write_text_atomic(args.out / "README.md", report(result))
    for made in [*args.out.glob("*.xml"), *args.out.glob("*.log")]:
        made.unlink()  # pytest's own reports name this machine's folders
    print(report(result))
    return 1 if result["summary"]["differ"] else 0
