"""Unknown-word replacement (ran_text.replace_unk) on crafted fairseq-generate output,
its two methods (copy; the paper's dictionary learned from word alignments by eflomal,
ran_text.unk_dictionary), and end to end: rnnsearch_dynmem trained briefly on a
synthetic corpus binarized with tiny vocabularies, so that it writes <unk>, decoded by
fairseq-generate --print-alignment."""
import gzip
import json
import re
import subprocess
import sys
from collections import Counter

import pytest
import torch

import helpers
from ran_text import unk_dictionary
from ran_text.evaluate import read_generate_output
from ran_text.replace_unk import ReplaceUnkError, Stats, load_dictionary, main, replace_unk_lines

SOURCES = [
    "das Haus am Zwergensee .".split(),
    "ein Quokka lacht".split(),
]
# Hand-written output as fairseq-generate --print-alignment --nbest 2 prints it (ids out of
# order, as batches come sorted by length; D- lines detokenized).
GENERATED = """\
S-1\tein <unk> lacht
T-1\ta <<unk>> laughs
H-1\t-0.5\ta <unk> laughs
D-1\t-0.5\ta <unk> laughs
P-1\t-0.1 -0.9 -0.2 -0.1
A-1\t0-0 1-1 2-2
H-1\t-0.7\t<unk> laughs <unk>
D-1\t-0.7\t<unk> laughs <unk>
P-1\t-0.1 -0.9 -0.2 -0.1
A-1\t1-0 2-1 0-2
S-0\tdas Haus am <unk> .
T-0\tthe house at <<unk>> .
H-0\t-0.3\tthe house at <unk> .
D-0\t-0.3\tthe house at <unk>.
P-0\t-0.1 -0.1 -0.1 -0.5 -0.1 -0.1
A-0\t0-0 1-1 2-2 3-3 4-4
Generate test with beam=2: BLEU4 = 10.00, 1/1/1/1 (BP=1.000, ratio=1.000, syslen=8, reflen=8)
"""
EXPECTED = """\
S-1\tein <unk> lacht
T-1\ta <<unk>> laughs
H-1\t-0.5\ta quokka laughs
D-1\t-0.5\ta quokka laughs
P-1\t-0.1 -0.9 -0.2 -0.1
A-1\t0-0 1-1 2-2
H-1\t-0.7\tquokka laughs ein
D-1\t-0.7\tquokka laughs ein
P-1\t-0.1 -0.9 -0.2 -0.1
A-1\t1-0 2-1 0-2
S-0\tdas Haus am <unk> .
T-0\tthe house at <<unk>> .
H-0\t-0.3\tthe house at Zwergensee .
D-0\t-0.3\tthe house at Zwergensee.
P-0\t-0.1 -0.1 -0.1 -0.5 -0.1 -0.1
A-0\t0-0 1-1 2-2 3-3 4-4
Generate test with beam=2: BLEU4 = 10.00, 1/1/1/1 (BP=1.000, ratio=1.000, syslen=8, reflen=8)
"""
DICTIONARY = {"Quokka": "quokka", "Haus": "building"}


def test_crafted_example():
    stats = Stats()
    out = list(replace_unk_lines(GENERATED.splitlines(), SOURCES, DICTIONARY, stats=stats))
    assert "\n".join(out) + "\n" == EXPECTED
    assert (stats.hypotheses, stats.replaced, stats.translated) == (3, 4, 2)
    assert stats.sentences == {0, 1}


def test_cli_and_evaluate_read_the_output(tmp_path, capsys):
    gen, src, lex, out = (tmp_path / n for n in ("gen.txt", "src.txt", "lex.txt", "out.txt"))
    gen.write_text(GENERATED)
    src.write_text("\n".join(" ".join(s) for s in SOURCES) + "\n")
    lex.write_text("Quokka quokka 0.9\nQuokka kangaroo 0.1\n\nHaus building\n")
    assert main(["--generate-output", str(gen), "--source", str(src), "--dictionary", str(lex),
                 "--output", str(out)]) == 0
    assert out.read_text() == EXPECTED
    err = capsys.readouterr().err
    assert "4 <unk> replaced (2 through the dictionary) in 2 of 3 hypotheses" in err
    assert read_generate_output(str(out)) == ["the house at Zwergensee.", "a quokka laughs"]


