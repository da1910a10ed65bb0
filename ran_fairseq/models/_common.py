"""What the four models share: :class:`PluginModel` (reading a config of any form, the options
version, the hub), :class:`TransformerFlags` (fairseq's transformer options as flat fields, the
keys ``fairseq-train`` and ``model.<key>`` have always used) and the resume check's list of
architecture flags."""
import argparse
import dataclasses
import difflib
import enum
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass, interpret_dc_type
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, BaseFairseqModel
from fairseq.models.transformer import TransformerConfig
from fairseq.utils import get_available_activation_fns

VERSION = "options_version"


def flag_of(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def require(args, dest: str, ok, problem: str):
    """Raise a ValueError naming the flag of ``args.<dest>`` unless ``ok(value)``."""
    value = getattr(args, dest)
    if value is not None and not ok(value):
        raise ValueError(f"{flag_of(dest)} {problem}, got {value!r}")


def positive(args, *dests):
    for dest in dests:
        require(args, dest, lambda v: v >= 1, "must be positive")


def probability(args, *dests):
    for dest in dests:
        require(args, dest, lambda v: 0 <= v < 1, "must be in [0, 1)")


def fill(args, **values):
    """Set each option ``args`` lacks or holds as None (the architecture's value) to ``values``'."""
    for dest, value in values.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)


def current_options(args):
    """Record in a namespace that a named architecture fills (a new one: a checkpoint's is
    upgraded first) that its options are of the current version."""
    fill(args, **{VERSION: PluginModel.OPTIONS_VERSION})


@dataclass
class PluginConfig(FairseqDataclass):
    options_version: Optional[int] = field(default=None, metadata={
        "help": "the version of the options a checkpoint was saved with (set by the model)"})


# ---- fairseq's transformer options, flat ---------------------------------------------------------

def _fairseq(path: str, default=dataclasses.MISSING):
    """A field with the help and default of ``TransformerConfig``'s ``path`` (``encoder.layers``);
    ``default`` replaces fairseq's (None: the named architecture's value)."""
    config = TransformerConfig
    *groups, name = path.split(".")
    for group in groups:
        config = config.__dataclass_fields__[group].type
    source = config.__dataclass_fields__[name]
    if default is dataclasses.MISSING:
        default = source.default if source.default_factory is dataclasses.MISSING \
            else source.default_factory()
    return field(default=default, metadata=dict(source.metadata))


