"""fairseq-hydra-train and fairseq-train read one declaration per model (its config dataclass):
each YAML of
ran_fairseq/config trains to the same parameters and losses as the same settings given as flags, a
misspelled model key is refused by name, the named architectures are reachable by
``model._name``, every option reaches the model through fairseq-train's flags, and a run trained
from YAML (its checkpoint stores ``cfg.model`` as a dict) resumes under the resume check."""
import argparse
import enum
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

import helpers
import ran_fairseq  # noqa: F401  (registers the models)
from fairseq import options as fairseq_options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf, merge_with_parent
from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY

from ran_fairseq.models._common import UnknownOption

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import option_tables  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "ran_fairseq" / "config"
MODELS = ("ran_transformer", "recurrent_cross_transformer", "rnnsearch_dynmem",
          "pervasive_attention")

TINY_SIZES = {"encoder_layers": 2, "decoder_layers": 2, "encoder_embed_dim": 16,
              "decoder_embed_dim": 16, "encoder_ffn_embed_dim": 32, "decoder_ffn_embed_dim": 32,
              "encoder_attention_heads": 2, "decoder_attention_heads": 2}
# tiny sizes of each model, as model keys (the flags are the same with '-' for '_')
TINY = {
    "ran_transformer": {**TINY_SIZES, "max_attention_positions": 32},
    "recurrent_cross_transformer": TINY_SIZES,
    "rnnsearch_dynmem": {"encoder_embed_dim": 16, "encoder_hidden_size": 16,
                         "decoder_embed_dim": 16, "decoder_hidden_size": 16,
                         "decoder_out_embed_dim": 16, "dynamic_memory_dim": 8},
    "pervasive_attention": {"num_layers": 2, "growth_rate": 4, "encoder_embed_dim": 8,
                            "decoder_embed_dim": 8},
}
# What every run shares, as Hydra overrides and as flags: a few updates on the tiny corpus
RUN = {"common.cpu": "true", "common.seed": "1", "common.log_interval": "1",
       "optimization.max_update": "3", "dataset.num_workers": "0", "dataset.data_buffer_size": "0",
       "dataset.disable_validation": "true", "checkpoint.no_epoch_checkpoints": "true"}
RUN_FLAGS = ["--cpu", "--seed", "1", "--log-interval", "1", "--log-format", "simple",
             "--max-update", "3", "--num-workers", "0", "--data-buffer-size", "0",
             "--disable-validation", "--no-epoch-checkpoints"]
# The settings of each YAML (the README's examples) as fairseq-train flags, written out here so
# that a YAML that drifts from them fails the comparison
TRANSFORMER_RECIPE = ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "0.002",
                      "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2",
                      "--criterion", "label_smoothed_cross_entropy_with_entropy",
                      "--label-smoothing", "0.1", "--max-tokens", "400"]
FLAGS = {
    "ran_transformer": ["--arch", "ran_transformer_small", "--share-all-embeddings",
                        *TRANSFORMER_RECIPE],
    "recurrent_cross_transformer": ["--arch", "recurrent_cross_transformer_small",
                                    "--share-all-embeddings", "--cross-attention", "coverage",
                                    *TRANSFORMER_RECIPE],
    "rnnsearch_dynmem": ["--arch", "rnnsearch_dynmem_small", "--dynamic-memory-window", "5",
                         "--optimizer", "sgd", "--lr", "0.7", "--clip-norm", "3",
                         "--batch-size", "128", "--lr-scheduler", "fixed", "--force-anneal", "9",
                         "--lr-shrink", "0.5", "--max-epoch", "12", "--criterion",
                         "cross_entropy", "--max-source-positions", "51",
                         "--max-target-positions", "51", "--skip-invalid-size-inputs-valid-test"],
    "pervasive_attention": ["--arch", "pervasive_attention_small", "--aggregator", "max-attn",
                            "--share-decoder-input-output-embed", *TRANSFORMER_RECIPE],
}
# the YAML's per-run values the tiny runs change (as the flags above do)
HYDRA_RUN = {"ran_transformer": {"lr_scheduler.warmup_updates": "2", "dataset.max_tokens": "400"},
             "rnnsearch_dynmem": {}}
HYDRA_RUN["recurrent_cross_transformer"] = HYDRA_RUN["pervasive_attention"] = \
    HYDRA_RUN["ran_transformer"]


def flag(key):
    return "--" + key.replace("_", "-")


# joined_databin (tests/conftest.py): the tiny corpus with one dictionary (the YAMLs share all
# embeddings)


