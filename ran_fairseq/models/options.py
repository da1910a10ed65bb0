"""One declaration per architecture option: its flag, type, default, choices, help and check.

Each model declares its options once as an :class:`Options` table; the table gives the model's
``add_args`` (the help states the default, from the declaration), its architecture function's
defaults (a named architecture passes its own), and the validation of a built model's namespace
(every error names the flag). The table also carries the options' version: a namespace saved
before the options had a version (a checkpoint of version 1) is upgraded by the model's
``upgrade_args`` before its defaults are filled in, and the version is recorded in the namespace
(``options_version``) and in the model's state dict (``options_version``, see
:func:`upgrade_state_dict`).

The table also gives the model's fairseq config dataclass (:func:`config_dataclass`), registered
with ``register_model(name, dataclass=...)``: a flat class whose field names are the flags' dests,
so that ``fairseq-train`` (flags) and ``fairseq-hydra-train`` (YAML, ``model.<dest>``) read the
same declaration, and a key that is not an option is refused by name. Every field defaults to None,
which means "the architecture's value": :func:`resolved` turns any form of a model config (the
flags' namespace, a Hydra/OmegaConf config, a checkpoint's namespace) into one namespace with the
named architecture's defaults filled in, which is what the models build from.
"""
import argparse
import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

VERSION_DEST = "options_version"


def flag_of(dest: str) -> str:
    """``--dest-with-dashes``."""
    return "--" + dest.replace("_", "-")


# ---- checks of one value: the problem as text, or None -----------------------------------------

def positive(value):
    return None if value >= 1 else "must be positive"


def non_negative(value):
    return None if value >= 0 else "must be >= 0"


def probability(value):
    return None if 0 <= value < 1 else "must be in [0, 1)"


def above_zero(value):
    return None if value > 0 else "must be positive"


def finite(value):
    return None if math.isfinite(value) else "must be finite"


@dataclass(frozen=True)
class Option:
    """One option. ``default`` is the base architecture's value (None: no value, the model
    computes one); ``type`` None with a bool default is a switch (``store_true``);
    ``parser_default`` also gives argparse the default (for options that resuming compares with
    checkpoints recorded before the option existed)."""

    dest: str
    default: Any
    help: str
    type: Optional[Callable] = None
    choices: Optional[Tuple] = None
    check: Optional[Callable[[Any], Optional[str]]] = None
    metavar: Optional[str] = None
    nargs: Optional[str] = None
    const: Any = None
    parser_default: bool = False
    default_text: Optional[str] = None  # the default in words, where it is computed

    @property
    def flag(self) -> str:
        return flag_of(self.dest)

    @property
    def value_type(self):
        """The type of the option's values (a config dataclass field's type)."""
        if self.type is None and self.choices is None:
            return bool if self.is_switch else str
        if self.type is not None:
            return self.type
        return type(self.choices[0])

    @property
    def is_switch(self) -> bool:
        return self.type is None and self.choices is None and self.default is False

    def shown_default(self) -> Optional[str]:
        """The default as the help and the docs state it (None for a switch)."""
        if self.default_text is not None:
            return self.default_text
        if self.is_switch:
            return None
        return str(self.default)

    def add_to(self, parser):
        kwargs: Dict[str, Any] = {"help": self.help}
        shown = self.shown_default()
        if shown is not None:
            kwargs["help"] = f"{self.help}; default {shown}"
        if self.is_switch:
            parser.add_argument(self.flag, action="store_true", **kwargs)
            return
        for name in ("type", "metavar", "nargs", "const"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        if self.choices is not None:
            kwargs["choices"] = list(self.choices)
        if self.parser_default:
            kwargs["default"] = self.default
        parser.add_argument(self.flag, **kwargs)

    def problem(self, value) -> Optional[str]:
        """What is wrong with ``value`` (None if nothing; None values are not checked)."""
        if value is None:
            return None
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(map(str, self.choices))}"
        if self.check is not None:
            return self.check(value)
        return None