@dataclass
class TransformerFlags(PluginConfig):
    """fairseq's transformer options under the flat names of ``TransformerModel.add_args``. The
    sizes that the named architectures set (``*_small``, ``*_iwslt_de_en``) and the sizes fairseq
    derives from others default to None, the architecture's value."""

    activation_fn: Optional[ChoiceEnum(get_available_activation_fns())] = _fairseq("activation_fn")
    dropout: Optional[float] = _fairseq("dropout")
    attention_dropout: Optional[float] = _fairseq("attention_dropout")
    activation_dropout: Optional[float] = _fairseq("activation_dropout")
    relu_dropout: Optional[float] = _fairseq("relu_dropout")
    adaptive_input: Optional[bool] = _fairseq("adaptive_input")
    encoder_embed_path: Optional[str] = _fairseq("encoder.embed_path")
    encoder_embed_dim: Optional[int] = _fairseq("encoder.embed_dim", None)
    encoder_ffn_embed_dim: Optional[int] = _fairseq("encoder.ffn_embed_dim", None)
    encoder_layers: Optional[int] = _fairseq("encoder.layers", None)
    encoder_attention_heads: Optional[int] = _fairseq("encoder.attention_heads", None)
    encoder_normalize_before: Optional[bool] = _fairseq("encoder.normalize_before")
    encoder_learned_pos: Optional[bool] = _fairseq("encoder.learned_pos")
    encoder_layerdrop: Optional[float] = _fairseq("encoder.layerdrop")
    encoder_layers_to_keep: Optional[List[int]] = _fairseq("encoder.layers_to_keep")
    encoder_xformers_att_config: Optional[str] = _fairseq("encoder.xformers_att_config")
    max_source_positions: Optional[int] = _fairseq("max_source_positions")
    decoder_embed_path: Optional[str] = _fairseq("decoder.embed_path")
    decoder_embed_dim: Optional[int] = _fairseq("decoder.embed_dim", None)
    decoder_ffn_embed_dim: Optional[int] = _fairseq("decoder.ffn_embed_dim", None)
    decoder_layers: Optional[int] = _fairseq("decoder.layers", None)
    decoder_attention_heads: Optional[int] = _fairseq("decoder.attention_heads", None)
    decoder_normalize_before: Optional[bool] = _fairseq("decoder.normalize_before")
    decoder_learned_pos: Optional[bool] = _fairseq("decoder.learned_pos")
    decoder_layerdrop: Optional[float] = _fairseq("decoder.layerdrop")
    decoder_layers_to_keep: Optional[List[int]] = _fairseq("decoder.layers_to_keep")
    decoder_xformers_att_config: Optional[str] = _fairseq("decoder.xformers_att_config")
    decoder_input_dim: Optional[int] = _fairseq("decoder.input_dim", None)
    decoder_output_dim: Optional[int] = _fairseq("decoder.output_dim", None)
    max_target_positions: Optional[int] = _fairseq("max_target_positions")
    share_decoder_input_output_embed: Optional[bool] = _fairseq("share_decoder_input_output_embed")
    share_all_embeddings: Optional[bool] = _fairseq("share_all_embeddings")
    merge_src_tgt_embed: Optional[bool] = _fairseq("merge_src_tgt_embed")
    no_token_positional_embeddings: Optional[bool] = _fairseq("no_token_positional_embeddings")
    adaptive_softmax_cutoff: Optional[List[int]] = _fairseq("adaptive_softmax_cutoff")
    adaptive_softmax_dropout: Optional[float] = _fairseq("adaptive_softmax_dropout")
    adaptive_softmax_factor: Optional[float] = _fairseq("adaptive_softmax_factor")
    layernorm_embedding: Optional[bool] = _fairseq("layernorm_embedding")
    tie_adaptive_weights: Optional[bool] = _fairseq("tie_adaptive_weights")
    tie_adaptive_proj: Optional[bool] = _fairseq("tie_adaptive_proj")
    no_scale_embedding: Optional[bool] = _fairseq("no_scale_embedding")
    checkpoint_activations: Optional[bool] = _fairseq("checkpoint_activations")
    offload_activations: Optional[bool] = _fairseq("offload_activations")
    no_cross_attention: Optional[bool] = _fairseq("no_cross_attention")
    cross_self_attention: Optional[bool] = _fairseq("cross_self_attention")
    quant_noise_pq: Optional[float] = _fairseq("quant_noise.pq")
    quant_noise_pq_block_size: Optional[int] = _fairseq("quant_noise.pq_block_size")
    quant_noise_scalar: Optional[float] = _fairseq("quant_noise.scalar")
    min_params_to_wrap: Optional[int] = _fairseq("min_params_to_wrap")
    char_inputs: Optional[bool] = _fairseq("char_inputs")
    base_layers: Optional[int] = _fairseq("base_layers")
    base_sublayers: Optional[int] = _fairseq("base_sublayers")
    base_shuffle: Optional[int] = _fairseq("base_shuffle")
    export: Optional[bool] = _fairseq("export")
    no_decoder_final_norm: Optional[bool] = _fairseq("no_decoder_final_norm")