def model_overrides(model, keys):
    """``model.key=value`` for the YAML's keys, ``+model.key=value`` for the others."""
    listed = yaml.safe_load((CONFIGS / f"{model}.yaml").read_text())["model"]
    return [f"{'' if key in listed else '+'}model.{key}={value}" for key, value in keys.items()]


def hydra_train(model, data, save_dir, *overrides, check=True):
    args = ["--config-dir", CONFIGS, "--config-name", model, f"task.data={data}",
            f"common.user_dir={helpers.USER_DIR}", f"checkpoint.save_dir={save_dir}",
            *(f"{k}={v}" for k, v in {**RUN, **HYDRA_RUN[model]}.items()),
            *model_overrides(model, TINY[model]), *overrides]
    # in the folder above the checkpoints: Hydra writes hydra_train.log where it runs
    return helpers.run_cli("hydra_train", args, check=check, cwd=Path(save_dir).parent)


def flags_train(model, data, save_dir, *extra, check=True):
    tiny = [a for key, value in TINY[model].items() for a in (flag(key), str(value))]
    args = [data, "--user-dir", helpers.USER_DIR, "--task", "translation", "-s", "de", "-t", "en",
            "--save-dir", save_dir, *RUN_FLAGS, *FLAGS[model], *tiny, *extra]
    return helpers.run_cli("train", args, check=check)


def losses(proc):
    """The logged training losses, update by update."""
    lines = (proc.stdout + proc.stderr).splitlines()
    return [line.split(" loss=")[1].split(",")[0] for line in lines if " loss=" in line]


def parameters(save_dir):
    state = torch.load(Path(save_dir) / "checkpoint_last.pt", map_location="cpu",
                       weights_only=True)
    return state["model"]


@pytest.mark.parametrize("model", MODELS)
def test_a_yaml_trains_as_the_same_flags_do(model, joined_databin, tmp_path):
    from_yaml = hydra_train(model, joined_databin, tmp_path / "hydra")
    from_flags = flags_train(model, joined_databin, tmp_path / "flags")
    assert len(losses(from_yaml)) == 3 and losses(from_yaml) == losses(from_flags)
    yaml_params, flag_params = parameters(tmp_path / "hydra"), parameters(tmp_path / "flags")
    assert yaml_params.keys() == flag_params.keys()
    for name in yaml_params:
        assert torch.equal(yaml_params[name], flag_params[name]), name
    # both checkpoints record the model's config as a plain dict, with the same options
    saved = [torch.load(d / "checkpoint_last.pt", weights_only=True)["cfg"]["model"]
             for d in (tmp_path / "hydra", tmp_path / "flags")]
    assert all(isinstance(cfg, dict) for cfg in saved)
    # nothing that torch's plain weights-only load refuses (so fairseq's own
    # scripts/average_checkpoints.py reads them; older checkpoints hold an argparse.Namespace)
    for folder in (tmp_path / "hydra", tmp_path / "flags"):
        assert torch.serialization.get_unsafe_globals_in_checkpoint(
            folder / "checkpoint_last.pt") == [], folder.name
    options = [f.name for f in option_tables.own_fields(model)]
    assert {dest: saved[0][dest] for dest in options} == {dest: saved[1][dest] for dest in options}


def test_a_misspelled_model_key_is_refused_by_name(joined_databin, tmp_path):
    proc = hydra_train("rnnsearch_dynmem", joined_databin, tmp_path / "ck",
                       "+model.dynamic_memry_dim=8", check=False)
    assert proc.returncode != 0 and "dynamic_memry_dim" in proc.stderr
    assert not (tmp_path / "ck" / "checkpoint_last.pt").exists()
    # a config that did not pass through fairseq's merge is refused by the model itself
    cls = MODEL_REGISTRY["recurrent_cross_transformer"]
    with pytest.raises(UnknownOption, match=r"model\.cross_attenton \(did you mean "
                                            r"model\.cross_attention\?\)"):
        cls.resolve_args(OmegaConf.create({"_name": "recurrent_cross_transformer_small",
                                           "cross_attenton": "coverage"}))
    with pytest.raises(ValueError, match="not an architecture of rnnsearch_dynmem"):
        MODEL_REGISTRY["rnnsearch_dynmem"].resolve_args(OmegaConf.create({"_name": "lstm"}))


def named_architectures(model):
    return sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == model)


def from_flags(arch, *flags):
    """The model config fairseq-train makes of ``--arch arch flags``."""
    args = fairseq_options.parse_args_and_arch(
        fairseq_options.get_training_parser(),
        ["unused-data", "--task", "translation", "--arch", arch, *flags])
    return convert_namespace_to_omegaconf(args).model


