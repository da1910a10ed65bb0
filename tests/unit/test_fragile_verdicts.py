"""A verdict near the level says so: where a 2.5 % wider or narrower interval (what another
bootstrap seed may draw for the test set's share) would turn it, the comparison is fragile."""
from ran_lab.claims import report, rule, seeds


def compare(difference, relation=">", margin=None):
    both = seeds.combined(difference, 0.04, 0.09, 6, 2, 0.01)
    runs = [rule.Seed(1, difference, 0.0, None), rule.Seed(2, difference, 0.0, None)]
    return rule.compare(relation, runs, margin=margin, combined=both), both


def test_an_interval_whose_end_lies_at_zero_is_fragile_and_one_far_from_it_is_not():
    _, both = compare(1.0)
    half = both.interval[1] - both.difference
    near, _ = compare(half * 1.01)  # the lower end just above 0: held, but barely
    assert near.verdict == rule.HELD and near.fragile
    far, _ = compare(half * 1.5)
    assert far.verdict == rule.HELD and not far.fragile
    assert "near the level" in report._pooled_text(near)
    assert "near the level" not in report._pooled_text(far)


def test_a_parity_edge_near_the_margin_is_fragile():
    _, both = compare(0.0)
    half = both.interval[1] - both.difference
    edge, _ = compare(-1.0 + half * 0.99, "≥", margin=1.0)  # the lower end just below −δ
    assert edge.verdict == rule.INCONCLUSIVE and edge.fragile
