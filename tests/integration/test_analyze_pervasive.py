"""scripts/analyze-pervasive.py and ran_lab.analysis.sweeps (Elbayad et al. 2018, Figs. 4-5)
on a hand-made results folder: the swept values read from flags or arch defaults, mean ± std over
seeds, BLEU by source length averaged over seeds, CSV and PNG outputs, and errors."""
import csv
import json
import statistics
import subprocess
import sys

import pytest
from sacrebleu.metrics import BLEU

import helpers
from ran_lab.analysis import sweeps

SCRIPT = helpers.REPO / "scripts" / "analyze-pervasive.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def result(system, tables, flags, bleu, seed, pair="de-en", arch="pervasive_attention"):
    return {"pair": pair, "system": system, "seed": seed, "arch": arch, "flags": flags,
            "tables": tables, "tok_bleu": bleu,
            "subsets": {"test": {"hyp_file": "hyp.detok.txt"}}}


def test_sweep_rows_take_values_from_flags_or_arch_defaults():
    results = [
        result("max", ["1", "fig4-d", "fig4-g", "fig4-L"], ["--aggregator", "max"], 30.0, 1),
        result("max", ["1", "fig4-d", "fig4-g", "fig4-L"], ["--aggregator", "max"], 31.0, 2),
        result("max d=64", ["fig4-d"], ["--encoder-embed-dim", "64", "--decoder-embed-dim", "64"],
               28.0, 1),
        result("max g=8", ["fig4-g"], ["--growth-rate", "16", "--growth-rate", "8"], 25.0, 1),
        result("max k=5 L=8", ["2", "fig4-L"], ["--num-layers", "8"], 27.0, 1),
        result("small", ["fig4-L"], [], 20.0, 1, arch="pervasive_attention_small"),
        result("ConvS2S", ["3"], [], 29.0, 1, arch="fconv_iwslt_de_en"),
        result("max", ["1", "fig4-d", "fig4-g", "fig4-L"], [], 26.0, 1, pair="en-de"),
    ]
    rows = sweeps.sweep_rows(results, pair="de-en")
    got = [(r["panel"], r["value"], r["system"], r["seeds"]) for r in rows]
    assert got == [("d", 64, "max d=64", 1), ("d", 128, "max", 2), ("g", 8, "max g=8", 1),
                   ("g", 32, "max", 2), ("L", 8, "max k=5 L=8", 1), ("L", 8, "small", 1),
                   ("L", 24, "max", 2)]
    best = next(r for r in rows if r["system"] == "max")
    assert best["bleu"] == 30.5 and best["bleu_std"] == pytest.approx(statistics.stdev([30, 31]))
    assert {r["pair"] for r in sweeps.sweep_rows(results)} == {"de-en", "en-de"}
    with pytest.raises(ValueError, match="no result belongs to a Fig. 4 sweep"):
        sweeps.sweep_rows(results[-2:-1])
    with pytest.raises(ValueError, match="unknown Fig. 4 table 'fig4-k'"):
        sweeps.sweep_rows([result("x", ["fig4-k"], [], 1.0, 1)])


@pytest.fixture
def results_folder(tmp_path):
    """results.json over a data-bin with 4 raw test pairs (source lengths 2, 3, 12, 13 words):
    Pervasive Attention with two seeds and one baseline; sweeps for Fig. 4."""
    data = tmp_path / "bin.de-en"
    data.mkdir()
    sources = ["a b", "a b c", " ".join(["w"] * 12), " ".join(["w"] * 13)]
    refs = ["the cat sat down", "a dog ran off", "one two three four five six",
            "seven eight nine ten eleven twelve"]
    (data / "test.raw.de").write_text("\n".join(sources) + "\n")
    (data / "test.raw.en").write_text("\n".join(refs) + "\n")
    hyps = {("max-attn", 1): ["the cat sat down", "a dog ran", "one two three four five six",
                              "seven eight nine ten"],
            ("max-attn", 2): ["the cat sat", "a dog ran off", "one two three four five",
                              "seven eight nine ten eleven twelve"],
            ("ConvS2S", 1): ["cat sat down", "dog ran off", "one two three", "seven eight"]}
    out = tmp_path / "out"
    results = []
    for (system, seed), lines in hyps.items():
        folder = out / "de-en" / system / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "hyp.detok.txt").write_text("\n".join(lines) + "\n")
        r = result(system, ["3"], [], 10.0 * seed, seed)
        r["subsets"]["test"]["raw_ref"] = str(data / "test.raw.en")
        results.append(r)
    results += [result("max", ["1", "fig4-L"], [], 30.0, 1),
                result("max k=5 L=8", ["2", "fig4-L"], ["--num-layers", "8"], 27.0, 1)]
    (out / "results.json").write_text(json.dumps(
        {"settings": {"data": str(tmp_path / "bin.{src}-{tgt}")}, "results": results}))
    return out, hyps, refs