@dataclass(frozen=True)
class Options:
    """An architecture's options (``options``), the checks across options (``rules``: functions
    of the namespace that raise a ValueError naming the flags), and the version of the options
    (raised when a saved namespace must be read differently)."""

    options: Tuple[Option, ...]
    version: int
    rules: Tuple[Callable, ...] = field(default=())

    def __getitem__(self, dest: str) -> Option:
        for option in self.options:
            if option.dest == dest:
                return option
        raise KeyError(dest)

    def add_args(self, parser):
        for option in self.options:
            option.add_to(parser)

    def config_dataclass(self, name: str, inherited=(), module: Optional[str] = None):
        """A flat ``FairseqDataclass`` named ``name`` with a field per option (after the
        ``inherited`` fields, ``(name, type, dataclasses.field)`` triples, e.g. fairseq's
        transformer flags) and ``options_version``. Every field defaults to None, "the named
        architecture's value" (:func:`resolved` fills it in); the help states the base
        architecture's default."""
        from fairseq.dataclass import FairseqDataclass

        fields = list(inherited)
        for option in self.options:
            help = option.help if option.shown_default() is None \
                else f"{option.help}; default {option.shown_default()}"
            fields.append((option.dest, Optional[option.value_type],
                           field(default=None, metadata={"help": help})))
        fields.append((VERSION_DEST, Optional[int], field(default=None, metadata={
            "help": "the version of the options a checkpoint was saved with (set by the model)"})))
        cls = dataclasses.make_dataclass(name, fields, bases=(FairseqDataclass,))
        if module is not None:
            cls.__module__ = module
        return cls

    def fill(self, args, **defaults):
        """Set every option ``args`` lacks (or holds as None where the default is not None) to
        ``defaults[dest]`` (a named architecture's), else its declared default; record the
        version."""
        for option in self.options:
            value = getattr(args, option.dest, None)
            if value is None:
                setattr(args, option.dest, defaults.get(option.dest, option.default))
        if getattr(args, VERSION_DEST, None) is None:
            setattr(args, VERSION_DEST, self.version)

    def validate(self, args, dests: Optional[Sequence[str]] = None):
        """Raise a ValueError naming the flag of the first option whose value is wrong, then run
        the rules."""
        for option in self.options:
            if dests is not None and option.dest not in dests:
                continue
            value = getattr(args, option.dest, None)
            problem = option.problem(value)
            if problem is not None:
                raise ValueError(f"{option.flag} {problem}, got {value!r}")
        for rule in self.rules:
            rule(args)


def saved_version(args) -> int:
    """The options version a namespace was saved with: 1 if it records none (saved before the
    options had a version)."""
    return getattr(args, VERSION_DEST, None) or 1


def add_version_buffer(model, version: int):
    """Record the options version in the state dict, as fairseq's models record theirs."""
    import torch

    model.register_buffer(VERSION_DEST, torch.tensor([version]), persistent=True)


def upgrade_state_dict(state_dict, name: str, version: int):
    """A state dict saved before its model recorded the options version (version 1) gets the
    current one; the weights of version 1 need no change. Returns the version it was saved
    with."""
    import torch

    key = f"{name}.{VERSION_DEST}" if name else VERSION_DEST
    saved = int(state_dict[key][0]) if key in state_dict else 1
    state_dict[key] = torch.tensor([version])
    return saved


# ---- configs of every form → the namespace a model builds from ---------------------------------

def transformer_fields(set_by_architectures=()):
    """fairseq's transformer options (``TransformerConfig``, whose nested encoder/decoder/quant_noise
    groups become ``encoder_embed_dim``, ...: the dests of ``TransformerModel.add_args``) as flat
    config-dataclass fields. A field keeps fairseq's default (fairseq's trainer reads some of them
    from the config, ``base_layers``), except those of ``set_by_architectures`` (which the model's
    named architectures set differently) and those whose default is another field's value: these
    default to None, the named architecture's value."""
    from fairseq.dataclass import FairseqDataclass
    from fairseq.models.transformer import TransformerConfig

    def flat(config, prefix):
        for f in dataclasses.fields(config):
            if f.name.startswith("_"):
                continue
            name = prefix + f.name
            if isinstance(f.type, type) and issubclass(f.type, FairseqDataclass):
                yield from flat(f.type, f"{name}_")
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
                else f.default
            if name in set_by_architectures or (isinstance(default, str)
                                                and default.startswith("${")):
                default = None
            yield (name, Optional[f.type],
                   field(default_factory=lambda d=default: d, metadata=dict(f.metadata))
                   if isinstance(default, (list, dict)) else
                   field(default=default, metadata=dict(f.metadata)))

    return list(flat(TransformerConfig, ""))


class UnknownOption(ValueError):
    """A model config holds a key that is not an option of the model."""


