"""The conformance checks must fail on broken models: each test breaks one property of a known-good
fairseq model and expects the matching check to reject it."""
import pytest
import torch

import helpers
from systems import TINY_LSTM, TINY_TRANSFORMER
from test_conformance import (
    BEAM_ORDERS,
    check_incremental_matches_full_forward,
    check_reorder_incremental_state,
    check_scores_independent_of_batch_and_padding_side,
)


def test_detects_incremental_path_that_differs(synthetic_databin):
    task, model = helpers.build_model("transformer", synthetic_databin, TINY_TRANSFORMER)
    check_incremental_matches_full_forward(task, model)
    forward = model.decoder.forward

    def off_by_a_little(*args, incremental_state=None, **kwargs):
        x, extra = forward(*args, incremental_state=incremental_state, **kwargs)
        if incremental_state is not None:
            x = x.clone()
            x[..., -1] += 1e-2  # one logit: a shift of all of them would not change log-softmax
        return x, extra

    model.decoder.forward = off_by_a_little
    with pytest.raises(AssertionError, match="incremental vs full forward"):
        check_incremental_matches_full_forward(task, model)


def test_detects_padding_dependent_positions(synthetic_databin, monkeypatch):
    task, left = helpers.build_model("transformer", synthetic_databin, TINY_TRANSFORMER)
    _, right = helpers.build_model("transformer", synthetic_databin,
                                   (*TINY_TRANSFORMER, "--left-pad-source"))
    right.load_state_dict(left.state_dict())
    check_scores_independent_of_batch_and_padding_side(task, left, right)

    def column_positions(tensor, padding_idx, onnx_trace=False):  # ignores where padding is
        pos = torch.arange(tensor.size(1)).expand_as(tensor) + padding_idx + 1
        return pos.masked_fill(tensor.eq(padding_idx), padding_idx)

    monkeypatch.setattr("fairseq.utils.make_positions", column_positions)
    with pytest.raises(AssertionError, match="padding"):
        check_scores_independent_of_batch_and_padding_side(task, left, right)


@pytest.mark.parametrize("order", [BEAM_ORDERS["within-beam"], BEAM_ORDERS["shrink"]])
def test_detects_missing_state_reorder(synthetic_databin, order):
    task, model = helpers.build_model("lstm", synthetic_databin, TINY_LSTM)
    check_reorder_incremental_state(task, model, order)
    model.decoder.reorder_incremental_state = lambda state, new_order: None
    with pytest.raises((AssertionError, RuntimeError)):
        check_reorder_incremental_state(task, model, order)
