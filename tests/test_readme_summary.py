"""The README's results summary: each "N of M" count of claims that hold (between
``<!-- claims-count FOLDER pairs=A,B -->`` and ``<!-- /claims-count -->``) is what the folder's
verdicts give, filled by ``scripts/claims.py --fill`` (tests/test_claims.py checks that every page
is as the fill leaves it); here, the count is checked against the verdicts independently."""
import re

from helpers import REPO
from ran_fairseq.lab.claims import verdicts_by_key
from ran_fairseq.lab.claims.report import fill

COUNT = re.compile(r"<!-- claims-count (\S+) pairs=(\S+) -->(.*?)<!-- /claims-count -->")


def counted(folder, pairs):
    verdicts = [v for v in verdicts_by_key(folder, REPO).values()
                if v.pair is None or v.pair in pairs]
    ran = [v for v in verdicts if not v.verdict.startswith("not run")]
    return f"{sum(v.verdict == 'held' for v in ran)} of {len(ran)}"


def test_readme_held_counts_match_the_verdicts():
    found = COUNT.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 4, "one count per paper"
    for folder, pairs, text in found:
        assert text == counted(folder, pairs.split(",")), \
            f"README.md: {folder} ({pairs}) says {text!r}, the verdicts give " \
            f"{counted(folder, pairs.split(','))!r}"


def test_the_fill_writes_the_count():
    folder = "results/dynmem/paper-epochs"
    page = f"a <!-- claims-count {folder} pairs=de-en -->9 of 99<!-- /claims-count --> b"

    def verdicts_of(name):
        return verdicts_by_key(name, REPO)

    filled = fill(page, verdicts_of)
    assert filled == (f"a <!-- claims-count {folder} pairs=de-en -->"
                      f"{counted(folder, ['de-en'])}<!-- /claims-count --> b")


def test_the_readme_stays_a_guide():
    """Tables and verdicts in full live in docs/results.md; the README stays short enough to read
    from the clone to the demo, to one's own corpus, to a paper's table."""
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail into docs/"
