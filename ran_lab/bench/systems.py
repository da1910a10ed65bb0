"""The benchmark's systems and training flags, read with :mod:`ran_lab.common`: a systems
file (``--systems``) whose flags may not set what the harness sets, the systems ``--systems-only``
names (the baseline always among them, in file order), and the training flags of a reproduction
config (``--train-flags-of``)."""
from pathlib import Path

from ran_text import textio
from ran_lab.common import LabError
from ran_lab.common.flags import check_flags, flag_pairs
from ran_lab.common.systems import Systems, parse_systems, select_systems

from .settings import NOT_BENCHED_FLAGS, RESERVED_FLAGS


def check_bench_flags(flags, where):
    check_flags(flags, RESERVED_FLAGS, where, verb="the harness controls")


def read_systems(path) -> Systems:
    """Read and check a systems file: its systems by name, each a dict of name, arch and flags
    (its own, without common_flags), and a baseline that names one of them."""
    path = Path(path)
    if not path.is_file():
        raise LabError(f"systems file {path} does not exist (--systems)")
    spec = textio.read_json(path, "systems file (--systems)",
                            "fix the file (or take it again from the repository)")
    if not (isinstance(spec, dict) and isinstance(spec.get("systems"), list) and spec["systems"]):
        raise LabError(f"{path}: expected an object with a non-empty 'systems' list")
    check_bench_flags(spec.get("common_flags", []), f"{path}: common_flags")
    systems = parse_systems(spec, path, check=lambda system: check_bench_flags(
        system.get("flags", []), f"{path}: system {system['name']!r} flags"))
    systems.systems = {name: {"name": name, "arch": s["arch"], "flags": list(s.get("flags", []))}
                       for name, s in systems.systems.items()}
    if systems.baseline not in systems.systems:
        raise LabError(f"{path}: baseline {systems.baseline!r} is not one of the systems "
                         f"({', '.join(systems.systems)})")
    return systems


def chosen_systems(systems: Systems, only):
    """The systems to run, in file order; ``only`` is the --systems-only value or None."""
    def refuse(names, unknown):
        if unknown:
            return LabError(f"--systems-only: unknown system(s) {', '.join(unknown)}; "
                              f"the systems file has: {', '.join(systems.systems)}")
        return None

    return select_systems(systems.systems, only, refuse, always=(systems.baseline,),
                          file_order=True)


def train_flags_of(path):
    """The training flags of reproduction config ``path`` without those the harness sets or does
    not use, the config's --max-tokens (or None), and its ``arch`` (or None): a full-size config
    such as configs/recurrent_cross/full-wmt16-ro-en.json trains every system of its systems file
    at that architecture, and so does the benchmark."""
    from ran_lab.reproduce.config import config_train_flags, read_config

    try:  # only the training flags: the config's other keys (e.g. its speed_bench) may not exist
        config = read_config(path)
        pairs = flag_pairs(config_train_flags(config, path))
    except LabError as e:
        raise LabError(f"--train-flags-of: {e}") from e
    max_tokens = pairs.get("--max-tokens")
    kept = []
    for flag, value in pairs.items():
        name = flag.split("=", 1)[0]
        if name not in RESERVED_FLAGS and name not in NOT_BENCHED_FLAGS:
            kept += [flag] if value is None else [flag, value]
    arch = config.get("arch")
    if arch is not None and not (isinstance(arch, str) and arch):
        raise LabError(f"--train-flags-of: config {path}: 'arch' must be an architecture name, "
                         f"not {arch!r}")
    return kept, int(max_tokens) if max_tokens is not None else None, arch
