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


def known_keywords(config_class):
    """The keywords ``from_pretrained`` passes on: the model's options (``config_class``),
    fairseq's own (every group of ``FairseqConfig``, its tasks', tokenizers', BPEs' and other
    registered components' options, the groups' names) and ``hub_utils.from_pretrained``'s."""
    import dataclasses
    import inspect

    from fairseq import hub_utils
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    classes = [config_class, *TASK_DATACLASS_REGISTRY.values()]
    classes += [c for registry in REGISTRIES.values()
                for c in registry["dataclass_registry"].values()]
    names = {f.name for f in dataclasses.fields(FairseqConfig)}
    for group in dataclasses.fields(FairseqConfig):
        if dataclasses.is_dataclass(group.type):
            classes.append(group.type)
    for cls in classes:
        names |= {f.name for f in dataclasses.fields(cls)}
    names |= set(inspect.signature(hub_utils.from_pretrained).parameters)
    return {name for name in names if not name.startswith("_")} | {"arch"}


def from_pretrained(cls, fairseq_from_pretrained, model_name_or_path, checkpoint_file,
                    data_name_or_path, kwargs):
    """``fairseq_from_pretrained`` (fairseq's ``BaseFairseqModel.from_pretrained``) for the model
    class ``cls``, refusing a keyword that is no option (fairseq would pass it on as an override
    no one reads), with DATA's recorded tokenization as the default, and a hub whose
    ``translate`` and ``sample`` take a sentence or a list of them."""
    import difflib

    known = known_keywords(cls.config_class())
    unknown = sorted(set(kwargs) - known)
    if unknown:
        own = sorted(f for f in cls.config_class().__dataclass_fields__ if not f.startswith("_"))

        def named(key):
            close = difflib.get_close_matches(key, own, n=1) \
                or difflib.get_close_matches(key, sorted(known), n=1)
            return repr(key) + (f" (did you mean {close[0]!r}?)" if close else "")

        raise TypeError(f"{cls.__name__}.from_pretrained() got a keyword that is no option of "
                        f"the model or of fairseq: {', '.join(map(named, unknown))}")
    kwargs = with_data_bin_defaults(model_name_or_path, data_name_or_path, kwargs)
    hub = fairseq_from_pretrained(cls, model_name_or_path, checkpoint_file=checkpoint_file,
                                  data_name_or_path=data_name_or_path, **kwargs)
    for name in ("translate", "sample"):  # a sentence or a list of them, never bytes or ""
        setattr(hub, name, _checked(getattr(hub, name)))
    return hub
