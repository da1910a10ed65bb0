"""The data pipeline (ran_fairseq.data): raw-corpus readers, the cleaning rule, Multi30k end to end
on a 300-sentence slice of the real files, and the scripts/prepare-*.sh wrappers run offline: a
stand-in curl serves hand-made archives, a stand-in python records the pipeline's arguments, and
for IWSLT'14, IWSLT'17 and WMT'17 those arguments are then run through the pipeline in-process."""
import gzip
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from ran_text import corpora
from ran_text import prepare as prepare_module
from ran_text.prepare import langid as prepare_langid
from ran_text.prepare import Cleaning, filter_pairs, language_filter, main

REPO = Path(__file__).resolve().parents[2]
MULTI30K = Path(os.environ.get("MULTI30K_DIR") or REPO.parent / "shared" / "data" / "multi30k")
SLICE = {"train": 300, "val": 60, "test_2016_flickr": 60}


def read(path):
    return Path(path).read_text(encoding="utf-8").splitlines()


def gz_lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def top_level_mtimes(d):
    return {p.name: p.stat().st_mtime_ns for p in Path(d).iterdir() if p.is_file()}


@pytest.fixture(autouse=True)
def own_download_cache(tmp_path, monkeypatch):
    """Each test downloads Multi30k into a cache of its own, from the default URL unless it says
    otherwise, and never into the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("MULTI30K_URL", raising=False)
    return tmp_path / "xdg-cache" / "ran_fairseq" / "multi30k"


@pytest.fixture(scope="module")
def raw_slice(tmp_path_factory):
    """The first lines of the real Multi30k de/en files, gzipped under the same names."""
    if not (MULTI30K / "train.de.gz").is_file():
        pytest.skip(f"Multi30k raw files not found in {MULTI30K} (set MULTI30K_DIR)")
    d = tmp_path_factory.mktemp("multi30k-slice")
    for name, n in SLICE.items():
        for lang in ("de", "en"):
            lines = gz_lines(MULTI30K / f"{name}.{lang}.gz")[:n]
            with gzip.open(d / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    return d


@pytest.fixture(scope="module")
def de_en_bin(raw_slice, tmp_path_factory):
    out = tmp_path_factory.mktemp("bin") / "multi30k.de-en"
    assert main(["multi30k", "--src", "de", "--tgt", "en", "--raw-dir", str(raw_slice),
                 "--out", str(out), "--bpe-merges", "300", "--workers", "2"]) == 0
    return out


# --- Multi30k end to end ----------------------------------------------------------------------
def test_multi30k_data_bin_contents(de_en_bin, raw_slice):
    from fairseq.data import Dictionary, data_utils

    out = de_en_bin
    assert (out / "dict.de.txt").read_bytes() == (out / "dict.en.txt").read_bytes()  # joined
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            for ext in ("bin", "idx"):
                assert (out / f"{split}.de-en.{lang}.{ext}").stat().st_size > 0
    assert read(out / "code")[0].startswith("#version")
    assert len(read(out / "code")) == 1 + 300
    # Raw references and sources: the untokenized input lines, in order.
    for split, name in (("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("de", "en"):
            assert read(out / f"{split}.raw.{lang}") == gz_lines(raw_slice / f"{name}.{lang}.gz")
    # BPE is reversible to the Moses tokens, and the binarized test set holds exactly that text.
    tok = read(out / "prep" / "test.tok.en")
    bpe = read(out / "prep" / "test.bpe.en")
    assert any("@@ " in line for line in bpe)
    assert [(line + " ").replace("@@ ", "").strip() for line in bpe] == tok
    assert tok[0].endswith(" .") and not read(out / "test.raw.en")[0].endswith(" .")
    # The tokenized references of tokenized BLEU lie in the data-bin itself.
    for split in ("valid", "test"):
        for lang in ("de", "en"):
            assert read(out / f"{split}.tok.{lang}") == read(out / "prep" / f"{split}.tok.{lang}")
    dictionary = Dictionary.load(str(out / "dict.en.txt"))
    test = data_utils.load_indexed_dataset(str(out / "test.de-en.en"), dictionary)
    assert len(test) == SLICE["test_2016_flickr"]
    assert dictionary.string(test[0][:-1]) == bpe[0]  # drop the final </s>
    train = data_utils.load_indexed_dataset(str(out / "train.de-en.de"), dictionary)
    assert len(train) == SLICE["train"]


def test_rerun_is_a_no_op(de_en_bin, raw_slice, capsys):
    before = top_level_mtimes(de_en_bin)
    assert main(["multi30k", "--src", "de", "--tgt", "en", "--raw-dir", str(raw_slice),
                 "--out", str(de_en_bin), "--bpe-merges", "300", "--workers", "1"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert top_level_mtimes(de_en_bin) == before


def test_changed_bpe_merges_rebuild(de_en_bin, raw_slice, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(de_en_bin, out)
    stamp = json.loads((out / "prepare-stamp.json").read_text())
    args = ["multi30k", "--src", "de", "--tgt", "en", "--raw-dir", str(raw_slice),
            "--out", str(out), "--workers", "2"]
    assert main(args + ["--bpe-merges", "300"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(args + ["--bpe-merges", "150"]) == 0
    assert "building" in capsys.readouterr().out
    assert len(read(out / "code")) == 1 + 150
    assert stamp["options"]["bpe_merges"] == 300
    assert json.loads((out / "prepare-stamp.json").read_text())["options"]["bpe_merges"] == 150
    assert (out / "dict.de.txt").read_bytes() == (out / "dict.en.txt").read_bytes()


def test_word_level_vocabularies(de_en_bin, raw_slice, tmp_path, capsys):
    """--bpe-merges 0: Moses tokens binarized as they are, one dictionary per language cut to
    --nwords-src/--nwords-tgt (specials included), the rest <unk>; the model's input tokens are
    kept beside the raw text. A BPE data-bin's stamp does not record the word-level options."""
    from fairseq.data import Dictionary, data_utils

    assert set(json.loads((de_en_bin / "prepare-stamp.json").read_text())["options"]) == {
        "src", "tgt", "bpe_merges", "lowercase", "normalize_punct", "aggressive_dash_splits",
        "clean", "valid_every"}
    out = tmp_path / "words"
    args = ["multi30k", "--src", "de", "--tgt", "en", "--raw-dir", str(raw_slice), "--out",
            str(out), "--bpe-merges", "0", "--nwords-src", "100", "--nwords-tgt", "60",
            "--no-joined-dictionary", "--workers", "1"]
    assert main(args) == 0
    assert "words" in capsys.readouterr().out and not (out / "code").exists()
    src_dict, tgt_dict = (Dictionary.load(str(out / f"dict.{lang}.txt")) for lang in ("de", "en"))
    def words(d):  # fairseq pads a dictionary to a multiple of 8 with madeupwordN
        return sum(1 for s in d.symbols if not s.startswith("madeupword"))

    assert [words(src_dict), words(tgt_dict)] == [100, 60]
    for split in ("valid", "test"):
        for lang in ("de", "en"):
            assert read(out / f"{split}.tok.{lang}") == read(out / "prep" / f"{split}.tok.{lang}")
    tok = read(out / "test.tok.en")
    test = data_utils.load_indexed_dataset(str(out / "test.de-en.en"), tgt_dict)
    for i in range(5):
        expected = [w if tgt_dict.index(w) != tgt_dict.unk() else "<unk>" for w in tok[i].split()]
        assert tgt_dict.string(test[i][:-1]).split() == expected
    assert any("<unk>" in tgt_dict.string(test[i]) for i in range(len(test)))
    assert main(args) == 0 and "up to date" in capsys.readouterr().out
    stamp = json.loads((out / "prepare-stamp.json").read_text())["options"]
    assert (stamp["bpe_merges"], stamp["nwords_tgt"], stamp["joined_dictionary"]) == (0, 60, False)


