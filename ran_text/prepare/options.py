"""Where data-bins and raw corpora live, the options a data-bin depends on, and how the pipeline
speaks (``say``) and fails (``PrepareError``)."""
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional



def data_bin_root() -> Path:
    """Where data-bins go by default: ``./data-bin`` under the current directory (as fairseq's
    examples do; the checkout's scripts run from the checkout)."""
    return Path.cwd() / "data-bin"


SPLITS = ("train", "valid", "test")
# Optional further test sets, binarized by fairseq-preprocess as test1, test2, ... (its
# --testpref takes a comma-separated list) and decoded with fairseq-generate --gen-subset test1.
EXTRA_TESTS = ("test1",)
_LANG_CODE = re.compile(r"^[a-z]{2,3}$")


class PrepareError(Exception):
    """Bad input or a failed step; the message names the problem and the flag to change."""


def say(msg: str) -> None:
    print(f"prepare: {msg}", flush=True)


@dataclass(frozen=True)
class Cleaning:
    """Moses clean-corpus-n on train pairs: keep a pair when both sides are non-empty, have
    ``min_len``..``max_len`` tokens, and neither side is more than ``ratio`` times as long as the
    other (``ratio <= 0``: no ratio test). ``stage`` counts Moses tokens (``tok``) or BPE units
    (``bpe``; fairseq's WMT'14 recipe)."""

    max_len: int
    min_len: int = 1
    ratio: float = 1.5
    stage: str = "tok"

    def keep(self, n_src: int, n_tgt: int) -> bool:
        if n_src == 0 or n_tgt == 0:
            return False
        if not (self.min_len <= n_src <= self.max_len and self.min_len <= n_tgt <= self.max_len):
            return False
        return self.ratio <= 0 or (n_src / n_tgt <= self.ratio and n_tgt / n_src <= self.ratio)


@dataclass(frozen=True)
class Options:
    """What the data-bin depends on (everything here goes into the stamp)."""

    src: str
    tgt: str
    bpe_merges: int = 10000
    lowercase: bool = False
    normalize_punct: bool = False
    aggressive_dash_splits: bool = False
    clean: Optional[Cleaning] = None
    valid_every: int = 0  # > 0: valid = every N-th (kept) train pair, held out of train
    # Added after stamp version 1: recorded in the stamp only when they differ from these
    # defaults, so that data-bins made before them stay up to date.
    nwords_src: int = 0  # > 0: fairseq-preprocess --nwordssrc (specials included)
    nwords_tgt: int = 0  # > 0: fairseq-preprocess --nwordstgt
    joined_dictionary: bool = True
    lang_filter: bool = False  # drop train pairs whose sides py3langid puts in the wrong language


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
