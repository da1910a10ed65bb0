"""ran_fairseq.checkpoint_average: the mean of several checkpoints' parameters (make demo uses it)."""
import subprocess
import sys

import pytest
import torch

import helpers
from ran_fairseq import checkpoint_average


def _save(path, weight, step, extra_key=None):
    model = {"w": torch.full((2, 3), float(weight)), "count": torch.tensor([step])}
    if extra_key:
        model[extra_key] = torch.zeros(1)
    torch.save({"model": model, "last_optimizer_state": {"state": weight},
                "optimizer_history": [{"num_updates": step}], "extra_state": {"step": step}},
               path)
    return str(path)


def test_average_is_the_mean_of_float_parameters(tmp_path):
    paths = [_save(tmp_path / f"c{i}.pt", w, i) for i, w in enumerate([1.0, 2.0, 6.0])]
    state = checkpoint_average.average_checkpoints(paths)
    assert torch.allclose(state["model"]["w"], torch.full((2, 3), 3.0))
    assert state["model"]["w"].dtype == torch.float32
    assert state["model"]["count"].tolist() == [0]  # integer tensors are not averaged
    assert state["extra_state"] == {"step": 2}  # the rest comes from the last checkpoint
    assert state["last_optimizer_state"] is None


def test_checkpoints_of_different_models_are_refused(tmp_path):
    paths = [_save(tmp_path / "a.pt", 1.0, 0), _save(tmp_path / "b.pt", 1.0, 1, extra_key="x")]
    with pytest.raises(ValueError, match="other parameters"):
        checkpoint_average.average_checkpoints(paths)


def test_last_orders_interval_checkpoints_by_updates(tmp_path):
    for epoch, updates in ((1, 20), (1, 100), (2, 300), (1, 40)):
        _save(tmp_path / f"checkpoint_{epoch}_{updates}.pt", updates, updates)
    _save(tmp_path / "checkpoint_last.pt", 300, 300)  # the same as checkpoint_2_300.pt
    names = [p.rsplit("/", 1)[1] for p in checkpoint_average.last_checkpoints(tmp_path, 3)]
    assert names == ["checkpoint_1_40.pt", "checkpoint_1_100.pt", "checkpoint_2_300.pt"]
    with pytest.raises(ValueError, match="has 4 checkpoints to average"):
        checkpoint_average.last_checkpoints(tmp_path, 5)
    # training that stops at an epoch's end leaves its last update in checkpoint_last.pt only
    _save(tmp_path / "checkpoint_last.pt", 310, 310)
    names = [p.rsplit("/", 1)[1] for p in checkpoint_average.last_checkpoints(tmp_path, 2)]
    assert names == ["checkpoint_2_300.pt", "checkpoint_last.pt"]


def test_cli_writes_a_loadable_average_of_a_trained_model(synthetic_databin, tmp_path):
    save = tmp_path / "ckpt"
    helpers.train(synthetic_databin, save, "ran_transformer_small",
                  extra=["--encoder-layers", "1", "--decoder-layers", "1",
                         "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
                         "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
                         "--save-interval-updates", "2", "--keep-interval-updates", "-1"],
                  max_update=4)
    out = tmp_path / "avg.pt"
    proc = subprocess.run([sys.executable, "-m", "ran_fairseq.checkpoint_average", "--last", "2",
                           str(save), "--output", str(out)], env=helpers.fairseq_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "averaged 2 checkpoints" in proc.stdout
    a, b = (torch.load(save / f"checkpoint_{e}_{u}.pt", map_location="cpu")["model"]
            for e, u in _interval(save)[-2:])
    avg = torch.load(out, map_location="cpu")["model"]
    for name, value in avg.items():
        if value.is_floating_point():
            assert torch.allclose(value, (a[name] + b[name]) / 2, atol=1e-6), name
    gen = helpers.generate(synthetic_databin, out)
    assert "H-0" in gen.stdout + gen.stderr
    bad = subprocess.run([sys.executable, "-m", "ran_fairseq.checkpoint_average", "--last", "9",
                          str(save), "--output", str(out)], env=helpers.fairseq_env(),
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--last 9" in bad.stderr


def _interval(directory):
    names = [p.name for p in directory.glob("checkpoint_*_*.pt")]
    pairs = [tuple(int(x) for x in n[len("checkpoint_"):-3].split("_")) for n in names]
    return sorted(pairs, key=lambda p: p[1])