@pytest.mark.parametrize("model", MODELS)
def test_named_architectures_are_reached_by_model_name(model):
    """``model._name=ARCH`` in a YAML (merged with the config dataclass, as fairseq-hydra-train
    does) builds what ``--arch ARCH`` builds."""
    cls = MODEL_REGISTRY[model]
    archs = named_architectures(model)
    assert model in archs and len(archs) >= 2
    fields = [f for f in cls.config_class().__dataclass_fields__ if not f.startswith("_")]
    for arch in archs:
        yaml_cfg = merge_with_parent(cls.config_class()(), OmegaConf.create({"_name": arch}))
        hydra, flags = cls.checked_args(yaml_cfg), cls.checked_args(from_flags(arch))
        assert {f: getattr(hydra, f, None) for f in fields} == \
            {f: getattr(flags, f, None) for f in fields}, arch
    small = cls.resolve_args(merge_with_parent(cls.config_class()(),
                                               OmegaConf.create({"_name": f"{model}_small"})))
    base = cls.resolve_args(merge_with_parent(cls.config_class()(),
                                              OmegaConf.create({"_name": model})))
    assert small.encoder_embed_dim < base.encoder_embed_dim


def other_value(option, default):
    """A value of ``option`` (a dataclass field) other than ``default``, as a command line gives
    it, and its type."""
    kind = dataclasses_type(option)
    if kind is bool:
        return None, bool
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return next(c.value for c in kind if c.value != default), str
    if kind is int:
        return str((default or 2) + 1), int
    if kind is float:
        return str((default or 0.5) / 2), float
    return "0", str  # --recurrent-cross-layers: the first layer only


def dataclasses_type(option):
    from fairseq.dataclass.utils import interpret_dc_type

    return interpret_dc_type(option.type)


@pytest.mark.parametrize("model", MODELS)
def test_every_option_reaches_the_model_through_the_flags(model):
    """Each option of the declaration (the docs' option tables list the same, tests/
    test_options.py) given on fairseq-train's command line arrives in the namespace the model is
    built from, through fairseq's conversion of the flags to its config."""
    cls = MODEL_REGISTRY[model]
    base = cls.resolve_args(argparse.Namespace(arch=model, options_version=2))
    for option in option_tables.own_fields(model):
        value, kind = other_value(option, getattr(base, option.name))
        flag = "--" + option.name.replace("_", "-")
        cfg = from_flags(f"{model}", flag, *([] if value is None else [value]))
        got = getattr(cls.resolve_args(cfg), option.name)
        expected = True if value is None else kind(value)
        assert got == expected, (flag, got, expected)
    if model in ("ran_transformer", "recurrent_cross_transformer"):  # fairseq's own flags too
        args = cls.resolve_args(from_flags(model, "--share-all-embeddings", "--encoder-layers", "2"))
        assert args.share_all_embeddings and args.encoder_layers == 2


@pytest.mark.parametrize("model", MODELS)
def test_each_yaml_lists_every_option_of_its_model(model):
    cfg = yaml.safe_load((CONFIGS / f"{model}.yaml").read_text())
    cls = MODEL_REGISTRY[model]
    assert ARCH_MODEL_NAME_REGISTRY[cfg["model"]["_name"]] == model
    listed = set(cfg["model"]) - {"_name"}
    assert {f.name for f in option_tables.own_fields(model)} <= listed
    assert listed <= set(cls.config_class().__dataclass_fields__)
    assert cfg["task"]["data"] == "???"  # the user's data-bin, asked for


def test_a_yaml_run_resumes_with_flags_and_the_resume_check_reads_its_config(joined_databin,
                                                                               tmp_path):
    model = "recurrent_cross_transformer"
    hydra_train(model, joined_databin, tmp_path)
    assert (tmp_path.parent / "hydra_train.log").is_file()  # not in the checkout
    proc = flags_train(model, joined_databin, tmp_path, "--max-update", "4")
    assert "num_updates=4" in proc.stdout + proc.stderr
    refused = flags_train(model, joined_databin, tmp_path, "--max-update", "5",
                          "--rescale-lambda", "0.25", check=False)
    assert refused.returncode != 0
    assert "--rescale-lambda (checkpoint: 0.5, this run: 0.25)" in refused.stderr
    assert torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)[
        "optimizer_history"][-1]["num_updates"] == 4


OPTIONS_DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def options_databin(tmp_path_factory):
    """The synthetic corpus binarized with the dictionaries of tests/data/options_v1."""
    tmp = tmp_path_factory.mktemp("options_data")
    v1 = OPTIONS_DATA / "options_v1"
    raw = helpers.make_synthetic_corpus(tmp / "raw", n_train=40, n_valid=4, n_test=4)
    helpers.run_cli("preprocess", ["-s", "de", "-t", "en", "--trainpref", raw / "train",
                                   "--validpref", raw / "valid", "--destdir", tmp / "bin",
                                   "--srcdict", v1 / "dict.de.txt", "--tgtdict",
                                   v1 / "dict.en.txt", "--workers", "1"])
    return tmp / "bin"


