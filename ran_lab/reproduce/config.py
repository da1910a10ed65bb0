"""A paper's reproduction as data: what a paper's ``reproduce.json`` adds (:class:`Paper`), and the scale config
it runs (``configs/PAPER/*.json``) read and checked with its systems file, paper numbers, speed
bench and the config it continues."""
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from ran_text import textio
from ..common.flags import check_device_flags  # noqa: F401  (the engine's, cli.py)
from ..common.flags import check_flags
from ..common.flags import config_train_flags as common_train_flags
from ..common import schema
from ..common.paths import repo_path, slug
from ..common.systems import parse_systems
from ..common.systems import select_systems as common_select
from ran_lab.common import LabError
from . import postprocessing, preparations
from .runs import SELECT

if TYPE_CHECKING:  # only for the annotation of Paper.measure
    from .runs import Run


SIGNIFICANCE = {"samples": 1000, "level": 0.01}


SYSTEM_KEYS = {"name", "arch", "flags", "tables", "checkpoint_of", "generate_flags", "postprocess",
               "notes"}


# Flags the engine sets itself, refused in a config: flag -> where its value comes from.
TRAIN_OWNED = {
    "--arch": "the system's arch (or the config's 'arch')", "-a": "the system's arch",
    "--save-dir": "--checkpoints / the config's 'checkpoints'",
    "--source-lang": "--pairs", "-s": "--pairs", "--target-lang": "--pairs", "-t": "--pairs",
    "--task": "nothing (translation)", "--user-dir": "nothing (the plugin)",
    "--cpu": "the config's 'device'", "--seed": "--seeds / the config's 'seeds'",
    "--best-checkpoint-metric": "the config's 'select'",
    "--maximize-best-checkpoint-metric": "the config's 'select'",
    "--eval-bleu": "the config's 'select' (\"bleu\")",
}


GENERATE_OWNED = dict(TRAIN_OWNED, **{
    "--path": "the config's 'checkpoint'", "--gen-subset": "the config's 'gen_subset'",
    "--post-process": "the config's 'bpe'", "--remove-bpe": "the config's 'bpe'",
    "--scoring": "nothing (the engine scores)", "--bpe": "nothing", "--tokenizer": "nothing",
    "--results-path": "nothing (OUT/PAIR/SYSTEM/seedN/generate.txt)", "--quiet": "nothing",
    "--required-batch-size-multiple": "nothing (1: every sentence is translated)",
})


@dataclass
class Column:
    """An extra table column: ``title`` and ``cell(result) -> str``."""
    title: str
    cell: Callable[[dict], str]


@dataclass
class FullSetting:
    """A named full-size scale config, chosen with ``--full NAME``; ``help`` says what it is."""
    name: str
    config: Path
    help: str


@dataclass
class Paper:
    """What a paper adds to the engine (read from its ``configs/KEY/reproduce.json``).

    The full-size settings are either one config (``full_config`` and ``full_help``: a bare
    ``--full`` flag) or several named ones (``full_settings``: ``--full [NAME]``, the first one
    without a NAME). ``measure(run, result)`` runs after a system is scored and returns extra
    result fields (e.g. FLOPs or a plot path); ``columns`` show fields of the result in the table."""
    key: str  # the paper's name: ran-reproduce KEY, configs/KEY, results/KEY
    title: str  # heading of TABLE.md
    cpu_config: Path
    full_config: Optional[Path] = None
    full_help: str = ""
    columns: Sequence[Column] = ()
    measure: Optional[Callable[["Run", dict], dict]] = None
    notes: Sequence[str] = field(default_factory=list)  # extra bullet lines under the heading
    full_settings: Sequence[FullSetting] = ()

    def __post_init__(self):
        if (self.full_config is None) == (not self.full_settings):
            raise ValueError(f"Paper {self.key!r}: give either full_config (with full_help) or "
                             f"full_settings, not both or neither")
        names = [s.name for s in self.full_settings]
        if len(set(names)) != len(names):
            raise ValueError(f"Paper {self.key!r}: full_settings names must differ, got {names}")


def parse_seeds(items):
    """Distinct non-negative integer seeds, in the given order."""
    seeds = []
    for item in items:
        text = str(item).strip()
        if not text.isdigit():
            raise ValueError(f"{item!r} is not a non-negative integer (e.g. --seeds 1,2,3)")
        if int(text) > schema.SEED_MAX:
            raise ValueError(f"seed {text} is above {schema.SEED_MAX}, the largest fairseq "
                             f"takes")
        if int(text) in seeds:
            raise ValueError(f"seed {text} appears twice")
        seeds.append(int(text))
    if not seeds:
        raise ValueError("no seed given")
    return seeds