@pytest.mark.parametrize("flags,match", [
    (["--bpe-merges", "-1"], "--bpe-merges"),
    (["--nwords-src", "50", "--nwords-tgt", "40"], "--no-joined-dictionary"),
    (["--bpe-merges", "0", "--clean-max-len", "50", "--clean-on", "bpe"], "--clean-on tok"),
], ids=["negative-merges", "joined-sizes", "clean-on-bpe"])
def test_word_level_flag_errors(raw_slice, tmp_path, capsys, flags, match):
    assert main(["multi30k", "--src", "de", "--tgt", "en", "--raw-dir", str(raw_slice),
                 "--out", str(tmp_path / "o"), *flags]) == 1
    assert match in capsys.readouterr().err


def test_download_reverse_direction_lowercased(raw_slice, tmp_path, capsys, monkeypatch,
                                               own_download_cache):
    """en->de, lowercased, with the raw files missing from --raw-dir and fetched by --download
    into the cache (from a file:// mirror standing in for GitHub, its files' SHA-256 patched in);
    a second run finds them in the cache."""
    import hashlib

    monkeypatch.delenv("MULTI30K_DOWNLOAD", raising=False)
    for f in raw_slice.glob("*.gz"):
        monkeypatch.setitem(corpora.MULTI30K_SHA256, f.name,
                            hashlib.sha256(f.read_bytes()).hexdigest())
    out = tmp_path / "multi30k.en-de"
    args = ["multi30k", "--src", "en", "--tgt", "de", "--raw-dir", str(tmp_path / "absent"),
            "--out", str(out), "--bpe-merges", "200", "--lowercase", "--workers", "2"]
    assert main(args + ["--download", "--download-url", raw_slice.as_uri()]) == 0
    assert "downloading" in capsys.readouterr().out
    assert (own_download_cache / "train.en.gz").read_bytes() == \
        (raw_slice / "train.en.gz").read_bytes()
    assert (out / "dict.en.txt").read_bytes() == (out / "dict.de.txt").read_bytes()
    assert (out / "train.en-de.de.bin").is_file() and (out / "test.en-de.en.idx").is_file()
    raw_de = gz_lines(raw_slice / "test_2016_flickr.de.gz")
    assert read(out / "test.raw.de") == [line.lower() for line in raw_de]
    assert read(out / "test.raw.de") != raw_de
    bpe = (out / "prep" / "train.bpe.en").read_text(encoding="utf-8")
    assert bpe == bpe.lower()
    assert main(args + ["--download"]) == 0
    assert "from the cache" in capsys.readouterr().out


