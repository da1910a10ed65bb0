"""The README's results summary: each tally "k held (j on one seed), m inconclusive, n not held of
N (t of the C comparisons testable); sizes: ..." over every direction run (between
``<!-- claims-count FOLDER -->`` and ``<!-- /claims-count -->``) is what the folder's
verdicts give, filled by ``scripts/claims.py --fill`` (tests/integration/test_claims.py checks that every page
is as the fill leaves it); here, the count is checked against the verdicts independently."""
import json
import re

from helpers import REPO
from ran_lab.claims import verdicts_by_key
from ran_lab.claims.report import fill

COUNT = re.compile(r"<!-- claims-count (\S+?)(?: pairs=(\S+))? -->(.*?)<!-- /claims-count -->")


def total_of(tally):
    """N of "k held (…), m inconclusive, n not held[, u not judged] of N (…)"."""
    return int(re.search(r"not held(?:, \d+ not judged)? of (\d+)", tally)[1])


def counted(folder, pairs=None):
    verdicts = [v for v in verdicts_by_key(folder, REPO).values()
                if v.pair is None or pairs is None or v.pair in pairs]
    # the project's own claims (its readings, the authors' code) are not the paper's; a claim
    # measured again on another device counts once; a measure of another folder's checkpoints
    # counts there; a measure without an interval is descriptive and not counted
    ran = [v for v in verdicts if v.outcome not in ("not run", "descriptive")
           and not v.claim.get("own") and not v.claim.get("same_as")
           and v.claim.get("checkpoints") in (None, folder)]
    held, unsure, failed, unjudged = (sum(v.outcome == o for v in ran) for o in
                                      ("held", "inconclusive", "not held", "not judged"))
    assert held + unsure + failed + unjudged == len(ran)
    one = sum(1 for v in ran if v.outcome == "held" and "held (one seed" in v.verdict)
    weak = sum(1 for v in ran if v.outcome == "held" and "below its paper's order" in v.verdict)
    text = (f"{held} held ({one} on one seed"
            + (f", {weak} against a baseline below its paper's order" if weak else "")
            + f"), {unsure} inconclusive, {failed} not held"
            + (f", {unjudged} not judged" if unjudged else "") + f" of {len(ran)}")
    parts = {v.key: ([c for _, _, c, _ in v.order.pairs] if v.order else
                     [c for _, c in v.comparisons]) for v in ran}
    judged = [v for v in ran if parts[v.key] and v.outcome != "not judged"]
    if judged:
        testable = sum(all(c.mde is not None and c.stated is not None and c.mde <= c.stated
                           for c in parts[v.key]) for v in judged)
        text += f" ({testable} of the {len(judged)} comparisons testable)"
    sizes = [c.size["result"] for v in ran for _, c in v.comparisons if c.size]
    if sizes:
        text += "; sizes: " + ", ".join(
            f"{sizes.count(s)} {s}" for s in ("consistent", "smaller", "larger", "not comparable")
            if s in sizes)
    return text


def test_each_claim_is_counted_once_and_descriptive_measures_not_at_all():
    """Z-F3 (two devices), Z-F5/Z-F8 (the 1,300-update checkpoints of results/ran) and R-T2 (two
    devices) are measures without an interval: descriptive, in no tally; so is a parameter count
    that the chosen sizes fix."""
    from ran_lab.claims.report import counted as tallied
    for folder in ("results/ran/long", "results/ran/short", "results/recurrent_cross/long"):
        verdicts = list(verdicts_by_key(folder, REPO).values())
        kept = tallied(verdicts, ["de-en"], folder)
        ids = [v.claim["id"] for v in kept]
        assert len(ids) == len(set(ids))
        assert not [v for v in kept if v.claim.get("same_as")]
        assert not [v for v in kept if v.pair is None and v.claim.get("by_construction")]
        assert not {"Z-F3-speed", "Z-F3-speed-gpu", "Z-F5-encoder", "Z-F8-length",
                    "R-T2-train-time", "R-T2-train-time-gpu"} & set(ids)
        assert total_of(counted(folder, ["de-en"])) == len(ids)
    described = [v for v in verdicts_by_key("results/ran/long", REPO).values()
                 if v.outcome == "descriptive"]
    assert {"Z-F3-speed", "Z-F3-speed-gpu"} <= {v.claim["id"] for v in described}
    # RAN-ALL's parameter count is fixed by the sizes chosen: descriptive, not counted
    params = verdicts_by_key("results/ran/long", REPO)["Z-2.3-params"]
    assert params.claim.get("by_construction") and params.outcome == "descriptive"


