"""Multi30k: where its raw files come from (a named folder, the mirror beside the checkout, the
user cache, a download), and its data-bin."""
import os
from pathlib import Path
from typing import Optional, Sequence

from ..corpora import (MULTI30K_LANGS, MULTI30K_SPLITS, CorpusError, Part, fetch_multi30k,
                       missing_files, multi30k_cache, multi30k_files, multi30k_url)
from .options import Options, PrepareError, data_bin_root, say
from .pipeline import prepare

def _multi30k_default_download() -> Optional[bool]:
    """MULTI30K_DOWNLOAD: 1 downloads what a named --raw-dir / MULTI30K_DIR lacks, 0 never
    downloads; unset (None) downloads only when no folder has the files."""
    value = os.environ.get("MULTI30K_DOWNLOAD", "")
    return None if value == "" else value != "0"


def resolve_multi30k_raw(raw_dir: Optional[Path], work: Path, langs: Sequence[str],
                         download: Optional[bool] = None, url: Optional[str] = None) -> Path:
    """The directory holding the Multi30k files for ``langs``, the first of:

    1. ``raw_dir`` (--raw-dir, else $MULTI30K_DIR) when one is named; it must have the files,
       unless ``download`` is True (--download, MULTI30K_DOWNLOAD=1): then the cache (3-4) does;
    2. an earlier download into ``work/raw`` (where data-bins made before the cache fetched to);
    3. the user cache (``multi30k_cache``: $XDG_CACHE_HOME/ran_fairseq/multi30k, else
       ~/.cache/ran_fairseq/multi30k), when it has the files (no request is made);
    4. a download into that cache from ``url`` (default $MULTI30K_URL, else ``MULTI30K_URL``),
       each file checked against its published SHA-256; not when ``download`` is False
       (MULTI30K_DOWNLOAD=0)."""
    url = (url or multi30k_url()).rstrip("/")
    cache = multi30k_cache()
    files = f"{{{','.join(MULTI30K_SPLITS.values())}}}.{{{','.join(langs)}}}.gz"
    named = ""
    if raw_dir is not None:
        raw_dir = Path(raw_dir).resolve()
        missing = missing_files(multi30k_files(raw_dir, langs))
        if not missing:
            return raw_dir
        named = (f"Multi30k raw files not found in {raw_dir} (--raw-dir or MULTI30K_DIR): "
                 f"missing {', '.join(p.name for p in missing)}")
        if not download:
            raise PrepareError(
                f"{named}. Point --raw-dir (or the MULTI30K_DIR environment variable) at a "
                f"directory with {files}, or unset it to use the download cache {cache}, or pass "
                f"--download (or set MULTI30K_DOWNLOAD=1) to fetch the missing files from {url} "
                f"into that cache.")
    else:
        fetched = work / "raw"
        if not missing_files(multi30k_files(fetched, langs)):
            say(f"using the Multi30k files downloaded earlier to {fetched}")
            return fetched
    if not missing_files(multi30k_files(cache, langs)):
        say(f"reading Multi30k from the cache {cache}")
        return cache
    if download is False:
        raise PrepareError(
            f"Multi30k raw files not found (in MULTI30K_DIR or --raw-dir, beside the checkout, "
            f"or in the cache {cache}) and MULTI30K_DOWNLOAD=0 forbids downloading them from "
            f"{url}: set MULTI30K_DIR to a directory with {files}, or unset MULTI30K_DOWNLOAD.")
    try:
        return fetch_multi30k(cache, langs, url)
    except CorpusError as err:
        raise PrepareError(f"{named}, and {err}" if named else str(err)) from err


def prepare_multi30k(opts: Options, raw_dir=None, out_dir=None, work_dir=None,
                     download_missing: Optional[bool] = None, download_url: Optional[str] = None,
                     workers: Optional[int] = None, force: bool = False) -> bool:
    """Multi30k task 1 ``opts.src``->``opts.tgt`` (en, de, fr, cs): train / val -> valid /
    test_2016_flickr -> test. Raw files come from ``raw_dir`` (default ``$MULTI30K_DIR``), else
    the mirror beside the checkout, else the user cache, else a download into that cache
    (``download_missing``: default from MULTI30K_DOWNLOAD); see ``resolve_multi30k_raw``."""
    src, tgt = opts.src, opts.tgt
    for flag, lang in (("--src", src), ("--tgt", tgt)):
        if lang not in MULTI30K_LANGS:
            raise PrepareError(f"unsupported Multi30k language {lang!r} ({flag}): choose from "
                               f"{', '.join(MULTI30K_LANGS)}")
    if src == tgt:
        raise PrepareError(f"source and target language are both {src!r} (--src/--tgt)")
    if raw_dir is None:
        raw_dir = os.environ.get("MULTI30K_DIR") or None
    if out_dir is None:
        out_dir = data_bin_root() / f"multi30k.{src}-{tgt}"
    out_dir = Path(out_dir).resolve()
    work = Path(work_dir).resolve() if work_dir else out_dir / "prep"
    if download_missing is None:
        download_missing = _multi30k_default_download()
    raw = resolve_multi30k_raw(raw_dir, work, (src, tgt), download_missing, download_url)
    splits = {split: [Part(raw / f"{name}.{src}.gz", raw / f"{name}.{tgt}.gz", fmt="text")]
              for split, name in MULTI30K_SPLITS.items()}
    return prepare(splits, out_dir, opts, work, workers, force, corpus="multi30k")
