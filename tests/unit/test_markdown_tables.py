"""The lab's markdown tables (ran_lab/tables.py, on tabulate): text columns left-aligned, numbers
right-aligned, cells shown as their callers formatted them; the benchmark's kernel table names
the Python calls only where they were counted; every committed table of the benchmark, the GPU
check and fairseq's own tests is what the writer makes of the JSON beside it."""
import json

import pytest

import helpers
from ran_lab import upstream
from ran_lab.bench import peers, report
from ran_lab.bench.report import kernels_markdown
from ran_lab.gpucheck import report as gpu_check
from ran_lab.tables import markdown_table

RESULTS = helpers.REPO / "results"


def committed_tables():
    """(a committed table, its JSON, the function that writes the one from the other)."""
    def beside(pattern, table, render):
        return [(path.with_name(table), path, render) for path in sorted(RESULTS.glob(pattern))
                if path.with_name(table).is_file()]

    return (beside("**/bench.json", "bench.md", report.markdown)
            + beside("**/peers.json", "peers.md", lambda d: peers.report(d["results"],
                                                                         d["machine"]))
            + beside("**/check.json", "CHECK.md", gpu_check.markdown)
            + beside("fairseq-tests/outcomes.json", "README.md", upstream.report))


@pytest.mark.parametrize("table,data,render", committed_tables(),
                         ids=lambda v: str(v.relative_to(RESULTS)) if hasattr(v, "relative_to")
                         else "")
def test_a_committed_table_is_what_its_json_gives(table, data, render):
    assert table.read_text() == render(json.loads(data.read_text()))


def test_every_kind_of_committed_table_is_checked():
    names = {table.name for table, _, _ in committed_tables()}
    assert names == {"bench.md", "peers.md", "CHECK.md", "README.md"}


def test_text_columns_align_left_and_numbers_right():
    lines = markdown_table(["system", "arch", "tok/s"],
                           [["RAN-ALL", "ran_transformer", "1,234.5 (×1.00)"],
                            ["a longer name", "lstm", "9.0 (×0.01)"]], text_columns=2)
    assert lines[0].split("|")[1:-1] == [" system        ", " arch            ",
                                         "           tok/s "]
    assert lines[1] == "|:--------------|:----------------|----------------:|"
    assert lines[2] == "| RAN-ALL       | ran_transformer | 1,234.5 (×1.00) |"
    assert lines[3] == "| a longer name | lstm            |     9.0 (×0.01) |"


def test_cells_are_shown_as_given_and_never_break_their_row():
    lines = markdown_table(["case", "value", "note"],
                           [["x", "1.50", "a | b"], ["y", 7, "two\nlines"], ["z", "", None]])
    assert len(lines) == 5
    assert [c.strip() for c in lines[2].split(" | ")] == ["| x", "1.50", "a \\| b |"]
    assert "7" in lines[3] and "two lines" in lines[3]
    assert lines[4].endswith(" None |")


def counts(total, python_calls=None):
    decoding = {"total": total, "components": {"encoder": 1.0, "rest": total - 1.0},
                "sentences": 4, "beam": 2, "length": 5}
    if python_calls is not None:
        decoding["python_calls"] = python_calls
    return {"name": f"s{total}", "kernels": {"decoding": decoding, "training": {
        "total": 10, "forward": 4, "backward": 6, "sentences": 4, "target_length": 7}}}


def test_python_calls_are_a_column_only_where_they_were_counted():
    settings = {"count_subset": "valid"}
    old = [counts(3.0), counts(6.0)]  # counted before the Python calls were
    table = "\n".join(kernels_markdown(old, old[0], settings))
    assert "Python calls" not in table
    assert list(helpers.table_rows(table)["s6.0"].values())[-3:] == [
        "10.00 (×1.00)", "4", "6"]
    new = [counts(3.0, 100.0), counts(6.0, 150.0)]
    table = "\n".join(kernels_markdown(new, new[0], settings))
    assert helpers.table_rows(table)["s6.0"]["decoding Python calls per step"] == \
        "150.00 (×1.50)"
    assert "Python calls: the function calls cProfile counts" in table
