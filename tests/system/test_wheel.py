"""The package as a user installs it: a wheel built from the sources (not an editable install),
installed with ``--no-deps`` into a fresh virtual environment that sees this environment's packages
(fairseq and torch are not rebuilt), and run from a folder outside the checkout. The plugin's
commands work there (data preparation, training from flags and from its Hydra YAMLs, decoding, the
hub, scoring); every console script prints its --help; the lab's commands, which read configs/
and write results/ of a checkout, refuse anything else in one line that says so."""
import gzip
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

import helpers
from systems import TINY_RAN

LAB_COMMANDS = ("ran-reproduce", "ran-bench", "ran-claims", "ran-remake")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, venv bin folder, a folder outside the checkout, environment)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"  # a copy of what the wheel is built from: the build leaves the checkout be
    src.mkdir()
    for name in ("setup.py", "README.md"):
        shutil.copy(helpers.REPO / name, src / name)
    for package in ("ran_fairseq", "ran_text", "ran_lab"):
        shutil.copytree(helpers.REPO / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = dict(helpers.fairseq_env(), PIP_CONFIG_FILE=os.devnull, PIP_CONSTRAINT="",
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    wheels = root / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-w", str(wheels), str(src)],
                           env=env, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel, = wheels.glob("ran_fairseq-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, env=env, timeout=300)
    python = venv / "bin" / "python"
    # When this environment is itself a virtual environment, --system-site-packages reaches the
    # interpreter's base, not it: a .pth file adds its site-packages (fairseq, torch) after the
    # new environment's own, where the wheel goes.
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True).stdout
    ours = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}
            if Path(p).is_dir()]
    Path(purelib.strip(), "test_environment.pth").write_text("\n".join(ours) + "\n")
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", str(wheel)],
                             env=env, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return python, venv / "bin", elsewhere, env


def run(installed, *argv, timeout=600):
    _, _, cwd, env = installed
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    python, _, _, _ = installed
    proc = run(installed, python, "-m", "ran_fairseq")
    assert proc.returncode == 0, proc.stderr
    user_dir = Path(proc.stdout.strip())
    assert user_dir.name == "ran_fairseq" and "site-packages" in user_dir.parts
    assert not user_dir.is_relative_to(helpers.REPO)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    raw = tmp_path_factory.mktemp("wheel-corpus")
    helpers.make_synthetic_corpus(raw, n_train=120, n_valid=12, n_test=12)
    return raw


@pytest.fixture(scope="module")
def prepared(installed, corpus):
    """``ran-prepare custom`` from the wheel, in the folder outside the checkout: the data-bin."""
    _, bin_dir, cwd, _ = installed
    proc = run(installed, bin_dir / "ran-prepare", "custom", "--src", "de", "--tgt", "en",
               "--out", "data-bin/toy.de-en", "--bpe-merges", "40", "--workers", "1",
               "--train-prefix", corpus / "train", "--valid-prefix", corpus / "valid",
               "--test-prefix", corpus / "test")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = cwd / "data-bin" / "toy.de-en"
    assert (data / "dict.de.txt").is_file() and (data / "test.raw.en").is_file()
    return data


