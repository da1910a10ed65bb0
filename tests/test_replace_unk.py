"""Unknown-word replacement (ran_fairseq.scoring.replace_unk) on crafted fairseq-generate output,
and end to end: rnnsearch_dynmem trained briefly on a synthetic corpus binarized with tiny
vocabularies, so that it writes <unk>, decoded by fairseq-generate --print-alignment."""
import re
import subprocess
import sys

import pytest
import torch

import helpers
from ran_fairseq.scoring.evaluate import read_generate_output
from ran_fairseq.scoring.replace_unk import (
    ReplaceUnkError,
    Stats,
    load_dictionary,
    main,
    replace_unk_lines,
)

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
    proc = subprocess.run([sys.executable, "-m", "ran_fairseq.scoring.replace_unk",
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
