"""The README's results summary: each "N of M" claims-held count (between
``<!-- claims-count FOLDER pairs=A,B -->`` and ``<!-- /claims-count -->``) is what the folder's verdicts give: M
claims with a result in those directions (or none: analysis and speed claims), N of them held.
The verdicts and differences themselves are filled by ``scripts/claims.py --fill`` and checked by
tests/test_claims.py."""
import re

from helpers import REPO
from ran_fairseq.lab.claims import verdicts_by_key

COUNT = re.compile(r"<!-- claims-count (\S+) pairs=(\S+) -->(.*?)<!-- /claims-count -->")


def held_count(folder, pairs):
    verdicts = [v for v in verdicts_by_key(folder, REPO).values()
                if v.pair is None or v.pair in pairs]
    ran = [v for v in verdicts if not v.verdict.startswith("not run")]
    return f"{sum(v.verdict == 'held' for v in ran)} of {len(ran)}"


def test_readme_held_counts_match_the_verdicts():
    found = COUNT.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 4, "one count per paper"
    for folder, pairs, text in found:
        assert text == held_count(folder, pairs.split(",")), \
            f"README.md: {folder} ({pairs}) says {text!r}, the verdicts give " \
            f"{held_count(folder, pairs.split(','))!r}"
