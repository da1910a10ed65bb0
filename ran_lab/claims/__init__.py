"""Claims as data, verdicts by one rule.

``configs/PAPER/claims.json`` lists what a paper claims (:mod:`.spec`); :mod:`.engine` gives each
claim a verdict from a results folder's ``results.json``, its hypotheses (:mod:`.results`) and
committed analysis files (:mod:`.analysis`), by the rule of :mod:`.rule`; :mod:`.report` writes
the folder's ``CLAIMS.md`` (and ``CLAIMS.json``: the verdicts, and the p-values computed for
them) and fills the spans of README.md and docs/ that quote it. ``scripts/claims.py`` is the
command line; the reproduction engine calls :func:`write_claims` when it writes a TABLE.md.
"""
import json
from pathlib import Path
from typing import Dict, List, Optional

from ran_lab.common.paths import REPO
from ran_text.textio import read_json, write_text_atomic
from . import provenance, report
from .engine import Verdict, evaluate
from .results import Folder, table_data
from .spec import Claims, load

__all__ = ["Claims", "Folder", "Verdict", "claims_file_of", "compute", "holds_of", "load",
           "write_claims", "verdicts_by_key"]


def claims_file_of(folder: Path, repo: Path = REPO) -> Path:
    """The claims file of a results folder: ``claims.json`` beside the paper file its
    results.json names."""
    return (repo / table_data(folder)["settings"]["paper_file"]).parent / "claims.json"


def _cache(folder: Path, key: str = "pvalues") -> List[dict]:
    path = Path(folder) / "CLAIMS.json"
    if not path.is_file():
        return []
    return read_json(path, shape=dict).get(key, [])


def shown(path: Path, repo: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(repo).resolve()))
    except ValueError:
        return str(path)


def compute(folder, claims_file: Optional[Path] = None, refs: Optional[dict] = None,
            repo: Path = REPO, compute_missing: bool = True):
    """``(claims, folder, verdicts)`` of a results folder. A p-value CLAIMS.json does not hold is
    computed from the hypotheses unless ``compute_missing`` is False (LabError then)."""
    folder = Path(folder)
    claims = load(claims_file or claims_file_of(folder, repo), repo)
    results = Folder(folder, repo, refs, _cache(folder), compute_missing,
                     _cache(folder, "pooled"), borrow=claims.borrow_for(shown(folder, repo)))
    results.key = shown(folder, repo)
    return claims, results, evaluate(claims, results, repo)


def render(claims: Claims, results: Folder, verdicts: List[Verdict], repo: Path = REPO):
    """CLAIMS.md's text and CLAIMS.json's object."""
    folder_path, claims_path = shown(results.path, repo), shown(claims.path, repo)
    text = report.markdown(claims.paper, claims_path, folder_path, results.settings, verdicts,
                           results.pairs, provenance.holds(results.report))
    data = {"claims": claims_path, "results": folder_path, "verdicts": report.as_json(verdicts),
            "pvalues": results.computed(), "pooled": results.computed_pooled()}
    return text, data


def write_claims(claims_file, folder, refs: Optional[dict] = None, repo: Path = REPO) -> Path:
    """Write ``FOLDER/CLAIMS.md`` and ``FOLDER/CLAIMS.json``; return CLAIMS.md's path."""
    claims, results, verdicts = compute(folder, Path(claims_file), refs, repo)
    text, data = render(claims, results, verdicts, repo)
    write_text_atomic(Path(folder) / "CLAIMS.json",
                      json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(Path(folder) / "CLAIMS.md", text)
    return Path(folder) / "CLAIMS.md"


def holds_of(folder, repo: Path = REPO) -> List[str]:
    """What a results folder holds (:func:`.provenance.holds` of its results.json)."""
    return provenance.holds(table_data(Path(repo) / folder))


def verdicts_by_key(folder, repo: Path = REPO, compute_missing: bool = False) -> Dict[str, Verdict]:
    """A folder's verdicts by ``ID`` or ``ID@PAIR`` (what a page's claim span names)."""
    _, _, verdicts = compute(Path(repo) / folder, repo=repo, compute_missing=compute_missing)
    return {v.key: v for v in verdicts}
