"""The GPU check's report: check.json (everything) and CHECK.md (a table a person reads), written
after each step."""
import json
import platform
import shutil
import subprocess

from ran_text import textio
from ..common.machine import cuda_mps_running, git_commit, utc_now
from ..tables import markdown_table


def environment(device):
    import torch

    env = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "commit": git_commit(), "date": utc_now(),
           "cuda_mps": cuda_mps_running()}
    if device == "cuda" and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True) if shutil.which("nvidia-smi") else None
        env["driver"] = smi.stdout.strip().split("\n")[0] if smi and smi.returncode == 0 else None
    return env


def markdown(report):
    env = report["environment"]
    lines = ["# GPU check", "",
             f"{env.get('gpu') or env['device']}, driver {env.get('driver') or '-'}, "
             f"torch {env['torch']}, CUDA {env.get('cuda') or '-'}, Python {env['python']}, "
             f"commit {(env.get('commit') or '-')[:12]}, {env['date']}"
             + (" (an NVIDIA MPS daemon was running)" if env.get("cuda_mps") else ""), ""]
    tests = report["steps"].get("tests")
    if tests:
        lines += ["## Device-aware tests (gradcheck, model-level conformance)", "",
                  f"{tests['status']}: " + ", ".join(
                      f"{tests[k]} {k}" for k in ("tests", "failures", "errors", "skipped")
                      if k in tests) + (f" ({tests['reason']})" if "reason" in tests else ""),
                  ""]
        lines += [f"- failed: `{t}`" for t in tests.get("failed_tests", [])]
        lines += [""] if tests.get("failed_tests") else []
    training = report["steps"].get("training")
    if training:
        dtypes = training["dtypes"]
        by = {(r["system"], r["dtype"]): r for r in training["rows"]}
        rows = [[system] + [_cell(by.get((system, d), {"status": "not run"})) for d in dtypes]
                for system in dict.fromkeys(r["system"] for r in training["rows"])]
        lines += [f"## Training, {training['updates']} updates", ""]
        lines += markdown_table(["system"] + dtypes, rows, text_columns=1 + len(dtypes))
        lines += ["", "Tolerance of the validation loss against float32's: "
                  + ", ".join(f"{k} {v:.0%}" for k, v in training["tolerance"].items()), ""]
    speed = report["steps"].get("speed")
    if speed:
        lines += ["## Speed", "", f"{speed['status']}"
                  + (f": {speed['reason']}" if speed.get("reason") else ""), ""]
    not_run = [s for s in report["planned"] if s not in report["steps"]]
    if not_run:
        lines += [f"Not run (the deadline came first): {', '.join(not_run)}", ""]
    return "\n".join(lines)


def _cell(row):
    """A training's cell: its status, its validation loss, and why it did not pass."""
    v = row.get("valid_loss")
    return (row["status"] + (f", valid {v:.3f}" if isinstance(v, float) else "")
            + (f": {row['reason']}" if row["status"] != "passed" and row.get("reason") else ""))


def write(out, report):
    out.mkdir(parents=True, exist_ok=True)
    textio.write_text_atomic(out / "check.json", json.dumps(report, indent=2) + "\n")
    textio.write_text_atomic(out / "CHECK.md", markdown(report))
