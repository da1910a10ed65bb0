"""The figures a page's prose quotes between ``<!-- figure FOLDER#SPEC -->`` markers
(ran_lab.claims.figures): each read from the committed files, checked here against the files
independently; every page is as the fill leaves it (tests/integration/test_claims.py)."""
import importlib.util
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


# a measured number as prose writes it: a decimal, a percentage, a ratio, a signed difference, a
# thousands-separated count, or a whole number with a unit of time or memory or a test outcome
# (81 s, 18–21 s, 470 MiB, 486 passed); the rule's own constants (its 99 % level and 80 % power), the
# papers' section numbers (§3.1), software versions (Python 3.10.13, torch 2.5.1+cpu, CUDA 12.4)
# and a GPU's model name (H100 80GB) are not measurements
MEASURED = re.compile(r"(?<![\w.§])(?:[+−-]\d|×\s?\d|\d[\d,]*\.\d|\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?\s?%"
                      r"|\d+(?:[–-]\d+)?\s?(?:s|ms|min|h|KiB|MiB|GiB|MB|GB)\b"
                      r"|\d+ (?:passed|failed|skipped|errors?)\b)")
RULE = ("99 %", "80 %")
VERSION = re.compile(r"\b(?:Python|torch|NumPy|numpy|CUDA|fairseq|fairseq-fixed|driver|Debian|glibc"
                     r"|cuDNN|NCCL|pytest|Linux|v)[\s-]?\d+(?:\.\d+)+[\w.+-]*"
                     r"|(?<![\w.])\d+(?:\.\d+){2,}[\w.+-]*|\bH\d+ \d+GB\b")


def stripped(text):
    """A page's prose: without its filled spans, code, link targets, comments and versions."""
    for pattern in (report.TABLE, report.HOLDS, report.SPAN, report.COUNT, report.FIGURE):
        text = pattern.sub("", text)
    text = re.sub(r"(?s)<!-- leaderboard -->.*?<!-- /leaderboard -->", "", text)
    text = re.sub(r"(?s)```.*?```", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"<!--.*?-->", "", text)
    text = VERSION.sub("", text)
    for constant in RULE:
        text = text.replace(constant, "")
    return text


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_no_measured_number_is_typed_by_hand(page):
    """Outside the filled spans, code and link targets, README.md and docs/results.md write no
    measured number: every one is a figure, a quote or a tally filled from the committed files."""
    text = stripped((REPO / page).read_text(encoding="utf-8"))
    found = [(line, m.group(0)) for line, row in enumerate(text.splitlines(), 1)
             for m in MEASURED.finditer(row)]
    assert not found, f"{page}: numbers typed by hand (line of the stripped page, number): {found}"


# the results' own pages: each measured number is a figure filled from the committed files, or a
# number that the measurement files it cites give at the precision the prose writes, or a setting
# that the folder's settings.json lists under the page's section with its reason (a goal, a batch
# size): no measured value is typed by hand, and none is listed by hand
RESULTS_PAGES = [REPO / "results" / "README.md"] + sorted((REPO / "results").glob("*/README.md")) + \
    sorted((REPO / "results").glob("*/*/README.md"))
SETTINGS = "settings.json"
# pages that a script writes whole from the folder's records, each checked against it below
WRITTEN_BY_SCRIPT = [REPO / "results" / "environments" / "README.md"]
NUMBER = re.compile(r"(?:[+−-]|×\s?)?\d[\d,]*(?:\.\d+)?")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
# how a file's number may be written: as it is, a fraction as a percentage, seconds as minutes or
# milliseconds, bytes as MiB, MiB as GiB
UNITS = (1, 100, 1 / 60, 1000, 1 / 2 ** 20, 1 / 1024)
SIGNIFICANT = 4  # fewer digits than this could match some number of a large file by chance


def sections(text):
    """``(heading, body)`` of a page, code blocks left out (their ``#`` lines are no headings);
    the text before the first heading under ``""``."""
    text = re.sub(r"(?s)```.*?```", "", text)
    marks = list(HEADING.finditer(text))
    if not marks or marks[0].start() > 0:
        yield "", text[:marks[0].start() if marks else len(text)]
    for m, after in zip(marks, marks[1:] + [None]):
        yield m[1].strip(), text[m.end():after.start() if after else len(text)]


def numbers_of(body):
    """The measured numbers of a section's prose: ``(token, digits, decimals)``, ``digits`` the
    number without its sign, ratio sign, unit and thousands separators."""
    for row in stripped(body).splitlines():
        for m in MEASURED.finditer(row):
            first = NUMBER.match(row, m.start())  # the whole number, where the match ends early
            for number in [first] + list(NUMBER.finditer(row, first.end(), m.end())):
                token = number[0].rstrip(",")
                digits = re.sub(r"[^\d.]", "", token)
                yield token, digits, len(digits.partition(".")[2])


