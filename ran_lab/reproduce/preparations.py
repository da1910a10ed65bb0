"""The corpora the engine prepares, a registry of the code: a config's ``"prepare"`` names one of
them with typed parameters, e.g. ``{"corpus": "multi30k", "bpe_merges": 0}``, and never a
program. Each entry says how it is prepared: ``ran_text.prepare`` in the engine's process (a corpus
of files on disk: Multi30k, or a config's own text files), or the checkout's download script of a
full-size corpus (``scripts/prepare-*.sh``, which fetches the corpus and then runs the same
pipeline). A new corpus is a new entry here (docs/adding-a-paper.md)."""
from dataclasses import dataclass
from typing import Optional, Tuple

from ..common import schema
from ran_lab.common import LabError


@dataclass(frozen=True)
class Corpus:
    """How a corpus is prepared: ``script`` (a download script of the checkout, run with
    ``lead`` before the pair and the flags), or None for ``ran_text.prepare``'s ``subcommand``
    in the engine's process. ``options``: the parameters of its own, beyond :data:`PARAMETERS`."""
    help: str
    script: Optional[str] = None
    lead: Tuple[str, ...] = ()
    subcommand: Optional[str] = None
    options: Tuple[str, ...] = ()


CORPORA = {
    "multi30k": Corpus("Multi30k task 1 (en, de, fr, cs; the raw files of shared/data/multi30k "
                       "or a download)", subcommand="multi30k"),
    "files": Corpus("a parallel corpus of text files: 'train', 'valid' and 'test' (and "
                    "optionally 'test1') name prefixes PREFIX (PREFIX.SRC and PREFIX.TGT)",
                    subcommand="custom", options=("train", "valid", "test", "test1")),
    "iwslt14": Corpus("IWSLT'14 German-English (fairseq's prepare-iwslt14.sh)",
                      script="scripts/prepare-iwslt14.sh", options=("test_sets",)),
    "iwslt17-en-it": Corpus("IWSLT'17 English-Italian", script="scripts/prepare-iwslt17-en-it.sh"),
    "nist-zh-en": Corpus("NIST Chinese-English (LDC corpora)",
                         script="scripts/prepare-nist-zh-en.sh"),
    "wmt14-en-de": Corpus("WMT'14 English-German", script="scripts/prepare-wmt14-en-de.sh"),
    "wmt16-ro-en": Corpus("WMT'16 Romanian-English", script="scripts/prepare-wmt16-ro-en.sh"),
    "wmt17-en-tr": Corpus("WMT'17 English-Turkish", script="scripts/prepare-wmt-en-tr.sh",
                          lead=("2017",)),
    "wmt18-en-tr": Corpus("WMT'18 English-Turkish", script="scripts/prepare-wmt-en-tr.sh",
                          lead=("2018",)),
}

# the parameters every corpus takes: ran-prepare's processing options (docs/data.md), the name of
# each its flag with "_" for "-"; "out": the data-bin, {src} and {tgt} replaced
_PATH = schema.Str(nonempty=True, line=True)
PARAMETERS = {
    "bpe_merges": schema.Int(0), "nwords_src": schema.Int(0), "nwords_tgt": schema.Int(0),
    "joined_dictionary": schema.Bool(), "lowercase": schema.Bool(),
    "normalize_punct": schema.Bool(), "aggressive_dash_splits": schema.Bool(),
    "clean_max_len": schema.Int(0), "clean_min_len": schema.Int(0),
    "clean_ratio": schema.Num(0), "clean_on": schema.Str(choices=("tok", "bpe")),
    "lang_filter": schema.Bool(), "out": _PATH,
}
OPTIONS = {"train": _PATH, "valid": _PATH, "test": _PATH, "test1": _PATH,
           "test_sets": schema.Str(choices=("fairseq", "elbayad2018"))}
# the splits of a corpus of files, each a prefix (ran-prepare custom --SPLIT-prefix)
FILE_SPLITS = ("train", "valid", "test", "test1")

EXAMPLE = '"prepare": {"corpus": "multi30k", "bpe_merges": 10000}'


def spec(corpus):
    """The schema of a ``"prepare"`` naming ``corpus`` (its parameters and its own options)."""
    own = {name: OPTIONS[name] for name in CORPORA[corpus].options}
    required = {name: own.pop(name) for name in ("train", "valid", "test") if name in own}
    return schema.Obj(required={"corpus": schema.Str(choices=tuple(CORPORA)), **required},
                      optional={**PARAMETERS, **own})


def check(prepare, path):
    """A config's ``"prepare"`` (``path``: the config) checked: null, or an object naming a
    corpus of :data:`CORPORA` with its typed parameters; anything else is one line saying what
    to write (an argv, as configs held before, included)."""
    if prepare is None:
        return None
    if isinstance(prepare, list):
        raise LabError(f"config {path}: \"prepare\" names a corpus of the engine and its "
                         f"parameters, not a command: write e.g. {EXAMPLE} (corpora: "
                         f"{', '.join(CORPORA)}; docs/adding-a-paper.md)")
    if not isinstance(prepare, dict):
        raise LabError(f"config {path}: \"prepare\": expected null or an object naming a "
                         f"corpus (e.g. {EXAMPLE}), found {schema.found(prepare)}")
    corpus = prepare.get("corpus")
    if corpus not in CORPORA:
        raise LabError(f"config {path}: \"prepare.corpus\": {schema.found(corpus)} is not a "
                         f"corpus of the engine; the corpora: {', '.join(CORPORA)} (a new corpus "
                         f"is an entry of ran_lab/reproduce/preparations.py)")
    schema.check(prepare, spec(corpus), path, "config, \"prepare\"")
    for name, value in prepare.items():
        try:
            if isinstance(value, str) and name != "corpus":
                value.format(src="de", tgt="en")
        except (KeyError, IndexError, ValueError):
            raise LabError(f"config {path}: \"prepare.{name}\": {value!r} holds a placeholder "
                             f"other than {{src}} and {{tgt}}") from None
    return prepare


def flags(prepare, src, tgt):
    """ran-prepare's flags for a checked ``prepare`` of the pair ``src``-``tgt``."""
    fields = {"src": src, "tgt": tgt}
    argv = []
    for name, value in prepare.items():
        if name == "corpus":
            continue
        flag = "--" + name.replace("_", "-")
        if name in FILE_SPLITS:
            flag += "-prefix"
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, str(value).format(**fields) if isinstance(value, str) else str(value)]
    return argv


def command(prepare, src, tgt):
    """(script or None, argv): what prepares ``src``-``tgt``: the corpus's script and its
    arguments, or (None, ran-prepare's arguments) for a preparation in the engine's process."""
    corpus = CORPORA[prepare["corpus"]]
    if corpus.script is None:
        return None, [corpus.subcommand, "--src", src, "--tgt", tgt, *flags(prepare, src, tgt)]
    return corpus.script, [*corpus.lead, src, tgt, *flags(prepare, src, tgt)]
