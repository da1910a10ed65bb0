"""The plans of configs/gpu-plans (commands for scripts/gpu-batch.sh on a GPU machine) name configs,
systems, seeds and flags that the engines accept: each command runs here with --dry-run, which
resolves all of them and prints the fairseq commands without running any."""
import shlex

import pytest

import helpers
from ran_lab.reproduce.cli import run_paper
from ran_lab.reproduce.papers import paper_of

PLANS = sorted((helpers.REPO / "configs" / "gpu-plans").glob("*.plan"))


def plan_commands(plan):
    return [line for line in plan.read_text().splitlines() if line.strip()]


def test_there_are_plans_and_the_readme_lists_each():
    readme = (helpers.REPO / "configs" / "gpu-plans" / "README.md").read_text()
    assert PLANS
    for plan in PLANS:
        assert f"`{plan.name}`" in readme, plan.name


def check_analysis(argv, trains):
    from ran_lab.analysis.cli import ran as ran_cli
    assert argv[:2] == ["python3", "scripts/analyze-ran.py"], argv
    args = ran_cli.parser().parse_args(argv[2:])  # a bad flag exits 2
    save_dirs = {t.split("--save-dir ")[1].split()[0] for t in trains}
    for spec in args.checkpoint:
        path = spec.split("=", 1)[-1]
        assert path.endswith("/checkpoint_best.pt"), spec
        # the dry run writes under --checkpoints; the plan's path is under the config's own
        tail = path[len("checkpoints/"):].split("/", 1)[1].rsplit("/", 1)[0]
        assert any(d.endswith(tail) for d in save_dirs), (spec, sorted(save_dirs))


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.name)
def test_each_plan_command_dry_runs(plan, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(helpers.REPO)  # the plans' paths are relative to the checkout
    for line in plan_commands(plan):
        line, *after = line.split(" && ")
        argv = shlex.split(line)
        assert (helpers.REPO / argv[0]).is_file(), f"{plan.name}: no script {argv[0]}"
        assert "--stop-after" in argv, f"{plan.name}: give every engine --stop-after: {line}"
        # the script's paper, and the engine in this process (a bad name or flag exits 2)
        run_paper(paper_of(argv[0]), [*argv[1:], "--dry-run", "--out", str(tmp_path / "out"),
                     "--checkpoints", str(tmp_path / "ckpt")])
        out = capsys.readouterr().out
        trains = [ln for ln in out.splitlines() if ln.startswith("fairseq-train ")]
        seeds = argv[argv.index("--seeds") + 1].split(",")
        # one training per system and seed (a system that decodes another's checkpoint trains none)
        assert trains and len(trains) % len(seeds) == 0, (line, out[-2000:])
        assert all("--max-update" in t or "--max-epoch" in t for t in trains)
        # what follows the engine (`&& ...`) analyses the checkpoints it trains: the flags parse,
        # and every checkpoint is one of the engine's trainings
        for follow in after:
            check_analysis(shlex.split(follow), trains)
