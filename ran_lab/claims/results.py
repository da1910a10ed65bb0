"""A results folder as the verdicts read it: each run's scores, and paired-bootstrap p-values.

The scores are those of the folder's ``results.json`` (the numbers its TABLE.md shows). Every
pair of runs a comparison names is tested here on the committed hypotheses by
:func:`.bootstrap.test` (the two-sided paired percentile bootstrap, seeded, drawn until p is
settled on one side of the level; its p and interval come from the same resamples; results.json's
``p_value`` is the reproduction engine's, sacreBLEU's centred test, and is not read here); each
comparison's seeds together get the test set's share of the mean difference's variance from
:func:`.bootstrap.pooled`, and the folder's pooled between-seed variance
(:func:`.seeds.seed_variance`) the seeds' share. Tests and pooled variances are kept in the
folder's ``CLAIMS.json`` (``pvalues`` and ``pooled``, each with its ``method``) with a digest of
the hypothesis files, so that the report can be remade where the references are not at hand; a
changed hypothesis file is tested again.
"""
import hashlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from ran_text import textio
from ran_lab.common import LabError, schema
from ran_text.textio import read_json
from . import bootstrap, seeds as seeds_mod
from .rule import Seed

BOOTSTRAP_METRIC = {"sacrebleu": "BLEU", "ter": "TER"}
METHOD = "percentile"  # what a stored test or pooled variance was computed by


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class Folder:
    """One results folder (``results.json`` and the hypotheses under ``PAIR/SYSTEM/seedN``).

    ``refs``: (pair, subset) -> the raw references, where they are not at the path results.json
    records; ``cache``: p-values computed before (CLAIMS.json's ``pvalues``); ``compute``: False to
    refuse computing a missing p-value (LabError instead)."""

    def __init__(self, path, repo: Optional[Path] = None, refs: Optional[dict] = None,
                 cache: Optional[List[dict]] = None, compute: bool = True,
                 pooled_cache: Optional[List[dict]] = None, seed: int = bootstrap.SEED,
                 borrow: Optional[dict] = None):
        self.path = Path(path)
        self.repo = Path(repo) if repo else None
        self.report = schema.check(
            read_json(self.path / "results.json", "a results folder's table data", shape=dict),
            schema.TABLE_DATA, self.path / "results.json",
            "a results folder's table data", "delete it: the reproduction command with --resume writes it again from the runs' result.json")
        self.settings = self.report["settings"]
        self.baseline = self.settings["baseline"]
        self.level = self.settings["significance"]["level"]
        self.samples = self.settings["significance"]["samples"]
        self.refs = dict(refs or {})
        self.compute = compute
        self.runs: Dict[Tuple[str, str, int], dict] = {
            (r["pair"], r["system"], r["seed"]): r for r in self.report["results"]}
        self.pairs = list(dict.fromkeys(r["pair"] for r in self.report["results"]))
        self.seed = seed
        self._cache = {self._key(e): e for e in (cache or [])
                       if e.get("bootstrap_seed") == seed and e.get("method") == METHOD}
        self._pooled = {self._pooled_key(e): e for e in (pooled_cache or [])
                        if e.get("bootstrap_seed") == seed and e.get("method") == METHOD}
        self.key = str(path)  # the folder as the claims file names it (set by claims.compute)
        self.borrow = borrow  # {"from": FOLDER, "why": ...}: the claims file's seed_variance entry
        self.used: Dict[tuple, dict] = {}
        self.used_pooled: Dict[tuple, dict] = {}
        self._stats: Dict[tuple, object] = {}

    # -- scores ---------------------------------------------------------------------------------

    def seeds(self, pair: str, system: str, subset: str) -> List[int]:
        return sorted(seed for (p, s, seed), r in self.runs.items()
                      if p == pair and s == system and subset in r.get("subsets", {}))

    def score(self, pair, system, seed, subset, metric) -> float:
        return self.runs[(pair, system, seed)]["subsets"][subset][metric]

    def has(self, pair, system, subset) -> bool:
        return bool(self.seeds(pair, system, subset))

    # -- p-values -------------------------------------------------------------------------------

    @staticmethod
    def _key(entry):
        return (entry["pair"], entry["subset"], entry["metric"], entry["seed"],
                *sorted((entry["system"], entry["against"])))

    def hyp_file(self, pair, system, seed, subset) -> Path:
        from ..common.paths import slug
        scores = self.runs[(pair, system, seed)]["subsets"][subset]
        return self.path / pair / slug(system) / f"seed{seed}" / scores["hyp_file"]

    def ref_file(self, pair, system, seed, subset) -> Path:
        if (pair, subset) in self.refs:
            return Path(self.refs[(pair, subset)])
        # recorded relative to the checkout: the same file of this one
        return Path(self.repo) / self.runs[(pair, system, seed)]["subsets"][subset]["raw_ref"]

    def _hyps(self, pair, names, seeds, subset) -> Dict[tuple, Path]:
        hyps = {(name, seed): self.hyp_file(pair, name, seed, subset)
                for name in names for seed in seeds}
        missing = [str(f) for f in hyps.values() if not f.is_file()]
        if missing:
            raise LabError(f"no hypotheses to test {' against '.join(names)} ({pair}, "
                               f"seeds {', '.join(map(str, seeds))}, {subset}): "
                               f"{', '.join(missing)}")
        return hyps

    def _statistics(self, pair, subset, metric, hyps: Dict[tuple, Path], what: str):
        """The per-sentence statistics of each hypothesis file, and the scorer."""
        name, seed = next(iter(hyps))
        if not self.compute:
            raise LabError(f"{self.path}: no stored test for {what} ({pair}, {subset}, "
                               f"{metric}) and computing is off")
        ref = self.ref_file(pair, name, seed, subset)
        if not ref.is_file():
            raise LabError(f"{self.path}: the references {ref} are needed to test {what} "
                               f"({pair}, {subset}); pass --refs {pair}:{subset}=FILE")
        refs = textio.read_lines(ref)
        stats = {}
        for key, f in hyps.items():
            cache_key = (str(f), metric)
            if cache_key not in self._stats:
                self._stats[cache_key] = bootstrap.sentence_stats(textio.read_lines(f), refs,
                                                                  BOOTSTRAP_METRIC[metric])
            stats[key] = self._stats[cache_key]
        return stats, bootstrap.Scorer(BOOTSTRAP_METRIC[metric], refs)

    def test(self, pair, system, against, seed, subset, metric) -> dict:
        """The paired bootstrap between two runs of the same seed: ``p``, ``count``, ``samples``,
        ``settled``, ``interval`` (of system minus against)."""
        entry = {"pair": pair, "subset": subset, "metric": metric, "seed": seed,
                 "system": system, "against": against}
        hyps = self._hyps(pair, (system, against), (seed,), subset)
        digests = {name: digest(f) for (name, _), f in hyps.items()}
        key = self._key(entry)
        cached = self._cache.get(key)
        if cached is not None and cached.get("digests") == digests and "interval" in cached:
            self.used[key] = cached
            return self._oriented(cached, system)
        stats, scorer = self._statistics(pair, subset, metric, hyps, f"{system} against {against}")
        result = bootstrap.test(stats[(against, seed)], stats[(system, seed)], scorer,
                                self.level, self.seed)
        entry.update(p=result.p, count=result.count, samples=result.samples,
                     settled=result.settled, mc=list(result.mc),
                     interval=list(result.interval), digests=digests,
                     bootstrap_seed=self.seed, method=METHOD)
        self._cache[key] = self.used[key] = entry
        return entry

    @staticmethod
    def _oriented(entry: dict, system: str) -> dict:
        """A stored test read for ``system`` against the other: the interval turned round where
        the entry was stored the other way."""
        if entry["system"] == system:
            return entry
        lo, hi = entry["interval"]
        return {**entry, "system": entry["against"], "against": entry["system"],
                "interval": [-hi, -lo]}

    def p_value(self, pair, system, against, seed, subset, metric) -> float:
        """The paired bootstrap's p-value between two runs of the same seed."""
        return self.test(pair, system, against, seed, subset, metric)["p"]

    @staticmethod
    def _pooled_key(entry):
        return (entry["pair"], entry["subset"], entry["metric"], entry["system"],
                entry["against"], tuple(entry["seeds"]))

    def pooled(self, pair, system, against, seeds: List[int], subset, metric):
        """The test set's share of the variance of the mean difference over ``seeds``
        (:func:`.bootstrap.pooled`), for ``system - against``."""
        entry = {"pair": pair, "subset": subset, "metric": metric, "system": system,
                 "against": against, "seeds": list(seeds)}
        hyps = self._hyps(pair, (system, against), seeds, subset)
        digests = {f"{name}/seed{seed}": digest(f) for (name, seed), f in hyps.items()}
        key = self._pooled_key(entry)
        cached = self._pooled.get(key)
        if cached is not None and cached.get("digests") == digests:
            self.used_pooled[key] = cached
            return cached["test_var"]
        stats, scorer = self._statistics(pair, subset, metric, hyps, f"{system} against {against}")
        _, interval, var = bootstrap.pooled([(stats[(against, s)], stats[(system, s)])
                                             for s in seeds], scorer, self.level, seed=self.seed,
                                            spread=True)
        entry.update(test_var=var, samples=bootstrap.INTERVAL_SAMPLES,
                     digests=digests, bootstrap_seed=self.seed, method=METHOD)
        self._pooled[key] = self.used_pooled[key] = entry
        return var

    def _by_system(self, subset, metric, only=None) -> Dict[tuple, List[float]]:
        by_system: Dict[tuple, List[float]] = {}
        for (p, system, seed), r in sorted(self.runs.items()):
            scores = r.get("subsets", {}).get(subset)
            if r.get("checkpoint_of"):  # its owner's seeds again (seeds.py)
                continue
            if only is not None and (p, system) not in only:
                continue
            if scores is not None and scores.get(metric) is not None:
                by_system.setdefault((p, system), []).append(scores[metric])
        return by_system

    def own_variance(self, subset, metric):
        """The folder's pooled between-seed variance on ``subset``/``metric`` and its degrees of
        freedom (:func:`.seeds.seed_variance` over every system's seeds on every pair: one
        variance for the folder's runs, its configuration and budget)."""
        return seeds_mod.seed_variance(self._by_system(subset, metric))

    def seed_variance(self, subset, metric) -> Tuple[float, int, str]:
        """The seed variance the folder's comparisons use, its degrees of freedom and where it
        comes from: the folder's own (:meth:`own_variance`), or, where no system of it has two
        seeds, that of the folder its claims file names (``borrow``), else none (0.0, 0)."""
        var, df = self.own_variance(subset, metric)
        if df or not self.borrow:
            return var, df, "folder"
        other = Path(self.repo or ".") / self.borrow["from"]
        var, df = Folder(other, self.repo, compute=False).own_variance(subset, metric)
        return var, df, f"borrowed from {self.borrow['from']}"

    def combined(self, pair, system, against, seeds: List[int], subset, metric):
        """The mean difference over ``seeds`` with the interval and p the verdict rests on
        (:func:`.seeds.combined`)."""
        difference = (sum(self.score(pair, system, s, subset, metric) for s in seeds) / len(seeds)
                      - sum(self.score(pair, against, s, subset, metric) for s in seeds)
                      / len(seeds))
        test_var = self.pooled(pair, system, against, seeds, subset, metric)
        sigma2, df, source = self.seed_variance(subset, metric)
        shared = None
        if self.trained(pair, system, seeds[0]) == self.trained(pair, against, seeds[0]):
            shared = [self.score(pair, system, s, subset, metric) -
                      self.score(pair, against, s, subset, metric) for s in seeds]
        own = seeds_mod.seed_variance(self._by_system(subset, metric,
                                                      {(pair, system), (pair, against)}))
        return seeds_mod.combined(difference, test_var, sigma2, df, len(seeds), self.level,
                                  shared, own, source)

    def trained(self, pair, system, seed) -> str:
        """The system whose training run a run decodes (itself, or its ``checkpoint_of``)."""
        return self.runs[(pair, system, seed)].get("checkpoint_of") or system

    def comparison_seeds(self, pair, system, against, subset, metric,
                         p_value: Optional[Callable] = None) -> List[Seed]:
        """The seeds both systems ran on ``pair``/``subset``, each with its scores and p-value."""
        common = sorted(set(self.seeds(pair, system, subset)) &
                        set(self.seeds(pair, against, subset)))
        out = []
        for seed in common:
            scores = (self.score(pair, system, seed, subset, metric),
                      self.score(pair, against, seed, subset, metric))
            if p_value is not None:
                out.append(Seed(seed, *scores, p_value(pair, system, against, seed, subset,
                                                       metric)))
                continue
            t = self.test(pair, system, against, seed, subset, metric)
            out.append(Seed(seed, *scores, t["p"], tuple(t["interval"]), t["settled"],
                            t["samples"]))
        return out

    def computed(self) -> List[dict]:
        """The p-values computed or reused by this report, for CLAIMS.json."""
        return [self.used[k] for k in sorted(self.used)]

    def computed_pooled(self) -> List[dict]:
        """The pooled intervals computed or reused by this report, for CLAIMS.json."""
        return [self.used_pooled[k] for k in sorted(self.used_pooled)]
