"""The alignments of Pervasive Attention's analysis (ran_lab.analysis.alignments, Elbayad et al.
2018 Eq. 7) on a tiny model of the plugin: each row sums to the logit of the token scored. The
figures they make: tests/system/test_reproduce_pervasive.py."""
import pytest
import torch

from test_pervasive_attention import TINY, build


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_eq7_alignment_rows_sum_to_the_logit_of_the_scored_token(tied):
    """Σ_j α_ij = E_w·H^pool_i = the logit of w at position i (Eqs. 4-6), w the token scored."""
    from ran_lab.analysis.alignments import eq7_alignment

    model = build(*TINY, *(("--share-decoder-input-output-embed",) if tied else ())).eval()
    src, tokens = torch.tensor([5, 6, 7, 2]), torch.tensor([9, 4, 6, 2])
    alpha = eq7_alignment(model, src, tokens)
    assert alpha.shape == (4, 4)
    with torch.no_grad():
        logits, _ = model(src[None], torch.tensor([4]), torch.tensor([[2, 9, 4, 6]]))
    torch.testing.assert_close(alpha.sum(-1), logits[0, torch.arange(4), tokens],
                               rtol=1e-4, atol=1e-4)
    assert not model.training
