"""A reproduction's outputs (``scripts/reproduce-*.sh``) as inputs of the analyses.

``reproduction_outputs(results_dir, pair, seed, systems)`` reads ``RESULTS/results.json`` and
returns each system's detokenized hypotheses (``RESULTS/PAIR/SYSTEM/seedN/hyp.detok.txt``, the file
its result names), with the raw references and raw sources they were scored against (the
data-bin's ``SUBSET.raw.TGT`` / ``SUBSET.raw.SRC``), so that analyses such as BLEU by length
(Fig. 8) run on a reproduction with one command.
"""
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

from ran_lab.common.paths import repo_path, slug  # the engine names the result folders
from ran_text.evaluate import read_lines
from ran_text.textio import read_json


class Outputs(NamedTuple):
    hypotheses: Dict[str, List[str]]  # system name -> detokenized hypotheses, in test-set order
    refs: List[str]
    sources: List[str]
    ref_path: Path
    src_path: Path


def _scores(result):
    """The scores of the result's main (first) decoded subset: hyp_file and raw_ref."""
    subsets = result.get("subsets")
    if subsets:
        return next(iter(subsets.values()))
    return result


def reproduction_outputs(results_dir, pair, seed=1, systems: Optional[Sequence[str]] = None
                         ) -> Outputs:
    """Hypotheses of ``systems`` (default: every system of ``pair`` and ``seed``) in a
    reproduction's results folder, with the references and sources they were scored against."""
    results_dir = Path(results_dir)
    path = results_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: pass the --out folder of a reproduction (--results)")
    src, sep, tgt = pair.partition("-")
    if not (sep and src and tgt):
        raise ValueError(f"--pair must look like de-en, got {pair!r}")
    results = [r for r in read_json(path, "a reproduction's table data", shape=dict)["results"]
               if r["pair"] == pair and r.get("seed", 1) == seed]
    found = [r["system"] for r in results]
    if not results:
        raise ValueError(f"{path} has no result for pair {pair} and seed {seed} (--pair, --seed)")
    if systems is not None:
        missing = [s for s in systems if s not in found]
        if missing:
            raise ValueError(f"{path} has no result for {', '.join(map(repr, missing))} on {pair}, "
                             f"seed {seed}; it has {', '.join(found)} (--systems)")
        results = [next(r for r in results if r["system"] == s) for s in systems]
    hypotheses, ref_path = {}, None
    for r in results:
        scores = _scores(r)
        folder = results_dir / pair / slug(r["system"])
        if (folder / f"seed{seed}").is_dir():
            folder = folder / f"seed{seed}"
        hyp_path = folder / scores.get("hyp_file", "hyp.detok.txt")
        if not hyp_path.is_file():
            raise FileNotFoundError(f"{hyp_path} is missing (the hypotheses of {r['system']!r})")
        hypotheses[r["system"]] = read_lines(hyp_path)
        refs = repo_path(scores["raw_ref"])  # relative to the checkout: this one's file
        if ref_path is not None and refs != ref_path:
            raise ValueError(f"the results of {pair} were scored against different references: "
                             f"{ref_path} and {refs}")
        ref_path = refs
    if not ref_path.name.endswith(f".{tgt}"):
        raise ValueError(f"reference file {ref_path} does not end in .{tgt}; pass --ref and --src")
    src_path = ref_path.with_name(ref_path.name[:-len(tgt)] + src)
    for p in (ref_path, src_path):
        if not p.is_file():
            raise FileNotFoundError(f"{p} is missing (the data-bin the results were scored "
                                    "with); pass --ref and --src")
    return Outputs(hypotheses, read_lines(ref_path), read_lines(src_path), ref_path, src_path)