def test_dictionary_first_entry_wins_and_bad_lines(tmp_path):
    lex = tmp_path / "lex"
    lex.write_text("a b\na c\n")
    assert load_dictionary(lex) == {"a": "b"}
    lex.write_text("a b\nlonely\n")
    with pytest.raises(ReplaceUnkError, match=":2: expected 'SOURCE_WORD TARGET_WORD'"):
        load_dictionary(lex)


@pytest.mark.parametrize("edit,match", [
    (lambda t: t.replace("A-0\t0-0 1-1 2-2 3-3 4-4\n", ""), "--print-alignment"),
    (lambda t: t.replace("A-0\t0-0 1-1 2-2 3-3 4-4", "A-0\t0.1,0.9 0.5,0.5"), "not soft"),
    (lambda t: t.replace("3-3 4-4", "7-3 4-4"), "--source line has 5 tokens"),
    (lambda t: t.replace("\tthe house at <unk> .", "\tthe house at <unk> . extra <unk>"),
     "no alignment"),
    (lambda t: t.replace("D-0\t-0.3\tthe house at <unk>.", "D-0\t-0.3\tthe house at unk."),
     "the D- line has 0"),
], ids=["no-alignment-line", "soft", "index-past-source", "merged-tokens", "detokenizer"])
def test_errors_name_the_problem(edit, match):
    with pytest.raises(ReplaceUnkError, match=match):
        list(replace_unk_lines(edit(GENERATED).splitlines(), SOURCES))


def test_sample_id_past_source_file():
    with pytest.raises(ReplaceUnkError, match="--source has 1 lines"):
        list(replace_unk_lines(GENERATED.splitlines(), SOURCES[:1]))


def copied():
    """GENERATED with each <unk> replaced by its attended source word, as --method copy does."""
    return EXPECTED.replace("a quokka laughs", "a Quokka laughs").replace(
        "quokka laughs ein", "Quokka laughs ein")


def write_inputs(tmp_path):
    gen, src = tmp_path / "gen.txt", tmp_path / "src.txt"
    gen.write_text(GENERATED)
    src.write_text("\n".join(" ".join(s) for s in SOURCES) + "\n")
    return gen, src


def test_copy_method_copies_the_attended_source_word(tmp_path, capsys):
    """--method copy (and no --method without --dictionary: the default) copies every <unk>'s
    most-attended source word, whatever the dictionary would say; it records its counts."""
    gen, src = write_inputs(tmp_path)
    for extra in (["--method", "copy"], []):
        out = tmp_path / "out.txt"
        assert main(["--generate-output", str(gen), "--source", str(src), "--output", str(out),
                     *extra]) == 0
        assert out.read_text() == copied()
        record = json.loads((tmp_path / "out.txt.json").read_text())
        assert record == {"method": "copy", "unk": 4, "from_dictionary": 0, "copied": 4,
                          "hypotheses": 3, "hypotheses_with_unk": 2, "dictionary": None,
                          "dictionary_sha256": None}
    assert main(["--generate-output", str(gen), "--source", str(src), "--method", "copy",
                 "--dictionary", "x"]) == 1
    assert "--method copy uses no dictionary" in capsys.readouterr().err


def test_gzip_generate_output_is_read(tmp_path):
    gen, src = write_inputs(tmp_path)
    gz = tmp_path / "gen.txt.gz"
    gz.write_bytes(gzip.compress(GENERATED.encode()))
    out = tmp_path / "out.txt"
    assert main(["--generate-output", str(gz), "--source", str(src), "--output", str(out)]) == 0
    assert out.read_text() == copied()


# the tiny parallel corpus of the dictionary tests: German and English words in the same order
DE_EN = {"das": "the", "ein": "a", "Haus": "house", "Buch": "book", "Hund": "dog",
         "ist": "is", "klein": "small", "groß": "big", "rot": "red"}


def tiny_corpus(folder):
    """``folder/prep/train.tok.{de,en}``: every 'ART NOUN ist ADJ' sentence and its word-for-word
    English, as ran_text.prepare keeps a data-bin's tokenized training text."""
    prep = folder / "prep"
    prep.mkdir(parents=True)
    de, en = [], []
    for art in ("das", "ein"):
        for noun in ("Haus", "Buch", "Hund"):
            for adj in ("klein", "groß", "rot"):
                for _ in range(3):
                    de.append(f"{art} {noun} ist {adj}")
                    en.append(" ".join(DE_EN[w] for w in de[-1].split()))
    (prep / "train.tok.de").write_text("\n".join(de) + "\n")
    (prep / "train.tok.en").write_text("\n".join(en) + "\n")
    return folder


