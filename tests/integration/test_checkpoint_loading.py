"""Checkpoints written by fairseq-train load under torch>=2.6 safe unpickling once the plugin is
imported, and the allow-list stays narrow: foreign classes in a checkpoint are still refused."""
import json
import subprocess
import sys

import pytest
import torch

import helpers
from systems import TINY_TRANSFORMER


@pytest.fixture(scope="module")
def checkpoints(synthetic_databin, tmp_path_factory):
    """A transformer trained for 4 updates with validation (so checkpoint_best.pt exists too)."""
    save = tmp_path_factory.mktemp("ckpt-validated")
    args = helpers.train_args(synthetic_databin, save, "transformer", TINY_TRANSFORMER, max_update=4)
    args.remove("--disable-validation")
    proc = helpers.run_cli("train", args, fresh=True)  # a new interpreter loads the plugin
    return save, proc.stdout + proc.stderr


def python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=helpers.fairseq_env(), cwd=helpers.REPO)


def test_validation_during_training_ran(checkpoints):
    save, log = checkpoints
    assert "valid on 'valid' subset" in log
    assert {p.name for p in save.glob("*.pt")} >= {"checkpoint_last.pt", "checkpoint_best.pt"}


def test_allow_list_covers_exactly_what_checkpoints_hold(checkpoints):
    from ran_fairseq.safe_checkpoints import fairseq_checkpoint_globals

    save, _ = checkpoints
    allowed = {f"{c.__module__}.{c.__qualname__}" for c in fairseq_checkpoint_globals()}
    # A process without the plugin: torch reports only globals that are not allow-listed there.
    proc = python(
        "import json, pathlib, sys, torch\n"
        f"paths = sorted(pathlib.Path({str(save)!r}).glob('*.pt'))\n"
        "print(json.dumps({p.name: torch.serialization.get_unsafe_globals_in_checkpoint(str(p))"
        " for p in paths}))"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(found) == 2
    for name, classes in found.items():
        assert set(classes) <= allowed, f"{name} holds classes outside the allow-list: {set(classes) - allowed}"
        assert classes, "checkpoints no longer need the allow-list: revisit ran_fairseq/compat.py"


def test_stock_torch_refuses_and_plugin_loads(checkpoints):
    save, _ = checkpoints
    path = save / "checkpoint_last.pt"
    stock = python(f"import torch; torch.load({str(path)!r})")
    assert stock.returncode != 0 and "argparse.Namespace" in stock.stderr
    plugin = python(
        "import ran_fairseq, torch\n"
        f"state = torch.load({str(path)!r})\n"
        "print(state['optimizer_history'][-1]['num_updates'])"
    )
    assert plugin.returncode == 0, plugin.stderr[-2000:]
    assert plugin.stdout.strip().splitlines()[-1] == "4"


class Payload:
    """A class that is not on the allow-list, pickled into a would-be checkpoint."""


def test_foreign_classes_are_still_refused(tmp_path):
    import ran_fairseq  # noqa: F401

    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "payload": Payload()}, path)
    with pytest.raises(Exception, match="Unsupported global"):
        torch.load(path)


def test_fairseq_validate_and_generate_load_checkpoint(checkpoints, synthetic_databin):
    save, _ = checkpoints
    best = save / "checkpoint_best.pt"
    proc = helpers.run_cli("validate", [synthetic_databin, "--user-dir", helpers.USER_DIR, "--path", best,
                                        "--task", "translation", "--cpu", "--num-workers", "0",
                                        "--max-tokens", "400"], fresh=True)
    assert "valid on 'valid' subset" in proc.stdout + proc.stderr
    out = helpers.generate(synthetic_databin, best, ["--scoring", "ter"]).stdout
    assert "TER" in out


# ---- a checkpoint that asks to run code, or is cut short -----------------------------------------

@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory):
    return helpers.bad_checkpoints(tmp_path_factory.mktemp("bad-checkpoints"))


