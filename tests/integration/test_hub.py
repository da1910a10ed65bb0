"""Translating raw text: fairseq's hub interface (``Model.from_pretrained(...).translate``) and
fairseq-interactive for every architecture, and translation-time tokenization that matches the data
pipeline's (README, "Translating raw text"; ran_fairseq/hub.py, ran_text/tokenization.py).

The data-bin is made by the real pipeline (Moses, BPE) from a synthetic corpus whose words carry
dashes, quotes and ampersands, so that fairseq's default Moses options would tokenize differently."""
import gzip
import os
import random
from pathlib import Path

import pytest

from helpers import REPO, run_cli, train
from systems import TINY_DYNMEM, TINY_PA, TINY_RAN, TINY_TRANSFORMER

ARCHS = {
    "ran_transformer": ("ran_fairseq.models.ran_transformer", "RanTransformerModel", TINY_RAN),
    "recurrent_cross_transformer": ("ran_fairseq.models.recurrent_cross_transformer",
                                    "RecurrentCrossTransformerModel",
                                    (*TINY_TRANSFORMER, "--cross-attention", "coverage")),
    "rnnsearch_dynmem": ("ran_fairseq.models.rnnsearch_dynmem", "RNNSearchDynamicMemoryModel",
                         TINY_DYNMEM),
    "pervasive_attention": ("ran_fairseq.models.pervasive_attention", "PervasiveAttentionModel",
                            TINY_PA),
}

# Lines written for this test: dashes inside words, quotes, ampersands, apostrophes, brackets,
# pipes and angle brackets, the characters on which fairseq's default Moses options (aggressive
# dash splits, escaping) differ from the pipeline's.
SPECIAL_LINES = {
    "de": ["Ein Mann in einem schwarz-weißen T-Shirt spielt Gitarre.",
           'Eine Frau sagt "Hallo" & winkt ihrem Hund zu.',
           "Zwei Kinder (ein Junge und ein Mädchen) spielen im Sand - am Strand.",
           "Drei Arbeiter tragen rot-gelbe Helme | 3-4 Meter über dem Boden <oben>.",
           "Geht's dem Hund gut? Er hat 'nen Ball im Maul."],
    "en": ["A man in a black-and-white T-shirt plays guitar.",
           'A woman says "Hello" & waves to her dog.',
           "Two children (a boy and a girl) play in the sand - at the beach.",
           "Three workers wear red-yellow helmets | 3-4 meters above the ground <up>.",
           "The dog's fine, isn't it? It's got a ball in its mouth."],
}

MULTI30K = Path(os.environ.get("MULTI30K_DIR") or REPO.parent / "shared" / "data" / "multi30k")