def test_counting_links_picks_the_most_frequent_target():
    """Counting without the aligner: the intersection keeps the links both directions agree on,
    a source word's entry is its most linked target word (ties: sort order), and a word with no
    link gets no entry."""
    sources = ["A B C", "A B", "A C"]
    targets = ["x y z", "x y", "w z"]
    forward = ["0-0 1-1 2-2", "0-0 1-1", "0-0 1-1"]
    reverse = ["0-0 1-1", "0-0 1-1", "0-0 1-1"]
    inter = unk_dictionary.count_links(sources, targets, forward, reverse)
    assert inter == {"A": Counter({"x": 2, "w": 1}), "B": Counter({"y": 2}),
                     "C": Counter({"z": 1})}
    table = unk_dictionary.most_probable(inter)
    assert table == {"A": ("x", 2, 3), "B": ("y", 2, 2), "C": ("z", 1, 1)}
    fwd = unk_dictionary.count_links(sources, targets, forward, reverse, links="forward")
    assert fwd["C"] == Counter({"z": 2})
    tie = unk_dictionary.most_probable({"A": Counter({"y": 1, "x": 1})})
    assert tie == {"A": ("x", 1, 2)}
    with pytest.raises(unk_dictionary.DictionaryError, match="outside a pair of 2 and 2"):
        unk_dictionary.count_links(["A B"], ["x y"], ["0-2"], ["0-2"], links="forward")


def test_dictionary_learned_by_eflomal_and_cached(tmp_path, monkeypatch):
    """eflomal's alignments of a tiny corpus give each German word its English word; the
    dictionary is cached in the data-bin and built again only when the training text changes."""
    pytest.importorskip("eflomal", reason="the 'align' extra (eflomal) is not installed")
    data = tiny_corpus(tmp_path / "bin")
    path = unk_dictionary.cached(data, "de", "en")
    assert path == data / "unk-dict.de-en.intersection.txt"
    assert load_dictionary(path) == DE_EN
    stamp = json.loads((data / "unk-dict.de-en.intersection.txt.json").read_text())
    assert stamp["links"] == "intersection" and stamp["aligner"].startswith("eflomal ")
    built = []
    monkeypatch.setattr(unk_dictionary, "build", lambda *a: built.append(a))
    assert unk_dictionary.cached(data, "de", "en") == path and built == []
    with open(data / "prep" / "train.tok.de", "a") as f:
        f.write("das Haus\n")
    with open(data / "prep" / "train.tok.en", "a") as f:
        f.write("the house\n")
    unk_dictionary.cached(data, "de", "en")
    assert len(built) == 1


def test_dictionary_method_translates_the_attended_word_or_copies_it(tmp_path, capsys):
    """--method dictionary: each <unk> becomes the dictionary entry of its most-attended source
    word (the A- line's link), and the word itself where the dictionary has none."""
    pytest.importorskip("eflomal", reason="the 'align' extra (eflomal) is not installed")
    data = tiny_corpus(tmp_path / "bin")
    sources = ["das Haus ist Zwergensee", "ein Buch ist rot"]
    (data / "test.tok.de").write_text("\n".join(sources) + "\n")
    gen = tmp_path / "gen.txt"
    gen.write_text("H-0\t-0.1\tthe <unk> is <unk>\nD-0\t-0.1\tthe <unk> is <unk>\n"
                   "P-0\t-0.1 -0.1 -0.1 -0.1 -0.1\nA-0\t0-0 1-1 2-2 3-3\n"
                   "H-1\t-0.1\ta <unk> is <unk>\nD-1\t-0.1\ta <unk> is <unk>\n"
                   "P-1\t-0.1 -0.1 -0.1 -0.1 -0.1\nA-1\t0-0 3-1 2-2 1-3\n")
    out = tmp_path / "out.txt"
    assert main(["--generate-output", str(gen), "--source", str(data / "test.tok.de"),
                 "--method", "dictionary", "--data", str(data), "--src", "de", "--tgt", "en",
                 "--output", str(out)]) == 0
    # sample 1: <unk> 1 attends 'rot' (3-1), <unk> 3 attends 'Buch' (1-3)
    assert read_generate_output(str(out)) == ["the house is Zwergensee", "a red is book"]
    record = json.loads((tmp_path / "out.txt.json").read_text())
    assert (record["method"], record["unk"], record["from_dictionary"], record["copied"]) == \
        ("dictionary", 4, 3, 1)
    assert record["dictionary"] == str(data / "unk-dict.de-en.intersection.txt")
    assert "4 <unk> replaced (3 through the dictionary)" in capsys.readouterr().err


