"""The lab's markdown tables, written by tabulate: a pipe table whose first ``text_columns``
columns are left-aligned and the others (numbers) right-aligned. Cells are shown as given
(tabulate's number parsing is off: a figure keeps the format its caller chose), a ``|`` in a cell
escaped and a line break made a space, so that a cell never breaks its row."""
from tabulate import tabulate


def markdown_table(headers, rows, text_columns=1):
    """``rows`` (lists of cells, each shown as ``str`` shows it) under ``headers``, as the lines
    of a markdown table."""
    headers, rows = _cells(headers), [_cells(row) for row in rows]
    align = ["left"] * text_columns + ["right"] * (len(headers) - text_columns)
    return tabulate(rows, headers, tablefmt="pipe", colalign=align[:len(headers)],
                    disable_numparse=True).splitlines()


def _cells(row):
    return [str(cell).replace("|", "\\|").replace("\n", " ") for cell in row]