def check_transformer_flags(args):
    """fairseq's transformer sizes and probabilities, checked before building (fairseq itself
    fails only at the first forward pass, with torch's message)."""
    probability(args, "dropout", "attention_dropout", "activation_dropout", "relu_dropout",
                "encoder_layerdrop", "decoder_layerdrop", "adaptive_softmax_dropout",
                "quant_noise_pq")
    positive(args, "encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
             "decoder_ffn_embed_dim", "encoder_attention_heads", "decoder_attention_heads",
             "decoder_output_dim", "decoder_input_dim", "max_source_positions",
             "max_target_positions")
    for dest in ("encoder_layers", "decoder_layers"):
        require(args, dest, lambda v: v >= 0, "must be >= 0")
    for side in ("encoder", "decoder"):
        dim, heads = getattr(args, f"{side}_embed_dim"), getattr(args, f"{side}_attention_heads")
        if dim % heads:
            raise ValueError(f"--{side}-embed-dim ({dim}) must be divisible by "
                             f"--{side}-attention-heads ({heads})")


def small_transformer(args):
    """A transformer for CPU work (``*_small``): 3+3 layers, d = 256, FFN 1024, 4 heads."""
    for side in ("encoder", "decoder"):
        fill(args, **{f"{side}_embed_dim": 256, f"{side}_ffn_embed_dim": 1024,
                      f"{side}_attention_heads": 4, f"{side}_layers": 3})


# ---- a config of any form → the namespace a model builds from -----------------------------------

class UnknownOption(ValueError):
    """A model config holds a key that is not an option of the model."""


def choices_of(f) -> Optional[List[str]]:
    """The choices of a config field (a ``ChoiceEnum``), else None."""
    kind = interpret_dc_type(f.type)
    return [c.value for c in kind] if isinstance(kind, type) and issubclass(kind, enum.Enum) \
        else None


def _plain(value):
    return value.value if isinstance(value, enum.Enum) else value


def _default(f):
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if isinstance(value, str) and value.startswith("${"):
        return None
    return _plain(value)


def unknown_key_error(model_name: str, unknown, known, prefix="model."):
    def named(key):
        close = difflib.get_close_matches(key, sorted(known), n=1)
        return f"{prefix}{key}" + (f" (did you mean {prefix}{close[0]}?)" if close else "")

    return UnknownOption(f"{model_name} has no option {', '.join(map(named, sorted(unknown)))}; "
                         f"its options are the flags of `fairseq-train --arch {model_name} "
                         f"--help`, with '_' for '-'")