def load_systems(path, arch_override=None):
    """Systems of a systems file by name, in file order, with their links checked."""
    spec = textio.read_json_file(path, "systems file (the config's 'systems')")

    def check(system):
        name = system["name"]
        check_flags(system.get("flags", []), TRAIN_OWNED, f"{path}: system {name!r} flags")
        check_flags(system.get("generate_flags", []), GENERATE_OWNED,
                    f"{path}: system {name!r} generate_flags")
        if system.get("postprocess") is not None:
            system["postprocess"] = postprocessing.template(system["postprocess"],
                                                            f"{path}: system {name!r}")

    found = parse_systems(spec, path, known=SYSTEM_KEYS, check=check)
    # the flags of every system: the same rules as each system's own
    check_flags(found.common_flags, TRAIN_OWNED, f"{path}: common_flags")
    systems = {name: {
        "name": name, "arch": arch_override or system["arch"],
        "flags": found.common_flags + list(system.get("flags", [])),
        "tables": list(system.get("tables", [])),
        "checkpoint_of": system.get("checkpoint_of"),
        "generate_flags": list(system.get("generate_flags", [])),
        "postprocess": system.get("postprocess")} for name, system in found.systems.items()}
    for system in systems.values():
        owner = system["checkpoint_of"]
        if owner is None:
            continue
        if owner not in systems or systems[owner]["checkpoint_of"] is not None:
            raise LabError(f"{path}: system {system['name']!r} decodes the checkpoint of "
                             f"{owner!r}, which is not a trained system of this file")
        if (system["arch"], system["flags"]) != (systems[owner]["arch"], systems[owner]["flags"]):
            raise LabError(f"{path}: system {system['name']!r} decodes {owner!r}'s checkpoint, so "
                             f"its arch and flags must equal {owner!r}'s")
    try:
        dirs = [slug(name) for name in systems]
    except ValueError as e:
        raise LabError(f"{path}: {e}") from None
    if len(set(dirs)) != len(dirs):
        raise LabError(f"{path}: system names must differ in more than punctuation "
                         f"(their directories: {', '.join(dirs)})")
    baseline = spec.get("baseline")
    if baseline not in systems:
        raise LabError(f"{path}: 'baseline' must name one of its systems ({', '.join(systems)}),"
                         f" not {baseline!r}")
    return baseline, systems


def read_config(path, seen=()):
    """A config's keys, those of the config it names as ``base`` (a path from the repository root)
    filled in under its own: a GPU config is its CPU config with ``device`` and ``out`` changed."""
    what = "config (--config)" if not seen else "base config"
    config = dict(schema.check(textio.read_json_file(path, what),
                               schema.Obj(optional={"base": schema.Str(nonempty=True)},
                                          extra=True), path, what))
    base = config.pop("base", None)
    if base is None:
        return config
    base_path = repo_path(base) if isinstance(base, str) else None
    if base_path is None or base_path.resolve() in seen or Path(path).resolve() == base_path.resolve():
        raise LabError(f"config {path}: 'base' must be the path of another config, with no "
                         f"cycle, not {base!r}")
    inherited = read_config(base_path, seen + (Path(path).resolve(),))
    # the base's notes describe the base; a config that inherits says what it changes
    inherited.pop("notes", None)
    return dict(inherited, **config)


def load_config(path):
    """The scale config with its systems (in file order) and paper numbers resolved."""
    config = read_config(path)
    if "checkpoint" in config:
        raise LabError(f"config {path}: 'checkpoint' is replaced by 'select' (one of "
                         f"{', '.join(SELECT)}: checkpoint_last.pt, or checkpoint_best.pt by "
                         f"validation loss or BLEU)")
    missing = sorted(k for k in schema.CONFIG.required if k not in config)
    if missing:
        raise LabError(f"config {path} lacks {', '.join(missing)}")
    config["prepare"] = preparations.check(config.get("prepare"), path)
    # (keys, types, choices and ranges: schema.CONFIG; what follows, the links between them)
    schema.check(config, schema.CONFIG, path, "config, with its base")
    subsets = config["gen_subset"]
    subsets = [subsets] if isinstance(subsets, str) else subsets
    try:
        seeds = parse_seeds(config.get("seeds", [1]))
    except (ValueError, TypeError) as e:
        raise LabError(f"config {path}: seeds: {e}") from e
    significance = dict(SIGNIFICANCE, **config.get("significance", {}))
    config = dict(config, train_flags=config_train_flags(config, path))
    check_flags(config["generate_flags"], GENERATE_OWNED, f"config {path}: generate_flags")
    systems_file = repo_path(config["systems"])
    baseline, systems = load_systems(systems_file, config.get("arch"))
    paper_file = repo_path(config["paper"])
    paper = schema.check(textio.read_json_file(paper_file, "paper numbers (the config's 'paper')"),
                         schema.PAPER, paper_file, "paper numbers")
    keys = [c.get("key") for c in paper.get("columns", [])]
    shown_keys = config.get("paper_columns", keys)
    unknown = [k for k in shown_keys if k not in keys]
    if unknown:
        raise LabError(f"config {path}: paper_columns must list keys of {config['paper']}'s "
                         f"columns ({', '.join(map(str, keys))}); unknown: {unknown}")
    paper = dict(paper, columns=[c for c in paper.get("columns", []) if c.get("key") in shown_keys])
    speed = (load_speed_bench(config["speed_bench"], baseline, f"config {path}")
             if "speed_bench" in config else None)
    continues = continued_config(config["continues"], path) if "continues" in config else None
    return dict(config, path=str(Path(path).resolve()), systems_file=str(systems_file),
                systems=systems, baseline=baseline, paper_numbers=paper, subsets=subsets,
                seeds=seeds, significance=significance, speed_bench=speed, continues=continues)


