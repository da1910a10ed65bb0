"""A results folder as the verdicts read it: each run's scores, and paired-bootstrap p-values.

The scores are those of the folder's ``results.json`` (the numbers its TABLE.md shows). A
comparison with the table's baseline takes the p-value the reproduction engine stored there
(``p_value`` for sacreBLEU, ``ter_p_value`` for TER); any other pair of systems, or a metric
without a stored p-value, is tested here on the committed hypotheses with the engine's own
:func:`ran_fairseq.lab.reproduce.scores.paired_bootstrap` (sacreBLEU's paired bootstrap; its
resampling is seeded, so a p-value is the same on every run). Those p-values are kept in the
folder's ``CLAIMS.json`` with a digest of both hypothesis files, so that the report can be remade
where the references are not at hand; a changed hypothesis file is tested again.
"""
import hashlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from ...textio import read_json
from ..portable import expand_path
from .rule import Seed

P_KEY = {"sacrebleu": "p_value", "ter": "ter_p_value"}
BOOTSTRAP_METRIC = {"sacrebleu": "BLEU", "ter": "TER"}


class ResultsError(RuntimeError):
    """A p-value that can be neither read nor computed (missing hypotheses or references)."""


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


class Folder:
    """One results folder (``results.json`` and the hypotheses under ``PAIR/SYSTEM/seedN``).

    ``refs``: (pair, subset) -> the raw references, where they are not at the path results.json
    records; ``cache``: p-values computed before (CLAIMS.json's ``pvalues``); ``compute``: False to
    refuse computing a missing p-value (ResultsError instead)."""

    def __init__(self, path, repo: Optional[Path] = None, refs: Optional[dict] = None,
                 cache: Optional[List[dict]] = None, compute: bool = True):
        self.path = Path(path)
        self.repo = Path(repo) if repo else None
        self.report = read_json(self.path / "results.json", "a results folder's table data",
                                shape=dict)
        self.settings = self.report["settings"]
        self.baseline = self.settings["baseline"]
        self.level = self.settings["significance"]["level"]
        self.samples = self.settings["significance"]["samples"]
        self.refs = dict(refs or {})
        self.compute = compute
        self.runs: Dict[Tuple[str, str, int], dict] = {
            (r["pair"], r["system"], r["seed"]): r for r in self.report["results"]}
        self.pairs = list(dict.fromkeys(r["pair"] for r in self.report["results"]))
        self._cache = {self._key(e): e for e in (cache or [])}
        self.used: Dict[tuple, dict] = {}

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
        # {repo}/PATH: the same file of this checkout (ran_fairseq.lab.portable)
        recorded = expand_path(self.runs[(pair, system, seed)]["subsets"][subset]["raw_ref"],
                               self.repo)
        if recorded.is_file():
            return recorded
        # a results.json made before held the machine's absolute path: try the same data-bin here
        if self.repo is not None:
            here = self.repo / "data-bin" / recorded.parent.name / recorded.name
            if here.is_file():
                return here
        return recorded

    def p_value(self, pair, system, against, seed, subset, metric) -> float:
        """The paired bootstrap's p-value between two runs of the same seed."""
        stored = self.runs[(pair, system, seed)]["subsets"][subset].get(P_KEY[metric])
        if against == self.baseline and stored is not None:
            return stored
        if system == self.baseline:
            stored = self.runs[(pair, against, seed)]["subsets"][subset].get(P_KEY[metric])
            if stored is not None:
                return stored
        entry = {"pair": pair, "subset": subset, "metric": metric, "seed": seed,
                 "system": system, "against": against}
        hyps = {name: self.hyp_file(pair, name, seed, subset) for name in (system, against)}
        missing = [str(f) for f in hyps.values() if not f.is_file()]
        if missing:
            raise ResultsError(f"no hypotheses to test {system} against {against} ({pair}, "
                               f"seed {seed}, {subset}): {', '.join(missing)}")
        digests = {name: digest(f) for name, f in hyps.items()}
        key = self._key(entry)
        cached = self._cache.get(key)
        if cached is not None and cached.get("digests") == digests:
            self.used[key] = cached
            return cached["p"]
        ref = self.ref_file(pair, system, seed, subset)
        if not self.compute:
            raise ResultsError(f"{self.path}: no stored p-value for {system} against {against} "
                               f"({pair}, seed {seed}, {subset}, {metric}) and computing is off")
        if not ref.is_file():
            raise ResultsError(f"{self.path}: the references {ref} are needed to test {system} "
                               f"against {against} ({pair}, seed {seed}, {subset}); pass "
                               f"--refs {pair}:{subset}=FILE")
        from ..common.jsonio import read_text_lines
        from ..reproduce.scores import paired_bootstrap
        texts = [read_text_lines(f) for f in (hyps[against], hyps[system], ref)]
        p, _, _ = paired_bootstrap(*texts, self.samples, BOOTSTRAP_METRIC[metric])
        entry.update(p=p, digests=digests, samples=self.samples)
        self._cache[key] = self.used[key] = entry
        return p

    def comparison_seeds(self, pair, system, against, subset, metric,
                         p_value: Optional[Callable] = None) -> List[Seed]:
        """The seeds both systems ran on ``pair``/``subset``, each with its scores and p-value."""
        p_value = p_value or self.p_value
        common = sorted(set(self.seeds(pair, system, subset)) &
                        set(self.seeds(pair, against, subset)))
        return [Seed(seed, self.score(pair, system, seed, subset, metric),
                     self.score(pair, against, seed, subset, metric),
                     p_value(pair, system, against, seed, subset, metric))
                for seed in common]

    def computed(self) -> List[dict]:
        """The p-values computed or reused by this report, for CLAIMS.json."""
        return [self.used[k] for k in sorted(self.used)]
