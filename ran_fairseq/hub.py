"""fairseq's hub interface for the plugin's models, tokenizing raw text as the data pipeline did.

``Model.from_pretrained(checkpoint_dir, checkpoint_file=..., data_name_or_path=DATA, ...)`` is
fairseq's (``BaseFairseqModel.from_pretrained`` → ``fairseq.hub_utils``); for the plugin's models it
first reads how DATA's text was tokenized (``prepare-stamp.json``, see
``ran_text.tokenization``) and uses that as the default of every tokenizer and BPE option
the caller leaves out: the language pair, ``tokenizer='moses'`` with the pipeline's dash-split
setting and no escaping, and ``bpe='subword_nmt'`` with DATA's codes. fairseq's own defaults (dash
splits, escaping, English Moses rules) would feed the model tokens it never saw in training.
Options given by the caller win; a data-bin the pipeline did not make gets fairseq's behaviour.
"""
import logging
import os

from fairseq.models import BaseFairseqModel

from ran_text.tokenization import NoRecordError, recorded_options, translation_options, unreproduced

logger = logging.getLogger(__name__)


def _data_dir(model_name_or_path, data_name_or_path):
    # As fairseq.hub_utils.from_pretrained resolves it: '.'-prefixed paths are inside the model dir.
    if data_name_or_path.startswith("."):
        return os.path.abspath(os.path.join(str(model_name_or_path), data_name_or_path))
    return data_name_or_path


def with_data_bin_defaults(model_name_or_path, data_name_or_path, kwargs):
    """``kwargs`` completed with the data-bin's recorded tokenization (caller's values win)."""
    data = _data_dir(model_name_or_path, data_name_or_path)
    try:
        options = recorded_options(data)
    except NoRecordError:
        return dict(kwargs)
    merged = dict(kwargs)
    defaults = translation_options(data, options)
    if merged.get("tokenizer", "moses") != "moses":  # another tokenizer: leave its options alone
        defaults = {k: v for k, v in defaults.items() if not k.startswith("moses_")
                    and k != "tokenizer"}
    if merged.get("bpe", defaults.get("bpe")) != defaults.get("bpe"):
        defaults.pop("bpe_codes", None)
    for key, value in defaults.items():
        merged.setdefault(key, value)
    for note in unreproduced(data, options):
        logger.warning("%s: %s", data, note)
    return merged


def checked_sentences(sentences):
    """``sentences`` if it is a sentence (str) or a list of them, each holding a word; else a
    TypeError or ValueError saying what the hub takes (fairseq would read bytes as one sentence
    per byte, and make up a translation of an empty one)."""
    many = isinstance(sentences, (list, tuple))
    for sentence in (sentences if many else [sentences]):
        if not isinstance(sentence, str):
            raise TypeError(f"translate() takes a sentence (str) or a list of sentences, not "
                            f"{type(sentence).__name__}"
                            + (" (decode bytes first: data.decode('utf-8'))"
                               if isinstance(sentence, (bytes, bytearray)) else ""))
        if not sentence.strip():
            raise ValueError(f"translate() was given an empty sentence ({sentence!r}): it has "
                             f"no word to translate; leave it out")
    return list(sentences) if many else sentences


def _checked(method):
    def call(sentences, *args, **kwargs):
        return method(checked_sentences(sentences), *args, **kwargs)
    call.__doc__ = method.__doc__
    return call


def _from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".",
                     **kwargs):
    kwargs = with_data_bin_defaults(model_name_or_path, data_name_or_path, kwargs)
    hub = BaseFairseqModel.from_pretrained.__func__(
        cls, model_name_or_path, checkpoint_file=checkpoint_file,
        data_name_or_path=data_name_or_path, **kwargs)
    for name in ("translate", "sample"):  # a sentence or a list of them, never bytes or ""
        setattr(hub, name, _checked(getattr(hub, name)))
    return hub


def add_data_bin_defaults(cls):
    """Give ``cls`` a ``from_pretrained`` that applies ``with_data_bin_defaults`` first."""
    method = classmethod(_from_pretrained)
    method.__func__.__doc__ = __doc__
    cls.from_pretrained = method
    return cls