def test_dictionary_method_without_the_extra_fails_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "eflomal", None)  # import eflomal raises ImportError
    data = tiny_corpus(tmp_path / "bin")
    gen, src = write_inputs(tmp_path)
    assert main(["--generate-output", str(gen), "--source", str(src), "--method", "dictionary",
                 "--data", str(data), "--src", "de", "--tgt", "en"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ran_fairseq[align]'" in err
    assert not (data / "unk-dict.de-en.intersection.txt").exists()
    assert unk_dictionary.main(["--data", str(data), "--src", "de", "--tgt", "en"]) == 1
    assert "needs the word aligner eflomal" in capsys.readouterr().err


def test_dictionary_method_names_missing_training_text(tmp_path, capsys):
    gen, src = write_inputs(tmp_path)
    assert main(["--generate-output", str(gen), "--source", str(src), "--method", "dictionary",
                 "--data", str(tmp_path), "--src", "de", "--tgt", "en"]) == 1
    err = capsys.readouterr().err
    assert "prep/train.tok.de is missing" in err and "--train-prefix" in err
    assert main(["--generate-output", str(gen), "--source", str(src),
                 "--method", "dictionary"]) == 1
    assert "needs --data, --src, --tgt" in capsys.readouterr().err


def test_compare_unk_scores_both_methods_on_a_kept_decoding(tmp_path, capsys):
    """ran_lab.reproduce.compare_unk reads a run folder's generate.txt.gz and scores no
    replacement, copy and dictionary against the data-bin's references, writing nothing there."""
    from ran_lab.reproduce import compare_unk

    data, run = tmp_path / "bin", tmp_path / "run"
    data.mkdir()
    run.mkdir()
    (data / "test.tok.de").write_text("\n".join(" ".join(s) for s in SOURCES) + "\n")
    refs = ["the house at Zwergensee .", "a quokka laughs"]
    for kind in ("tok", "raw"):
        (data / f"test.{kind}.en").write_text("\n".join(refs) + "\n")
    (run / "generate.txt.gz").write_bytes(gzip.compress(GENERATED.encode()))
    lex = tmp_path / "lex"
    lex.write_text("Quokka quokka\n")
    out = tmp_path / "numbers.json"
    assert compare_unk.main([str(run), "--data", str(data), "--src", "de", "--tgt", "en",
                             "--dictionary", str(lex), "--json", str(out)]) == 0
    assert sorted(p.name for p in run.iterdir()) == ["generate.txt.gz"]
    row = json.loads(out.read_text())["runs"][0]
    # Zwergensee copied; Quokka translated in both hypotheses of sample 1, 'ein' copied
    assert (row["dictionary"]["unk"], row["dictionary"]["from_dictionary"],
            row["dictionary"]["copied"], row["copy"]["copied"]) == (4, 2, 2, 4)
    assert row["dictionary"]["tok_bleu"] == pytest.approx(100)
    assert row["none"]["tok_bleu"] < row["copy"]["tok_bleu"] < row["dictionary"]["tok_bleu"]
    assert "4 <unk> in 2 of 3 hypotheses; dictionary method: 2 from the dictionary, 2 copied" \
        in capsys.readouterr().out


# ---- end to end through fairseq-generate -------------------------------------------------------

TINY = ("--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--decoder-embed-dim", "16",
        "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16",
        "--dynamic-memory-dim", "8", "--dynamic-memory-window", "1")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A small model's fairseq-generate output on a corpus whose source and target vocabularies
    hold only the 8 most frequent words each (the rest is <unk>)."""
    root = tmp_path_factory.mktemp("unk")
    raw = helpers.make_synthetic_corpus(root / "raw", n_test=16)
    helpers.run_cli("preprocess", [
        "--source-lang", "de", "--target-lang", "en", "--trainpref", raw / "train",
        "--validpref", raw / "valid", "--testpref", raw / "test", "--destdir", root / "bin",
        "--workers", "1", "--nwordssrc", "12", "--nwordstgt", "12"])  # 4 specials + 8 words
    helpers.train(root / "bin", root / "ckpt", "rnnsearch_dynmem",
                  (*TINY, "--lr", "0.01", "--dropout", "0"), max_update=15)
    out = helpers.generate(root / "bin", root / "ckpt" / "checkpoint_last.pt",
                           ["--print-alignment"]).stdout
    return root, out


def test_generate_output_end_to_end(generated, tmp_path):
    root, out = generated
    sources = (root / "raw" / "test.de").read_text().splitlines()
    gen = tmp_path / "gen.txt"
    gen.write_text(out)
    lex = tmp_path / "lex"
    lex.write_text("".join(f"w{k} v{k}\n" for k in range(0, 24, 2)))  # even words only
    proc = subprocess.run([sys.executable, "-m", "ran_text.replace_unk",
                           "--generate-output", str(gen), "--source", str(root / "raw" / "test.de"),
                           "--dictionary", str(lex)], capture_output=True, text=True,
                          env=helpers.fairseq_env(), check=True)
    before, after = out.splitlines(), proc.stdout.splitlines()
    assert len(before) == len(after)
    hyps = {int(m.group(1)): m.group(2).split() for m in
            (re.match(r"H-(\d+)\t\S+\t(.*)", line) for line in before) if m}
    aligned = {int(m.group(1)): dict((int(t), int(s)) for s, t in
                                     (p.split("-") for p in m.group(2).split()))
               for m in (re.match(r"A-(\d+)\t(.*)", line) for line in before) if m}
    unks = sum(h.count("<unk>") for h in hyps.values())
    assert unks >= 10, "the model wrote too few <unk> for the test to mean anything"
    replaced = 0
    for old, new in zip(before, after):
        if not re.match(r"[HD]-\d+\t", old):
            assert new == old
            continue
        idx = int(old.split("\t")[0][2:])
        source = sources[idx].split()
        old_tokens, new_tokens = old.split("\t")[2].split(), new.split("\t")[2].split()
        assert len(old_tokens) == len(new_tokens) and "<unk>" not in new_tokens
        for t, (o, n) in enumerate(zip(old_tokens, new_tokens)):
            if o != "<unk>":
                assert n == o
                continue
            word = source[aligned[idx][t]]
            assert n == (f"v{word[1:]}" if int(word[1:]) % 2 == 0 else word)
            replaced += old.startswith("H-")
    assert replaced == unks
    assert f"{unks} <unk> replaced" in proc.stderr


@torch.no_grad()
def test_alignments_index_source_tokens_under_left_padding(generated):
    """fairseq-generate decodes padded batches (sources left-padded); each A- line must give the
    argmax of the attention of the sentence decoded alone, over its own tokens (not </s>)."""
    from fairseq import checkpoint_utils

    root, out = generated
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(root / "ckpt" / "checkpoint_last.pt")], arg_overrides={"data": str(root / "bin")})
    model = models[0].eval()
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    hyps = dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", out, re.M))
    sources = (root / "raw" / "test.de").read_text().splitlines()
    lengths = set()
    checked = 0
    for idx, alignment in re.findall(r"^A-(\d+)\t(.*)$", out, re.M):
        src = src_dict.encode_line(sources[int(idx)], add_if_not_exist=False).long().unsqueeze(0)
        tgt = tgt_dict.encode_line(hyps[idx], add_if_not_exist=False).long().unsqueeze(0)
        prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], 1)  # </s> first, as teacher forcing
        _, attn = model(src, torch.tensor([src.size(1)]), prev)
        expected = attn[0, :-1, :-1].argmax(-1).tolist()  # hypothesis tokens x source words
        pairs = sorted((int(t), int(s)) for s, t in (p.split("-") for p in alignment.split()))
        assert [s for _, s in pairs] == expected, f"sentence {idx}"
        lengths.add(src.size(1))
        checked += 1
    assert checked == 16 and len(lengths) > 3  # sentences of many lengths shared padded batches
