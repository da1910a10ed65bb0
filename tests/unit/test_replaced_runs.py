"""Runs that a retraining replaced are kept apart from the table (``replaced.json`` beside a
results folder's results.json): each names the run that replaced it, its own score and why."""
import json

import pytest

from helpers import REPO

LISTS = sorted((REPO / "results").rglob("replaced.json"))


def test_there_is_a_list_of_replaced_runs():
    assert LISTS, "results/dynmem/paper-epochs retrained runs and keeps the earlier ones' scores"


@pytest.mark.parametrize("path", LISTS, ids=lambda p: str(p.parent.relative_to(REPO)))
def test_each_replaced_run_names_its_replacement_and_says_why(path):
    listed = json.loads(path.read_text(encoding="utf-8"))["replaced"]
    report = json.loads((path.parent / "results.json").read_text(encoding="utf-8"))
    runs = [(r["pair"], r["system"], r["seed"]) for r in report["results"]]
    assert len(runs) == len(set(runs)), "a replaced run is not a second row of results.json"
    keys = [(r["pair"], r["system"], r["seed"]) for r in listed]
    assert len(keys) == len(set(keys))
    for entry, key in zip(listed, keys):
        assert key in runs, f"{key}: no run of results.json replaced it"
        assert entry["why"] and entry["replaced_by"]
        assert entry["sacrebleu"] is None or isinstance(entry["sacrebleu"], float)
        assert entry["sacrebleu"] is not None or "not recorded" in entry["why"]


def test_the_prose_says_how_the_replacements_scored():
    """docs/results.md says every replacement with an earlier score scored lower: true of the
    files."""
    path = REPO / "results" / "dynmem" / "paper-epochs" / "replaced.json"
    report = json.loads((path.parent / "results.json").read_text(encoding="utf-8"))
    now = {(r["pair"], r["system"], r["seed"]): r["subsets"]["test"]["sacrebleu"]
           for r in report["results"]}
    lower = all(now[(e["pair"], e["system"], e["seed"])] < e["sacrebleu"]
                for e in json.loads(path.read_text(encoding="utf-8"))["replaced"]
                if e["sacrebleu"] is not None)
    said = "Every replacement with an earlier score scored lower." in \
        (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    assert said == lower
