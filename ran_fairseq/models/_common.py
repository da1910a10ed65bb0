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


SMALL_SIZES = (("embed_dim", 256), ("ffn_embed_dim", 1024), ("attention_heads", 4), ("layers", 3))
# the transformer options that the named architectures (*_small here, *_iwslt_de_en: fairseq's
# transformer_iwslt_de_en) set to other values than the base architecture
SIZES_SET_BY_ARCHITECTURES = tuple(f"{side}_{name}" for side in ("encoder", "decoder")
                                   for name, _ in SMALL_SIZES)


def small_transformer_sizes(args):
    """Defaults of a transformer for CPU work: 3+3 layers, d = 256, FFN 1024, 4 heads."""
    for side in ("encoder", "decoder"):
        for name, value in SMALL_SIZES:
            setattr(args, f"{side}_{name}", getattr(args, f"{side}_{name}", value))


# ---- resuming: the architecture flags of a checkpoint against this run's -----------------------

# Options a resumed training may change: regularization (every option whose name holds
# "dropout"), and options that change how, not what, the model computes or how it starts.
RESUME_FREE = {"memory_efficient_densenet": "recomputes the dense blocks' features",
               "recompute_grid": "recomputes the decoder grid in the backward pass",
               "init_range": "initialization only"}


def _options(cls):
    """``{dest: (flag, default)}`` of the options ``cls.add_args`` declares."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    cls.add_args(parser)
    return {a.dest: (a.option_strings[0] if a.option_strings else a.dest, a.default)
            for a in parser._actions}


def architecture_flags(cls):
    """``{dest: (flag, default)}`` of the architecture options a plugin model class adds to the
    fairseq class it extends (fairseq's own, e.g. the transformer's, are fairseq's business),
    without :data:`RESUME_FREE` and dropout options."""
    base = next((c for c in cls.__mro__[1:] if hasattr(c, "add_args")
                 and not c.__module__.startswith("ran_fairseq.")), None)
    inherited = _options(base) if base is not None else {}
    return {dest: option for dest, option in _options(cls).items()
            if dest not in inherited and dest not in RESUME_FREE and "dropout" not in dest}


def _value(args, dest, default):
    value = getattr(args, dest, default) if args is not None else default
    return default if value is None else value


def _as_built(cls, args):
    """A model config (a namespace, a Hydra config or a checkpoint's, of any options version) as
    building the model reads it (``cls.resolve_args``): a checkpoint that does not record an option
    (it predates it) takes the value its ``upgrade_args`` and its architecture give it on loading,
    as for fairseq-generate (a RAN decoder saved before --ran-decoder-initial keeps ``full``, say).
    A config the model cannot read is compared as it is."""
    if args is None or not hasattr(cls, "resolve_args"):
        return args
    try:
        return cls.resolve_args(args)
    except ValueError:
        return args


def changed_flags(cls, checkpoint_args, args):
    """``[(flag, checkpoint's value, this run's value)]`` of the architecture flags of ``cls``
    (:func:`architecture_flags`) that differ, both sides read as building the model reads them
    (:func:`_as_built`)."""
    changed = []
    flags = architecture_flags(cls)
    checkpoint_args, args = _as_built(cls, checkpoint_args), _as_built(cls, args)
    for dest, (flag, default) in sorted(flags.items()):
        old, new = _value(checkpoint_args, dest, default), _value(args, dest, default)
        if old != new:
            changed.append((flag, old, new))
    return changed


def check_resumed_flags(model, checkpoint_args, args, checkpoint="the checkpoint"):
    """Raise a ValueError naming the flags that differ when ``model`` (a plugin model, built from
    ``args``) resumes a training whose checkpoint was made with ``checkpoint_args``; nothing for a
    model of another package."""
    cls = type(model)
    if not cls.__module__.startswith("ran_fairseq.models.") or not hasattr(cls, "add_args"):
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