def test_the_projects_own_claims_are_not_counted():
    folder = "results/ran/long"
    verdicts = verdicts_by_key(folder, REPO)
    own = [v for v in verdicts.values() if v.claim.get("own") and v.outcome != "not run"]
    assert own, "results/ran/long has claims of the project's own that ran (Z-2.2-*)"
    page = f"<!-- claims-count {folder} pairs=de-en -->?<!-- /claims-count -->"
    filled = fill(page, lambda name: verdicts_by_key(name, REPO))
    tally = filled.split("-->")[1].split("<!--")[0]
    assert tally == counted(folder, ["de-en"])
    total = total_of(tally)
    paper = [v for v in verdicts.values() if (v.pair in (None, "de-en"))
             and v.outcome not in ("not run", "descriptive") and not v.claim.get("same_as")
             and v.claim.get("checkpoints") in (None, folder)]
    assert total == len(paper) - sum(1 for v in paper if v.claim.get("own"))
    # and a claims table says whose claim it is where the paper has no number for it
    from ran_lab.claims.report import claims_table
    rows = claims_table(list(verdicts.values()), ["de-en"]).splitlines()
    for v in own:
        row = next(r for r in rows if r.startswith(f"| {v.claim['claim'][0].upper()}"
                                                   f"{v.claim['claim'][1:40]}"))
        assert "not the paper's: this project's own" in map(str.strip, row.split("|")), row


def test_readme_held_counts_match_the_verdicts():
    found = COUNT.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 4, "one count per paper"
    for folder, pairs, text in found:
        assert not pairs, f"README.md: {folder}'s headline tally leaves out directions ({pairs})"
        assert text == counted(folder), \
            f"README.md: {folder} says {text!r}, the verdicts give {counted(folder)!r}"


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
    in minutes: at most 150 lines once the leaderboard's short form is filled in, no line over 100
    characters but a table's rows (whose cells are short: a verdict, an interval, a tally)."""
    from ran_lab.leaderboard.page import SHORT_SPAN
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    board = SHORT_SPAN.search(text)
    assert board, "README.md: no <!-- leaderboard --> span for the board's short form"
    # the short form: a header, a rule, a row per board system, a blank and a link line
    systems = json.loads((REPO / "configs/leaderboard/systems.json").read_text())["systems"]
    room = 2 + len(systems) + 2 - (board[0].count("\n") - 1)
    assert len(lines) + max(room, 0) <= 150, \
        f"README.md has {len(lines)} lines (+{room} for the board): move detail into docs/"
    long = [i for i, line in enumerate(lines, 1) if len(line) > 100 and not line.startswith("|")]
    assert not long, f"README.md: lines over 100 characters: {long}"
    cells = [cell for line in lines if line.startswith("|")
             for cell in MARKER.sub("", COUNT.sub("", line)).split("|")]
    assert max(map(len, cells)) <= 100, "README.md: a table cell over 100 characters"


MARKER = re.compile(r"<!-- /?[a-z-]+(?: [^>]*)? -->")


def test_the_pages_that_quote_the_leaderboard_hold_its_span():
    """The board's page writer fills its short form into each page of QUOTED_BY between the
    markers; each has exactly one span for it."""
    from ran_lab.leaderboard.page import QUOTED_BY, SHORT_SPAN
    for name in QUOTED_BY:
        text = (REPO / name).read_text(encoding="utf-8")
        assert len(SHORT_SPAN.findall(text)) == 1, f"{name}: one <!-- leaderboard --> span"
