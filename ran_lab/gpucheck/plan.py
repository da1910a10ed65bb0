"""The training checks as data: configs/gpu-check.json's systems resolved to fairseq-train
commands (their paper's CPU recipe, their systems file's flags), one per system and dtype, in the
config's order, with the plan's time estimate."""
import math
from dataclasses import dataclass, field

from ran_text import textio
from ..common.errors import LabError
from ..common.flags import without
from ..common.paths import REPO, repo_path, slug

DTYPE_FLAGS = {"float32": [], "float16": ["--fp16"], "bfloat16": ["--bf16"]}
# what the check sets itself: the budget, the log it parses, no checkpoints
OWNED = ("--max-update", "--log-format", "--log-interval", "--no-save", "--save-dir", "--seed")


@dataclass
class Job:
    system: str
    dtype: str
    data: str
    argv: list
    prepare: list = field(default_factory=list)

    @property
    def name(self):
        return f"{slug(self.system)}.{self.dtype}"


def load(path):
    config = textio.read_json_file(repo_path(path), "the GPU check's config")
    missing = [k for k in ("updates", "dtypes", "systems", "tolerance", "concurrent")
               if k not in config]
    if missing:
        raise LabError(f"{path}: missing {', '.join(missing)}")
    load_check_dtypes(config, path)
    return config


def load_check_dtypes(config, where):
    unknown = [d for d in config["dtypes"] if d not in DTYPE_FLAGS]
    if unknown:
        raise LabError(f"{where}: unknown dtype {unknown[0]!r} (one of {', '.join(DTYPE_FLAGS)})")


def _system(recipe, name):
    systems_path = recipe.get("systems")
    spec = textio.read_json_file(repo_path(systems_path), "a systems file")
    for system in spec["systems"]:
        if system["name"] == name:
            return system, spec.get("common_flags", [])
    raise LabError(f"{systems_path} has no system {name!r} (configs/gpu-check.json names it)")


def _prepare_argv(recipe, pair):
    """The data package's command line for the corpus the recipe's `prepare` names (one the
    engine prepares in its process, :mod:`ran_lab.reproduce.preparations`), or [] when the
    recipe prepares nothing."""
    from ..reproduce import preparations
    from ran_lab.common import LabError

    prepare = recipe.get("prepare")
    if not prepare:
        return []
    try:
        prepare = preparations.check(prepare, "a paper's recipe")
    except LabError as e:
        raise LabError(str(e)) from None
    src, tgt = pair.split("-")
    script, argv = preparations.command(prepare, src, tgt)
    if script is not None:
        raise LabError(f"a recipe's prepare must name a corpus on disk (multi30k, files), not "
                       f"{prepare['corpus']!r}, which is downloaded")
    return ["-m", "ran_text.prepare", *argv]


def jobs(config, device, pair="de-en", data_bin=None):
    """One Job per (system, dtype), system-major: every dtype of the first system comes first;
    ``data_bin``: one data-bin for all (nothing prepared) instead of each recipe's."""
    out = []
    for entry in config["systems"]:
        recipe = textio.read_json_file(repo_path(entry["recipe"]), "a paper's recipe")
        system, common = _system(recipe, entry["name"])
        src, tgt = pair.split("-")
        own_data = data_bin is None
        data = recipe["data"].format(src=src, tgt=tgt) if own_data else str(data_bin)
        flags = without(list(recipe.get("train_flags", [])), OWNED)
        flags += ["--max-update", str(config["updates"]), "--log-format", "json",
                  "--log-interval", str(log_interval(config)), "--no-save",
                  "--seed", "1"]
        if device == "cpu":
            flags.append("--cpu")
        for dtype in config["dtypes"]:
            argv = [str(repo_path(data)), "--user-dir", str(REPO / "ran_fairseq"),
                    "--task", "translation", "--source-lang", src, "--target-lang", tgt,
                    "--arch", system["arch"], *common, *system.get("flags", []), *flags,
                    *DTYPE_FLAGS[dtype]]
            prepare = _prepare_argv(recipe, pair) if own_data else []
            out.append(Job(entry["name"], dtype, data, argv, prepare))
    return out


def log_interval(config):
    """The config's interval, or shorter where the budget would log fewer than four losses."""
    return max(1, min(config.get("log_interval", 10), config["updates"] // 4))


def estimate_seconds(config, n_jobs):
    """The plan's time for ``n_jobs`` trainings, ``concurrent`` at a time."""
    rounds = math.ceil(n_jobs / max(1, config["concurrent"]))
    per_job = config.get("seconds_per_start", 25) + \
        config["updates"] * config.get("seconds_per_update", 0.12)
    return rounds * per_job
