"""The benchmark's systems: a systems file read and checked, the systems to run, and the training
flags of a reproduction config (``--train-flags-of``)."""
import json
from pathlib import Path

from ran_fairseq.reproduce import check_flags as check_flag_list

from .settings import NOT_BENCHED_FLAGS, RESERVED_FLAGS, BenchError


def load_systems(path):
    """Read and check a systems file; return (baseline name, common flags, systems by name)."""
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"systems file {path} does not exist (--systems)")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BenchError(f"systems file {path} is not valid JSON: {e}") from e
    if not (isinstance(spec, dict) and isinstance(spec.get("systems"), list) and spec["systems"]):
        raise BenchError(f"{path}: expected an object with a non-empty 'systems' list")
    common = spec.get("common_flags", [])
    check_flags(common, f"{path}: common_flags")
    systems = {}
    for i, system in enumerate(spec["systems"]):
        if not isinstance(system, dict) or not all(
                isinstance(system.get(k), str) and system[k] for k in ("name", "arch")):
            raise BenchError(f"{path}: systems[{i}] needs string fields 'name' and 'arch'")
        if system["name"] in systems:
            raise BenchError(f"{path}: system name {system['name']!r} appears twice")
        check_flags(system.get("flags", []), f"{path}: system {system['name']!r} flags")
        systems[system["name"]] = {"name": system["name"], "arch": system["arch"],
                                   "flags": list(system.get("flags", []))}
    baseline = spec.get("baseline")
    if baseline not in systems:
        raise BenchError(f"{path}: baseline {baseline!r} is not one of the systems "
                         f"({', '.join(systems)})")
    return baseline, list(common), systems


def config_train_flags(path):
    """The training flags of reproduction config ``path`` without those the harness sets or does
    not use, the config's --max-tokens (or None), and its ``arch`` (or None): a full-size config
    such as configs/recurrent_cross/full-wmt16-ro-en.json trains every system of its systems file
    at that architecture, and so does the benchmark."""
    from ran_fairseq.reproduce import ReproError, flag_pairs, read_config
    from ran_fairseq.reproduce import config_train_flags as engine_train_flags

    try:  # only the training flags: the config's other keys (e.g. its speed_bench) may not exist
        config = read_config(path)
        pairs = flag_pairs(engine_train_flags(config, path))
    except ReproError as e:
        raise BenchError(f"--train-flags-of: {e}") from e
    max_tokens = pairs.get("--max-tokens")
    kept = []
    for flag, value in pairs.items():
        name = flag.split("=", 1)[0]
        if name not in RESERVED_FLAGS and name not in NOT_BENCHED_FLAGS:
            kept += [flag] if value is None else [flag, value]
    arch = config.get("arch")
    if arch is not None and not (isinstance(arch, str) and arch):
        raise BenchError(f"--train-flags-of: config {path}: 'arch' must be an architecture name, "
                         f"not {arch!r}")
    return kept, int(max_tokens) if max_tokens is not None else None, arch


def check_flags(flags, where):
    check_flag_list(flags, RESERVED_FLAGS, where, error=BenchError, verb="the harness controls")


def select_systems(systems, baseline, only):
    """The systems to run, in file order; ``only`` is the --systems-only value or None."""
    if only is None:
        return list(systems.values())
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in systems]
    if unknown:
        raise BenchError(f"--systems-only: unknown system(s) {', '.join(unknown)}; "
                         f"the systems file has: {', '.join(systems)}")
    return [s for name, s in systems.items() if name == baseline or name in wanted]
