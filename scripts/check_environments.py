"""Build the supported combinations of Python, torch and NumPy in fresh virtual environments from the
package index, run the fast tests and the conformance suite in each, and write the support table.

Run by ``scripts/check-environments.sh`` (see there for the options). Only the standard library:
it runs under any Python 3 before any environment exists. Each environment installs with its own
empty pip configuration and constraints (``PIP_CONFIG_FILE=/dev/null``, ``PIP_CONSTRAINT=``), so
a machine's pip settings that cap torch do not decide what is tested; fairseq-fixed is built from
source against the environment's torch and NumPy (its prebuilt wheels carry an extension built
for another torch), and this checkout is installed editable with its test extras.
"""
import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAIRSEQ = "fairseq-fixed>=0.12.3.1,<0.13"
# name -> (python, torch requirement, numpy requirement): the oldest supported, one between, the
# newest (its torch and NumPy: the newest releases within setup.py's ranges). The middle torch is
# one release: pip cannot resolve "torch==2.14.*" (2.14.0 and 2.14.1 pin different CUDA libraries).
COMBINATIONS = {
    "oldest": ("3.10", "torch==2.5.1", "numpy==1.26.*"),
    "middle": ("3.12", "torch==2.14.1", "numpy>=2,<3"),
    "newest": ("3.13", "torch>=2.5.1,<3", "numpy>=2,<3"),
}
SUITES = {"fast": ["-m", "fast"], "conformance": ["tests/integration/test_conformance.py"]}
PACKAGES = ("torch", "numpy", "fairseq-fixed")
COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")


class CheckError(Exception):
    """A bad argument or a missing interpreter; the message says what to change."""


def find_python(version, given):
    """The interpreter for ``version``: --python VERSION=PATH, else pythonVERSION on PATH, else a
    pyenv installation of it."""
    if version in given:
        return given[version]
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for folder in sorted(pyenv_root.glob(f"versions/{version}.*"), reverse=True):
        exe = folder / "bin" / f"python{version}"
        if exe.is_file():
            return str(exe)
    raise CheckError(f"no Python {version} found: install it, or name it with "
                     f"--python {version}=/path/to/python{version}")


def pip_env(build_dir):
    """The environment of every step: pip with no configuration file and no constraints, and
    fairseq's extensions built BUILD_JOBS at a time (as scripts/setup-env.sh does)."""
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_CONSTRAINT="",
               PIP_DISABLE_PIP_VERSION_CHECK="1", TORCH_NO_COMPILER_WRAPPER="1",
               DIST_EXTRA_CONFIG=str(build_dir / "build.cfg"))
    env.pop("PIP_FIND_LINKS", None)
    env.pop("PIP_EXTRA_INDEX_URL", None)
    env["PATH"] = f"{build_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def steps(name, venv, python, torch, numpy):
    """(step, argv, counts toward the build) of one environment, in order."""
    vpy = str(venv / "bin" / "python")
    pip = [vpy, "-m", "pip", "install"]
    return [
        ("venv", [python, "-m", "venv", str(venv)], True),
        ("build-requirements", [*pip, torch, numpy, "cython", "setuptools", "wheel"], True),
        ("fairseq", [*pip, "--no-build-isolation", "--no-binary", "fairseq-fixed", FAIRSEQ], True),
        ("ran_fairseq", [*pip, "--no-build-isolation", "-e", f"{ROOT}[test]"], True),
    ]


def test_argv(venv, suite, override):
    vpy = str(venv / "bin" / "python")
    return [vpy, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
            *(shlex.split(override) if override else SUITES[suite])]