def value_of(token):
    return float(re.sub(r"[^\d.−-]", "", token).replace("−", "-"))


def written(value, decimals):
    return f"{abs(value):.{decimals}f}"


def _numbers(data):
    if isinstance(data, dict):
        data = list(data.values())
    if isinstance(data, list):
        return [v for item in data for v in _numbers(item)]
    return [data] if isinstance(data, (int, float)) and not isinstance(data, bool) else []


def measured_numbers(page):
    """The numbers of the measurement files a page cites (as :class:`Writings`): every JSON file under its folder and
    under the folders its links point to inside results/ (settings.json aside)."""
    folders = {page.parent}
    for target in re.findall(r"\]\(([^)#\s]+)", page.read_text(encoding="utf-8")):
        path = (page.parent / target).resolve()
        if path.exists() and (REPO / "results") in path.parents:
            folders.add(path if path.is_dir() else path.parent)
    files = {f for folder in folders for f in folder.rglob("*.json") if f.name != SETTINGS}
    return Writings(v for f in sorted(files)
                    for v in _numbers(json.loads(f.read_text(encoding="utf-8"))))


class Writings:
    """How the numbers of a page's measurement files are written, at each precision asked."""

    def __init__(self, numbers):
        self.numbers, self.at = list(numbers), {}

    def __contains__(self, written_number):
        digits, decimals = written_number
        if decimals not in self.at:
            self.at[decimals] = {written(v * unit, decimals)
                                 for v in self.numbers for unit in UNITS}
        return digits in self.at[decimals]


def backed(token, digits, decimals, writings):
    """Whether a measurement file gives ``token`` at its precision (see UNITS, SIGNIFICANT)."""
    if "×" in token or len(digits.replace(".", "").lstrip("0")) < SIGNIFICANT:
        return False
    return (digits, decimals) in writings


def record_of(page):
    """A folder's settings.json: ``{section: [setting, ...]}``, each section with its reason."""
    path = page.parent / SETTINGS
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    assert "what" in data, f"{path}: what?"
    for section in data["sections"]:
        assert section.get("why"), f"{path}: settings without their reason ({section['section']})"
    return {s["section"]: s["settings"] for s in data["sections"]}


def unsupported(text, numbers, record):
    """The numbers of a page ``text`` that neither ``numbers`` (its measurement files') give nor
    ``record`` (section: figures) lists under their section, and the listed figures that their
    section does not quote: two lists of ``(section, number)``."""
    found = list(sections(text))
    headings = [heading for heading, _ in found]
    assert len(set(headings)) == len(headings), "two sections of one heading"
    assert not set(record) - set(headings), f"{SETTINGS} names sections the page has not"
    unbacked, unquoted = [], []
    for heading, body in found:
        listed = record.get(heading, [])
        quoted = set()
        for token, digits, decimals in numbers_of(body):
            quoted.add((digits, decimals))
            if not backed(token, digits, decimals, numbers) and \
                    digits not in {written(v, decimals) for v in listed}:
                unbacked.append((heading, token))
        unquoted += [(heading, v) for v in listed
                     if not any(written(v, d) == digits for digits, d in quoted)]
    return unbacked, unquoted


@pytest.mark.parametrize("page", [p for p in RESULTS_PAGES if p not in WRITTEN_BY_SCRIPT],
                         ids=lambda p: str(p.parent.relative_to(REPO)))
def test_a_results_pages_numbers_are_its_files_or_its_settings(page):
    """Every measured number of a results folder's README.md outside its filled figures is given
    by the measurement files it cites (at the precision written) or is a setting that the folder's
    settings.json lists under the section that quotes it; every listed setting is quoted there."""
    unbacked, unquoted = unsupported(page.read_text(encoding="utf-8"), measured_numbers(page),
                                     record_of(page))
    assert not unbacked, (f"{page}: numbers neither in the measurement files nor settings in "
                          f"{SETTINGS} (section, number): {unbacked}")
    assert not unquoted, f"{page}: {SETTINGS} lists settings its section does not quote: {unquoted}"


def test_no_results_folder_keeps_a_list_of_measured_figures():
    """The measured figures of the results' pages are filled from their files, not listed by
    hand beside them (a list that could drift from the measurements unnoticed)."""
    assert not sorted((REPO / "results").rglob("recorded.json"))


