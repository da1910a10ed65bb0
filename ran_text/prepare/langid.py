"""Language identification of train pairs (--lang-filter)."""
import logging
from typing import Dict, Optional

import numpy

from .options import PrepareError

LANGID_PACKAGE = "py3langid"
LANGID_MISSING = (f"--lang-filter needs the Python package {LANGID_PACKAGE} (offline language "
                  f"identification, a maintained fork of langid.py), which is not installed. "
                  f"Install it into this environment with: pip install {LANGID_PACKAGE} "
                  f"numpy=={numpy.__version__} (keeping the NumPy that fairseq's extensions "
                  f"were built against; the project's extra 'langid', which "
                  f"scripts/setup-env.sh installs), or drop --lang-filter")
_LANGID: Dict[tuple, "LanguageFilter"] = {}


def _import_langid():
    try:
        from py3langid import langid
    except ImportError as err:
        raise PrepareError(LANGID_MISSING) from err
    return langid


class LanguageFilter:
    """Is a train pair in its two languages? py3langid (langid.py's naive Bayes model over byte
    n-grams, bundled with the package, offline) with its candidates restricted to the pair's two
    languages decides, for each side, which of the two it is more likely to be. A pair is dropped
    when its source side is identified as the target language or its target side as the source
    language: swapped pairs, untranslated copies, and text in a third language that resembles the
    wrong side (a third language is always mapped onto one of the two, so French that looks more
    English than German passes on an English side). A side without letters, or on which the two
    scores tie (nothing the model knows), is not judged."""

    def __init__(self, src: str, tgt: str):
        langid = _import_langid()
        cls = langid.LanguageIdentifier
        # py3langid 0.4 ships an npz model (from_model_file); 0.2-0.3 a pickled one.
        load = getattr(cls, "from_model_file", None) or getattr(cls, "from_pickled_model", None)
        if load is None:
            raise PrepareError(f"--lang-filter: this version of {LANGID_PACKAGE} has neither "
                               f"LanguageIdentifier.from_model_file nor from_pickled_model; "
                               f"install a version between 0.2.2 and 0.4")
        self.identifier = load(langid.MODEL_FILE)
        logging.getLogger(langid.__name__).setLevel(logging.INFO)  # no debug line per call
        try:
            self.identifier.set_languages([src, tgt])
        except ValueError as err:
            raise PrepareError(f"--lang-filter: {LANGID_PACKAGE} cannot identify the languages "
                               f"{src!r} and {tgt!r} (--src/--tgt): {err}") from err
        self.src, self.tgt = src, tgt

    def language(self, text: str) -> Optional[str]:
        """``src`` or ``tgt``, whichever ``text`` is more likely in; None without evidence."""
        if not any(c.isalpha() for c in text):
            return None
        (best, score), (_, other) = self.identifier.rank(text)[:2]
        return None if score == other else best

    def verdict(self, src_line: str, tgt_line: str) -> int:
        """0: keep the pair; else bit 1: the source side is in the target language, bit 2: the
        target side is in the source language."""
        src_wrong = self.language(src_line) == self.tgt
        tgt_wrong = self.language(tgt_line) == self.src
        return int(src_wrong) + 2 * int(tgt_wrong)

    def keep(self, src_line: str, tgt_line: str) -> bool:
        return self.verdict(src_line, tgt_line) == 0


def language_filter(src: str, tgt: str) -> LanguageFilter:
    """The ``LanguageFilter`` of a pair, loaded once per process (forked workers inherit it)."""
    if (src, tgt) not in _LANGID:
        _LANGID[(src, tgt)] = LanguageFilter(src, tgt)
    return _LANGID[(src, tgt)]
