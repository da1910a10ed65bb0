"""What a claims file says beside its claims: the sibling folder whose seed variance a folder
without one borrows (``seed_variance``), baselines that fell below their paper's order
(``weak_baselines``), and a count held by construction (``by_construction``); read from the
committed folders and their claims files."""
import pytest

from helpers import REPO
from ran_lab.claims import Folder, rule, spec, verdicts_by_key
from ran_lab.claims.engine import WEAK_BASELINE
from ran_lab.common import LabError


def parts(folder, key):
    return dict(verdicts_by_key(folder, REPO)[key].comparisons)


def test_a_folder_without_seeds_judges_by_its_siblings_variance():
    (c,) = parts("results/ran/gpu", "Z-T1-ran-all@de-en").values()
    var, df = Folder(REPO / "results/ran/short", REPO, compute=False).own_variance(
        "test", "sacrebleu")
    assert df and c.combined.source == "borrowed from results/ran/short"
    assert c.combined.df == df and c.combined.sigma == pytest.approx(var ** 0.5)
    assert c.mde is not None and rule.outcome(c.verdict) != rule.NOT_JUDGED


def test_a_folder_with_neither_is_not_judged():
    verdicts = verdicts_by_key("results/dynmem/gpu", REPO)
    ran = [v for v in verdicts.values() if v.comparisons and v.verdict != rule.NOT_RUN]
    assert ran and all(v.outcome == rule.NOT_JUDGED for v in ran)


def test_a_held_claim_against_a_baseline_below_its_papers_order_says_so():
    (c,) = parts("results/pervasive/gpu-long", "E-T1-max-attn@de-en").values()
    assert rule.outcome(c.verdict) == rule.HELD and WEAK_BASELINE in c.verdict
    (other,) = parts("results/pervasive/gpu-long", "E-T3-transformer@de-en").values()
    assert WEAK_BASELINE not in other.verdict  # against the Transformer, no mark


@pytest.mark.parametrize("extra, message", [
    ({"seed_variance": {"results/x": {"from": "results/x", "why": "itself"}}}, "from"),
    ({"seed_variance": {"results/x": {"from": "results/y"}}}, "why"),
    ({"weak_baselines": {"results/x": [{"system": "a"}]}}, "why"),
])
def test_a_faulty_annotation_is_refused(extra, message):
    data = {"paper": "P", "claims": [], **extra}
    with pytest.raises(LabError, match=message):
        spec.validate(data, "claims.json")


def test_by_construction_belongs_to_a_threshold_claim():
    claim = {"id": "a", "where": "T1", "claim": "x", "relation": ">", "system": "s",
             "against": "b", "metric": "sacrebleu", "subset": "test", "pairs": ["de-en"],
             "by_construction": "sizes"}
    with pytest.raises(LabError, match="by_construction"):
        spec.validate({"paper": "P", "claims": [claim]}, "claims.json")


@pytest.mark.parametrize("folder", sorted(p.parent for p in (REPO / "results").rglob("CLAIMS.json")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_judged_comparison_shows_what_it_can_detect(folder):
    import json
    data = json.loads((folder / "CLAIMS.json").read_text(encoding="utf-8"))
    for v in data["verdicts"]:
        for part in v.get("systems", []):
            if part["verdict"] == rule.NOT_RUN or not part["judged"]:
                continue
            assert part["mde"] > 0 and f"detects ±{part['mde']:.2f}" in v["quote"], v["id"]
