"""scripts/quickstart.sh (make demo) end to end on a tiny Multi30k-shaped corpus and a tiny model:
what the terminal shows (step headers, fairseq's progress lines, scores, examples, where the logs
are), what it leaves to the logs (config dump, DEBUG lines, Python warnings) and demo.json, all in
the git-ignored demo-out/; a failing step shows its log's tail. The script's VENV is a folder of
commands whose fairseq-train, fairseq-generate and `python -m` fork their modules from a server
that has imported torch and fairseq once (``helpers.module_server``)."""
import gzip
import json
import re
import shlex
import subprocess
import sys

import pytest

import helpers

SCRIPT = helpers.REPO / "scripts" / "quickstart.sh"
TINY = """# a tiny ran_transformer_small for the test
--arch ran_transformer_small
--encoder-layers 1
--decoder-layers 1
--encoder-embed-dim 16
--decoder-embed-dim 16
--encoder-ffn-embed-dim 32
--decoder-ffn-embed-dim 32
--share-all-embeddings
--optimizer adam
--lr 1e-3
--criterion label_smoothed_cross_entropy
--max-tokens 400
--max-update 6
--save-interval-updates 2
--log-interval 2
--no-epoch-checkpoints
--data-buffer-size 0
"""
# what belongs in the logs only
NOISE = [re.compile(p) for p in (r"\| DEBUG \|", r"Warning:", r"'_name':", r"^\s*warnings\.warn",
                                 r"^INFO:", r"tensorboardX")]


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A VENV for the script (SETUP=0 uses it as it is: it puts its bin/ first on the PATH) whose
    commands run their modules as the test's environment would, forked from a server: the
    console scripts of fairseq, and `python -m MODULE` (also as PYTHON, which the data scripts run);
    any other `python` is this interpreter."""
    launcher, server = helpers.module_server()
    root = tmp_path_factory.mktemp("quickstart-venv")
    (root / "bin").mkdir()
    commands = {f"fairseq-{name}": f'exec {launcher} fairseq_cli.{name} "$@"'
                for name in ("train", "generate")}
    commands["python"] = commands["python3"] = (
        f'if [ "$1" = -m ]; then shift; exec {launcher} "$@"; fi\n'
        f'exec {shlex.quote(sys.executable)} "$@"')
    for command, body in commands.items():
        (root / "bin" / command).write_text(f"#!/bin/sh\n{body}\n")
        (root / "bin" / command).chmod(0o755)
    yield root
    helpers.stop_module_server(server)


def quickstart(venv, workdir, raw, config, *flags, average=2, cap=None):
    env = dict(helpers.fairseq_env(), WORKDIR=str(workdir), MULTI30K_DIR=str(raw),
               CONFIG=str(config), VENV=str(venv), PYTHON=str(venv / "bin" / "python"),
               SETUP="0", AVERAGE_LAST=str(average))
    env.pop("TIME_CAP_MINUTES", None)
    env.pop("OMP_NUM_THREADS", None)  # the demo measures what the machine can give
    if cap is not None:
        env["TIME_CAP_MINUTES"] = cap
    return subprocess.run(["bash", str(SCRIPT), *flags], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def demo(tmp_path_factory, venv):
    root = tmp_path_factory.mktemp("quickstart")
    plain = helpers.make_synthetic_corpus(root / "plain", n_train=200, n_valid=16, n_test=16)
    raw = root / "raw"
    raw.mkdir()
    for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("de", "en"):
            with gzip.open(raw / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write((plain / f"{split}.{lang}").read_text())
    config = root / "tiny.args"
    config.write_text(TINY)
    work = root / "work"
    return venv, work, raw, config, quickstart(venv, work, raw, config)


def test_demo_shows_steps_progress_scores_and_examples(demo):
    _, work, _, _, proc = demo
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for step in range(1, 6):
        assert f"== {step}/5 " in out
    progress = [line for line in out.splitlines() if line.startswith("train_inner | epoch 001:")]
    assert len(progress) == 3, out  # --log-interval 2 over 6 updates
    # each progress line before the last says where training is and when it should end
    assert all(re.search(r"-> update [24] of 6, [\d.]+ updates/s, done at about \d\d:\d\d "
                         r"\(in [\d.]+ min\)$", line) for line in progress[:2]), progress
    assert re.search(r"3/5 train \(.*: 6 updates; \d+ thread\(s\): \d+ cores, [\d.]+ of them "
                     r"busy over the last second", out), out
    assert "Training ran all 6 planned updates." in out and "stopped at update" not in out
    assert re.search(r"^BLEU\s+\d+\.\d\d\s+nrefs:1", out, re.M)
    assert "Examples (source / reference / translation):" in out
    assert "averaged 2 checkpoints (checkpoint_1_4.pt, checkpoint_last.pt)" in out
    logs = work / "demo-out" / "quickstart.de-en"
    assert str(logs) in out
    assert not (work / "results").exists()  # the demo never writes to results/
    for line in (out + proc.stderr).splitlines():
        assert not any(p.search(line) for p in NOISE), line
    train_log = (logs / "train.log").read_text()
    assert "'_name':" in train_log and "train_inner" in train_log  # everything is in the log
    assert (work / "checkpoints" / "quickstart.de-en" / "checkpoint_avg.pt").exists()


def test_demo_json_records_steps_scores_and_machine(demo):
    """demo.json: the seconds of each step, the scores and the machine, for results/quickstart/."""
    _, work, _, config, proc = demo
    assert proc.returncode == 0
    record = json.loads((work / "demo-out" / "quickstart.de-en" / "demo.json").read_text())
    assert set(record["seconds"]) == {"setup", "prepare", "train", "translate", "score"}
    assert all(isinstance(s, int) and s >= 0 for s in record["seconds"].values())
    assert record["total_seconds"] >= sum(record["seconds"].values()) - 1
    assert record["pair"] == "de-en" and record["config"] == str(config)
    assert record["updates"] == {"planned": 6, "reached": 6} and record["average_last"] == 2
    assert record["time_cap_minutes"] is None and record["stopped_early"] is False
    bleu = re.search(r"^BLEU\s+(\d+\.\d\d)", proc.stdout, re.M).group(1)
    assert f"{record['scores']['bleu']['score']:.2f}" == bleu
    assert {"chrf", "ter"} <= set(record["scores"])
    machine = record["machine"]
    assert machine["device"] == "cpu" and machine["device_name"] and machine["cores"] >= 1
    assert machine["torch"] and machine["date"]


def test_failed_step_shows_its_log_tail(demo):
    venv, work, raw, config, first = demo
    assert first.returncode == 0
    proc = quickstart(venv, work, raw, config, "--arch", "no_such_arch")
    assert proc.returncode != 0
    assert "FAILED" in proc.stderr and "train.log" in proc.stderr
    assert "invalid choice: 'no_such_arch'" in proc.stderr  # fairseq's own error, from the tail


def test_bad_average_count_is_named(demo):
    venv, work, raw, config, _ = demo
    proc = quickstart(venv, work, raw, config, average="0")
    assert proc.returncode == 2 and "AVERAGE_LAST" in proc.stderr


def test_demo_stopped_by_its_time_cap_says_so(demo):
    """A time cap that ends training early: the closing lines say at which update of how many it
    stopped, why (the cap, the rate, the load measured) and how to run it to the end; demo.json
    records both counts."""
    venv, work, raw, config, first = demo
    assert first.returncode == 0
    proc = quickstart(venv, work, raw, config, "--max-update", "100000", average=1, cap="0.02")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((work / "demo-out" / "quickstart.de-en" / "demo.json").read_text())
    reached = record["updates"]["reached"]
    assert record["updates"]["planned"] == 100000 and 0 <= reached < 100000
    assert record["time_cap_minutes"] == 0.02 and record["stopped_early"] is True
    note = re.search(r"^NOTE: training stopped at update (\d+) of 100000: the time cap "
                     r"TIME_CAP_MINUTES=0.02 ran out, at [\d.]+ updates/s on \d+ thread\(s\) "
                     r"\(at the start: \d+ cores, [\d.]+ of them busy", proc.stdout, re.M)
    assert note and int(note.group(1)) == reached, proc.stdout
    assert "unset TIME_CAP_MINUTES and run `make demo` again" in proc.stdout


def test_bad_time_cap_is_named(demo):
    venv, work, raw, config, _ = demo
    proc = quickstart(venv, work, raw, config, cap="five")
    assert proc.returncode == 2 and "TIME_CAP_MINUTES" in proc.stderr
