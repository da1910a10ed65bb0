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
    # the project's own claims (its readings, the authors' code) are not the paper's
    ran = [v for v in verdicts if not v.verdict.startswith("not run") and not v.claim.get("own")]
    return f"{sum(v.verdict == 'held' for v in ran)} of {len(ran)}"


def test_the_projects_own_claims_are_not_counted():
    folder = "results/ran/long"
    verdicts = verdicts_by_key(folder, REPO)
    own = [v for v in verdicts.values() if v.claim.get("own") and v.verdict == "held"]
    assert own, "results/ran/long has held claims of the project's own (Z-2.2-*)"
    page = f"<!-- claims-count {folder} pairs=de-en -->?<!-- /claims-count -->"
    filled = fill(page, lambda name: verdicts_by_key(name, REPO))
    held, _, total = filled.split("-->")[1].split("<!--")[0].partition(" of ")
    paper = [v for v in verdicts.values() if (v.pair in (None, "de-en"))
             and not v.verdict.startswith("not run")]
    assert int(total) == len(paper) - sum(1 for v in paper if v.claim.get("own"))
    assert int(held) == sum(v.verdict == "held" for v in paper) - len(
        [v for v in own if v.pair in (None, "de-en")])
    # and a claims table says whose claim it is where the paper has no number for it
    from ran_fairseq.lab.claims.report import claims_table
    rows = claims_table(list(verdicts.values()), ["de-en"]).splitlines()
    for v in own:
        row = next(r for r in rows if r.startswith(f"| {v.claim['claim'][0].upper()}"
                                                   f"{v.claim['claim'][1:40]}"))
        assert "| not the paper's: this project's own |" in row, row


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
