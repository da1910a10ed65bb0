"""``--redo-postprocess``: a run whose postprocess changed (unknown-word replacement's method, say)
made again from the decoding its folder keeps, without its checkpoint."""
import gzip
import shutil

from ran_lab.common import LabError
from .execute import check_text, score_output
from .store import device_free


def same_decoding(run, old):
    """Whether the stored result ``old`` was trained and decoded by ``run``'s commands (its
    postprocess may differ)."""
    mine, theirs = device_free(run.recorded()), device_free(old.get("commands"))
    return (isinstance(theirs, dict) and theirs.get("train") == mine["train"]
            and theirs.get("generate") == mine["generate"])


def kept_decoding(run, subset):
    """The decoding ``run``'s folder keeps for ``subset`` (gzip'd, else plain), or None."""
    for path in (run.kept_output[subset], run.output[subset]):
        if path.is_file():
            return path
    return None


def redoable(run, old):
    """Whether ``--redo-postprocess`` applies: a postprocessed run with a stored result of the
    same training and decoding, whose folder keeps every subset's decoding."""
    return (old is not None and all(run.postprocess.values()) and same_decoding(run, old)
            and all(kept_decoding(run, subset) for subset in run.subsets))


def redo_postprocess(run, env, old):
    """``run``'s result made from the stored result ``old`` and the decoding its folder keeps:
    postprocessed with this run's command and scored again; the training and decoding figures
    (and everything else of ``old``) kept."""
    label = f"({run.pair}, {run.system['name']}, seed {run.seed})"
    subsets = {}
    for subset in run.subsets:
        check_text(run, subset)
        kept = kept_decoding(run, subset)
        if kept is None:
            raise LabError(f"{label}: --redo-postprocess needs the decoding the run keeps "
                             f"({run.kept_output[subset]}); without it, decode again (drop "
                             f"--redo-postprocess)")
        if kept != run.output[subset]:
            with gzip.open(kept, "rb") as src, open(run.output[subset], "wb") as dst:
                shutil.copyfileobj(src, dst)
        previous = (old.get("subsets") or {}).get(subset) or {}
        scores, record = score_output(run, subset, env, label)
        scores.update({k: previous[k] for k in ("decode", "generate_seconds") if k in previous})
        if record is not None:
            scores["postprocess_record"] = record
        subsets[subset] = scores
    main = subsets[run.subsets[0]]
    new = dict(old, subsets=subsets, postprocess=run.postprocess[run.subsets[0]],
               commands=run.recorded())
    new.update({k: main[k] for k in ("tok_bleu", "sacrebleu", "chrf", "ter", "signatures")})
    return new
