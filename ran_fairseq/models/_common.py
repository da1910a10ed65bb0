"""What the architectures share: flag checks for ``build_model`` and the CPU-sized transformer
dimensions of the ``*_small`` architectures."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_positive(args, names):
    """Raise a ValueError naming the flag if any of ``args.<name>`` is below 1."""
    for name in names:
        if getattr(args, name, None) is not None and getattr(args, name) < 1:
            raise ValueError(f"{_flag(name)} must be positive, got {getattr(args, name)}")


def check_dropout(args, names):
    """Raise a ValueError naming the flag if any of ``args.<name>`` is outside [0, 1)."""
    for name in names:
        if getattr(args, name, None) is not None and not 0 <= getattr(args, name) < 1:
            raise ValueError(f"{_flag(name)} must be in [0, 1), got {getattr(args, name)}")


def check_non_negative(args, names):
    """Raise a ValueError naming the flag if any of ``args.<name>`` is negative."""
    for name in names:
        if getattr(args, name, None) is not None and getattr(args, name) < 0:
            raise ValueError(f"{_flag(name)} must be >= 0, got {getattr(args, name)}")


def check_transformer_flags(args):
    """The probability and size flags of fairseq's transformer, checked before the model is
    built (fairseq itself only fails at the first forward pass, with torch's message)."""
    check_dropout(args, ("dropout", "attention_dropout", "activation_dropout", "relu_dropout",
                         "encoder_layerdrop", "decoder_layerdrop", "adaptive_softmax_dropout",
                         "quant_noise_pq"))
    check_positive(args, ("encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
                          "decoder_ffn_embed_dim", "encoder_attention_heads",
                          "decoder_attention_heads", "decoder_output_dim", "decoder_input_dim",
                          "max_source_positions", "max_target_positions"))
    check_non_negative(args, ("encoder_layers", "decoder_layers"))
    for side in ("encoder", "decoder"):
        dim, heads = getattr(args, f"{side}_embed_dim"), getattr(args, f"{side}_attention_heads")
        if dim % heads:
            raise ValueError(f"--{side}-embed-dim ({dim}) must be divisible by "
                             f"--{side}-attention-heads ({heads})")


def small_transformer_sizes(args):
    """Defaults of a transformer for CPU work: 3+3 layers, d = 256, FFN 1024, 4 heads."""
    for side in ("encoder", "decoder"):
        for name, value in (("embed_dim", 256), ("ffn_embed_dim", 1024),
                            ("attention_heads", 4), ("layers", 3)):
            setattr(args, f"{side}_{name}", getattr(args, f"{side}_{name}", value))
