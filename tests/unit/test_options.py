"""The options of each architecture come from its config dataclass: the flags, the defaults of the
named architectures, the validation and the docs' option tables. Checkpoints of options version 1
(tests/data/options_v1, saved before the options carried a version) and of version 2
(tests/data/options_v2, saved as dicts) load with the outputs the code that saved them
computed."""
import argparse
import dataclasses
import re
import sys
from pathlib import Path

import pytest
import torch

import ran_fairseq  # noqa: F401  (registers the models)
from fairseq import checkpoint_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, MODEL_REGISTRY

from ran_fairseq.models._common import choices_of
from ran_fairseq.models import (
    pervasive_attention,
    ran_transformer,
    recurrent_cross_transformer,
    rnnsearch_dynmem,
)

V1 = Path(__file__).resolve().parents[1] / "data" / "options_v1"
V2 = V1.parent / "options_v2"
sys.path.insert(0, str(V1))
import make  # noqa: E402  (the checkpoints' names and the fixed batch)
from systems import TINY_DYNMEM, TINY_RAN, TINY_TRANSFORMER  # noqa: E402

sys.path.insert(0, str(V1.parents[2] / "scripts"))
import option_tables  # noqa: E402

MODULES = {"ran_transformer": ran_transformer,
           "recurrent_cross_transformer": recurrent_cross_transformer,
           "rnnsearch_dynmem": rnnsearch_dynmem, "pervasive_attention": pervasive_attention}


def load(path, **overrides):
    return load_with_task(path, **overrides)[0]


def load_with_task(path, **overrides):
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(path)], arg_overrides={"data": str(V1), **overrides})
    return models[0], task


@pytest.mark.parametrize("name", sorted(make.CHECKPOINTS))
def test_a_version_1_checkpoint_loads_with_its_outputs(name):
    saved = torch.load(V1 / f"{name}.pt", map_location="cpu", weights_only=False)
    assert "options_version" not in saved["model"]  # saved before the options had a version
    model = load(V1 / f"{name}.pt")
    torch.testing.assert_close(make.outputs(model), torch.load(V1 / f"{name}.out.pt"))
    assert int(model.state_dict()["options_version"][0]) == 2


@pytest.mark.parametrize("name", sorted(make.CHECKPOINTS))
def test_a_version_2_checkpoint_loads_and_decodes_as_it_did(name):
    """tests/data/options_v2: saved with cfg.model as a dict, by the code of options version 2;
    its outputs and beam search's hypotheses are those the code that saved it computed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("options_v2_make", V2 / "make.py")
    v2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v2)
    saved = torch.load(V2 / f"{name}.pt", map_location="cpu", weights_only=True)
    assert isinstance(saved["cfg"]["model"], dict)
    assert int(saved["model"]["options_version"][0]) == 2
    model, task = load_with_task(V2 / f"{name}.pt")
    torch.testing.assert_close(make.outputs(model), torch.load(V2 / f"{name}.out.pt"))
    expected = torch.load(V2 / f"{name}.hyp.pt")
    got = v2.hypotheses(model, task)
    assert [h.tolist() for h in got] == [h.tolist() for h in expected]


def test_a_current_checkpoint_records_its_version_and_loads_again(tmp_path):
    model = load(V1 / "ran_transformer.pt")
    state = torch.load(V1 / "ran_transformer.pt", map_location="cpu", weights_only=False)
    state["model"] = model.state_dict()
    state["cfg"]["model"].options_version = 2
    torch.save(state, tmp_path / "v2.pt")
    again = load(tmp_path / "v2.pt")
    assert int(again.state_dict()["options_version"][0]) == 2
    torch.testing.assert_close(make.outputs(again), make.outputs(model))


def test_a_version_1_ran_namespace_without_the_decoder_initial_option_keeps_whole_rows():
    """Before --ran-decoder-initial existed a RAN decoder transitioned whole rows: a version-1
    namespace without the option builds ``full``; the command line's (version 2) the default."""
    cls = MODEL_REGISTRY["ran_transformer"]
    old = cls.resolve_args(argparse.Namespace(arch="ran_transformer_small"))
    assert (old.ran_decoder_initial, old.options_version) == ("full", 2)
    now = cls.resolve_args(argparse.Namespace(arch="ran_transformer_small", options_version=2))
    assert now.ran_decoder_initial == "lower-triangle"
    dot = argparse.Namespace(arch="ran_transformer_small", decoder_self_attention="dot")
    cls.upgrade_args(dot)
    assert not hasattr(dot, "ran_decoder_initial")