def run_logged(argv, env, log, cwd=ROOT):
    """Run ``argv`` with its output in ``log``; (return code, seconds, output)."""
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.run(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    return proc.returncode, time.monotonic() - start, Path(log).read_text(encoding="utf-8",
                                                                          errors="replace")


def summary_of(output):
    """pytest's last summary line as counts: {'passed': 453, 'failed': 3}."""
    lines = [line for line in output.splitlines() if COUNTS.search(line) and " in " in line]
    if not lines:
        return {}
    return {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
            for n, kind in COUNTS.findall(lines[-1])}


def installed(venv, env):
    """The versions pip reports in the environment (pip freeze), and Python's own."""
    vpy = str(venv / "bin" / "python")
    freeze = subprocess.run([vpy, "-m", "pip", "freeze", "--all"], env=env, capture_output=True,
                            text=True).stdout
    versions = {}
    for line in freeze.splitlines():
        name, sep, version = line.partition("==")
        if sep and name.lower().replace("_", "-") in PACKAGES:
            versions[name.lower().replace("_", "-")] = version
        elif " @ " in line and line.split(" @ ")[0].lower().replace("_", "-") in PACKAGES:
            versions[line.split(" @ ")[0].lower().replace("_", "-")] = line.split(" @ ")[1]
    versions["python"] = subprocess.run(
        [vpy, "-c", "import platform; print(platform.python_version())"], capture_output=True,
        text=True).stdout.strip()
    check = subprocess.run([vpy, "-m", "pip", "check"], env=env, capture_output=True, text=True)
    return versions, (check.stdout + check.stderr).strip().splitlines()


def keep(venv, env, path):
    """Write constraints that hold the torch and NumPy just installed: installing fairseq and
    the project must not move them (a dependency asking for NumPy 2 would upgrade a 1.26 that
    fairseq's extensions were built against), as a user's environment keeps its own."""
    versions, _ = installed(venv, env)
    kept = {name: versions[name] for name in ("torch", "numpy")}
    path.write_text("".join(f"{name}=={version}\n" for name, version in kept.items()),
                    encoding="utf-8")
    return kept


def check_one(name, spec, args, env, say):
    """Build (or reuse) and test one combination; its record."""
    version, torch, numpy = spec
    venv = args.folder / name
    logs = venv.parent / f"{name}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "wanted": {"python": version, "torch": torch, "numpy": numpy,
                                       "fairseq": FAIRSEQ},
              "reused": False, "steps": {}, "tests": {}}
    if args.reuse and (venv / "bin" / "python").is_file():
        record["reused"] = True
        say(f"{name}: reusing {venv}")
    else:
        if venv.exists():
            raise CheckError(f"{venv} exists: pass --reuse to test it as it is, or delete it to "
                             f"build it again")
        python = find_python(version, args.python)
        step_env = env
        for step, argv, _ in steps(name, venv, python, torch, numpy):
            say(f"{name}: {step}: {shlex.join(argv)}")
            rc, seconds, output = run_logged(argv, step_env, logs / f"{step}.log")
            record["steps"][step] = {"seconds": round(seconds, 1), "returncode": rc}
            if rc != 0:
                record["failed"] = f"{step} (exit {rc}; log: {logs / (step + '.log')})"
                say(f"{name}: FAILED at {step}; the last lines of its log:\n"
                    + "\n".join(output.splitlines()[-15:]))
                return record
            if step == "build-requirements":
                record["kept"] = keep(venv, env, logs / "keep.txt")
                step_env = dict(env, PIP_CONSTRAINT=str(logs / "keep.txt"))
                say(f"{name}: the later steps keep " + ", ".join(
                    f"{k} {v}" for k, v in record["kept"].items()))
    record["build_seconds"] = round(sum(s["seconds"] for s in record["steps"].values()), 1)
    record["installed"], record["pip_check"] = installed(venv, env)
    for suite in args.suites:
        argv = test_argv(venv, suite, args.pytest_args)
        say(f"{name}: {suite} tests: {shlex.join(argv)}")
        rc, seconds, output = run_logged(argv, env, logs / f"test-{suite}.log")
        record["tests"][suite] = {"returncode": rc, "seconds": round(seconds, 1),
                                  "counts": summary_of(output)}
        say(f"{name}: {suite}: {record['tests'][suite]['counts'] or 'no summary'} "
            f"in {seconds:.0f} s")
    return record


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(), "system": platform.platform(terse=True)}


def merge(out, records, made):
    """The report file's records with ``records`` in place of those of the same name."""
    path = out / "environments.json"
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"environments": []}
    by_name = {r["name"]: r for r in old.get("environments", [])}
    by_name.update({r["name"]: dict(r, made=made) for r in records})
    order = list(COMBINATIONS) + sorted(set(by_name) - set(COMBINATIONS))
    return {"command": "scripts/check-environments.sh", "machine": machine(),
            "environments": [by_name[n] for n in order if n in by_name]}


def cell_of(test):
    if not test:
        return "not run"
    counts = test.get("counts") or {}
    text = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or f"exit {test['returncode']}"
    text = text if test["returncode"] == 0 else f"**{text}**"
    return f"{text} ({test['seconds'] / 60:.1f} min)"


