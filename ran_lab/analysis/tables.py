"""CSV output of the analyses: one row per dict, floats to 6 decimals, None as an empty cell."""
import csv
import math


def _cell(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6f}"
    return value


def write_csv(path, rows, fields):
    """Write ``rows`` (dicts) with the columns ``fields`` to ``path``."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row[k]) for k in fields})
    return path