class PluginModel:
    """What the plugin's models share. A subclass is registered with ``register_model(name,
    dataclass=Config)`` and names ``base_architecture``, the function that fills the sizes its
    config leaves to the architecture (None); ``check_args`` checks a resolved namespace."""

    base_architecture = staticmethod(lambda args: None)
    OPTIONS_VERSION = 2

    @classmethod
    def config_class(cls):
        return getattr(cls, "__dataclass")

    @classmethod
    def model_name(cls):
        """The name the class is registered under."""
        from fairseq.models import MODEL_REGISTRY

        return next(name for name, registered in MODEL_REGISTRY.items() if registered is cls)

    @classmethod
    def add_args(cls, parser):
        """The flags of the config class, with its defaults; those it leaves to the named
        architecture (None) have none, for the architecture function to fill. A parsed namespace
        records the options version (a checkpoint's of version 1 records none)."""
        gen_parser_from_dataclass(parser, cls.config_class()(), delete_default=True)
        defaults = {f.name: _default(f) for f in dataclasses.fields(cls.config_class())
                    if not f.name.startswith("_")}
        parser.set_defaults(**{dest: value for dest, value in defaults.items()
                               if value is not None}, **{VERSION: cls.OPTIONS_VERSION})

    @classmethod
    def namespace_of(cls, cfg) -> argparse.Namespace:
        """The namespace of a model config in any of fairseq's forms: an ``argparse.Namespace``
        (fairseq-train's, or an options-version-1 checkpoint's: itself, filled in place as
        fairseq fills its own models'), a config class instance, an OmegaConf config or a dict
        (fairseq-hydra-train's, a newer checkpoint's), whose keys must be options. None values
        are left out (the architecture's value)."""
        if isinstance(cfg, argparse.Namespace):
            return cfg
        known = {f.name for f in dataclasses.fields(cls.config_class())}
        if dataclasses.is_dataclass(cfg):
            values = {name: getattr(cfg, name) for name in known}
        else:
            from omegaconf import OmegaConf

            values = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) \
                if OmegaConf.is_config(cfg) else dict(cfg)
            unknown = set(values) - known - {"arch", "_name"}
            if unknown:
                raise unknown_key_error(cls.model_name(), unknown, known - {"_name"})
            if values.get(VERSION) is None:  # no checkpoint of version 1 is a config or dict
                values[VERSION] = cls.OPTIONS_VERSION
        return argparse.Namespace(**{k: _plain(v) for k, v in values.items() if v is not None})

    @classmethod
    def resolve_args(cls, cfg) -> argparse.Namespace:
        """The namespace the model builds from: :meth:`namespace_of`, an older options version
        upgraded (``upgrade_args``), then its named architecture's values (``_name``, else
        ``arch``, else the model's own), then the config class's defaults."""
        args = cls.namespace_of(cfg)
        name = cls.model_name()
        arch = getattr(args, "_name", None) or getattr(args, "arch", None) or name
        if ARCH_MODEL_NAME_REGISTRY.get(arch) != name:
            names = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == name)
            raise ValueError(f"{arch!r} is not an architecture of {name} (--arch, model._name): "
                             f"use one of {', '.join(names)}")
        args._name = args.arch = arch
        cls.upgrade_args(args)
        ARCH_CONFIG_REGISTRY[arch](args)
        cls.base_architecture(args)
        for f in dataclasses.fields(cls.config_class()):
            if not f.name.startswith("_") and getattr(args, f.name, None) is None:
                setattr(args, f.name, _default(f))
            setattr(args, f.name, _plain(getattr(args, f.name)))
        if args.options_version is None:
            args.options_version = cls.OPTIONS_VERSION
        return args

    @classmethod
    def checked_args(cls, cfg) -> argparse.Namespace:
        """:meth:`resolve_args`, its choices and ``check_args`` checked: every error names its
        flag. The None values of an OmegaConf config (fairseq-hydra-train's) are replaced by the
        values resolved, as fairseq's architecture functions fill a config in place, so that a
        checkpoint records them."""
        args = cls.resolve_args(cfg)
        from omegaconf import OmegaConf, open_dict

        if OmegaConf.is_config(cfg):
            with open_dict(cfg):
                for f in dataclasses.fields(cls.config_class()):
                    if not f.name.startswith("_") and cfg.get(f.name) is None:
                        cfg[f.name] = getattr(args, f.name)
        for f in dataclasses.fields(cls.config_class()):
            choices = choices_of(f)
            if choices is not None:
                require(args, f.name, lambda v: v in choices, f"must be one of {', '.join(choices)}")
        cls.check_args(args)
        return args

    @classmethod
    def upgrade_args(cls, args):
        """Read a namespace of an older options version (``saved_version(args)``) as it was
        trained; nothing by default."""

    @classmethod
    def check_args(cls, args):
        """Raise a ValueError naming the flags of a wrong value or combination."""

    def add_version_buffer(self):
        """Record the options version in the state dict, as fairseq's models record theirs."""
        self.register_buffer(VERSION, torch.tensor([self.OPTIONS_VERSION]), persistent=True)

    def upgrade_state_dict_named(self, state_dict, name):
        """A state dict saved before the model recorded its options version (version 1) gets the
        current one; the weights of version 1 need no change."""
        state_dict[f"{name}.{VERSION}" if name else VERSION] = torch.tensor([self.OPTIONS_VERSION])
        super().upgrade_state_dict_named(state_dict, name)

    @classmethod
    def hub_models(cls):
        return {}

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt",
                        data_name_or_path=".", **kwargs):
        """fairseq's hub interface (``BaseFairseqModel.from_pretrained``), with the data-bin's
        recorded tokenization as the default of the tokenizer and BPE options; a keyword that is
        no option is refused with the closest name (:func:`ran_fairseq.hub.from_pretrained`)."""
        from ..hub import from_pretrained

        return from_pretrained(cls, BaseFairseqModel.from_pretrained.__func__, model_name_or_path,
                               checkpoint_file, data_name_or_path, kwargs)


