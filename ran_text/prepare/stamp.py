"""The stamp (what a data-bin was built from), the clearing of an old build, and the lock that
serializes builds of one data-bin."""
import contextlib
import json
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..corpora import Part
from .langid import LANGID_PACKAGE
from .options import SPLITS, Options, PrepareError, say
from .. import textio

STAMP = "prepare-stamp.json"
# written before a build touches the data-bin, removed once its stamp is: a data-bin that holds it
# is a build of this tool that was stopped (a killed engine), made again without --force
BUILDING = "prepare-building.json"
STAMP_VERSION = 1
_LATER_OPTIONS = {"nwords_src": 0, "nwords_tgt": 0, "joined_dictionary": True,
                  "lang_filter": False}
# What a build found rather than what it was asked for: kept in the stamp, not compared.
_STAMP_RESULTS = ("outputs", "language_filter")


def _tool_versions(extra: Sequence[str] = ()) -> Dict[str, str]:
    versions = {}
    for name in ("sacremoses", "subword-nmt", "fairseq", "fairseq-fixed", *extra):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def _output_names(opts: Options, extra_tests: Sequence[str] = ()) -> List[str]:
    s, t = opts.src, opts.tgt
    scored = ("valid", "test", *extra_tests)
    names = [f"dict.{s}.txt", f"dict.{t}.txt", "preprocess.log"]
    if opts.bpe_merges > 0:
        names.append("code")
    names += [f"{split}.tok.{lang}" for split in scored for lang in (s, t)]
    names += [f"{split}.{s}-{t}.{lang}.{ext}" for split in (*SPLITS, *extra_tests)
              for lang in (s, t)
              for ext in ("bin", "idx")]
    names += [f"{split}.raw.{lang}" for split in scored for lang in (s, t)]
    return names


def _make_stamp(splits: Dict[str, List[Part]], opts: Options, corpus: str) -> dict:
    inputs = {}
    for parts in splits.values():
        for part in parts:
            for path in part.files():
                st = path.stat()
                inputs[str(path.resolve())] = [st.st_size, st.st_mtime_ns]
    return {
        "version": STAMP_VERSION,
        "corpus": corpus,
        "options": {k: v for k, v in asdict(opts).items()
                    if k not in _LATER_OPTIONS or v != _LATER_OPTIONS[k]},
        "splits": {split: [[str(Path(p.src).resolve()), str(Path(p.tgt).resolve()), p.fmt,
                            p.ascii_apostrophe] for p in parts]
                   for split, parts in splits.items()},
        "inputs": inputs,
        "tools": _tool_versions([LANGID_PACKAGE] if opts.lang_filter else []),
    }


# the stamp's shape: its keys and the type of each (what a build, and a later check, read of it)
_STAMP_SHAPE = {"version": int, "corpus": str, "options": dict, "splits": dict, "inputs": dict,
                "tools": dict}


def _stamp_problem(stamp) -> Optional[str]:
    """What a stamp read from disk lacks (None if it has the stamp's shape)."""
    if not isinstance(stamp, dict):
        return f"it holds {textio.json_kind(stamp)}, not an object"
    for key, kind in _STAMP_SHAPE.items():
        if not isinstance(stamp.get(key), kind) or isinstance(stamp.get(key), bool):
            return f'its "{key}" is missing or not {textio.json_kind(kind())}'
    outputs = stamp.get("outputs", [])
    if not (isinstance(outputs, list) and all(isinstance(n, str) for n in outputs)):
        return 'its "outputs" is not a list of file names'
    return None


def _read_stamp(out_dir: Path, force: bool = False) -> Optional[dict]:
    """The stamp of ``out_dir`` (None if it has none). One that cannot be read (not JSON, too
    large or too deep, not of the stamp's shape) is a one-line PrepareError naming it, unless
    ``force`` (the data-bin is rebuilt: the stamp is then taken as absent)."""
    path = out_dir / STAMP
    if not path.is_file():
        return None
    fix = "rebuild the data-bin with --force"
    try:
        stamp = textio.read_json(path, "the data-bin's stamp", fix)
        problem = _stamp_problem(stamp)
    except textio.BadTextFile as e:
        stamp, problem = None, str(e)
    if problem is None:
        return stamp
    if force:
        return None
    if str(path) in problem:
        raise PrepareError(problem)
    raise PrepareError(f"{path} (the data-bin's stamp) is not one this tool writes ({problem}); "
                       f"it was edited or made by another program: {fix}")


def _prepare_out_dir(out_dir: Path, outputs: List[str], old: Optional[dict], force: bool) -> None:
    """Remove the files a previous build left (those named by its stamp and ours), refusing to
    overwrite a data-bin this tool did not make unless ``force``."""
    from ran_text import textio

    dicts = [n for n in outputs if n.startswith("dict.")]
    stopped = _read_building(out_dir)  # a build of this tool that never finished
    if old is None and stopped is None and not force \
            and any((out_dir / n).exists() for n in dicts):
        raise PrepareError(f"{out_dir} already holds a data-bin without {STAMP} (not made by "
                           f"this tool): choose another --out, or pass --force to overwrite it")
    if stopped is not None:
        say(f"{out_dir}: a build of this data-bin was stopped before it finished (it holds "
            f"{BUILDING}); making it again")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = set(outputs) | set((old or {}).get("outputs", [])) | set(stopped or [])
    textio.write_json(out_dir / BUILDING, {"outputs": sorted(names)})
    (out_dir / STAMP).unlink(missing_ok=True)
    for name in names:
        if Path(name).name == name:  # plain file names only, never a path out of out_dir
            (out_dir / name).unlink(missing_ok=True)


def _read_building(out_dir: Path) -> Optional[List[str]]:
    """The file names a stopped build of ``out_dir`` was making (its BUILDING record), or None."""
    try:
        record = json.loads((out_dir / BUILDING).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # cut short as it was written: still this tool's
        return []
    names = record.get("outputs") if isinstance(record, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def finished(out_dir: Path) -> None:
    """The build of ``out_dir`` is whole (its stamp written): no longer a stopped one."""
    (out_dir / BUILDING).unlink(missing_ok=True)


@contextlib.contextmanager
def _exclusive(out_dir: Path):
    """Hold an exclusive lock on ``out_dir`` (a lock file beside it) so that two processes that
    prepare the same data-bin at once (two reproductions, say) build it one after the other
    instead of writing the same files together; the second then finds it up to date."""
    from ran_text.textio import waiting_lock

    with waiting_lock(out_dir, "the data-bin", out_dir.parent / f".{out_dir.name}.lock", say):
        yield
