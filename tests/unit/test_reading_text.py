"""Text as the project's tools read it: a file's lines are split on ``\\n`` only (a U+2028 or a
form feed inside a sentence is no line break; ``\\r\\n`` ends a line) and a leading byte-order mark
is dropped, by the text files' reader, the evaluation's reading of fairseq-generate output, data
preparation's corpus reader, the significance test's references and the demo's training curve;
and the hub takes a sentence or a list of them, never bytes or an empty sentence."""
import gzip
import sys

import pytest

from helpers import REPO

BREAKS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def test_lines_split_on_newline_only_with_a_bom_dropped(tmp_path):
    from ran_text.evaluate import read_generate_output
    from ran_text.textio import read_lines

    lines = [f"a{b}b" for b in BREAKS]
    path = tmp_path / "ref.txt"
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\n").encode())
    assert read_lines(path) == lines
    gen = tmp_path / "gen.txt"
    gen.write_text("".join(f"D-{i}\t-0.5\t{line}\n" for i, line in enumerate(lines)),
                   encoding="utf-8")
    assert read_generate_output(gen) == lines


def test_prepare_strips_a_byte_order_mark(tmp_path):
    from ran_text.corpora import read_text

    path = tmp_path / "train.de"
    path.write_bytes("\ufeffEin Satz.\nNoch\u2028einer.\n".encode())
    with gzip.open(tmp_path / "train.de.gz", "wb") as f:
        f.write(path.read_bytes())
    for p in (path, tmp_path / "train.de.gz"):
        assert list(read_text(p)) == ["Ein Satz.", "Noch\u2028einer."]


def test_significance_reads_references_holding_unicode_line_breaks(tmp_path):
    """The engine split text files with str.splitlines(): a reference holding U+2028 counted as two
    sentences, and the bootstrap against the baseline failed on the count."""
    from ran_lab.reproduce.scores import add_significance

    refs = ["a b c d", "e\u2028f g h", "i j k\x1cl", "m n o p"]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    results = []
    for system, hyps in (("base", ["a b c d", "e f", "i j", "m"]), ("sys", refs)):
        run_dir = tmp_path / "de-en" / system / "seed1"
        run_dir.mkdir(parents=True)
        (run_dir / "hyp.detok.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        results.append({"pair": "de-en", "system": system, "seed": 1, "subsets": {"test": {
            "hyp_file": "hyp.detok.txt", "raw_ref": str(tmp_path / "ref.txt"),
            "sacrebleu": 10.0 if system == "base" else 100.0, "ter": 50.0 if system == "base"
            else 0.0}}})
    add_significance(results, "base", {"samples": 100}, tmp_path)
    assert 0 < results[1]["subsets"]["test"]["p_value"] <= 1


def test_curve_splits_a_log_on_newline_only(tmp_path):
    sys.path.insert(0, str(REPO / "scripts" / "quickstart"))
    import curve

    log = tmp_path / "train.log"
    # a U+2028 inside a line (a sentence fairseq logged, say) is no line break
    line = 'x | INFO | train_inner | epoch 001:  1 / 9 loss=1.0,\u2028 wpb=10, num_updates={u}'

    log.write_text("\n".join(line.format(u=u) for u in (1, 2)) + "\n")
    assert curve.tokens_by_update(log) == {1: 10.0, 2: 20.0}


def test_the_hub_takes_a_sentence_or_a_list_of_them():
    from ran_fairseq.hub import checked_sentences

    assert checked_sentences("w1 w2") == "w1 w2"
    assert checked_sentences(("a", "b")) == ["a", "b"]
    for bad, error, message in [(b"w1 w2", TypeError, "not bytes (decode bytes first"),
                                (None, TypeError, "not NoneType"),
                                ("", ValueError, "empty sentence"),
                                (["a", " "], ValueError, "empty sentence"),
                                ([b"a"], TypeError, "not bytes")]:
        with pytest.raises(error, match=message.replace("(", r"\(")):
            checked_sentences(bad)
