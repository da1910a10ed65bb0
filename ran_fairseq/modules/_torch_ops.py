"""The plugin's one use of a torch operator outside the public API, behind a public fallback.

:func:`sigmoid_times` forms sigmoid(x) ⊙ v (x broadcasting against v) in one kernel through
aten's ``softplus_backward`` (the derivative of softplus(x) = log(1 + e^x) is sigmoid(x), so
softplus's backward operator with v as the incoming gradient is the product). Per target position
this is one kernel instead of two (``torch.sigmoid`` then a product) in the loops of Eqs. 5-8
(``recurrent_cross_attention/context_functions.py``), which keeps their training step within its
kernel bound (tests/test_recurrent_cross_attention.py). The operator carries no stability promise,
so it is looked up once, checked against the public form on a small input, and replaced by the
public form when it is missing, fails or disagrees: results are the same either way.
"""
from typing import Callable, Optional

import torch
from torch import Tensor


def _lookup_softplus_backward(aten=None) -> Optional[Callable]:
    """aten's softplus_backward with an output argument (from ``aten``, torch's aten operators
    unless given), or None where it is missing or no longer computes sigmoid(x) ⊙ v."""
    try:
        op = (torch.ops.aten if aten is None else aten).softplus_backward.grad_input
        value = torch.tensor([[0.5, -2.0, 3.0]], dtype=torch.float64)
        logit = torch.tensor([[0.3], [-1.5]], dtype=torch.float64)
        out = torch.empty(2, 3, dtype=torch.float64)
        op(value, logit, 1.0, 40.0, grad_input=out)
    except Exception:  # noqa: BLE001 (any failure of an internal operator means: do not use it)
        return None
    if not torch.allclose(out, value * torch.sigmoid(logit)):
        return None
    return op


_SOFTPLUS_BACKWARD = _lookup_softplus_backward()


def fused_sigmoid_times_available() -> bool:
    """Whether :func:`sigmoid_times` runs in one kernel in this torch."""
    return _SOFTPLUS_BACKWARD is not None


def sigmoid_threshold(dtype) -> float:
    """Where sigmoid(x) rounds to 1 in ``dtype``: 1 - sigmoid(x) ≈ e^-x is below half an ulp of 1
    from 20 on in float32 and 40 in float64; the fused form returns v itself above it."""
    return 40.0 if dtype == torch.float64 else 20.0


def sigmoid_times(value: Tensor, logit: Tensor, out: Tensor) -> Tensor:
    """out = sigmoid(logit) ⊙ value (``logit`` broadcasts against ``value``), in one kernel where
    :func:`fused_sigmoid_times_available`, else with ``torch.sigmoid`` and ``torch.mul``."""
    if _SOFTPLUS_BACKWARD is not None:
        _SOFTPLUS_BACKWARD(value, logit, 1.0, sigmoid_threshold(value.dtype), grad_input=out)
        return out
    return torch.mul(value, torch.sigmoid(logit), out=out)