@pytest.mark.parametrize("model", sorted(MODULES))
def test_the_flags_and_defaults_come_from_the_config_dataclass(model):
    cls = MODEL_REGISTRY[model]
    config = cls.config_class()
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    cls.add_args(parser)
    parsed = parser.parse_args([])
    # the dataclass's defaults; those it leaves to the architecture (None) are left out
    defaults = {f.name: f.default for f in dataclasses.fields(config)
                if not f.name.startswith("_") and f.default is not None}
    assert {k: getattr(parsed, k) for k in defaults} == defaults
    assert parsed.options_version == 2
    assert not any(getattr(parsed, f.name, None) is None for f in dataclasses.fields(config)
                   if hasattr(parsed, f.name))
    fields = option_tables.own_fields(model)
    assert fields and all(f.metadata.get("help") for f in fields)
    args = cls.resolve_args(parsed)
    for f in fields:
        if f.default is not None:
            assert getattr(args, f.name) == f.default, f.name
    assert cls.resolve_args(argparse.Namespace(arch=model)).options_version == 2
    assert issubclass(config, FairseqDataclass) and config.__module__ == MODULES[model].__name__


def test_named_architectures_keep_their_defaults():
    def resolved(arch, **given):
        model = ARCH_MODEL_NAME_REGISTRY[arch]
        return MODEL_REGISTRY[model].resolve_args(argparse.Namespace(arch=arch, **given))

    small = resolved("rnnsearch_dynmem_small")
    assert (small.encoder_embed_dim, small.dynamic_memory_dim, small.attention_dim) == (256, 128, 256)
    base = resolved("rnnsearch_dynmem")
    assert (base.encoder_embed_dim, base.dynamic_memory_dim, base.attention_dim) == (1000, 500, 1000)
    small = resolved("pervasive_attention_small")
    assert (small.num_layers, small.growth_rate, small.kernel_size, small.decoder_embed_dim,
            small.aggregator) == (8, 16, 3, 64, "max")
    assert resolved("pervasive_attention").num_layers == 24
    small = resolved("ran_transformer_small")
    assert (small.encoder_layers, small.encoder_embed_dim, small.max_attention_positions) == \
        (3, 256, 256)
    iwslt = resolved("recurrent_cross_transformer_iwslt_de_en")
    assert (iwslt.encoder_ffn_embed_dim, iwslt.encoder_attention_heads) == (1024, 4)
    assert resolved("pervasive_attention_small", num_layers=4).num_layers == 4
    # a named architecture function, as fairseq-train's parser calls it, sets only its sizes
    given = argparse.Namespace(num_layers=4)
    ARCH_CONFIG_REGISTRY["pervasive_attention_small"](given)
    assert (given.num_layers, given.growth_rate) == (4, 16)


# one wrong value per checked option, as ``{model: {dest: value}}``
BAD = {
    "ran_transformer": {"encoder_self_attention": "bad", "decoder_self_attention": "bad",
                        "max_attention_positions": 0, "positional_attention_dropout": 1.0,
                        "ran_decoder_initial": "bad", "ran_transition": "bad", "ran_ffn_dim": 0,
                        "ran_initial_init": "bad", "gaussian_attention_std": 0.0,
                        "dropout": -0.1, "encoder_embed_dim": 0},
    "recurrent_cross_transformer": {"cross_attention": "bad", "kv_variant": 5,
                                    "rescale_lambda": float("nan"), "rescale_window": -1,
                                    "attention_dropout": 1.5},
    "rnnsearch_dynmem": {"dropout": 1.0, "encoder_embed_dim": 0, "encoder_hidden_size": 0,
                         "encoder_layers": 0, "decoder_embed_dim": 0, "decoder_hidden_size": 0,
                         "decoder_layers": 0, "decoder_out_embed_dim": 0, "attention_dim": 0,
                         "dynamic_memory_window": -1, "init_range": 0.0},
    "pervasive_attention": {"aggregator": "bad", "num_layers": 0, "growth_rate": 0,
                            "kernel_size": 4, "gated_convolutions": "bad",
                            "encoder_embed_dim": 0, "decoder_embed_dim": 0,
                            "positional_embeddings": "bad", "dropout": 1.0,
                            "embedding_dropout": -0.5, "output_dropout": 2.0,
                            "max_source_positions": 0, "max_target_positions": 0},
}


@pytest.mark.parametrize("model", sorted(MODULES))
def test_each_value_error_names_its_flag(model):
    cls = MODEL_REGISTRY[model]
    cls.checked_args(argparse.Namespace(arch=model))  # the defaults pass
    for dest, bad in BAD[model].items():
        with pytest.raises(ValueError, match=f"^--{dest.replace('_', '-')} "):
            cls.checked_args(argparse.Namespace(arch=model, **{dest: bad}))
    # every option with choices is checked
    for f in option_tables.own_fields(model):
        if choices_of(f) is not None:
            assert f.name in BAD[model], f.name


@pytest.mark.parametrize("model", sorted(MODULES))
def test_the_docs_option_table_is_written_from_the_dataclass(model):
    written, _, _ = option_tables.written(model)
    assert written == option_tables.table(model), \
        f"docs/{model}.md: run python scripts/option_tables.py"
    flags = [row[0].strip("`") for row in option_tables.rows(model)]
    assert len(flags) == len(set(flags)) and "--options-version" not in flags


# ---- every probability and size flag is checked when the model is built ---------------------

TINY_PA = ("--num-layers", "3", "--growth-rate", "4", "--kernel-size", "3",
           "--encoder-embed-dim", "8", "--decoder-embed-dim", "8")


