"""The options of each architecture come from one declaration (ran_fairseq/models/options.py):
``add_args``, the defaults of the named architectures and the validation. Checkpoints of options
version 1 (tests/data/options_v1, saved before the options carried a version) load with the
outputs the code that saved them computed."""
import argparse
import sys
from pathlib import Path

import pytest
import torch

import ran_fairseq  # noqa: F401  (registers the models)
from fairseq import checkpoint_utils
from fairseq.models import ARCH_CONFIG_REGISTRY, MODEL_REGISTRY

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
    old = argparse.Namespace(arch="ran_transformer_small")
    cls.upgrade_args(old)
    ran_transformer.ran_transformer_small(old)
    assert (old.ran_decoder_initial, old.options_version) == ("full", 2)
    now = argparse.Namespace(arch="ran_transformer_small")
    ran_transformer.ran_transformer_small(now)
    cls.upgrade_args(now)
    assert now.ran_decoder_initial == "lower-triangle"
    dot = argparse.Namespace(arch="ran_transformer_small", decoder_self_attention="dot")
    cls.upgrade_args(dot)
    assert not hasattr(dot, "ran_decoder_initial")


@pytest.mark.parametrize("model", sorted(MODULES))
def test_add_args_defaults_and_help_come_from_the_declaration(model):
    options = MODULES[model].OPTIONS
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    MODEL_REGISTRY[model].add_args(parser)
    actions = {a.dest: a for a in parser._actions}
    for option in options.options:
        action = actions[option.dest]
        assert action.option_strings[0] == option.flag
        assert (tuple(action.choices) if action.choices else None) == \
            (tuple(option.choices) if option.choices else None)
        shown = option.shown_default()
        if shown is not None:
            assert action.help.endswith(f"; default {shown}"), (option.flag, action.help)
            assert action.help.count("default") == 1, (option.flag, action.help)
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[model](args)
    for option in options.options:
        if option.default is not None:
            assert getattr(args, option.dest) == option.default, option.dest


def test_named_architectures_keep_their_defaults():
    small = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["rnnsearch_dynmem_small"](small)
    assert (small.encoder_embed_dim, small.dynamic_memory_dim, small.attention_dim) == (256, 128, 256)
    small = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["pervasive_attention_small"](small)
    assert (small.num_layers, small.growth_rate, small.kernel_size, small.decoder_embed_dim,
            small.aggregator) == (8, 16, 3, 64, "max")
    small = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["ran_transformer_small"](small)
    assert (small.encoder_layers, small.encoder_embed_dim, small.max_attention_positions) == \
        (3, 256, 256)
    given = argparse.Namespace(num_layers=4)
    ARCH_CONFIG_REGISTRY["pervasive_attention_small"](given)
    assert given.num_layers == 4


@pytest.mark.parametrize("model", sorted(MODULES))
def test_each_value_error_names_its_flag(model):
    options = MODULES[model].OPTIONS
    for option in options.options:
        if option.choices is None and option.check is None:
            continue
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[model](args)
        bad = "bad" if option.choices is not None else float("nan") if option.type is float else -1
        setattr(args, option.dest, bad)
        with pytest.raises(ValueError, match=f"^{option.flag} "):
            options.validate(args)


DOCS = Path(__file__).resolve().parents[2] / "docs"
HEADER = "| flag | default | choices | meaning |"


def doc_options(name):
    """``{flag: (default, choices)}`` of the options table of docs/<name>.md."""
    lines = (DOCS / f"{name}.md").read_text().splitlines()
    assert lines.count(HEADER) == 1, f"docs/{name}.md needs one options table ({HEADER})"
    rows = {}
    for line in lines[lines.index(HEADER) + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.replace("\\|", "\0").strip("|").split("|")]
        flag, default, choices = (c.replace("\0", "|") for c in cells[:3])
        assert flag not in rows, f"docs/{name}.md lists {flag} twice"
        rows[flag.strip("`")] = (
            None if default == "off" else default.strip("`"),
            tuple(c.strip().strip("`") for c in choices.split(",")) if choices else None)
    return rows


@pytest.mark.parametrize("model", sorted(MODULES))
def test_the_docs_option_table_matches_the_declaration(model):
    declared = {o.flag: (o.shown_default(), tuple(map(str, o.choices)) if o.choices else None)
                for o in MODULES[model].OPTIONS.options}
    assert doc_options(model) == declared
