"""Raw parallel text -> fairseq data-bin, in one place for every corpus.

Pipeline (``prepare``): read the raw splits (``corpora.Part``) -> optional language filtering of
train (``--lang-filter``: py3langid on the raw text, see ``LanguageFilter``) -> optional Moses
punctuation normalization -> Moses tokenization (sacremoses, language-specific, no XML escaping)
-> optional lowercasing -> optional length cleaning of train (Moses clean-corpus-n: token counts
and length ratio, on tokens or on BPE units) -> optional hold-out of every N-th train pair as
valid -> joint BPE (subword-nmt) learned on train source+target -> BPE applied to every split ->
``fairseq-preprocess --joined-dictionary``. With ``bpe_merges = 0`` the Moses tokens are binarized
as they are (word-level vocabularies), optionally cut to the most frequent ``nwords_src`` /
``nwords_tgt`` words (the rest become ``<unk>``) and with one dictionary per language.

The data-bin then holds, besides fairseq's ``dict.{src,tgt}.txt`` and ``{train,valid,test}.*``:
  ``code``                        the BPE merges (fairseq-generate --bpe subword_nmt --bpe-codes;
                                  none at word level)
  ``{valid,test}.tok.{src,tgt}``  the Moses-tokenized text before BPE: the references of tokenized
                                  BLEU (``ran_lab.reproduce``) and, at word level, the tokens
                                  the model reads (``ran_text.replace_unk``)
  ``{valid,test}.raw.{src,tgt}``  untokenized text (lowercased under --lowercase) for scoring
  ``prepare-stamp.json``          the parameters, inputs and tool versions: rerunning with the same
                                  ones does nothing, with different ones rebuilds (and, under
                                  --lang-filter, how many train pairs the filter dropped)
Intermediate text (raw / tokenized / BPE, per split and language) goes to a work dir,
``<out>/prep`` by default. Tokenization and BPE application run over ``--workers`` processes.

CLI: ``python -m ran_text.prepare {multi30k,iwslt14,custom} --help`` (``ran-prepare``).

Modules: ``options`` (paths, ``Options``, ``Cleaning``, ``PrepareError``), ``langid`` (the
language filter), ``parallel`` (the worker pool and its chunk functions), ``steps`` (tokenize,
filter, BPE, binarize), ``stamp`` (the stamp, the clearing of an old build, the lock),
``pipeline`` (``prepare``), ``multi30k`` (its raw files and data-bin), ``cli``.
"""
from .cli import build_parser, main, run
from .langid import LANGID_MISSING, LANGID_PACKAGE, LanguageFilter, language_filter
from .multi30k import prepare_multi30k, resolve_multi30k_raw
from .options import (EXTRA_TESTS, SPLITS, Cleaning, Options, PrepareError, data_bin_root,
                      default_workers, say)
from .parallel import _tokenize_chunk  # noqa: F401  (tests import it from here)
from .pipeline import prepare
from .stamp import STAMP, STAMP_VERSION
from .steps import (apply_bpe_file, binarize, filter_languages, filter_pairs, learn_bpe_codes,
                    tokenize_split)

__all__ = [
    "EXTRA_TESTS", "LANGID_MISSING", "LANGID_PACKAGE", "SPLITS", "STAMP", "STAMP_VERSION",
    "Cleaning", "LanguageFilter", "Options", "PrepareError", "apply_bpe_file", "binarize",
    "build_parser", "data_bin_root", "default_workers", "filter_languages", "filter_pairs",
    "language_filter", "learn_bpe_codes", "main", "prepare",
    "prepare_multi30k", "resolve_multi30k_raw", "run", "say", "tokenize_split",
]
