"""The device-aware tests on the device: every test that takes the suite's ``device`` fixture
(gradcheck of the hand-written backward passes in float64, the model-level conformance checks:
incremental decoding equals the full forward, padding and batch invariance, beam reordering),
through pytest's ``--device``, which deselects every other test."""
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from ..common.paths import REPO
from ..portable import kept_log


def run(device, out_dir, deadline, select=None):
    """pytest on ``device`` until ``deadline``; a summary from its JUnit XML."""
    tests = REPO / "tests"
    if not tests.is_dir():
        return {"status": "not run", "reason": "no tests/ folder: run the check from a checkout"}
    xml = out_dir / "device-tests.xml"
    cmd = [sys.executable, "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider",
           "-p", "no:xdist", "--device", device, f"--junitxml={xml}"]
    if select:
        cmd += ["-k", select]
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                              timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired as e:
        (out_dir / "device-tests.log").write_text(kept_log(_text(e.stdout) + _text(e.stderr)))
        return {"status": "stopped", "reason": "the deadline came first"}
    (out_dir / "device-tests.log").write_text(kept_log(proc.stdout + proc.stderr))
    summary = summarize(xml) if xml.exists() else {}
    failed = summary.get("failures", 0) + summary.get("errors", 0)
    status = "passed" if proc.returncode == 0 else "failed"
    if proc.returncode == 5:
        status = "failed"
        summary["reason"] = "pytest collected no test"
    return {"status": status, "exit": proc.returncode, **summary,
            **({"failed": failed} if failed else {})}


def _text(data):
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def summarize(xml):
    """Counts and the failed tests' ids of a JUnit XML file."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {k: sum(int(s.get(k, 0)) for s in suites)
              for k in ("tests", "failures", "errors", "skipped")}
    bad = []
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            bad.append(f"{case.get('classname')}::{case.get('name')}")
    return {**counts, "failed_tests": bad}