def markdown(report):
    lines = ["# Supported environments, as measured", "",
             "Written by `scripts/check-environments.sh` (the records: `environments.json`). Each "
             "environment is a fresh virtual environment built from the package index with an "
             "empty pip configuration; fairseq-fixed is built from source against its torch and "
             "NumPy; the fast group (`pytest -m fast`) and `tests/integration/test_conformance.py` run in it. "
             "Versions are those pip installed; build times include the downloads; test times (in "
             "brackets) are pytest's in one process (`-p no:xdist`).", "",
             f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, "
             f"{report['machine']['system']}.", "",
             "| environment | Python | torch | NumPy | fairseq-fixed | build (min) | fast | "
             "conformance | `pip check` | made |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["environments"]:
        got = r.get("installed", {})
        build = "reused" if r.get("reused") else (f"{r['build_seconds'] / 60:.1f}"
                                                   if "build_seconds" in r else "—")
        if "failed" in r:
            build = f"**failed at {r['failed'].split(' ')[0]}**"
        check = "ok" if not r.get("pip_check") or r["pip_check"] == ["No broken requirements found."] \
            else "; ".join(r["pip_check"])
        wanted = r.get("wanted", {})

        def version(name):
            return got.get(name) or wanted.get(name) or "—"

        lines.append(f"| {r['name']} | {version('python')} | {version('torch')} | "
                     f"{version('numpy')} | {version('fairseq-fixed')} | "
                     f"{build} | {cell_of(r.get('tests', {}).get('fast'))} | "
                     f"{cell_of(r.get('tests', {}).get('conformance'))} | {check} | {r.get('made', '')} |")
    return "\n".join(lines) + "\n"


def parse(argv):
    p = argparse.ArgumentParser(
        prog="check-environments.sh",
        description="Build the supported Python/torch/NumPy combinations in fresh virtual "
                    "environments under FOLDER, run the fast tests and the conformance suite in "
                    "each, and write the support table (README.md and environments.json) to --out.")
    p.add_argument("folder", type=Path, help="where the environments are built (FOLDER/NAME)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "environments",
                   help="where the table goes (default: results/environments); a run of some "
                        "environments replaces their rows and keeps the others")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help=f"check only this combination (repeatable): {', '.join(COMBINATIONS)}")
    p.add_argument("--reuse", action="store_true",
                   help="test an environment already in FOLDER/NAME as it is (no install)")
    p.add_argument("--python", action="append", default=[], metavar="VERSION=PATH",
                   help="the interpreter of a Python version (default: pythonVERSION on PATH, "
                        "else pyenv's)")
    p.add_argument("--suites", default="fast,conformance",
                   help="the test suites to run, comma-separated (default: fast,conformance)")
    p.add_argument("--pytest-args", default="",
                   help="run pytest with these arguments instead of each suite's")
    p.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0))
                   if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
                   help="compile fairseq's extensions this many at a time (default: the cores)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and run nothing")
    args = p.parse_args(argv)
    unknown = [n for n in args.only if n not in COMBINATIONS]
    if unknown:
        p.error(f"--only {unknown[0]}: no such combination (choose from "
                f"{', '.join(COMBINATIONS)})")
    given = {}
    for item in args.python:
        version, sep, path = item.partition("=")
        if not sep or not path:
            p.error(f"--python {item}: give VERSION=PATH, e.g. --python 3.13=/usr/bin/python3.13")
        given[version] = path
    args.python = given
    args.suites = [s for s in args.suites.split(",") if s]
    bad = [s for s in args.suites if s not in SUITES]
    if bad:
        p.error(f"--suites {bad[0]}: no such suite (choose from {', '.join(SUITES)})")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    args.folder = args.folder.resolve()
    args.out = args.out.resolve()
    return args


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    names = args.only or list(COMBINATIONS)

    def say(msg):
        print(f"check-environments: {msg}", flush=True)

    if args.dry_run:
        for name in names:
            venv = args.folder / name
            if args.reuse and (venv / "bin" / "python").is_file():
                say(f"{name}: reuse {venv}")
            else:
                for step, argv, _ in steps(name, venv, f"python{COMBINATIONS[name][0]}",
                                           *COMBINATIONS[name][1:]):
                    say(f"{name}: {step}: {shlex.join(argv)}")
                    if step == "build-requirements":
                        say(f"{name}: the later steps keep the torch and NumPy installed here "
                            f"(PIP_CONSTRAINT)")
            for suite in args.suites:
                say(f"{name}: {suite} tests: {shlex.join(test_argv(venv, suite, args.pytest_args))}")
        say(f"(dry run) the table would go to {args.out}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build_dir = Path(tmp)
        # fairseq's extensions built side by side overwrite one build.ninja: ninja is hidden (a
        # `ninja` that fails makes torch compile with the plain compiler), as in setup-env.sh
        (build_dir / "build.cfg").write_text(f"[build_ext]\nparallel = {args.jobs}\n")
        (build_dir / "ninja").write_text("#!/bin/sh\nexit 1\n")
        (build_dir / "ninja").chmod(0o755)
        env = pip_env(build_dir)
        records = []
        try:
            for name in names:
                records.append(check_one(name, COMBINATIONS[name], args, env, say))
        except CheckError as err:
            print(f"check-environments: error: {err}", file=sys.stderr)
            return 2
    made = time.strftime("%Y-%m-%d")
    report = merge(args.out, records, made)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "environments.json").write_text(json.dumps(report, indent=2) + "\n",
                                                encoding="utf-8")
    (args.out / "README.md").write_text(markdown(report), encoding="utf-8")
    say(f"wrote {args.out / 'README.md'} and environments.json")
    ok = all("failed" not in r and all(t["returncode"] == 0 for t in r["tests"].values())
             for r in records)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