def test_a_number_typed_by_hand_into_a_results_page_is_found():
    numbers = [1071.9375, 0.30808]
    page = ("# Speed\n\nThe transformer trained 1,071.9 tok/s (`bench.json`), ×1.65 LSTM's.\n\n"
            "## Later\n\nIt took 0.3081 s per update, 12 s in all, 2.5 % more.\n")
    record = {"Speed": [1.65], "Later": [0.3081, 12]}
    assert unsupported(page, Writings(numbers), record) == ([("Later", "2.5")], [])
    # a figure the record lists under another section, or that no section quotes
    assert unsupported(page, Writings(numbers), {"Speed": [1.65, 12], "Later": [0.3081, 2.5]}) == \
        ([("Later", "12")], [("Speed", 12)])
    # a measured number with fewer than four digits is the record's, whatever a file holds
    assert unsupported(page, Writings(numbers + [1.65]), {"Later": [0.3081, 12, 2.5]}) == \
        ([("Speed", "×1.65")], [])


@pytest.mark.parametrize("page", [p for p in RESULTS_PAGES if report.FIGURE.search(
    p.read_text(encoding="utf-8")) and not (p.parent / "results.json").is_file()],
    ids=lambda p: str(p.parent.relative_to(REPO)))
def test_a_results_pages_figures_are_as_the_fill_writes_them(page):
    """A measurement folder's figures (its test-suite or durations record) are as
    ``ran-claims --fill`` writes them (the reproductions' pages: tests/integration/test_claims.py)."""
    text = page.read_text(encoding="utf-8")
    assert report.fill(text, lambda name: verdicts_by_key(name, REPO)) == text, \
        f"rerun: ran-claims --fill {page.relative_to(REPO)}"