def test_length_rows_average_the_seeds_per_bin(results_folder):
    out, hyps, refs = results_folder
    rows = sweeps.length_rows(out, "de-en", ["max-attn", "ConvS2S"], edges=[10])
    by = {(r["system"], r["bin"]): r for r in rows}
    assert set(by) == {(s, b) for s in ("max-attn", "ConvS2S") for b in ("0-9", "10+")}

    def bleu(lines, members):
        return BLEU().corpus_score([lines[i] for i in members],
                                   [[refs[i] for i in members]]).score

    for label, members in (("0-9", [0, 1]), ("10+", [2, 3])):
        seeds = [bleu(hyps[("max-attn", s)], members) for s in (1, 2)]
        row = by[("max-attn", label)]
        assert row["seeds"] == 2 and row["sentences"] == 2
        assert row["bleu"] == pytest.approx(statistics.fmean(seeds))
        assert row["bleu_std"] == pytest.approx(statistics.stdev(seeds))
        assert by[("ConvS2S", label)]["bleu"] == pytest.approx(bleu(hyps[("ConvS2S", 1)], members))
    with pytest.raises(ValueError, match="no result for 'RNNsearch' on de-en"):
        sweeps.length_rows(out, "de-en", ["RNNsearch"])


def test_cli_writes_csv_and_png(results_folder, tmp_path):
    """One real command line (the script), the other figure through ran-analyze in-process (the
    error for a folder without results.json: test_ran_analyze_names_the_papers_and_runs_each)."""
    from ran_lab.analysis import cli

    out, _, _ = results_folder
    figures = tmp_path / "figures"
    proc = subprocess.run([sys.executable, str(SCRIPT), "fig4", "--results", str(out),
                           "--out", str(figures)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cli.main(["pervasive", "fig5", "--pair", "de-en", "--systems", "max-attn,ConvS2S",
              "--bins", "10", "--results", str(out), "--out", str(figures)])
    for name in ("fig4", "fig5"):
        assert (figures / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        with open(figures / f"{name}.csv") as f:
            table = list(csv.DictReader(f))
        assert table and "bleu_std" in table[0]
    assert [r["value"] for r in csv.DictReader(open(figures / "fig4.csv"))] == ["8", "24"]


def test_ran_analyze_names_the_papers_and_runs_each(results_folder, tmp_path, capsys):
    """``ran-analyze PAPER ...`` (ran_lab.analysis.cli): --help lists the papers, an unknown
    one is an error naming them, and a paper's commands run as through its script."""
    from ran_lab.analysis import cli

    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert "ran-analyze" in shown and "ran " in shown and "pervasive" in shown
    with pytest.raises(SystemExit) as done:
        cli.main(["fig4"])
    assert done.value.code == 2 and "'ran', 'pervasive'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        cli.main(["pervasive", "--help"])
    assert done.value.code == 0 and "usage: ran-analyze pervasive" in capsys.readouterr().out
    out, _, _ = results_folder
    figures = tmp_path / "figures"
    cli.main(["pervasive", "fig4", "--results", str(out), "--out", str(figures)])
    assert (figures / "fig4.png").read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(SystemExit, match="analyze-pervasive fig5: error: .*results.json"):
        cli.main(["pervasive", "fig5", "--results", str(tmp_path), "--pair", "de-en",
                  "--out", str(figures)])
