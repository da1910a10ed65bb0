"""What a run's scores were computed from, by SHA-256: its hypotheses (``hyp.detok.txt``), the
data-bin's raw and tokenized references, and the data-bin's recipe (its ``prepare-stamp.json``'s
corpus and options: what the data-bin was made of, not where or when). Each subset of a result
records them (``"sha256"``); ``--resume`` then refuses a stored score whose input changed under the
same path, naming the file, unless ``--rescore`` asks for the run to be scored against it."""
import hashlib
import json

from ran_text import textio
from ran_text.prepare.stamp import STAMP
from ran_lab.common import LabError

# the stamp's fields that say what a data-bin holds (the others: its inputs' paths and times, the
# tools' versions, what a build found)
RECIPE = ("version", "corpus", "options")


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recipe_sha256(data):
    """The SHA-256 of the data-bin ``data``'s recipe (its stamp's :data:`RECIPE` fields as
    canonical JSON), or None where it has no stamp (a data-bin given with --data from
    elsewhere)."""
    path = data / STAMP
    if not path.is_file():
        return None
    try:
        stamp = textio.read_json(path, "the data-bin's stamp", "rebuild the data-bin with "
                                 "ran-prepare --force", shape=dict)
    except textio.BadTextFile as e:
        raise LabError(str(e)) from None
    recipe = {k: stamp.get(k) for k in RECIPE}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def files(run, subset):
    """{name: path} of the inputs recorded for ``subset``."""
    return {"hyps": run.hyp_file[subset], "refs": run.raw_ref[subset],
            "tok_refs": run.tok_ref[subset]}


def hashes(run, subset):
    """The SHA-256 of ``subset``'s inputs as they are now: {"hyps", "refs", "tok_refs",
    "data_bin"} (a file that is not here: None)."""
    found = {name: file_sha256(path) if path.is_file() else None
             for name, path in files(run, subset).items()}
    found["data_bin"] = recipe_sha256(run.data)
    return found


def changed(run, subset, recorded):
    """The first input of ``subset`` whose file is here and differs from what ``recorded`` (a
    subset's ``"sha256"``) says it was: (name, path), or None."""
    now = hashes(run, subset)
    where = dict(files(run, subset), data_bin=run.data / STAMP)
    for name, digest in recorded.items():
        if name in now and now[name] is not None and digest is not None and now[name] != digest:
            return name, where[name]
    return None


WHAT = {"hyps": "the run's hypotheses", "refs": "the references",
        "tok_refs": "the tokenized references", "data_bin": "the data-bin's recipe"}


def refuse_changed(run, subset, recorded):
    """A one-line LabError naming the input of ``subset`` that changed since it was scored."""
    found = changed(run, subset, recorded)
    if found is None:
        return
    name, path = found
    raise LabError(f"{path} ({WHAT[name]} of {run.pair} {run.system['name']} seed {run.seed}, "
                     f"{subset}) changed since the run was scored: its SHA-256 is not the one "
                     f"{run.dir / 'result.json'} records. Restore it, or rerun with --rescore to "
                     f"score the run against it")
