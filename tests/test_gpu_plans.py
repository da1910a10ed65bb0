"""The plans of configs/gpu-plans (commands for scripts/gpu-batch.sh on a GPU machine) name configs,
systems, seeds and flags that the engines accept: each command runs here with --dry-run, which
resolves all of them and prints the fairseq commands without running any."""
import runpy
import shlex

import pytest

import helpers
from ran_fairseq.lab.reproduce.cli import run_paper

PLANS = sorted((helpers.REPO / "configs" / "gpu-plans").glob("*.plan"))


def plan_commands(plan):
    return [line for line in plan.read_text().splitlines() if line.strip()]


def test_there_are_plans_and_the_readme_lists_each():
    readme = (helpers.REPO / "configs" / "gpu-plans" / "README.md").read_text()
    assert PLANS
    for plan in PLANS:
        assert f"`{plan.name}`" in readme, plan.name


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.name)
def test_each_plan_command_dry_runs(plan, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(helpers.REPO)  # the plans' paths are relative to the checkout
    for line in plan_commands(plan):
        argv = shlex.split(line)
        assert argv[0] == "python3" and argv[1].startswith("scripts/reproduce-"), line
        assert "--stop-after" in argv, f"{plan.name}: give every engine --stop-after: {line}"
        # the script's Paper, and the engine in this process (a bad name or flag exits 2)
        paper = runpy.run_path(str(helpers.REPO / argv[1]), run_name="plan_test")["PAPER"]
        run_paper(paper, [*argv[2:], "--dry-run", "--out", str(tmp_path / "out"),
                     "--checkpoints", str(tmp_path / "ckpt")])
        out = capsys.readouterr().out
        trains = [ln for ln in out.splitlines() if ln.startswith("fairseq-train ")]
        seeds = argv[argv.index("--seeds") + 1].split(",")
        # one training per system and seed (a system that decodes another's checkpoint trains none)
        assert trains and len(trains) % len(seeds) == 0, (line, out[-2000:])
        assert all("--max-update" in t or "--max-epoch" in t for t in trains)