def test_prepare_train_generate_hub_and_evaluate_from_the_wheel(installed, prepared):
    python, bin_dir, cwd, _ = installed
    data = prepared
    user_dir = run(installed, python, "-m", "ran_fairseq").stdout.strip()
    args = helpers.train_args(data, cwd / "ckpt", "ran_transformer", TINY_RAN, max_update=2)
    args[args.index("--user-dir") + 1] = user_dir
    proc = run(installed, python, "-m", "fairseq_cli.train", *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    checkpoint = cwd / "ckpt" / "checkpoint_last.pt"
    assert checkpoint.is_file()

    proc = run(installed, python, "-m", "fairseq_cli.generate", data, "--user-dir", user_dir,
               "--path", checkpoint, "--task", "translation", "--source-lang", "de",
               "--target-lang", "en", "--gen-subset", "test", "--cpu", "--beam", "2",
               "--batch-size", "8", "--max-len-b", "10", "--num-workers", "0",
               # every sentence: fairseq 0.12 drops a last batch of fewer than 8 (pitfalls.md)
               "--required-batch-size-multiple", "1",
               "--bpe", "subword_nmt", "--bpe-codes", data / "code", "--tokenizer", "moses")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (cwd / "gen.txt").write_text(proc.stdout)
    assert proc.stdout.count("\nD-") == 12 or proc.stdout.startswith("D-")

    proc = run(installed, bin_dir / "ran-evaluate", "--generate-output", "gen.txt",
               "--ref", data / "test.raw.en")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("BLEU")

    hub = ("import ran_fairseq, sys\n"
           "from ran_fairseq.models.ran_transformer import RanTransformerModel\n"
           "assert ran_fairseq.__file__.startswith(sys.prefix), ran_fairseq.__file__\n"
           "assert not [m for m in sys.modules if m.startswith('ran_lab')], 'the lab loaded'\n"
           "hub = RanTransformerModel.from_pretrained(sys.argv[1], 'checkpoint_last.pt', "
           "data_name_or_path=sys.argv[2])\n"
           "print(repr(hub.translate(sys.argv[3], beam=2, max_len_b=10)))\n")
    source = (data / "test.raw.de").read_text().splitlines()[0]
    proc = run(installed, python, "-c", hub, cwd / "ckpt", data, source)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().startswith("'")


def test_prepare_multi30k_from_the_wheel(installed, corpus, tmp_path):
    _, bin_dir, cwd, env = installed
    raw = tmp_path / "multi30k"
    raw.mkdir()
    for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("de", "en"):
            with gzip.open(raw / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write((corpus / f"{split}.{lang}").read_text())
    proc = run(installed, bin_dir / "ran-prepare", "multi30k", "--src", "de", "--tgt", "en",
               "--raw-dir", raw, "--bpe-merges", "40", "--workers", "1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # installed, the default data-bin is under the current folder, as fairseq's examples have it
    assert (cwd / "data-bin" / "multi30k.de-en" / "dict.en.txt").is_file()


def test_hydra_train_from_the_wheel_with_the_documented_overrides(installed, prepared):
    """docs/hydra.md's command from a folder outside the checkout: the YAMLs are in the wheel,
    ``python -m ran_fairseq.config`` names their folder, and the task's length limits are
    overrides of every YAML (here pervasive_attention's, whose model takes them too)."""
    python, _, cwd, _ = installed
    config_dir = Path(run(installed, python, "-m", "ran_fairseq.config").stdout.strip())
    assert "site-packages" in config_dir.parts and not config_dir.is_relative_to(helpers.REPO)
    assert (config_dir / "pervasive_attention.yaml").is_file()
    user_dir = run(installed, python, "-m", "ran_fairseq").stdout.strip()
    proc = run(installed, python, "-m", "fairseq_cli.hydra_train", "--config-dir", config_dir,
               "--config-name", "pervasive_attention", f"task.data={prepared}",
               f"common.user_dir={user_dir}", "checkpoint.save_dir=hydra-ckpt",
               "task.max_source_positions=64", "task.max_target_positions=64",
               "model.num_layers=2", "model.growth_rate=4", "model.encoder_embed_dim=8",
               "model.decoder_embed_dim=8", "common.cpu=true", "optimization.max_update=1",
               "dataset.max_tokens=400", "dataset.num_workers=0", "dataset.data_buffer_size=0",
               "dataset.disable_validation=true", "checkpoint.no_epoch_checkpoints=true")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cfg = torch.load(cwd / "hydra-ckpt" / "checkpoint_last.pt", map_location="cpu",
                     weights_only=True)["cfg"]
    assert cfg["task"]["max_source_positions"] == cfg["model"]["max_source_positions"] == 64
    assert cfg["model"]["max_target_positions"] == 64


def console_scripts(installed):
    python = installed[0]
    code = ("import importlib.metadata as m\n"
            "print(' '.join(sorted(e.name for e in m.distribution('ran_fairseq').entry_points "
            "if e.group == 'console_scripts')))")
    return run(installed, python, "-c", code).stdout.split()


def test_every_console_script_prints_its_help_outside_a_checkout(installed):
    _, bin_dir, _, _ = installed
    scripts = console_scripts(installed)
    assert set(LAB_COMMANDS) | {"ran-prepare", "ran-evaluate", "ran-analyze"} <= set(scripts)
    for command in scripts:
        proc = run(installed, bin_dir / command, "--help")
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        assert proc.stdout.startswith("usage:"), (command, proc.stdout[:500])


# What each lab command is given here: options its parser takes, so that the checkout is what
# is missing
LAB_ARGV = {"ran-reproduce": ["ran"], "ran-bench": ["--data", "d", "--systems", "s", "--out", "o"],
            "ran-claims": ["--all"], "ran-remake": ["--list"]}


@pytest.mark.parametrize("command", LAB_COMMANDS)
def test_lab_commands_refuse_outside_a_checkout_in_one_line(installed, command):
    _, bin_dir, _, _ = installed
    proc = run(installed, bin_dir / command, *LAB_ARGV[command])
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{command}: error: {command} runs from a checkout of the project")
    assert "clone the project's repository" in lines[0]
