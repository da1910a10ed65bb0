"""No import noise (ran_lab.quiet): the project's commands print none of the lines importing
fairseq 0.12 prints (tensorboardX, hydra's deprecation warnings, DEBUG:hydra, the wav2vec
escape-sequence warning), while fairseq's own log lines and other warnings still come through."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import helpers

REPO = Path(__file__).resolve().parents[2]
NOISE = re.compile(
    r"Please install tensorboardX|version_base parameter|deprecated keyword in package header"
    r"|validated against ConfigStore schema|strict flag in the compose API"
    r"|no longer experimental|DEBUG:hydra|invalid escape sequence|has already been imported")


def run(argv, timeout=300):
    proc = subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True,
                          cwd=REPO, env=helpers.fairseq_env(), timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def assert_quiet(text):
    found = sorted({m.group(0) for m in NOISE.finditer(text)})
    assert not found, f"import noise {found} in:\n{text[-3000:]}"


@pytest.mark.parametrize("argv", [
    ["-m", "ran_text.prepare", "--help"],
    ["scripts/bench.py", "--help"],
    ["-m", "ran_lab.reproduce", "ran", "--help"],
    ["-m", "ran_text.evaluate", "--help"],
], ids=["prepare", "bench", "reproduce-ran", "evaluate"])
def test_commands_print_no_import_noise(argv):
    proc = run(argv)
    assert_quiet(proc.stderr + proc.stdout)


CONSOLE_SCRIPTS = ["ran-prepare", "ran-reproduce", "ran-bench", "ran-claims", "ran-analyze",
                   "ran-remake", "ran-evaluate"]


@pytest.mark.parametrize("name", CONSOLE_SCRIPTS)
def test_console_scripts_are_installed_and_quiet(name):
    """setup.py's console scripts, as the install put them beside the interpreter."""
    script = Path(sys.executable).parent / name
    assert script.exists(), f"{name} is not installed beside {sys.executable}: reinstall the package"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, cwd=REPO,
                          env=helpers.fairseq_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
    assert_quiet(proc.stderr + proc.stdout)


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    d = tmp_path_factory.mktemp("quiet")
    (d / "a.de").write_text("".join(f"ein mann {i} spielt\n" for i in range(24)))
    (d / "a.en").write_text("".join(f"a man {i} plays\n" for i in range(24)))
    run(["-m", "ran_text.prepare", "custom", "--src", "de", "--tgt", "en",
         "--train-prefix", d / "a", "--valid-prefix", d / "a", "--test-prefix", d / "a",
         "--bpe-merges", "0", "--workers", "1", "--out", d / "bin"])
    return d


def test_fairseq_through_the_plugin_is_quiet_and_keeps_its_log(tiny_bin):
    """fairseq-train and fairseq-generate as the engine runs them (python -m ran_lab.run_fairseq):
    no noise on either stream, fairseq's log as fairseq writes it. Plain fairseq-train with
    --user-dir prints what stock fairseq prints: the plugin installs no filter of its own."""
    data, save = tiny_bin / "bin", tiny_bin / "ck"
    train = [data, "--user-dir", REPO / "ran_fairseq", "--task", "translation", "--arch",
             "ran_transformer_small", "--encoder-layers", "1", "--decoder-layers", "1", "--cpu",
             "--max-tokens", "200", "--max-update", "1", "--optimizer", "adam", "--lr", "1e-3",
             "--no-epoch-checkpoints", "--num-workers", "0", "--save-dir", save]
    proc = run(["-m", "ran_lab.run_fairseq", "train", *train])
    assert_quiet(proc.stdout + proc.stderr)
    assert re.search(r"^\S+ \S+ \| INFO \| fairseq_cli\.train \| done training", proc.stdout,
                     re.M), proc.stdout[-2000:]
    proc = run(["-m", "ran_lab.run_fairseq", "generate", data, "--user-dir",
                REPO / "ran_fairseq", "--path", save / "checkpoint_last.pt", "--cpu", "--beam",
                "2", "--max-len-b", "5", "--batch-size", "8", "--num-workers", "0"])
    assert_quiet(proc.stdout + proc.stderr)
    assert "Translated 24 sentences" in proc.stdout + proc.stderr
    proc = run(["-m", "fairseq_cli.train", *train[:-1], tiny_bin / "ck-plain"])
    assert "| INFO | fairseq_cli.train |" in proc.stdout


FILTERS = """
import logging, sys, warnings
import ran_lab.quiet as quiet
quiet.install()  # in front of -W always
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s: %(message)s")
log = logging.getLogger("fairseq.tasks.text_to_speech")
log.info("Please install tensorboardX: pip install tensorboardX")
log.info("a line of its own")
with warnings.catch_warnings(record=True) as caught:
    warnings.warn("\\nThe version_base parameter is not specified.", UserWarning)
    warnings.warn("a real warning", UserWarning)
    for name in ("/x/fairseq/models/wav2vec/m.py", "/x/elsewhere/m.py"):
        compile(r"s = '\\d'", name, "exec")
for w in caught:
    print("warning:", w.category.__name__, repr(str(w.message)), w.filename)
"""


def test_filters_match_only_their_messages():
    proc = subprocess.run([sys.executable, "-W", "always", "-c", FILTERS], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "fairseq.tasks.text_to_speech: a line of its own" in lines
    assert not any("tensorboardX" in line for line in lines)
    warned = [line for line in lines if line.startswith("warning:")]
    assert len(warned) == 2 and "'a real warning' <string>" in warned[0], warned
    assert "invalid escape sequence" in warned[1] and warned[1].endswith("/x/elsewhere/m.py")
