"""The figures a page's prose quotes between ``<!-- figure FOLDER#SPEC -->`` markers
(ran_lab.claims.figures): each read from the committed files, checked here against the files
independently; every page is as the fill leaves it (tests/integration/test_claims.py)."""
import json
import math
import re
import statistics

import pytest

from helpers import REPO
from ran_lab.claims import figures, report, verdicts_by_key


def scores(folder, pair, system, subset="test", field="sacrebleu"):
    data = json.loads((REPO / folder / "results.json").read_text(encoding="utf-8"))
    return {r["seed"]: r["subsets"][subset][field] for r in data["results"]
            if r["pair"] == pair and r["system"] == system}


def test_a_runs_score_its_p_and_its_systems_spread_come_from_results_json():
    folder = "results/ran/long"
    transf = scores(folder, "de-en", "TransF")
    assert figures.figure(folder, "de-en/TransF/3", REPO) == f"{transf[3]:.2f}"
    sd = statistics.stdev(transf.values())
    assert figures.figure(folder, "de-en/TransF/sd", REPO) == f"{sd:.2f}"
    assert figures.figure(folder, "de-en/TransF/spread", REPO) == \
        f"{1.959964 * math.sqrt(2) * sd:.2f}"
    assert figures.figure(folder, "de-en/TransF/apart/1,3", REPO) == \
        f"{abs(transf[1] - transf[3]):.2f}"
    p = scores(folder, "de-en", "RAN-ALL", field="p_value")[2]
    assert float(figures.figure(folder, "de-en/RAN-ALL/2/p", REPO)) == pytest.approx(p, rel=0.05)
    # a system whose name holds a slash
    ln = scores(folder, "de-en", "RAN-ALL w/o LN&RES")[1]
    assert figures.figure(folder, "de-en/RAN-ALL w/o LN&RES/1", REPO) == f"{ln:.2f}"


def test_a_verdicts_numbers_and_the_papers_come_from_the_engine_and_the_claims_file():
    folder = "results/recurrent_cross/long"
    verdicts = verdicts_by_key(folder, REPO)
    part = dict(verdicts["R-5.2-none-better@de-en"].comparisons)["prev-accum-weight"]
    assert figures.figure(folder, "R-5.2-none-better@de-en/prev-accum-weight/interval", REPO,
                          lambda name: verdicts_by_key(name, REPO)) == \
        report.interval_text(part.pooled)
    assert figures.figure("results/pervasive/gpu-long", "paper:E-T3-transformer/Transformer",
                          REPO) == "32.83"


@pytest.mark.parametrize("spec", ["de-en/TransF", "de-en/nobody/1", "de-en/TransF/9"])
def test_a_figure_that_the_files_do_not_hold_is_refused(spec):
    with pytest.raises(KeyError):
        figures.figure("results/ran/long", spec, REPO)


def test_a_stale_figure_is_rewritten():
    page = "sd <!-- figure results/ran/long#de-en/TransF/sd -->9.99<!-- /figure --> here"
    filled = report.fill(page, lambda name: verdicts_by_key(name, REPO))
    assert filled == page.replace("9.99", figures.figure("results/ran/long", "de-en/TransF/sd",
                                                         REPO))


def test_a_verdicts_outcome_is_a_figure_for_a_short_cell():
    folder = "results/ran/long"
    verdicts = verdicts_by_key(folder, REPO)
    assert figures.figure(folder, "Z-T1-ran-all@de-en/verdict", REPO,
                          lambda name: verdicts_by_key(name, REPO)) == \
        verdicts["Z-T1-ran-all@de-en"].outcome


# a measured number as prose writes it: a decimal, a percentage, a ratio, a signed difference or
# a thousands-separated count; the rule's own constants (its 99 % level and 80 % power) and the
# papers' section numbers (§3.1) are not measurements
MEASURED = re.compile(r"(?<![\w.§])(?:[+−-]\d|×\s?\d|\d[\d,]*\.\d|\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?\s?%)")
RULE = ("99 %", "80 %")


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_no_measured_number_is_typed_by_hand(page):
    """Outside the filled spans, code and link targets, README.md and docs/results.md write no
    measured number: every one is a figure, a quote or a tally filled from the committed files."""
    text = (REPO / page).read_text(encoding="utf-8")
    for pattern in (report.TABLE, report.HOLDS, report.SPAN, report.COUNT, report.FIGURE):
        text = pattern.sub("", text)
    text = re.sub(r"(?s)<!-- leaderboard -->.*?<!-- /leaderboard -->", "", text)
    text = re.sub(r"(?s)```.*?```", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"<!--.*?-->", "", text)
    for constant in RULE:
        text = text.replace(constant, "")
    found = [(line, m.group(0)) for line, row in enumerate(text.splitlines(), 1)
             for m in MEASURED.finditer(row)]
    assert not found, f"{page}: numbers typed by hand (line of the stripped page, number): {found}"