TINY_RCT = TINY_TRANSFORMER


BAD_FLAGS = [
    # (arch, base flags, bad flag, bad value)
    *[("ran_transformer", TINY_RAN, flag, value) for flag, value in [
        ("--positional-attention-dropout", "1.5"), ("--positional-attention-dropout", "-0.1"),
        ("--dropout", "1.5"), ("--dropout", "-0.1"), ("--attention-dropout", "1.0"),
        ("--activation-dropout", "-0.5"), ("--encoder-layerdrop", "1.2"),
        ("--max-attention-positions", "0"), ("--gaussian-attention-std", "0"),
        ("--encoder-embed-dim", "15"), ("--decoder-attention-heads", "0"),
        ("--encoder-layers", "-1"), ("--max-source-positions", "0"),
        ("--quant-noise-pq", "1.5")]],
    # RAN option combinations that make no sense: the base flags hold the other half
    ("ran_transformer", (*TINY_RAN, "--ran-no-layernorm-residual"), "--ran-transition", "ffn"),
    ("ran_transformer", (*TINY_RAN, "--encoder-self-attention", "dot",
                         "--decoder-self-attention", "gaussian"), "--ran-transition", "ffn"),
    ("ran_transformer", (*TINY_RAN, "--decoder-self-attention", "dot"),
     "--ran-decoder-initial", "full"),
    *[("recurrent_cross_transformer", TINY_RCT, flag, value) for flag, value in [
        ("--dropout", "1.5"), ("--attention-dropout", "-0.1"), ("--activation-dropout", "2"),
        ("--decoder-ffn-embed-dim", "0"), ("--rescale-window", "-1"),
        ("--max-target-positions", "-5")]],
    *[("rnnsearch_dynmem", TINY_DYNMEM, flag, value) for flag, value in [
        ("--dropout", "1.5"), ("--dropout", "-0.1"), ("--dynamic-memory-window", "-1"),
        ("--dynamic-memory-dim", "0"), ("--init-range", "0"), ("--encoder-hidden-size", "0"),
        ("--decoder-layers", "0")]],
    *[("pervasive_attention", TINY_PA, flag, value) for flag, value in [
        ("--dropout", "1.5"), ("--embedding-dropout", "-0.1"), ("--output-dropout", "1"),
        ("--num-layers", "0"), ("--growth-rate", "-1"), ("--kernel-size", "0"),
        ("--max-source-positions", "0")]],
]


@pytest.mark.parametrize("arch, base, flag, value", BAD_FLAGS,
                         ids=[f"{a}{f}={v}" for a, _, f, v in BAD_FLAGS])
def test_out_of_range_flag_is_refused_at_build_time_naming_it(synthetic_databin, arch, base, flag, value):
    from helpers import build_model

    with pytest.raises(ValueError, match=re.escape(flag)):
        build_model(arch, synthetic_databin, (*base, flag, value))


# ---- the architecture flags a resume compares (ran_fairseq.models._common) -------------------

def test_every_plugin_model_names_its_architecture_flags():
    from fairseq.models import MODEL_REGISTRY
    from ran_fairseq.models._common import architecture_flags, changed_flags

    ours = {n: c for n, c in MODEL_REGISTRY.items() if c.__module__.startswith("ran_fairseq.")}
    assert set(ours) == {"ran_transformer", "recurrent_cross_transformer", "rnnsearch_dynmem",
                         "pervasive_attention"}
    expect = {"ran_transformer": "ran_decoder_initial", "recurrent_cross_transformer":
              "cross_attention", "rnnsearch_dynmem": "dynamic_memory_window",
              "pervasive_attention": "aggregator"}
    for name, cls in ours.items():
        flags = architecture_flags(cls)
        assert expect[name] in flags and not any("dropout" in d for d in flags), name
        dest = expect[name]
        assert changed_flags(cls, argparse.Namespace(**{dest: "a"}),
                             argparse.Namespace(**{dest: "b"})) == [(flags[dest][0], "a", "b")]
        assert changed_flags(cls, argparse.Namespace(), argparse.Namespace()) == []


def test_a_checkpoint_older_than_an_option_is_compared_as_it_loads():
    """A RAN checkpoint saved before --ran-decoder-initial existed loads as 'full' (its arch
    function says so): resuming it needs --ran-decoder-initial full, and the default is refused."""
    from fairseq.models import MODEL_REGISTRY
    from ran_fairseq.models._common import changed_flags
    from ran_fairseq.models.ran_transformer import ran_transformer_small

    cls = MODEL_REGISTRY["ran_transformer"]
    old = argparse.Namespace(arch="ran_transformer_small", _name="ran_transformer_small")
    for flags, changed in (({}, [("--ran-decoder-initial", "full", "lower-triangle")]),
                           ({"ran_decoder_initial": "full"}, [])):
        now = argparse.Namespace(arch="ran_transformer_small", **flags)
        ran_transformer_small(now)
        assert changed_flags(cls, old, now) == changed
