"""scripts/check-environments.sh, the support table's maker, without building an environment: its
plan (--dry-run), its argument errors, and a run that reuses an environment (this one, behind a
wrapper) and writes the versions pip reports, the test counts and the table, keeping the rows of
environments it did not check."""
import json
import platform
import subprocess
import sys

import numpy
import torch

import helpers

SCRIPT = helpers.REPO / "scripts" / "check-environments.sh"


def check(*args, timeout=600):
    env = dict(helpers.fairseq_env(), PYTHON=sys.executable)
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=helpers.REPO, timeout=timeout)


def this_environment_as(venv):
    """A virtual environment's layout whose python is this one (behind a wrapper)."""
    (venv / "bin").mkdir(parents=True)
    wrapper = venv / "bin" / "python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return venv


def test_dry_run_plans_fresh_builds_and_writes_nothing(tmp_path):
    out = tmp_path / "table"
    proc = check("--dry-run", "--only", "oldest", "--out", out, tmp_path / "envs")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("oldest: venv: python3.10 -m venv" in line for line in lines)
    build = next(line for line in lines if "oldest: build-requirements:" in line)
    assert "torch==2.5.1" in build and "'numpy==1.26.*'" in build
    fairseq = next(line for line in lines if "oldest: fairseq:" in line)
    assert "--no-build-isolation --no-binary fairseq-fixed" in fairseq
    assert any("oldest: fast tests:" in line and line.endswith("-m fast") for line in lines)
    assert any(line.endswith("tests/integration/test_conformance.py") for line in lines)
    assert not any("newest" in line or "middle" in line for line in lines)
    assert not out.exists()


def test_bad_arguments_are_named(tmp_path):
    proc = check("--only", "latest", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "error: --only latest: no such combination (choose from oldest, middle, newest)")
    proc = check("--python", "3.13", tmp_path)
    assert proc.returncode == 2 and "--python 3.13: give VERSION=PATH" in proc.stderr
    built = tmp_path / "envs" / "middle"
    built.mkdir(parents=True)
    proc = check("--only", "middle", "--out", tmp_path / "table", tmp_path / "envs")
    assert proc.returncode == 2
    assert f"{built} exists: pass --reuse" in proc.stderr


def test_reused_environment_is_recorded_and_merged_into_the_table(tmp_path):
    envs = tmp_path / "envs"
    this_environment_as(envs / "newest")
    out = tmp_path / "table"
    out.mkdir()
    kept = {"name": "oldest", "wanted": {"python": "3.11"}, "reused": False, "steps": {},
            "tests": {}, "installed": {"python": "3.11.0", "torch": "2.5.1"}}
    (out / "environments.json").write_text(json.dumps({"environments": [kept]}))
    proc = check("--only", "newest", "--reuse", "--suites", "fast", "--pytest-args",
                 "tests/unit/test_layering.py", "--out", out, envs)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "environments.json").read_text())
    assert [r["name"] for r in report["environments"]] == ["oldest", "newest"]
    assert report["environments"][0]["installed"] == kept["installed"]
    newest = report["environments"][1]
    assert newest["reused"] is True and newest["steps"] == {}
    got = newest["installed"]
    assert got["python"] == platform.python_version()
    assert got["torch"] == torch.__version__ and got["numpy"] == numpy.__version__
    assert "fairseq-fixed" in got
    fast = newest["tests"]["fast"]
    assert fast["returncode"] == 0 and fast["counts"]["passed"] >= 3
    assert "failed" not in fast["counts"]
    table = (out / "README.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| newest |"))
    assert f"| {platform.python_version()} | {torch.__version__} | {numpy.__version__} |" in row
    assert "| reused |" in row and f"{fast['counts']['passed']} passed" in row
    assert any(line.startswith("| oldest | 3.11.0 | 2.5.1 |") for line in table.splitlines())


def test_later_steps_keep_the_torch_and_numpy_just_installed(tmp_path):
    """After torch and NumPy are installed, fairseq and the project install under constraints
    that hold them: a dependency that asks for NumPy 2 (py3langid 0.3+) must not upgrade the 1.26
    that fairseq's extensions are built against. Checked on this environment (behind a wrapper)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_environments",
                                                  helpers.REPO / "scripts" / "check_environments.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    venv = this_environment_as(tmp_path / "env")
    kept = module.keep(venv, module.pip_env(tmp_path), tmp_path / "keep.txt")
    assert kept == {"torch": torch.__version__, "numpy": numpy.__version__}
    assert (tmp_path / "keep.txt").read_text().splitlines() == [
        f"torch=={torch.__version__}", f"numpy=={numpy.__version__}"]
    proc = check("--dry-run", "--only", "oldest", tmp_path / "envs")
    lines = proc.stdout.splitlines()
    build = next(i for i, line in enumerate(lines) if "oldest: build-requirements:" in line)
    assert "the later steps keep the torch and NumPy installed here" in lines[build + 1]