def test_the_environments_table_is_as_its_script_writes_it_from_its_records():
    """results/environments/README.md is scripts/check-environments.sh's table of
    environments.json, byte for byte (the script rewrites both)."""
    spec = importlib.util.spec_from_file_location("check_environments",
                                                  REPO / "scripts" / "check_environments.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    folder = REPO / "results" / "environments"
    records = json.loads((folder / "environments.json").read_text(encoding="utf-8"))
    assert (folder / "README.md").read_text(encoding="utf-8") == script.markdown(records)


def test_a_measurement_records_figure_is_its_value_as_written():
    folder = "results/test-suite"
    data = json.loads((REPO / folder / "suite.json").read_text(encoding="utf-8"))
    seconds = data["runs"]["latest"]["make_test_seconds"]
    assert figures.figure(folder, "suite.json:runs.latest.make_test_seconds", REPO) == \
        f"{seconds:,}"
    assert figures.figure(folder, "suite.json:runs.latest.make_test_seconds|d", REPO) == \
        str(seconds)
    with pytest.raises(KeyError):
        figures.figure(folder, "suite.json:runs.nowhere", REPO)
    with pytest.raises(KeyError):
        figures.figure(folder, "suite.json:runs.latest", REPO)


def test_an_expression_of_a_records_values_is_computed_from_them():
    folder = "results/bench/peers"
    runs = {n: json.loads((REPO / folder / f"cpu-run{n}" / "peers.json").read_text(
        encoding="utf-8"))["results"] for n in (1, 2)}
    pa = [r for run in runs.values() for case, r in run.items() if case.startswith("pa-")]
    kernels = [r["memory"]["plugin"]["kernels"] / r["memory"]["attn2d"]["kernels"] for r in pa]
    rows = "cpu-run[12]/peers.json:results.pa-*.memory"
    assert figures.figure(folder, f"max {rows}.plugin.kernels ÷ {rows}.attn2d.kernels|.3f",
                          REPO) == f"{max(kernels):.3f}"
    assert figures.figure(folder, f"min {rows}.ratio|.2f", REPO) == \
        f"{min(r['memory']['ratio'] for r in pa):.2f}"
    one = runs[1]["pa-cpu"]["train"]
    assert figures.figure(folder, "cpu-run1/peers.json:results.pa-cpu.train.sides.plugin.median "
                                  "− cpu-run1/peers.json:results.pa-cpu.train.sides.attn2d.median"
                                  "\\|.4f", REPO) == \
        f"{one['sides']['plugin']['median'] - one['sides']['attn2d']['median']:.4f}"
    assert figures.figure(folder, "cpu-run1/peers.json:results.pa-cpu.train.sides.plugin.median"
                                  " × 1000|.1f", REPO) == f"{one['sides']['plugin']['median'] * 1000:.1f}"
    assert figures.figure(folder, "max cpu-run1/peers.json:results.pa-cpu.train.ratio_of_medians, "
                                  "cpu-run2/peers.json:results.pa-cpu.train.ratio_of_medians|.4f",
                          REPO) == f"{max(r['pa-cpu']['train']['ratio_of_medians'] for r in runs.values()):.4f}"
    # one value asked of many, or terms whose wildcards match different rows, are refused
    for spec in (f"{rows}.ratio",
                 f"min {rows}.plugin.kernels ÷ cpu-run1/peers.json:results.ran-*.memory.thseq.kernels",
                 "min cpu-run1/peers.json:results.nobody.train.ratio_of_medians"):
        with pytest.raises(KeyError):
            figures.figure(folder, spec, REPO)


def test_a_lists_item_is_found_by_a_fields_value():
    folder = "results/bench/kernels-cpu"
    systems = json.loads((REPO / folder / "ran" / "bench.json").read_text(encoding="utf-8"))["systems"]
    total = {s["name"]: s["kernels"]["training"]["total"] for s in systems}
    assert figures.figure(folder, "ran/bench.json:systems.name=RAN-D.kernels.training.total",
                          REPO) == f"{total['RAN-D']:,}"
    with pytest.raises(KeyError):
        figures.figure(folder, "ran/bench.json:systems.name=nobody.kernels.training.total", REPO)


# the result lines of a log whose run stopped before it wrote them as JSON, kept as LOG-log.json
# beside it: a benchmark's (scripts/bench.py's "bench: NAME: 0.0753 s/update, train 98,699.4 tok/s,
# decode 240.09 sent/s, peak train 3,926.7 MiB, peak decode 531.4 MiB") and a test run's
# differences ("max abs diff 3.07e-03")
BENCH_LINE = re.compile(r"^bench: (.+?): ([\d.]+) s/update, train ([\d,.]+) tok/s, decode ([\d,.]+) "
                        r"sent/s, peak train ([\d,.]+) MiB, peak decode ([\d,.]+) MiB$", re.M)
LINE_FIELDS = ("seconds_per_update", "train_tokens_per_s", "decode_sentences_per_s",
               "train_peak_mib", "decode_peak_mib")
DIFF_LINE = re.compile(r"max abs diff ([\d.e+-]+)$", re.M)


def bench_lines(log):
    text = log.read_text(encoding="utf-8")
    kept = {"from": log.name, "systems": [
        {"name": m[1], **{f: float(v.replace(",", "")) for f, v in zip(LINE_FIELDS, m.groups()[1:])}}
        for m in BENCH_LINE.finditer(text)]}
    diffs = [float(d) for d in DIFF_LINE.findall(text)]
    return {**kept, "max_abs_diffs": diffs} if diffs else kept


@pytest.mark.parametrize("kept", sorted((REPO / "results").rglob("*-log.json")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_a_logs_result_lines_are_kept_as_they_are_written(kept):
    log = kept.with_name(kept.name[:-len("-log.json")] + ".log")
    assert json.loads(kept.read_text(encoding="utf-8")) == bench_lines(log)


def test_a_bench_line_is_read_whole(tmp_path):
    log = tmp_path / "bench.log"
    log.write_text("bench: PA (pervasive_attention) ...\nbench: PA: 0.1915 s/update, train 18,003.1 "
                   "tok/s, decode 197.62 sent/s, peak train 23,158.2 MiB, peak decode 788.9 MiB\n",
                   encoding="utf-8")
    assert bench_lines(log)["systems"] == [{"name": "PA", "seconds_per_update": 0.1915,
                                            "train_tokens_per_s": 18003.1,
                                            "decode_sentences_per_s": 197.62,
                                            "train_peak_mib": 23158.2, "decode_peak_mib": 788.9}]


def test_a_lists_item_is_found_by_several_fields_and_items_are_counted():
    folder = "results/pervasive/gpu-long"
    runs = json.loads((REPO / folder / "results.json").read_text(encoding="utf-8"))["results"]
    (run,) = [r for r in runs if r["system"] == "max" and r["seed"] == 2]
    assert figures.figure(folder, "results.json:results.system=max&seed=2.train_seconds|.3f",
                          REPO) == f"{run['train_seconds']:.3f}"
    assert figures.figure(folder, "count results.json:results.system=*&seed=1.seed|d", REPO) == \
        str(sum(r["seed"] == 1 for r in runs))
    with pytest.raises(KeyError):  # two seeds of max: which one is not said
        figures.figure(folder, "results.json:results.system=max.train_seconds", REPO)
    # an "&" inside a value is the value's (RAN-ALL w/o LN&RES), not another field
    speed = json.loads((REPO / "results/ran/speed-cpu/run1/bench.json").read_text(encoding="utf-8"))
    (ln,) = [s for s in speed["systems"] if s["name"] == "RAN-ALL w/o LN&RES"]
    assert figures.figure("results/ran/speed-cpu",
                          "run1/bench.json:systems.name=RAN-ALL w/o LN&RES.metrics.params", REPO) == \
        f"{ln['metrics']['params']:,}"