def test_the_refused_checkpoint_would_run_code(bad_checkpoints):
    """The checkpoint these tests refuse would run code if unpickled freely (so a refusal is a
    refusal of that): torch's weights-only unpickler rejects it."""
    import pickle

    with pytest.raises(pickle.UnpicklingError):
        torch.load(bad_checkpoints / "evil.pt", weights_only=True)


@pytest.mark.parametrize("name, what", [("evil.pt", "is not a plain checkpoint"),
                                        ("cut.pt", "truncated")])
def test_a_refused_or_cut_checkpoint_is_named_on_every_path_of_the_plugin(
        bad_checkpoints, tmp_path, synthetic_databin, name, what):
    """checkpoint averaging ends with one line; fairseq's own command with ``--user-dir`` and
    fairseq's loader (which the hub and resuming use) raise an error naming the file. The engine's
    paths: tests/integration/test_engine_store.py."""
    from fairseq import checkpoint_utils

    from ran_fairseq.safe_checkpoints import BadCheckpoint

    path = bad_checkpoints / name
    proc = subprocess.run([sys.executable, "-m", "ran_fairseq.checkpoint_average", str(path),
                           "--output", str(tmp_path / "avg.pt")], env=helpers.fairseq_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().split("\n")[-1]
    assert "checkpoint_average: error:" in last and str(path) in last and what in last, last
    proc = helpers.generate(synthetic_databin, path, check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().split("\n")[-1]
    assert str(path) in last and what in last, proc.stderr[-3000:]
    with pytest.raises(BadCheckpoint, match=what) as caught:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert str(path) in str(caught.value) and "ran-code" not in str(caught.value)


def test_weights_only_loading_cannot_be_turned_off(bad_checkpoints, monkeypatch):
    """TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 would let fairseq's loader unpickle freely: the plugin's
    loader refuses, naming the variable (docs/guarantees.md)."""
    from fairseq import checkpoint_utils

    from ran_fairseq.safe_checkpoints import BadCheckpoint

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(BadCheckpoint, match="unset TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"):
        checkpoint_utils.load_checkpoint_to_cpu(str(bad_checkpoints / "evil.pt"))


def test_checkpoint_averaging_loads_weights_only(tmp_path, monkeypatch):
    from ran_fairseq import checkpoint_average

    torch.save({"optimizer_history": [{"num_updates": 5}]}, tmp_path / "checkpoint_last.pt")
    calls = []
    load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: (calls.append(k), load(*a, **k))[1])
    checkpoint_average._updates(tmp_path / "checkpoint_last.pt")
    assert len(calls) == 1 and calls[0].get("weights_only") is True, calls
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def _qualified(name):
    """A class's qualified name, NumPy 2's ``numpy._core`` read as NumPy 1's ``numpy.core``."""
    return name.replace("numpy._core.", "numpy.core.")


def test_pitfalls_names_exactly_the_classes_the_import_allows():
    """docs/pitfalls.md's item on checkpoints under torch >= 2.6 says how many classes importing
    the plugin adds to torch's safe globals and names them: those of the code."""
    import re

    from ran_fairseq.safe_checkpoints import fairseq_checkpoint_globals

    text = (helpers.REPO / "docs" / "pitfalls.md").read_text(encoding="utf-8")
    item = text[text.index("- **Checkpoints under torch ≥ 2.6.**"):]
    item = " ".join(item[:item.index("\n- **")].split())  # its lines as one
    said = re.search(r"adds exactly (\w+) classes? to torch's safe-globals list(.*?)It does not",
                     item, re.S)
    assert said, "docs/pitfalls.md: 'adds exactly N classes to torch's safe-globals list: ...'"
    named = {_qualified(n) for n in re.findall(r"`((?:argparse|numpy)\.[\w.]+)`", said.group(2))}
    allowed = {_qualified(f"{c.__module__}.{c.__qualname__}")
               for c in fairseq_checkpoint_globals()}
    assert named == allowed
    assert NUMBERS[said.group(1)] == len(fairseq_checkpoint_globals())
