"""The ``ter`` scorer and the sacreBLEU evaluation of detokenized fairseq-generate output."""
import subprocess
import sys
from types import SimpleNamespace

import pytest
import sacrebleu

from ran_text import evaluate
from ran_fairseq.scoring.ter import TerScorer

REFS = ["the cat sits on the mat", "a man rides a red bike", "two dogs play"]
HYPS = ["the cat sat on the mat", "a man rides a bike", "two dogs play"]


def ter_cfg(**kw):
    base = dict(ter_normalized=False, ter_no_punct=False, ter_case_insensitive=False,
                ter_asian_support=False)
    return SimpleNamespace(**{**base, **kw})


def test_ter_scorer_counts_edits():
    scorer = TerScorer(ter_cfg())
    scorer.add_string("a b c d", "a b x d")  # one substitution in four reference words
    assert scorer.score() == pytest.approx(25.0)
    scorer.add_string("e f g h", "e f g h")
    assert scorer.score() == pytest.approx(100 * 1 / 8)
    assert scorer.result_string().startswith("TER = 12.50")


def test_ter_scorer_options():
    scorer = TerScorer(ter_cfg(ter_case_insensitive=True))
    scorer.add_string("The Cat", "the cat")
    assert scorer.score() == 0.0
    strict = TerScorer(ter_cfg())
    strict.add_string("The Cat", "the cat")
    assert strict.score() == pytest.approx(100.0)


def generate_output(hyps, order):
    lines = ["S-{0}\tsrc {0}", "T-{0}\tref {0}", "H-{0}\t-0.5\t{1} tok", "D-{0}\t-0.5\t{1}",
             "P-{0}\t-0.1 -0.2"]
    out = [line.format(i, hyps[i]) for i in order for line in lines]
    return "\n".join(out + ["Generate test with beam=5: BLEU4 = 10.00"]) + "\n"


def test_read_generate_output_restores_corpus_order(tmp_path):
    path = tmp_path / "gen.out"
    path.write_text(generate_output(HYPS, [2, 0, 1]))
    assert evaluate.read_generate_output(path) == HYPS


def test_read_generate_output_reports_missing_ids(tmp_path):
    path = tmp_path / "gen.out"
    path.write_text(generate_output(HYPS, [2, 0]))
    with pytest.raises(ValueError, match="lacks hypotheses for 1 sentence"):
        evaluate.read_generate_output(path)
    path.write_text("no generate output here\n")
    with pytest.raises(ValueError, match="fairseq-generate output"):
        evaluate.read_generate_output(path)


def test_score_matches_sacrebleu():
    result = evaluate.score(HYPS, REFS)
    assert result["bleu"][0] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert result["chrf"][0] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert result["ter"][0] == pytest.approx(sacrebleu.corpus_ter(HYPS, [REFS]).score)
    assert evaluate.score(REFS, REFS)["bleu"][0] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="2 hypotheses but 3 references"):
        evaluate.score(HYPS[:2], REFS)


def test_evaluate_cli(tmp_path):
    gen, ref = tmp_path / "gen.out", tmp_path / "ref.txt"
    gen.write_text(generate_output(HYPS, [1, 2, 0]))
    ref.write_text("\n".join(REFS) + "\n")
    cmd = [sys.executable, "-m", "ran_text.evaluate", "--generate-output", gen, "--ref", ref]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    bleu = sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert f"BLEU  {bleu:6.2f}" in proc.stdout and "TER" in proc.stdout and "CHRF" in proc.stdout
    ref.write_text("only one line\n")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode != 0 and "3 hypotheses but 1 references" in proc.stderr


def test_source_and_reference_lines_have_no_score_column(tmp_path):
    """S- and T- lines are <tag>TAB<text>: reading them as if a score came first gave empty
    references (the engine's tokenized BLEU was 0.00 for every system)."""
    path = tmp_path / "gen.out"
    path.write_text(generate_output(HYPS, [1, 2, 0]))
    assert evaluate.read_generate_output(path, prefix="T") == ["ref 0", "ref 1", "ref 2"]
    assert evaluate.read_generate_output(path, prefix="S") == ["src 0", "src 1", "src 2"]
    assert evaluate.read_generate_output(path, prefix="H") == [h + " tok" for h in HYPS]


def test_ter_is_tercoms_default_case_insensitive():
    upper = [h.upper() for h in REFS]
    result = evaluate.score(upper, REFS)
    assert result["ter"][0] == pytest.approx(0.0)
    assert "case:lc" in result["ter"][1]
    assert result["bleu"][0] < 100  # BLEU stays case-sensitive


def test_an_unknown_word_counts_as_one_wrong_word():
    """sacreBLEU's tokenizer splits "<unk>" into three tokens; scored, it is one wrong word, as in
    tokenized BLEU: the same score as any other wrong word, and a replacement by the right word
    gains only that word."""
    refs = ["Ein Mann mit einem Zwergenhut steht auf der Straße."] * 3
    unk = ["Ein Mann mit einem <unk> steht auf der Straße."] * 3
    wrong = ["Ein Mann mit einem Hundehut steht auf der Straße."] * 3
    right = refs
    as_unk, as_wrong = (evaluate.score(h, refs)["bleu"][0] for h in (unk, wrong))
    assert as_unk == pytest.approx(as_wrong)
    literal = evaluate.score(unk, refs, literal_unk=True)["bleu"][0]
    assert literal < as_unk < evaluate.score(right, refs)["bleu"][0] == pytest.approx(100)
    assert evaluate.unk_as_one_word(["a <unk>, b <unk>."]) == ["a \u2047, b \u2047."]
