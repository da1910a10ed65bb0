"""What the architectures share: flag checks for ``build_model`` and the CPU-sized transformer
dimensions of the ``*_small`` architectures."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_positive(args, names):
    """Raise a ValueError naming the flag if any of ``args.<name>`` is below 1."""
    for name in names:
        if getattr(args, name) < 1:
            raise ValueError(f"{_flag(name)} must be positive, got {getattr(args, name)}")


def check_dropout(args, names):
    """Raise a ValueError naming the flag if any of ``args.<name>`` is outside [0, 1)."""
    for name in names:
        if not 0 <= getattr(args, name) < 1:
            raise ValueError(f"{_flag(name)} must be in [0, 1), got {getattr(args, name)}")


def small_transformer_sizes(args):
    """Defaults of a transformer for CPU work: 3+3 layers, d = 256, FFN 1024, 4 heads."""
    for side in ("encoder", "decoder"):
        for name, value in (("embed_dim", 256), ("ffn_embed_dim", 1024),
                            ("attention_heads", 4), ("layers", 3)):
            setattr(args, f"{side}_{name}", getattr(args, f"{side}_{name}", value))