def continued_config(name, path):
    """The config whose trainings a config's runs carry on (its ``continues``): where that config
    keeps its checkpoints and training logs."""
    where = f"config {path}: continues"
    if not isinstance(name, str) or not repo_path(name).is_file():
        raise LabError(f"{where} must name an existing config (a path from the repository "
                         f"root, e.g. \"configs/ran/cpu.json\"), not {name!r}")
    other = read_config(repo_path(name))
    for key in ("out", "checkpoints"):
        if not isinstance(other.get(key), str):
            raise LabError(f"{where}: {name} has no '{key}'")
    return {"config": name, "out": other["out"], "checkpoints": other["checkpoints"]}


def config_train_flags(config, path):
    """The training flags of a config (as read by :func:`read_config`): its ``train_flags`` with
    ``set_train_flags`` applied, checked against the flags the engine sets."""
    return common_train_flags(config, path, TRAIN_OWNED)


def load_speed_bench(paths, baseline, where):
    """The training-time ratios of ``scripts/bench.py`` runs (their bench.json files: ``speed_bench``
    in a config, one path or a list): the systems timed one after another on a machine with
    nothing else running, which runs side by side (--jobs) cannot give. With several runs a
    system's ratio is the median of its ratios (a run's drift moves one run's figures). Returns
    what the table shows of them."""
    paths = [paths] if isinstance(paths, str) else paths  # (its type: schema.CONFIG)
    runs = []
    for path in paths:
        bench = textio.read_json_file(repo_path(path), f"{where}: speed_bench (made by "
                                      f"scripts/bench.py --systems SYSTEMS --train-flags-of CONFIG "
                                      f"--out DIR)")
        try:
            tps = {r["name"]: r["metrics"]["train_tokens_per_s"] for r in bench["systems"]}
            settings, machine = bench["settings"], bench["machine"]
        except (KeyError, TypeError) as e:
            raise LabError(f"{where}: speed_bench {path} is not a bench.py report (no {e})") \
                from e
        if not tps.get(baseline):
            raise LabError(f"{where}: speed_bench {path} has no training speed of the baseline "
                             f"{baseline!r} (systems: {', '.join(tps)}); run bench.py with this "
                             f"config's systems file")
        runs.append((path, tps, settings, machine))
    ratios = {}
    for _, tps, _, _ in runs:
        for name, value in tps.items():
            if value:
                ratios.setdefault(name, []).append(tps[baseline] / value)
    _, _, settings, machine = runs[0]
    loads = [m.get(k) for _, _, _, m in runs for k in ("load_average_before", "load_average_after")]
    loads = [x for x in loads if x is not None]
    return {"files": [p for p, _, _, _ in runs], "device": machine.get("device"),
            "device_name": machine.get("device_name"), "threads": machine.get("threads"),
            "load_average_max": max(loads) if loads else None,
            "dates": [m.get("date") for _, _, _, m in runs],
            "train_updates": settings.get("train_updates"),
            "max_tokens": settings.get("max_tokens"),
            "train_flags_of": settings.get("train_flags_of"),
            "train_time_ratios": ratios,
            "train_time_ratio": {name: statistics.median(v) for name, v in ratios.items()}}


def parse_pairs(text):
    pairs = []
    for item in text.split(","):
        parts = item.strip().split("-")
        if len(parts) != 2 or not all(re.fullmatch(r"[a-z]{2,3}", x) for x in parts) \
                or parts[0] == parts[1]:
            raise LabError(f"--pairs: {item.strip()!r} is not a pair like de-en")
        if tuple(parts) in pairs:
            raise LabError(f"--pairs: {item.strip()} appears twice")
        pairs.append(tuple(parts))
    return pairs


def check_data_template(template, where):
    """A data-bin path whose only fields are {src} and {tgt} (a config's 'data', --data);
    anything else in braces is one error naming ``where``."""
    try:
        template.format(src="src", tgt="tgt")
    except (KeyError, IndexError, ValueError, AttributeError) as e:
        what = f"unknown field {{{e.args[0]}}}" if isinstance(e, KeyError) else str(e)
        raise LabError(f"{where} {template!r}: {what}; a data-bin path may hold {{src}} and "
                         f"{{tgt}} (replaced per pair), and {{{{ }}}} for a brace") from None


def select_systems(systems, wanted, config_path):
    """The wanted systems in the order ``wanted`` names them (all of them, in file order, where it
    is None), each system whose checkpoint another decodes just before that one unless named
    earlier: the order in which their runs start (the table keeps the file's order)."""
    def refuse(names, unknown):
        if unknown or not names:
            return LabError(f"--systems: unknown system(s) "
                              f"{', '.join(map(repr, unknown)) or '(none)'}; {config_path} has: "
                              f"{', '.join(systems)}")
        return None

    return common_select(systems, wanted, refuse)