def test_missing_raw_dir_names_the_path(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MULTI30K_DOWNLOAD", raising=False)
    absent = tmp_path / "nowhere"
    monkeypatch.setenv("MULTI30K_DIR", str(absent))
    assert main(["multi30k", "--src", "de", "--tgt", "en", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert str(absent) in err and "train.de.gz" in err and "test_2016_flickr.en.gz" in err
    assert "--raw-dir" in err and "MULTI30K_DIR" in err
    # A failed download says so and still names the directory.
    assert main(["multi30k", "--src", "de", "--tgt", "en", "--out", str(tmp_path / "o"),
                 "--download", "--download-url", (tmp_path / "no-mirror").as_uri()]) == 1
    err = capsys.readouterr().err
    assert "download failed" in err and str(absent) in err
    assert not (tmp_path / "o" / "dict.de.txt").exists()


@pytest.mark.parametrize("src,tgt,expect", [("xx", "en", "'xx'"), ("de", "de", "both")])
def test_bad_language(src, tgt, expect, tmp_path, capsys):
    assert main(["multi30k", "--src", src, "--tgt", tgt, "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert expect in err and "--src" in err
    if src == "xx":
        assert "en, de, fr, cs" in err


def test_refuses_foreign_data_bin_and_misaligned_pairs(tmp_path, capsys):
    for name, text in (("a.de", "eins\nzwei\n"), ("a.en", "one\n"), ("b.de", "x\n"),
                       ("b.en", "y\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    common = ["custom", "--src", "de", "--tgt", "en", "--train-prefix", str(tmp_path / "a"),
              "--valid-prefix", str(tmp_path / "b"), "--test-prefix", str(tmp_path / "b"),
              "--workers", "1"]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "dict.de.txt").write_text("x 1\n")
    assert main(common + ["--out", str(foreign)]) == 1
    assert "--force" in capsys.readouterr().err and (foreign / "dict.de.txt").exists()
    assert main(common + ["--out", str(tmp_path / "new")]) == 1
    err = capsys.readouterr().err
    assert "a.de has 2 lines" in err and "a.en has 1" in err


KILLED_BUILD = """
import os, signal, sys
from ran_text.prepare import pipeline
from ran_text.prepare.cli import main

binarize = pipeline.binarize

def binarize_then_die(*args, **kwargs):  # the data-bin written, its stamp not yet
    binarize(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

pipeline.binarize = binarize_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_a_data_bin_a_killed_build_left_is_made_again_without_force(tmp_path, capsys):
    """A build SIGKILLed after fairseq-preprocess wrote the data-bin but before its stamp (an
    engine killed while it prepared) leaves a data-bin that is the tool's own: the next build
    (the engine's --resume) makes it again, where it used to refuse it as not made by this tool;
    a data-bin that no build of this tool began is still refused."""
    for name, text in (("a.de", "eins zwei\nzwei drei\n"), ("a.en", "one two\ntwo three\n"),
                       ("b.de", "eins\n"), ("b.en", "one\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    out = tmp_path / "bin"
    common = ["custom", "--src", "de", "--tgt", "en", "--train-prefix", str(tmp_path / "a"),
              "--valid-prefix", str(tmp_path / "b"), "--test-prefix", str(tmp_path / "b"),
              "--workers", "1", "--bpe-merges", "0", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH",
                                                                                  "")]))
    proc = subprocess.run([sys.executable, "-c", KILLED_BUILD, *common], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert (out / "dict.de.txt").is_file() and not (out / "prepare-stamp.json").exists()
    capsys.readouterr()
    assert main(common) == 0
    assert "was stopped before it finished" in capsys.readouterr().out
    assert (out / "prepare-stamp.json").is_file() and not (out / "prepare-building.json").exists()
    assert main(common) == 0 and "up to date" in capsys.readouterr().out


def test_second_test_set_becomes_test1(tmp_path, capsys):
    """--test1: a second test set binarized as fairseq's test1 (Yang et al. 2017 test on
    newstest2014 and newstest2015), with its tokenized and raw text beside it; and an error
    without a first test set."""
    from fairseq.data import Dictionary, data_utils

    texts = {"a": ("eins zwei drei", "one two three"), "b": ("zwei", "two"),
             "c": ("drei eins", "three one"), "d": ("vier, zwei", "four, two")}
    for stem, (de, en) in texts.items():
        n = 3 if stem == "a" else 1
        (tmp_path / f"{stem}.de").write_text(f"{de}\n" * n, encoding="utf-8")
        (tmp_path / f"{stem}.en").write_text(f"{en}\n" * n, encoding="utf-8")
    out = tmp_path / "bin"
    common = ["custom", "--src", "de", "--tgt", "en", "--train-prefix", str(tmp_path / "a"),
              "--valid-prefix", str(tmp_path / "b"), "--workers", "1", "--bpe-merges", "0",
              "--no-joined-dictionary"]
    assert main(common + ["--test-prefix", str(tmp_path / "c"), "--test1-prefix",
                          str(tmp_path / "d"), "--out", str(out)]) == 0
    assert read(out / "test.tok.de") == ["drei eins"]
    assert read(out / "test1.tok.de") == ["vier , zwei"] and read(out / "test1.raw.en") == [
        "four, two"]
    dictionary = Dictionary.load(str(out / "dict.en.txt"))
    test1 = data_utils.load_indexed_dataset(str(out / "test1.de-en.en"), dictionary)
    assert dictionary.string(test1[0]) == "<unk> <unk> two"  # four and the comma: not in train
    assert "test1.de-en.de.bin" in json.loads((out / "prepare-stamp.json").read_text())["outputs"]
    assert main(common + ["--test1-prefix", str(tmp_path / "d"), "--out",
                          str(tmp_path / "bad")]) == 1
    assert "needs a first one (--test/--test-prefix)" in capsys.readouterr().err


# --- Readers and cleaning -----------------------------------------------------------------------
SGM = """<refset setid="newstest2016" srclang="any" trglang="tr">
<doc sysid="ref" docid="abc-1" genreid="news" origlang="en">
<p>
<seg id="1">Ankara: Daha fazla güvenlik</seg>
<seg id="2">  İki   boşluk &amp; sonra </seg>
</p>
</doc>
</refset>
"""

IWSLT_XML = """<?xml version="1.0" encoding="UTF-8"?>
<mteval>
<srcset setid="iwslt2014-dev2010" srclang="german">
<doc docid="535" genre="lectures">
<url>http://www.ted.com/talks/al_gore.html</url>
<description>TED Talk Subtitles and Transcript: Al Gore spricht.</description>
<talkid>535</talkid>
<title>Al Gore: Die Klimakrise</title>
<seg id="1"> Vielen Dank, Chris. </seg>
<seg id="2"> Es ist mir eine \u2019Ehre\u2019. </seg>
</doc>
</srcset>
</mteval>
"""

TAGS = """<url>http://www.ted.com/talks/jane_doe.html</url>
<keywords>talks, science</keywords>
<talkid>1</talkid>
<title>Jane Doe: A title</title>
<description>TED Talk Subtitles and Transcript: About things.</description>
First sentence.
  Second sentence.
"""


def test_read_seg_sgm_and_xml(tmp_path):
    (tmp_path / "a.sgm").write_text(SGM, encoding="utf-8")
    assert list(corpora.read_seg(tmp_path / "a.sgm")) == [
        "Ankara: Daha fazla güvenlik", "İki boşluk &amp; sonra"]
    (tmp_path / "b.de.xml").write_text(IWSLT_XML, encoding="utf-8")
    assert list(corpora.read_seg(tmp_path / "b.de.xml")) == [
        "Vielen Dank, Chris.", "Es ist mir eine \u2019Ehre\u2019."]
    part = corpora.Part(tmp_path / "b.de.xml", tmp_path / "a.sgm", ascii_apostrophe=True)
    assert list(part.read(0))[1] == "Es ist mir eine 'Ehre'."
    (tmp_path / "bad.sgm").write_text('<seg id="1">no end\n', encoding="utf-8")
    with pytest.raises(corpora.CorpusError, match=r"bad\.sgm:1"):
        list(corpora.read_seg(tmp_path / "bad.sgm"))


def test_read_iwslt_tags_and_text(tmp_path):
    (tmp_path / "train.tags.de-en.en").write_text(TAGS, encoding="utf-8")
    assert list(corpora.read_iwslt_tags(tmp_path / "train.tags.de-en.en")) == [
        "Jane Doe: A title", "TED Talk Subtitles and Transcript: About things.",
        "First sentence.", "Second sentence."]
    (tmp_path / "t.txt").write_bytes("a\rb \nc\n".encode())  # a bare \r must not split a line
    assert list(corpora.read_text(tmp_path / "t.txt")) == ["a b", "c"]
    assert [corpora.detect_format(n) for n in ("x.sgm", "y.en.xml", "train.tags.de-en.de",
                                                "europarl-v7.de-en.de", "train.de.gz")] == \
        ["seg", "seg", "tags", "text", "text"]


def test_cleaning_rule():
    c = Cleaning(max_len=5, min_len=1, ratio=1.5)
    assert c.keep(3, 3) and c.keep(2, 3) and c.keep(5, 5)
    assert not c.keep(0, 3) and not c.keep(3, 0)  # empty side
    assert not c.keep(6, 5) and not c.keep(5, 6)  # too long
    assert not c.keep(2, 4) and not c.keep(4, 2)  # ratio 2 > 1.5
    assert not Cleaning(max_len=5, min_len=2).keep(1, 1)
    assert Cleaning(max_len=5, ratio=0).keep(1, 5)


def test_filter_pairs_cleans_and_holds_out(tmp_path):
    src = ["a b", "c", "d e f g h i", "j k", "l m", "n", "o p", "q"]
    tgt = ["A B", "C D E F", "D E F G H I", "J K", "L M", "N", "O P", "Q"]
    raw = [f"raw {i}" for i in range(len(src))]
    files = []
    for name, lines in (("s", src), ("t", tgt), ("r", raw)):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(tmp_path / name)
    train = [tmp_path / f"train.{n}" for n in "str"]
    valid = [tmp_path / f"valid.{n}" for n in "str"]
    counts = filter_pairs(files, train, valid, Cleaning(max_len=5, ratio=1.5), valid_every=2)
    # dropped: pair 1 (ratio 4), pair 2 (6 tokens); kept 0,3,4,5,6,7 -> every 2nd to valid
    assert counts == dict(read=8, dropped=2, train=3, valid=3)
    assert read(train[0]) == ["a b", "l m", "o p"] and read(valid[0]) == ["j k", "n", "q"]
    assert read(train[1]) == ["A B", "L M", "O P"] and read(valid[1]) == ["J K", "N", "Q"]
    assert read(train[2]) == ["raw 0", "raw 4", "raw 6"]
    assert read(valid[2]) == ["raw 3", "raw 5", "raw 7"]


# --- Language filtering (--lang-filter, Yang et al. 2017, section 3.1) ---------------------------
EN = ["The committee approved the new budget for next year.",
      "Mr President, ladies and gentlemen, I would like to thank the rapporteur for his work.",
      "We visited the old castle on the hill before it started to rain."]
DE = ["Der Ausschuss hat den neuen Haushalt für das nächste Jahr genehmigt.",
      "Herr Präsident, meine Damen und Herren, ich möchte dem Berichterstatter für seine Arbeit "
      "danken.",
      "Wir haben die alte Burg auf dem Hügel besucht, bevor es zu regnen begann."]
FR = ["Les enfants jouent dans le jardin pendant que leurs parents préparent le dîner.",
      "Je ne sais pas pourquoi il est parti si tôt ce matin."]


def test_language_filter_keeps_pairs_in_their_languages():
    """py3langid choosing between the pair's two languages: right pairs kept, swapped pairs,
    untranslated copies and a French target side (more English than German) dropped; a side
    without letters is not judged."""
    lf = language_filter("en", "de")
    assert [lf.verdict(e, d) for e, d in zip(EN, DE)] == [0, 0, 0]
    assert [lf.verdict(d, e) for e, d in zip(EN, DE)] == [3, 3, 3]  # swapped: both sides wrong
    assert lf.verdict(EN[0], EN[1]) == 2 and lf.verdict(DE[0], DE[1]) == 1  # copies
    assert [lf.verdict(e, f) for e, f in zip(EN, FR)] == [2, 2]
    assert lf.keep("2014", "2014") and lf.keep(EN[0], "(3) -")
    assert language_filter("de", "en").verdict(DE[0], EN[0]) == 0  # the other direction
    assert language_filter("en", "de") is lf  # loaded once per process


def test_lang_filter_drops_train_pairs_only(tmp_path, capsys):
    """`prepare custom --lang-filter` on tiny files: the swapped and the French train pairs are
    gone before tokenization, valid and test keep their wrong-language lines, the counts are logged
    and recorded in the stamp, and a rerun is a no-op."""
    train = list(zip(EN, DE)) + [(DE[0], EN[0]), (EN[1], FR[0])] + [(EN[2], DE[2])]
    texts = {"train": train, "dev": [(DE[1], DE[1])], "test": [(FR[1], DE[2])]}
    for stem, pairs in texts.items():
        for i, lang in enumerate(("en", "de")):
            (tmp_path / f"{stem}.{lang}").write_text("".join(p[i] + "\n" for p in pairs),
                                                     encoding="utf-8")
    out, work = tmp_path / "bin", tmp_path / "work"
    argv = ["custom", "--src", "en", "--tgt", "de", "--train-prefix", str(tmp_path / "train"),
            "--valid-prefix", str(tmp_path / "dev"), "--test-prefix", str(tmp_path / "test"),
            "--bpe-merges", "0", "--workers", "1", "--lang-filter", "--out", str(out),
            "--work-dir", str(work)]
    assert main(argv) == 0
    log = capsys.readouterr().out
    assert "6 train pairs read, 2 dropped (1 with the en side identified as de, 2 with the de " \
           "side identified as en), 4 kept" in log
    assert read(work / "train.raw.en") == EN + [EN[2]]
    assert read(work / "train.raw.de") == DE + [DE[2]]
    assert read(out / "valid.raw.en") == [DE[1]] and read(out / "test.raw.en") == [FR[1]]
    stamp = json.loads((out / "prepare-stamp.json").read_text())
    assert stamp["options"]["lang_filter"] is True and "py3langid" in stamp["tools"]
    assert stamp["language_filter"] == dict(read=6, dropped=2, kept=4, src_as_tgt=1,
                                            tgt_as_src=2)
    assert main(argv) == 0 and "is up to date" in capsys.readouterr().out


def test_lang_filter_without_py3langid_names_the_package(tmp_path, capsys, monkeypatch):
    """Without py3langid, --lang-filter stops before anything is read or written."""
    monkeypatch.setitem(sys.modules, "py3langid", None)  # `import py3langid` raises ImportError
    monkeypatch.setattr(prepare_langid, "_LANGID", {})
    for lang in ("en", "de"):
        (tmp_path / f"a.{lang}").write_text("x\n", encoding="utf-8")
    out = tmp_path / "bin"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    common = ["custom", "--src", "en", "--tgt", "de", "--train-prefix", str(tmp_path / "a"),
              "--valid-prefix", str(tmp_path / "a"), "--test-prefix", str(tmp_path / "a"),
              "--out", str(out), "--workers", "1"]
    assert main(common + ["--lang-filter"]) == 1
    err = capsys.readouterr().err
    assert "--lang-filter needs the Python package py3langid" in err
    assert "pip install py3langid" in err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    with pytest.raises(prepare_module.PrepareError, match="py3langid"):  # the library's own check
        prepare_module.prepare({"train": [corpora.Part(tmp_path / "a.en", tmp_path / "a.de")],
                                "valid": [corpora.Part(tmp_path / "a.en", tmp_path / "a.de")],
                                "test": [corpora.Part(tmp_path / "a.en", tmp_path / "a.de")]},
                               out, prepare_module.Options("en", "de", lang_filter=True))
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


# --- Download scripts, offline ------------------------------------------------------------------
# --- The scripts, offline ------------------------------------------------------------------------
FAKE_CURL = """#!/usr/bin/env bash
# Stand-in for curl: `curl [opts] -o DEST URL` copies $MIRROR/HOST/PATH of the URL to DEST.
dest= url=
while [ $# -gt 0 ]; do
    case $1 in -o) dest=$2; shift 2 ;; --retry) shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac
done
echo "$url" >> "$MIRROR/requested"
cp "$MIRROR/${url#*://}" "$dest"
"""

FAKE_PYTHON = """#!/usr/bin/env bash
# Stand-in for python: records the arguments of `-m ran_text.prepare ...` (one per line)
# instead of running it; anything else (python -m zipfile) goes to the real interpreter.
if [ "$1" = -m ] && [ "$2" = ran_text.prepare ]; then
    shift 2
    printf '%s\\n' "$@" > "$MIRROR/prepare-args"
    exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def run_script(tmp_path, name, args, files=None):
    """Run scripts/NAME with ``args``, a mirror serving ``files`` ({URL: bytes}) to a fake curl,
    ORIG_DIR under tmp_path and a fake python. Returns (process, URLs fetched, the arguments the
    script gave ``python -m ran_text.prepare``)."""
    mirror, bin_dir = tmp_path / "mirror", tmp_path / "bin"
    mirror.mkdir(exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    for url, data in (files or {}).items():
        path = mirror / url.split("://", 1)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for tool, text in (("curl", FAKE_CURL), ("python", FAKE_PYTHON)):
        (bin_dir / tool).write_text(text)
        (bin_dir / tool).chmod(0o755)
    env = dict(os.environ, MIRROR=str(mirror), ORIG_DIR=str(tmp_path / "orig"),
               PYTHON=str(bin_dir / "python"), REAL_PYTHON=sys.executable,
               PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(REPO / "scripts" / name), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=60)
    fetched = read(mirror / "requested") if (mirror / "requested").exists() else []
    recorded = read(mirror / "prepare-args") if (mirror / "prepare-args").exists() else None
    return proc, fetched, recorded


def tgz(members):
    """A .tgz holding ``members`` ({path: text})."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def a_zip(members):
    """A .zip holding ``members`` ({path: text})."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return buf.getvalue()


def parallel(rng, n, src_words, tgt_words, lo=3, hi=8):
    """``n`` sentence pairs, the target word for word the source under a vocabulary map."""
    pairs = [[rng.randrange(len(src_words)) for _ in range(rng.randint(lo, hi))]
             for _ in range(n)]
    return ([" ".join(src_words[i] for i in p) for p in pairs],
            [" ".join(tgt_words[i] for i in p) for p in pairs])


def segs(lines):
    body = "\n".join(f'<seg id="{i}"> {s} </seg>' for i, s in enumerate(lines, 1))
    return f'<refset setid="x">\n<doc docid="d1">\n{body}\n</doc>\n</refset>\n'


def option(args, flag):
    """The values given to each occurrence of ``flag`` in ``args``."""
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_multi30k_script_forwards_arguments(tmp_path):
    proc, _, args = run_script(tmp_path, "prepare-multi30k.sh", ["fr", "cs", "--lowercase"])
    assert proc.returncode == 0, proc.stderr
    assert args == ["multi30k", "--src", "fr", "--tgt", "cs", "--lowercase"]
    proc, _, _ = run_script(tmp_path, "prepare-multi30k.sh", ["de"])
    assert proc.returncode == 2 and "SRC TGT" in proc.stderr


def test_iwslt14_script(tmp_path, capsys):
    """fairseq's recipe on a hand-made de-en.tgz: tags stripped, lowercased, 2 bad pairs
    cleaned away, every 23rd kept pair held out as valid, the five xml test sets concatenated."""
    rng = random.Random(0)
    de, en = parallel(rng, 48, "Haus katze hund baum weg .".split(),
                      "House cat dog tree way .".split())
    kept_de, kept_en = ["Ein Titel", "Eine Beschreibung"] + de, ["A title", "A description"] + en
    bad_de = [" ".join(["wort"] * 176), "kurz ."]  # over 175 tokens; length ratio 3.5
    bad_en = [" ".join(["word"] * 176), "this is far far too long ."]

    def tags(title, desc, lines, bad):
        return ("<url>http://x</url>\n<keywords>k</keywords>\n<talkid>1</talkid>\n"
                f"<title>{title}</title>\n<description>{desc}</description>\n"
                + "\n".join(lines[:10] + bad + lines[10:]) + "\n")

    members = {"de-en/train.tags.de-en.de": tags(*kept_de[:2], de, bad_de),
               "de-en/train.tags.de-en.en": tags(*kept_en[:2], en, bad_en)}
    tests = {"de": [], "en": []}
    for k, name in enumerate(corpora.IWSLT14_TEST_SETS):
        for lang, word in (("de", "Satz"), ("en", "Sentence")):
            lines = [f"{word} {k} eins.", f"{word} {k} \u2019zwei\u2019."]
            members[f"de-en/IWSLT14.{name}.de-en.{lang}.xml"] = segs(lines)
            tests[lang] += lines
    url = "https://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"
    out = tmp_path / "iwslt14.de-en"
    proc, fetched, args = run_script(tmp_path, "prepare-iwslt14.sh",
                                     ["--out", out, "--bpe-merges", "40"], {url: tgz(members)})
    assert proc.returncode == 0, proc.stderr
    assert fetched == [url]
    assert args[0] == "iwslt14" and option(args, "--src") == ["de"]
    assert Path(option(args, "--orig-dir")[0], "train.tags.de-en.en").is_file()

    assert main(args + ["--workers", "1"]) == 0
    assert "2 dropped by length cleaning" in capsys.readouterr().out
    assert (out / "dict.de.txt").read_bytes() == (out / "dict.en.txt").read_bytes()
    assert len(read(out / "prep" / "train.bpe.de")) == 48
    assert read(out / "valid.raw.de") == [kept_de[22].lower(), kept_de[45].lower()]
    assert read(out / "valid.raw.en") == [kept_en[22].lower(), kept_en[45].lower()]
    assert read(out / "test.raw.en") == [s.replace("\u2019", "'").lower() for s in tests["en"]]
    assert (out / "test.de-en.de.bin").is_file() and (out / "code").is_file()


def test_iwslt14_test_sets_of_elbayad2018(tmp_path, capsys):
    """--test-sets elbayad2018 (Elbayad et al. 2018, 4.1): TED dev2010 and tst2010-2013 in that
    order, no TEDX dev2012; tst2013 is the IWSLT'15 release's file, found in the orig directory
    or --extra-test-dir, and its absence is an error that says where to get it."""
    orig, extra = tmp_path / "de-en", tmp_path / "iwslt15"
    for directory, release, name in [(orig, "IWSLT14", n) for n in corpora.IWSLT14_TEST_SETS] \
            + [(extra, "IWSLT15", "TED.tst2013")]:
        directory.mkdir(exist_ok=True)
        for lang in ("de", "en"):
            (directory / f"{release}.{name}.de-en.{lang}.xml").write_text(segs([name]))
    _, fairseq_tests = corpora.iwslt14_parts(orig, "en", "de")
    assert [p.src.name for p in fairseq_tests] == [
        f"IWSLT14.{n}.de-en.en.xml" for n in corpora.IWSLT14_TEST_SETS]
    _, tests = corpora.iwslt14_parts(orig, "en", "de", "elbayad2018", [extra])
    assert [(p.src.parent, p.src.name, p.tgt.name) for p in tests] == [
        (orig, "IWSLT14.TED.dev2010.de-en.en.xml", "IWSLT14.TED.dev2010.de-en.de.xml"),
        (orig, "IWSLT14.TED.tst2010.de-en.en.xml", "IWSLT14.TED.tst2010.de-en.de.xml"),
        (orig, "IWSLT14.TED.tst2011.de-en.en.xml", "IWSLT14.TED.tst2011.de-en.de.xml"),
        (orig, "IWSLT14.TED.tst2012.de-en.en.xml", "IWSLT14.TED.tst2012.de-en.de.xml"),
        (extra, "IWSLT15.TED.tst2013.de-en.en.xml", "IWSLT15.TED.tst2013.de-en.de.xml")]
    with pytest.raises(corpora.CorpusError, match="no tst2013.*IWSLT'15 release"):
        corpora.iwslt14_parts(orig, "de", "en", "elbayad2018")
    assert main(["iwslt14", "--orig-dir", str(orig), "--test-sets", "elbayad2018",
                 "--out", str(tmp_path / "bin")]) != 0
    assert "--extra-test-dir" in capsys.readouterr().err


def test_wmt17_en_tr_script(tmp_path, capsys):
    """SETimes + newstest2016 / newstest2017 .sgm from hand-made archives: punctuation
    normalized, hyphens split, the train pair over 250 BPE units dropped."""
    en, tr = parallel(random.Random(1), 40, "the latest news from ankara".split(),
                      "bugün ankara haberleri son durum".split())
    en.append(" ".join(["news"] * 260))
    tr.append(" ".join(["haber"] * 260))
    valid_en, valid_tr = ["A well-known «story»."], ["Bilinen bir «hikaye»."]
    test_en, test_tr = ["News from Ankara.", "Second one."], ["Ankara'dan haber.", "İkinci."]
    urls = ["https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-tr.txt.zip",
            "https://data.statmt.org/wmt16/translation-task/test.tgz",
            "https://data.statmt.org/wmt17/translation-task/test.tgz"]
    files = {urls[0]: a_zip({"SETIMES.en-tr.en": "\n".join(en) + "\n",
                             "SETIMES.en-tr.tr": "\n".join(tr) + "\n", "README": "SETimes2\n"}),
             urls[1]: tgz({"test/newstest2016-entr-src.en.sgm": segs(valid_en),
                           "test/newstest2016-entr-ref.tr.sgm": segs(valid_tr)}),
             urls[2]: tgz({"test/newstest2017-entr-src.en.sgm": segs(test_en),
                           "test/newstest2017-entr-ref.tr.sgm": segs(test_tr)})}
    out = tmp_path / "wmt17.en-tr"
    proc, fetched, args = run_script(tmp_path, "prepare-wmt-en-tr.sh",
                                     ["2017", "--out", out, "--bpe-merges", "60"], files)
    assert proc.returncode == 0, proc.stderr
    assert fetched == urls

    assert main(args + ["--workers", "1"]) == 0
    assert "1 dropped by length cleaning on BPE units" in capsys.readouterr().out
    assert len(read(out / "prep" / "train.bpe.en")) == 40
    assert read(out / "valid.raw.tr") == valid_tr and read(out / "test.raw.en") == test_en
    valid_tok = read(out / "prep" / "valid.tok.en")[0]
    assert "well @-@ known" in valid_tok and "«" not in valid_tok  # -a and normalization
    assert (out / "train.en-tr.tr.bin").is_file()


@pytest.mark.parametrize("src,tgt", [("tr", "en"), ("en", "tr")])
def test_wmt18_en_tr_script(tmp_path, src, tgt):
    """WMT'18: valid newstest2017 from WMT'17's test.tgz, test newstest2018 from WMT'18's, the
    files of the asked direction only, into data-bin/wmt18.SRC-TGT; a year other than 2017 or
    2018, or another pair, is refused."""
    sets = {"wmt17": "newstest2017", "wmt18": "newstest2018"}
    urls = ["https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-tr.txt.zip"] + [
        f"https://data.statmt.org/{wmt}/translation-task/test.tgz" for wmt in sets]
    files = {urls[0]: a_zip({f"SETIMES.en-tr.{lang}": "x\n" for lang in ("en", "tr")})}
    for url, (wmt, name) in zip(urls[1:], sets.items()):
        files[url] = tgz({f"test/{name}-{d}-{kind}.{lang}.sgm": segs([f"{wmt} {d} {lang}"])
                          for d, s, t in (("tren", "tr", "en"), ("entr", "en", "tr"))
                          for kind, lang in (("src", s), ("ref", t))})
    proc, fetched, args = run_script(tmp_path, "prepare-wmt-en-tr.sh", ["2018", src, tgt], files)
    assert proc.returncode == 0, proc.stderr
    assert fetched == urls
    assert option(args, "--src") == [src] and option(args, "--tgt") == [tgt]
    assert [Path(p).name for p in option(args, "--train-prefix")] == ["SETIMES.en-tr"]
    valid = args[args.index("--valid") + 1:args.index("--valid") + 3]
    test = args[args.index("--test") + 1:args.index("--test") + 3]
    assert [Path(p).name for p in valid + test] == [
        f"newstest2017-{src}{tgt}-src.{src}.sgm", f"newstest2017-{src}{tgt}-ref.{tgt}.sgm",
        f"newstest2018-{src}{tgt}-src.{src}.sgm", f"newstest2018-{src}{tgt}-ref.{tgt}.sgm"]
    assert [Path(p).relative_to(tmp_path / "orig").parts[0] for p in valid + test] == \
        ["wmt17"] * 2 + ["wmt18"] * 2
    assert Path(option(args, "--out")[0]).name == f"wmt18.{src}-{tgt}"
    assert option(args, "--bpe-merges") == ["16000"] and option(args, "--clean-on") == ["bpe"]
    for bad, message in ((["2019"], "2017 or 2018, got '2019'"), (["tr", "en"], "got 'tr'"),
                         (["2018", "tr", "de"], "'en tr' or 'tr en'")):
        proc, _, _ = run_script(tmp_path, "prepare-wmt-en-tr.sh", bad, files)
        assert proc.returncode == 2 and message in proc.stderr, (bad, proc.stderr)


IWSLT17_URL = ("https://huggingface.co/datasets/IWSLT/iwslt2017/resolve/main/data/2017-01-trnmted/"
               "texts/DeEnItNlRo/DeEnItNlRo/DeEnItNlRo-DeEnItNlRo.zip")


def iwslt17_archive(en, it):
    """A DeEnItNlRo-DeEnItNlRo.zip whose en-it train.tags hold ``en``/``it`` between the 2017
    release's talk metadata (and its title and description, which are kept), with dev2010 and
    tst2010 of en-it and, as decoys, of en-de."""
    def tags(lines, lang):
        meta = ['<doc docid="1" genre="lectures">', "<url>http://www.ted.com/talks/x</url>",
                "<keywords>talks</keywords>", "<speaker>Jane Doe</speaker>", "<talkid>1</talkid>",
                f"<title>Title {lang}</title>", f"<description>About {lang}.</description>",
                '<reviewer href="http://www.ted.com/profiles/2">A B</reviewer>',
                '<translator href="http://www.ted.com/profiles/3">C D</translator>']
        return "\n".join(meta + lines + ["</doc>"]) + "\n"

    top = "DeEnItNlRo-DeEnItNlRo"
    members = {f"{top}/train.tags.en-it.en": tags(en, "en"),
               f"{top}/train.tags.en-it.it": tags(it, "it"), f"{top}/README": "IWSLT 2017\n"}
    for name in ("dev2010", "tst2010"):
        for pair in ("en-it", "en-de"):
            for lang in pair.split("-"):
                members[f"{top}/IWSLT17.TED.{name}.{pair}.{lang}.xml"] = segs(
                    [f"{name} {pair} {lang} one.", f"{name} {pair} {lang} two."])
    return a_zip(members)


def test_iwslt17_en_it_script(tmp_path, capsys):
    """The hand-made release through the script and the pipeline: the 2017 metadata lines gone
    (title and description kept as sentences), train cleaned to 175 tokens, not lowercased, valid
    dev2010 and test tst2010 of en-it; then it->en from the same files, without a new download."""
    rng = random.Random(2)
    en, it = parallel(rng, 40, "The house cat dog tree way .".split(),
                      "La casa gatto cane albero via .".split())
    en.insert(5, " ".join(["word"] * 176))  # over 175 tokens: cleaned away
    it.insert(5, " ".join(["parola"] * 176))
    out = tmp_path / "iwslt17.en-it"
    proc, fetched, args = run_script(tmp_path, "prepare-iwslt17-en-it.sh",
                                     ["--out", out, "--bpe-merges", "40"],
                                     {IWSLT17_URL: iwslt17_archive(en, it)})
    assert proc.returncode == 0, proc.stderr
    assert fetched == [IWSLT17_URL]
    assert args[0] == "custom" and option(args, "--src") == ["en"]
    train = args[args.index("--train") + 1:args.index("--train") + 3]
    valid = args[args.index("--valid") + 1:args.index("--valid") + 3]
    test = args[args.index("--test") + 1:args.index("--test") + 3]
    assert [Path(p).name for p in train + valid + test] == [
        "train.tags.en-it.en", "train.tags.en-it.it",
        "IWSLT17.TED.dev2010.en-it.en.xml", "IWSLT17.TED.dev2010.en-it.it.xml",
        "IWSLT17.TED.tst2010.en-it.en.xml", "IWSLT17.TED.tst2010.en-it.it.xml"]

    assert main(args + ["--workers", "1"]) == 0
    assert "1 dropped by length cleaning" in capsys.readouterr().out
    assert read(out / "prep" / "train.raw.en") == ["Title en", "About en."] + en[:5] + en[6:]
    assert read(out / "prep" / "train.raw.it") == ["Title it", "About it."] + it[:5] + it[6:]
    assert read(out / "valid.raw.it") == ["dev2010 en-it it one.", "dev2010 en-it it two."]
    assert read(out / "test.raw.en") == ["tst2010 en-it en one.", "tst2010 en-it en two."]
    assert (out / "train.en-it.it.bin").is_file() and (out / "code").is_file()

    proc, fetched, args = run_script(tmp_path, "prepare-iwslt17-en-it.sh", ["it", "en"])
    assert proc.returncode == 0, proc.stderr
    assert fetched == [IWSLT17_URL]  # still the first run's only download
    assert option(args, "--src") == ["it"] and option(args, "--tgt") == ["en"]
    assert Path(option(args, "--out")[0]).name == "iwslt17.it-en"
    assert [Path(p).name for p in args[args.index("--train") + 1:args.index("--train") + 3]] == [
        "train.tags.en-it.it", "train.tags.en-it.en"]
    assert [Path(p).name for p in args[args.index("--test") + 1:args.index("--test") + 3]] == [
        "IWSLT17.TED.tst2010.en-it.it.xml", "IWSLT17.TED.tst2010.en-it.en.xml"]
    assert option(args, "--bpe-merges") == ["8000"]  # Rosendahl et al. 2021, §4
    proc, _, _ = run_script(tmp_path, "prepare-iwslt17-en-it.sh", ["it", "de"])
    assert proc.returncode == 2 and "'en it' or 'it en'" in proc.stderr


@pytest.mark.parametrize("src,tgt", [("en", "de"), ("de", "en")])
def test_wmt14_en_de_script(tmp_path, src, tgt):
    """The corpora, valid and test files the script hands to the pipeline, per direction."""
    urls = {name: f"https://statmt.org/{name}.tgz" for name in (
        "wmt13/training-parallel-europarl-v7", "wmt13/training-parallel-commoncrawl",
        "wmt14/training-parallel-nc-v9", "wmt13/test", "wmt14/test-full", "wmt15/test")}
    pair = {"de": "x\n", "en": "y\n"}
    files = {
        urls["wmt13/training-parallel-europarl-v7"]: tgz(
            {f"training/europarl-v7.{p}.{lang}": t for p in ("de-en", "fr-en")
             for lang, t in pair.items()}),
        urls["wmt13/training-parallel-commoncrawl"]: tgz(
            {f"commoncrawl.de-en.{lang}": t for lang, t in pair.items()}),
        urls["wmt14/training-parallel-nc-v9"]: tgz(
            {f"training/news-commentary-v9.de-en.{lang}": t for lang, t in pair.items()}),
        urls["wmt13/test"]: tgz({f"test/newstest2013-src.{lang}.sgm": segs([t])
                                 for lang, t in pair.items()}),
        urls["wmt14/test-full"]: tgz(
            {f"test-full/newstest2014-deen-{kind}.{lang}.sgm": segs([t])
             for kind in ("src", "ref") for lang, t in pair.items()}),
        # newstest2015: a source and a reference file per direction
        urls["wmt15/test"]: tgz(
            {f"test/newstest2015-{a}{b}-{kind}.{lang}.sgm": segs([pair[lang]])
             for a, b in (("de", "en"), ("en", "de"))
             for kind, lang in (("src", a), ("ref", b))}),
    }
    proc, fetched, args = run_script(tmp_path, "prepare-wmt14-en-de.sh",
                                     [src, tgt, "--lang-filter"], files)
    assert proc.returncode == 0, proc.stderr
    assert sorted(fetched) == sorted(urls.values())
    assert option(args, "--src") == [src] and option(args, "--tgt") == [tgt]
    assert args[-1] == "--lang-filter"  # configs/dynmem/full.json's flag reaches the pipeline
    assert [Path(p).name for p in option(args, "--train-prefix")] == [
        "europarl-v7.de-en", "commoncrawl.de-en", "news-commentary-v9.de-en"]
    valid = args[args.index("--valid") + 1:args.index("--valid") + 3]
    test = args[args.index("--test") + 1:args.index("--test") + 3]
    assert [Path(p).name for p in valid] == [f"newstest2013-src.{src}.sgm",
                                             f"newstest2013-src.{tgt}.sgm"]
    assert [Path(p).name for p in test] == [f"newstest2014-deen-src.{src}.sgm",
                                            f"newstest2014-deen-ref.{tgt}.sgm"]
    test1 = args[args.index("--test1") + 1:args.index("--test1") + 3]
    assert [Path(p).name for p in test1] == [f"newstest2015-{src}{tgt}-src.{src}.sgm",
                                             f"newstest2015-{src}{tgt}-ref.{tgt}.sgm"]
    assert all(Path(p).is_file() for p in valid + test + test1)
    assert option(args, "--bpe-merges") == ["40000"] and option(args, "--clean-on") == ["bpe"]


def test_wmt16_ro_en_script(tmp_path):
    urls = ["https://data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz",
            "https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip",
            "https://data.statmt.org/wmt16/translation-task/dev.tgz",
            "https://data.statmt.org/wmt16/translation-task/test.tgz"]
    pair = {"ro": "x\n", "en": "y\n"}
    files = {
        urls[0]: tgz({f"training-parallel-ep-v8/europarl-v8.ro-en.{lang}": t
                      for lang, t in pair.items()}),
        urls[1]: a_zip({f"SETIMES.en-ro.{lang}": t for lang, t in pair.items()}),
        urls[2]: tgz({f"dev/newsdev2016-{d}-{kind}.{lang}.sgm": segs([pair[lang]])
                      for d, s, t in (("roen", "ro", "en"), ("enro", "en", "ro"))
                      for kind, lang in (("src", s), ("ref", t))}),
        urls[3]: tgz({f"test/newstest2016-{d}-{kind}.{lang}.sgm": segs([pair[lang]])
                      for d, s, t in (("roen", "ro", "en"), ("enro", "en", "ro"))
                      for kind, lang in (("src", s), ("ref", t))}),
    }
    proc, fetched, args = run_script(tmp_path, "prepare-wmt16-ro-en.sh", [], files)
    assert proc.returncode == 0, proc.stderr
    assert fetched == urls
    assert [Path(p).name for p in option(args, "--train-prefix")] == [
        "europarl-v8.ro-en", "SETIMES.en-ro"]
    valid = args[args.index("--valid") + 1:args.index("--valid") + 3]
    test = args[args.index("--test") + 1:args.index("--test") + 3]
    assert [Path(p).name for p in valid + test] == [
        "newsdev2016-roen-src.ro.sgm", "newsdev2016-roen-ref.en.sgm",
        "newstest2016-roen-src.ro.sgm", "newstest2016-roen-ref.en.sgm"]
    assert option(args, "--bpe-merges") == ["20000"]  # Rosendahl et al. 2021, §4
    proc, _, _ = run_script(tmp_path, "prepare-wmt16-ro-en.sh", ["ro", "de"], files)
    assert proc.returncode == 2 and "'ro en' or 'en ro'" in proc.stderr


def test_scripts_parse():
    for script in sorted((REPO / "scripts").glob("prepare-*.sh")):
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script.name}: {proc.stderr}"


def test_two_processes_preparing_one_data_bin_take_turns(raw_slice, tmp_path):
    """Two reproductions that prepare the same data-bin at once must not write its files together
    (that once left a BPE codes file with two writers' lines mixed): the second waits, then finds
    the data-bin up to date."""
    out = tmp_path / "bin"
    cmd = [sys.executable, "-m", "ran_text.prepare", "multi30k", "--src", "de", "--tgt",
           "en", "--raw-dir", str(raw_slice), "--out", str(out), "--bpe-merges", "300",
           "--workers", "1"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("is up to date" in o for o in outputs) == 1, outputs
    assert len(read(out / "code")) == 1 + 300
    assert all(len(line.split()) == 2 for line in read(out / "code")[1:])


def test_prepare_takes_an_out_folder_with_a_comma(tmp_path):
    import helpers

    raw = helpers.make_synthetic_corpus(tmp_path / "raw", n_train=60, n_valid=5, n_test=5)
    out = tmp_path / "a,b" / "bin"
    proc = subprocess.run(
        [sys.executable, "-m", "ran_text.prepare", "custom", "--src", "de", "--tgt", "en",
         "--out", str(out), "--train-prefix", str(raw / "train"), "--valid-prefix",
         str(raw / "valid"), "--test-prefix", str(raw / "test"), "--bpe-merges", "20",
         "--workers", "1"], env=helpers.fairseq_env(), capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "test.de-en.de.bin").is_file() and (out / "dict.de.txt").is_file()
