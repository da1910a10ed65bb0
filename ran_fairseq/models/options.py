"""One declaration per architecture option: its flag, type, default, choices, help and check.

Each model declares its options once as an :class:`Options` table; the table gives the model's
``add_args`` (the help states the default, from the declaration), its architecture function's
defaults (a named architecture passes its own), and the validation of a built model's namespace
(every error names the flag). The table also carries the options' version: a namespace saved
before the options had a version (a checkpoint of version 1) is upgraded by the model's
``upgrade_args`` before its defaults are filled in, and the version is recorded in the namespace
(``options_version``) and in the model's state dict (``options_version``, see
:func:`upgrade_state_dict`).
"""
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