def saved_version(args) -> int:
    """The options version a namespace was saved with: 1 if it records none."""
    return getattr(args, VERSION, None) or 1


# ---- resuming: the architecture flags of a checkpoint against this run's -----------------------

# Options a resumed training may change: regularization (every option whose name holds
# "dropout"), and options that change how, not what, the model computes or how it starts.
RESUME_FREE = {"memory_efficient_densenet": "recomputes the dense blocks' features",
               "recompute_grid": "recomputes the decoder grid in the backward pass",
               "init_range": "initialization only",
               "max_source_positions": "the task's length limits",
               "max_target_positions": "the task's length limits"}


def architecture_flags(cls):
    """``{dest: (flag, default)}`` of the plugin's own architecture options of ``cls`` (not
    fairseq's transformer options, :data:`RESUME_FREE` or dropouts)."""
    config = cls.config_class()
    inherited = {f.name for f in dataclasses.fields(TransformerFlags)} \
        if issubclass(config, TransformerFlags) else {VERSION}
    return {f.name: (flag_of(f.name), _default(f)) for f in dataclasses.fields(config)
            if f.name not in inherited and not f.name.startswith("_")
            and f.name not in RESUME_FREE and "dropout" not in f.name}


def _value(args, dest, default):
    value = getattr(args, dest, default) if args is not None else default
    return default if value is None else value


def _as_built(cls, args):
    """A model config (a namespace, a Hydra config or a checkpoint's, of any options version) as
    building the model reads it (``cls.resolve_args``): a checkpoint that does not record an option
    (it predates it) takes the value its ``upgrade_args`` and its architecture give it on loading.
    A config the model cannot read is compared as it is."""
    if args is None:
        return args
    try:
        return cls.resolve_args(argparse.Namespace(**vars(args))
                                if isinstance(args, argparse.Namespace) else args)
    except ValueError:
        return args


def changed_flags(cls, checkpoint_args, args):
    """``[(flag, checkpoint's value, this run's value)]`` of the architecture flags of ``cls``
    (:func:`architecture_flags`) that differ, both read as building the model reads them."""
    changed = []
    checkpoint_args, args = _as_built(cls, checkpoint_args), _as_built(cls, args)
    for dest, (flag, default) in sorted(architecture_flags(cls).items()):
        old, new = _value(checkpoint_args, dest, default), _value(args, dest, default)
        if old != new:
            changed.append((flag, old, new))
    return changed


def check_resumed_flags(model, checkpoint_args, args, checkpoint="the checkpoint"):
    """Raise a ValueError naming the flags that differ when ``model`` (a plugin model, built from
    ``args``) resumes a training whose checkpoint was made with ``checkpoint_args``; nothing for a
    model of another package."""
    cls = type(model)
    if not isinstance(model, PluginModel):
        return
    changed = changed_flags(cls, checkpoint_args, args)
    if changed:
        def shown(value):
            return {True: "set", False: "not set"}.get(value, repr(value)) \
                if isinstance(value, bool) else repr(value)

        flags = "; ".join(f"{flag} (checkpoint: {shown(old)}, this run: {shown(new)})"
                          for flag, old, new in changed)
        raise ValueError(
            f"resuming from {checkpoint}, trained with other architecture flags than this run's: "
            f"{flags}. Training on would mix the two (the checkpoint would record flags its first "
            f"updates did not use): pass the checkpoint's flags, train into another --save-dir, "
            f"or pass --reset-optimizer to start a new training from its weights.")