def _make_module(version):
    import importlib.util

    path = OPTIONS_DATA / f"options_v{version}" / "make.py"
    spec = importlib.util.spec_from_file_location(f"options_v{version}_make", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", ["ran_transformer", "ran_transformer_ffn",
                                  "recurrent_cross_transformer", "rnnsearch_dynmem",
                                  "pervasive_attention"])
def test_a_checkpoint_of_an_earlier_options_version_resumes(version, name, options_databin,
                                                            tmp_path):
    """tests/data/options_v1 (cfg.model an argparse.Namespace) and options_v2 (cfg.model a dict)
    resume under fairseq-train with the flags they recorded."""
    make = _make_module(version)
    path = OPTIONS_DATA / f"options_v{version}" / f"{name}.pt"
    arch, flags = make.CHECKPOINTS[name]
    saved = torch.load(path, map_location="cpu", weights_only=True)
    assert isinstance(saved["cfg"]["model"], argparse.Namespace if version == 1 else dict)
    updates = saved["optimizer_history"][-1]["num_updates"]
    args = helpers.train_args(options_databin, tmp_path / "ck", arch, flags,
                              max_update=updates + 1)
    proc = helpers.run_cli("train", [*args, "--restore-file", path])
    assert f"num_updates={updates + 1}" in proc.stdout + proc.stderr


# The overrides docs/hydra.md and the YAMLs' headers give, each taken by every YAML as written
# (without Hydra's '+', which only a key the YAML does not list needs)
DOCUMENTED_OVERRIDES = ["task.data=DATA", "common.user_dir=USER_DIR", "checkpoint.save_dir=CKPT",
                        "task.max_source_positions=64", "task.max_target_positions=64"]
# the models whose config has length limits of its own, which follow the task's
OWN_LIMITS = ("ran_transformer", "recurrent_cross_transformer", "pervasive_attention")


def compose(model, overrides):
    """The config fairseq-hydra-train makes of ``--config-dir ran_fairseq/config --config-name
    model`` and ``overrides`` (its schema registered under the config's name, as its cli_main
    does)."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    hydra_init(model)
    with warnings.catch_warnings():  # Hydra's notice that the config matches a schema's name
        warnings.simplefilter("ignore", UserWarning)
        with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
            cfg = hydra_compose(config_name=model, overrides=overrides)
    return OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))


@pytest.mark.parametrize("model", MODELS)
def test_every_yaml_takes_the_documented_overrides(model):
    cfg = compose(model, DOCUMENTED_OVERRIDES)
    assert (cfg.task.max_source_positions, cfg.task.max_target_positions) == (64, 64)
    if model in OWN_LIMITS:  # setting the task's limits sets the model's, as fairseq-train's flags
        assert (cfg.model.max_source_positions, cfg.model.max_target_positions) == (64, 64)
        cfg = compose(model, ["model.max_source_positions=32"])
        assert (cfg.task.max_source_positions, cfg.model.max_source_positions) == (1024, 32)


def test_the_config_folder_is_printed_and_installed_with_the_package():
    proc = subprocess.run([sys.executable, "-m", "ran_fairseq.config"], capture_output=True,
                          text=True, cwd="/", env=helpers.fairseq_env())
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == CONFIGS
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(MODELS)


def test_a_resume_whose_flags_change_the_shapes_stops_naming_them(joined_databin, tmp_path):
    """--decoder-self-attention dot on a RAN-ALL checkpoint: fairseq alone stops with "Cannot
    load model parameters from checkpoint" and the state dict, for either form."""
    model = "ran_transformer"
    flags_train(model, joined_databin, tmp_path)
    named = ("architecture flags than this run's, which give its parameters other shapes: "
             "--decoder-self-attention (checkpoint: 'ran', this run: 'dot')")
    refused = flags_train(model, joined_databin, tmp_path, "--max-update", "4",
                          "--decoder-self-attention", "dot", check=False)
    assert refused.returncode != 0 and named in refused.stderr, refused.stderr[-3000:]
    assert "Cannot load model parameters" not in refused.stderr
    refused = hydra_train(model, joined_databin, tmp_path, "model.decoder_self_attention=dot",
                          check=False)
    assert refused.returncode != 0 and named in refused.stderr, refused.stderr[-3000:]
    assert "Cannot load model parameters" not in refused.stderr
