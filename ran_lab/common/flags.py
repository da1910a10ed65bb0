"""fairseq command-line flag lists: checks, look-ups and changes."""
from .errors import LabError

# fairseq's FP16Optimizer keeps its flat fp32 copy of the parameters on the current CUDA device;
# with --fp16-no-flatten-grads it keeps them where the model is, and --memory-efficient-fp16 keeps
# none: both train on a CPU (the conformance suite runs the latter)
GPU_ONLY_FLAG, CPU_FP16_FLAG = "--fp16", "--fp16-no-flatten-grads"


def check_flags(flags, owned, where, verb="the script controls"):
    """Refuse a flag list that is not a list of strings or sets a flag in ``owned`` (flag -> where
    its value comes from)."""
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise LabError(f"{where} must be a list of strings")
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in owned:
            raise LabError(f"{where} sets {name}, which {verb}; remove it (its value comes from "
                        f"{owned[name]})")


def flag_names(flags):
    """The set of option names among command-line ``flags`` (``--a=1`` counts as ``--a``)."""
    return {f.split("=", 1)[0] for f in flags if f.startswith("-")}


def set_flag(flags, flag, value):
    """``flags`` with ``flag``'s value replaced by ``value`` (appended if absent)."""
    flags = list(flags)
    if flag in flags:
        flags[flags.index(flag) + 1] = str(value)
    else:
        flags += [flag, str(value)]
    return flags


def without(flags, drop):
    """``flags`` less every flag in ``drop`` and its values (the items up to the next flag)."""
    out, dropping = [], False
    for item in flags:
        if item.startswith("--"):
            dropping = item in drop
        if not dropping:
            out.append(item)
    return out


def flag_pairs(flags):
    """``{flag: value}`` of a flat flag list (a flag without a value maps to None)."""
    out, i = {}, 0
    while i < len(flags):
        if flags[i].startswith("--") and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out[flags[i]] = flags[i + 1]
            i += 2
        else:
            out[flags[i]] = None
            i += 1
    return out


def config_train_flags(config, path, owned):
    """The training flags of a reproduction config (as read, its ``base`` filled in): its
    ``train_flags`` with ``set_train_flags`` applied, checked against ``owned`` (the flags the
    engine sets: flag -> where its value comes from)."""
    if "train_flags" not in config:
        raise LabError(f"config {path} lacks train_flags")
    check_flags(config["train_flags"], owned, f"config {path}: train_flags")
    # {"--max-epoch": "12"}: values changed in (or added to) train_flags, e.g. over a base config's
    changes = config.get("set_train_flags", {})
    if not (isinstance(changes, dict) and all(isinstance(k, str) and k.startswith("-")
                                              and isinstance(v, str) for k, v in changes.items())):
        raise LabError(f"config {path}: set_train_flags must map flags to string values, e.g. "
                    f"{{\"--max-epoch\": \"12\"}}, not {changes!r}")
    check_flags(list(changes), owned, f"config {path}: set_train_flags")
    train_flags = config["train_flags"]
    for flag, value in changes.items():
        train_flags = set_flag(train_flags, flag, value)
    return train_flags


def check_device_flags(device, train_flags, systems, where, change):
    """A CPU training with --fp16 (flattened, fairseq's default) fails deep in fairseq ('Torch not
    compiled with CUDA enabled'): say so first, naming the flag, where it comes from, and
    ``change`` (what to do instead). ``systems``: dicts with 'name' and 'flags', trained with
    ``train_flags`` before their own."""
    if device != "cpu":
        return
    for system in systems or [{"name": None, "flags": []}]:
        names = flag_names(list(train_flags) + list(system["flags"]))
        if GPU_ONLY_FLAG in names and CPU_FP16_FLAG not in names:
            origin = (where if GPU_ONLY_FLAG in flag_names(train_flags)
                      else f"system {system['name']!r}")
            raise LabError(f"{origin} trains with {GPU_ONLY_FLAG}, which fairseq runs only on a "
                        f"CUDA GPU (its fp16 optimizer keeps a flat copy of the parameters "
                        f"there; {CPU_FP16_FLAG} or --memory-efficient-fp16 instead train on "
                        f"a CPU too), and this run is on the CPU: {change}")