def _special_corpus(raw, n_train=200, n_test=8, seed=0):
    """Synthetic de-en pairs over words like ``w3-w4``, ``"w5"`` and ``w1&w2``."""
    rng = random.Random(seed)
    raw.mkdir(parents=True, exist_ok=True)
    decorations = [lambda a, b: f"{a}-{b}", lambda a, b: f'"{a}"', lambda a, b: f"{a}&{b}",
                   lambda a, b: f"{a}'s", lambda a, b: a]
    for split, n in (("train", n_train), ("valid", 8), ("test", n_test)):
        src, tgt = [], []
        for _ in range(n):
            words = [rng.randrange(12) for _ in range(rng.randint(2, 8))]
            deco = [rng.randrange(len(decorations)) for _ in words]
            src.append(" ".join(decorations[d](f"w{w}", f"w{(w + 1) % 12}")
                                for w, d in zip(words, deco)))
            tgt.append(" ".join(decorations[d](f"v{w}", f"v{(w + 1) % 12}")
                                for w, d in zip(words, deco)))
        (raw / f"{split}.de").write_text("\n".join(src) + "\n", encoding="utf-8")
        (raw / f"{split}.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def pipeline_bin(tmp_path_factory):
    from ran_text.prepare import main

    root = tmp_path_factory.mktemp("hub")
    _special_corpus(root / "raw")
    out = root / "bin"
    assert main(["custom", "--src", "de", "--tgt", "en", "--out", str(out), "--bpe-merges", "40",
                 "--workers", "1", "--train-prefix", str(root / "raw" / "train"),
                 "--valid-prefix", str(root / "raw" / "valid"),
                 "--test-prefix", str(root / "raw" / "test")]) == 0
    return out


@pytest.fixture(scope="module")
def checkpoints(pipeline_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-ckpt")
    made = {}
    for arch, (_, _, flags) in ARCHS.items():
        train(pipeline_bin, root / arch, arch, flags, max_update=2)
        made[arch] = root / arch
    return made


def _model_class(arch):
    import importlib

    import ran_fairseq  # noqa: F401  (the documented first step)

    module, name, _ = ARCHS[arch]
    return getattr(importlib.import_module(module), name)


def _binarized_sources(data, hub):
    """The test set's source token ids as the pipeline binarized them, one tensor per line."""
    from fairseq.data import data_utils

    ds = data_utils.load_indexed_dataset(str(data / "test.de-en.de"), hub.src_dict)
    return [ds[i] for i in range(len(ds))]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_from_pretrained_translates_and_tokenizes_as_the_pipeline(arch, pipeline_bin, checkpoints):
    """The issue's call, with fairseq's tokenizer and BPE named explicitly: translate works, and
    encoding each raw test source gives exactly the ids the pipeline binarized for it."""
    hub = _model_class(arch).from_pretrained(
        str(checkpoints[arch]), checkpoint_file="checkpoint_last.pt",
        data_name_or_path=str(pipeline_bin), bpe="subword_nmt",
        bpe_codes=str(pipeline_bin / "code"), tokenizer="moses")
    hub.eval()
    assert type(hub.models[0]).__name__ == ARCHS[arch][1]
    assert hub.tokenizer.cfg.source_lang == "de" and hub.tokenizer.cfg.moses_no_dash_splits
    raw = (pipeline_bin / "test.raw.de").read_text(encoding="utf-8").splitlines()
    expected = _binarized_sources(pipeline_bin, hub)
    assert len(raw) == len(expected) == 8
    for line, ids in zip(raw, expected):
        assert hub.encode(line).tolist() == ids.tolist(), line
    out = hub.translate(raw[:3], beam=2, max_len_b=10)
    assert len(out) == 3 and all(isinstance(s, str) and s for s in out)
    assert isinstance(hub.translate(raw[0], beam=2, max_len_b=10), str)


def test_from_pretrained_defaults_come_from_the_data_bin(pipeline_bin, checkpoints):
    """Without tokenizer/BPE arguments, the plugin's from_pretrained takes them from the data-bin's
    record; fairseq's own defaults (here: passing them without the moses options to fairseq's
    TransformerModel) tokenize the dashed, quoted lines differently, which the record avoids."""
    from fairseq.models.transformer import TransformerModel

    arch = "ran_transformer"
    hub = _model_class(arch).from_pretrained(str(checkpoints[arch]), "checkpoint_last.pt",
                                             str(pipeline_bin))
    raw = (pipeline_bin / "test.raw.de").read_text(encoding="utf-8").splitlines()
    expected = _binarized_sources(pipeline_bin, hub)
    assert [hub.encode(s).tolist() for s in raw] == [e.tolist() for e in expected]
    plain = TransformerModel.from_pretrained(
        str(checkpoints[arch]), "checkpoint_last.pt", str(pipeline_bin), bpe="subword_nmt",
        bpe_codes=str(pipeline_bin / "code"), tokenizer="moses", source_lang="de",
        target_lang="en")
    assert [plain.encode(s).tolist() for s in raw] != [e.tolist() for e in expected]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_fairseq_interactive_with_recorded_flags(arch, pipeline_bin, checkpoints, tmp_path):
    """fairseq-interactive with the flags ``python -m ran_text.tokenization DATA`` prints:
    one translation per input line, and the source it shows is the pipeline's BPE segmentation."""
    from ran_text.tokenization import fairseq_flags

    raw = (pipeline_bin / "test.raw.de").read_text(encoding="utf-8").splitlines()
    bpe = (pipeline_bin / "prep" / "test.bpe.de").read_text(encoding="utf-8").splitlines()
    (tmp_path / "input.de").write_text("\n".join(raw) + "\n", encoding="utf-8")
    proc = run_cli("interactive", [
        pipeline_bin, "--user-dir", REPO / "ran_fairseq", "--path",
        checkpoints[arch] / "checkpoint_last.pt", "--cpu", "--beam", "2", "--max-len-b", "10",
        "--buffer-size", "3", "--batch-size", "3", "--input", tmp_path / "input.de",
        *fairseq_flags(pipeline_bin)])
    lines = proc.stdout.splitlines()
    shown = {int(l.split("\t")[0][2:]): l.split("\t")[1] for l in lines if l.startswith("S-")}
    hyps = [l for l in lines if l.startswith("D-")]
    assert len(hyps) == len(raw) == len(shown)
    assert [shown[i] for i in range(len(raw))] == bpe


def test_tokenization_cli(pipeline_bin, capsys):
    from ran_text.tokenization import main

    assert main([str(pipeline_bin)]) == 0
    out = capsys.readouterr().out.split()
    assert out[:4] == ["-s", "de", "-t", "en"]
    assert {"--moses-no-dash-splits", "--moses-no-escape", "--bpe-codes"} <= set(out)
    assert main([str(pipeline_bin.parent)]) == 1
    assert "prepare-stamp.json" in capsys.readouterr().err


def _multi30k_special_lines(lang, limit=200):
    path = MULTI30K / f"test_2016_flickr.{lang}.gz"
    if not path.is_file():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [l.strip() for l in f]
    return [l for l in lines if any(c in l for c in "-\"'&()<>|")][:limit]


@pytest.mark.parametrize("lang", ["de", "en"])
@pytest.mark.parametrize("aggressive", [False, True])
def test_translation_tokenizer_matches_the_pipeline(lang, aggressive, tmp_path):
    """fairseq's Moses tokenizer built from ``translation_options`` gives the pipeline's tokens
    (``prepare._tokenize_chunk``, what training saw) on lines with dashes and special characters
    (written here, plus Multi30k's test_2016 lines that have them where the corpus is present);
    fairseq's defaults do not."""
    from fairseq.data.encoders.moses_tokenizer import MosesTokenizer, MosesTokenizerConfig

    from ran_text.prepare import _tokenize_chunk
    from ran_text.tokenization import translation_options

    lines = SPECIAL_LINES[lang] + _multi30k_special_lines(lang)
    src, tgt = (lang, "xx") if lang == "de" else ("xx", lang)
    options = {"src": src, "tgt": tgt, "bpe_merges": 0, "aggressive_dash_splits": aggressive}
    pipeline = _tokenize_chunk((lang, False, False, aggressive, lines))

    def fairseq_tokens(**cfg):
        tok = MosesTokenizer(MosesTokenizerConfig(**cfg))  # what --tokenizer moses builds
        return [tok.encode(line) for line in lines]

    opts = translation_options(tmp_path, options)
    ours = fairseq_tokens(source_lang=lang, target_lang=lang,
                          moses_no_dash_splits=opts["moses_no_dash_splits"],
                          moses_no_escape=opts["moses_no_escape"])
    assert ours == pipeline
    assert fairseq_tokens(source_lang=lang, target_lang=lang) != pipeline


FIXTURES = Path(__file__).resolve().parents[1] / "data"


def test_from_pretrained_refuses_a_keyword_that_is_no_option_naming_the_closest():
    """fairseq passes every keyword on as an override that nothing reads: a misspelled option
    would load the checkpoint's value silently (docs/hydra.md)."""
    from ran_fairseq.models.recurrent_cross_transformer import RecurrentCrossTransformerModel

    def load(**kwargs):
        return RecurrentCrossTransformerModel.from_pretrained(
            str(FIXTURES / "options_v2"), checkpoint_file="recurrent_cross_transformer.pt",
            data_name_or_path=str(FIXTURES / "options_v1"), **kwargs)

    with pytest.raises(TypeError, match=r"'cross_attenton' \(did you mean 'cross_attention'\?\)"):
        load(cross_attenton="dot")
    with pytest.raises(TypeError, match=r"'beem' \(did you mean 'beam'\?\)"):
        load(beem=2)
    # the model's options, fairseq's (generation, task) and from_pretrained's own are taken
    hub = load(rescale_window=3, beam=2, source_lang="de", target_lang="en")
    assert hub.cfg.model.rescale_window == 3 and hub.cfg.generation.beam == 2
