"""fairseq-train with the plugin loaded, as a user runs it (no RAN_FAIRSEQ_FIXES), writes every
checkpoint atomically: a kill while fairseq copies a save to ``checkpoint_best.pt`` or
``checkpoint_last.pt`` leaves each ``checkpoint*.pt`` whole (the previous one, or none), and the
run resumes (fairseq alone left the copy truncated under its final name)."""
import re
import subprocess
import sys

import pytest

import helpers
from systems import TINY_RAN


def train_args(data, save, max_update, validate):
    args = helpers.train_args(data, save, "ran_transformer",
                              (*TINY_RAN, "--save-interval-updates", "2"), max_update=max_update)
    if validate:  # a save after validation copies to checkpoint_best.pt too
        args.remove("--disable-validation")
    return args


@pytest.mark.parametrize("target", ["checkpoint_best", "checkpoint_last"])
def test_a_kill_during_a_checkpoint_copy_leaves_every_checkpoint_whole(synthetic_databin,
                                                                       tmp_path, target):
    from ran_fairseq.safe_checkpoints import load_plain_checkpoint

    save = tmp_path / "ckpt"
    # the first run validates nothing, so the killed run's save is its first checkpoint_best.pt
    helpers.run_cli("train", train_args(synthetic_databin, save, 2, validate=False))
    env = {k: v for k, v in helpers.fairseq_env().items() if k != "RAN_FAIRSEQ_FIXES"}
    env["KILL_DURING_COPY_OF"] = target
    killed = subprocess.run([sys.executable, str(helpers.REPO / "tests" / "kill_during_copy.py"),
                             *map(str, train_args(synthetic_databin, save, 4, validate=True))],
                            env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert (save / "checkpoint_1_4.pt").exists()  # the save was under way
    written = sorted(save.glob("checkpoint*.pt"))
    assert written
    for path in written:  # whole: each loads (a truncated one: "failed finding central directory")
        assert load_plain_checkpoint(path)["optimizer_history"], path.name
    if target == "checkpoint_best":  # the copy under way never appeared under its name
        assert not (save / "checkpoint_best.pt").exists()
    resumed = helpers.run_cli("train", train_args(synthetic_databin, save, 6, validate=False))
    log = resumed.stdout + resumed.stderr
    assert re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", log), \
        log[-3000:]
    assert "num_updates=6" in log