def namespace_of(cfg, config_class, model_name: str, version: int) -> argparse.Namespace:
    """The namespace of a model config in any of fairseq's forms: an ``argparse.Namespace``
    (``fairseq-train``'s, or a checkpoint's saved before the model had a config dataclass: itself,
    filled in place as fairseq's own models fill theirs), an
    instance of ``config_class`` (fairseq makes one of such a namespace), or an OmegaConf config or
    dict (``fairseq-hydra-train``'s, or a newer checkpoint's). A key of a config or dict that is
    not a field of ``config_class`` is an :class:`UnknownOption` naming it; None values are left out
    (the architecture fills them in); a config or dict, which no checkpoint of options version 1
    is, records ``version`` if it records none."""
    if isinstance(cfg, argparse.Namespace):
        return cfg
    known = {f.name for f in dataclasses.fields(config_class)}
    if dataclasses.is_dataclass(cfg):
        values = {name: getattr(cfg, name) for name in known}
        return argparse.Namespace(**{k: v for k, v in values.items() if v is not None})
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    unknown = sorted(set(values) - known - {"arch"})
    if unknown:
        def named(key):
            close = difflib.get_close_matches(key, sorted(known - {"_name"}), n=1)
            return f"model.{key}" + (f" (did you mean model.{close[0]}?)" if close else "")

        raise UnknownOption(f"{model_name} has no option {', '.join(map(named, unknown))}; its "
                            f"options are the flags of `fairseq-train --arch {model_name} --help`, "
                            f"with '_' for '-'")
    values = {k: v for k, v in values.items() if v is not None}
    values.setdefault(VERSION_DEST, version)
    return argparse.Namespace(**values)


def resolved(model_cls, cfg, model_name: str, options: "Options", config_class):
    """The namespace ``model_cls`` builds from, of a config in any form (:func:`namespace_of`):
    the options of an older version upgraded (``model_cls.upgrade_args``), then the defaults of its
    named architecture (``_name``, else ``arch``, else the model's own) filled in."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    args = namespace_of(cfg, config_class, model_name, options.version)
    arch = getattr(args, "_name", None) or getattr(args, "arch", None) or model_name
    if ARCH_MODEL_NAME_REGISTRY.get(arch) != model_name:
        names = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == model_name)
        raise ValueError(f"{arch!r} is not an architecture of {model_name} (--arch, model._name): "
                         f"use one of {', '.join(names)}")
    args._name = args.arch = arch
    if hasattr(model_cls, "upgrade_args"):
        model_cls.upgrade_args(args)
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


class PluginModel:
    """What the plugin's model classes share: ``plugin_name`` (the model's registered name),
    ``plugin_options`` (its :class:`Options`) and ``plugin_config`` (its config dataclass), set by
    :func:`configured`."""

    plugin_name: str
    plugin_options: "Options"
    plugin_config: type

    @classmethod
    def resolve_args(cls, cfg) -> argparse.Namespace:
        """:func:`resolved` for this model."""
        return resolved(cls, cfg, cls.plugin_name, cls.plugin_options, cls.plugin_config)

    @classmethod
    def checked_args(cls, cfg) -> argparse.Namespace:
        """:meth:`resolve_args`, validated: every error names its flag."""
        args = cls.resolve_args(cfg)
        cls.plugin_options.validate(args)
        return args


def configured(name: str, options: "Options", config_class, base_architecture: Callable):
    """The class decorator of a plugin model: fairseq's ``register_model(name,
    dataclass=config_class)``, the :class:`PluginModel` attributes, and ``base_architecture`` as
    the architecture of the model's own name (:func:`register_base_architecture`)."""
    from fairseq.models import register_model

    def register(cls):
        cls.plugin_name, cls.plugin_options, cls.plugin_config = name, options, config_class
        cls = register_model(name, dataclass=config_class)(cls)
        register_base_architecture(name, base_architecture)
        return cls

    return register


def register_base_architecture(model_name: str, fill: Callable):
    """Make ``fill`` the architecture of the model's own name. ``register_model(name,
    dataclass=...)`` registers that name as an architecture that changes nothing (a config
    dataclass holds its defaults); a plugin model's dataclass fields default to None, so its own
    name fills in the base architecture's values, as ``--arch NAME`` did before the model had a
    dataclass."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY[model_name] = fill
    return fill
