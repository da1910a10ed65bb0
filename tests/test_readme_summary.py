"""The README's results summary: each tally "k held, m inconclusive, n not held of N" (between
``<!-- claims-count FOLDER pairs=A,B -->`` and ``<!-- /claims-count -->``) is what the folder's
verdicts give, filled by ``scripts/claims.py --fill`` (tests/test_claims.py checks that every page
is as the fill leaves it); here, the count is checked against the verdicts independently."""
import re

from helpers import REPO
from ran_lab.claims import verdicts_by_key
from ran_lab.claims.report import fill

COUNT = re.compile(r"<!-- claims-count (\S+) pairs=(\S+) -->(.*?)<!-- /claims-count -->")


def counted(folder, pairs):
    verdicts = [v for v in verdicts_by_key(folder, REPO).values()
                if v.pair is None or v.pair in pairs]
    # the project's own claims (its readings, the authors' code) are not the paper's; a claim
    # measured again on another device counts once; a measure of another folder's checkpoints
    # counts there
    ran = [v for v in verdicts if v.outcome != "not run" and not v.claim.get("own")
           and not v.claim.get("same_as") and v.claim.get("checkpoints") in (None, folder)]
    held, unsure, failed = (sum(v.outcome == o for v in ran)
                            for o in ("held", "inconclusive", "not held"))
    assert held + unsure + failed == len(ran)
    return f"{held} held, {unsure} inconclusive, {failed} not held of {len(ran)}"


def test_each_claim_is_counted_once():
    """Z-F3 (two devices) and Z-F5/Z-F8 (the 1,300-update checkpoints of results/ran) count once
    in the tally of results/ran/long; R-T2 (two devices) once in Rosendahl et al.'s."""
    ran = counted("results/ran/long", ["de-en"])
    ids = [v.claim["id"] for v in verdicts_by_key("results/ran/long", REPO).values()
           if v.pair in (None, "de-en")]
    assert "Z-F3-speed" in ids and "Z-F3-speed-gpu" in ids
    from ran_lab.claims.report import counted as tallied
    kept = [v.claim["id"] for v in tallied(list(verdicts_by_key("results/ran/long", REPO)
                                                 .values()), ["de-en"], "results/ran/long")]
    assert "Z-F3-speed-gpu" in kept and "Z-F3-speed" not in kept
    assert not {"Z-F5-encoder", "Z-F5-decoder", "Z-F8-length"} & set(kept)
    assert len(kept) == len(set(kept)) and ran.endswith(f"of {len(kept)}")
    kept = [v.claim["id"] for v in tallied(list(verdicts_by_key("results/ran/short", REPO)
                                                 .values()), ["de-en"], "results/ran/short")]
    assert {"Z-F5-encoder", "Z-F8-length"} <= set(kept)
    rc = [v.claim["id"] for v in tallied(list(verdicts_by_key(
        "results/recurrent_cross/long", REPO).values()), ["de-en"],
        "results/recurrent_cross/long")]
    assert "R-T2-train-time-gpu" in rc and "R-T2-train-time" not in rc


def test_the_projects_own_claims_are_not_counted():
    folder = "results/ran/long"
    verdicts = verdicts_by_key(folder, REPO)
    own = [v for v in verdicts.values() if v.claim.get("own") and v.verdict == "held"]
    assert own, "results/ran/long has held claims of the project's own (Z-2.2-*)"
    page = f"<!-- claims-count {folder} pairs=de-en -->?<!-- /claims-count -->"
    filled = fill(page, lambda name: verdicts_by_key(name, REPO))
    tally = filled.split("-->")[1].split("<!--")[0]
    assert tally == counted(folder, ["de-en"])
    total = int(tally.rpartition(" of ")[2])
    paper = [v for v in verdicts.values() if (v.pair in (None, "de-en"))
             and v.outcome != "not run" and not v.claim.get("same_as")
             and v.claim.get("checkpoints") in (None, folder)]
    assert total == len(paper) - sum(1 for v in paper if v.claim.get("own"))
    # and a claims table says whose claim it is where the paper has no number for it
    from ran_lab.claims.report import claims_table
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
