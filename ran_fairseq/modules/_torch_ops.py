"""The plugin's uses of torch operators outside the public API, each behind a public fallback.

:func:`sigmoid_times` (sigmoid(x) ⊙ v in one kernel, aten's ``softplus_backward``),
:func:`relu_backward` (aten's ``threshold_backward``) and :func:`batch_norm_eval_backward`
(aten's ``native_batch_norm_backward`` in evaluation mode). Each operator is looked up once,
checked against its public form on a small input, and replaced by that form where it is missing,
fails or disagrees: results are the same either way. docs/benchmarks.md ("Internal operators")
gives the kernels each saves.
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


def _relu_backward_public(grad: Tensor, out: Tensor) -> Tensor:
    return torch.where(out > 0, grad, torch.zeros((), dtype=grad.dtype, device=grad.device))


def _batch_norm_eval_backward_public(grad: Tensor, x: Tensor, weight: Tensor, mean: Tensor,
                                     var: Tensor, eps: float, need_x: bool):
    """∂/∂x, ∂/∂w, ∂/∂b of y = w·(x − m)/√(v + ε) + b per channel of x (B, C, T, S), m and v
    constants: g·w/√(v + ε), Σ g·(x − m)/√(v + ε) = (Σ g·x − m·Σ g)/√(v + ε), and Σ g."""
    invstd = torch.rsqrt(var + eps)
    grad_b = grad.sum((0, 2, 3))
    grad_w = ((grad * x).sum((0, 2, 3)) - mean * grad_b) * invstd
    grad_x = grad * (weight * invstd).view(1, -1, 1, 1) if need_x else None
    return grad_x, grad_w, grad_b


def _lookup_batch_norm_ops(aten=None):
    """aten's (threshold_backward, native_batch_norm_backward), each None where it is missing or
    disagrees with its public form on a small float64 input."""
    aten = torch.ops.aten if aten is None else aten
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 2, 2, dtype=torch.float64, generator=g)
    grad = torch.randn(2, 3, 2, 2, dtype=torch.float64, generator=g)
    weight, mean = torch.randn(3, dtype=torch.float64, generator=g), x.mean((0, 2, 3))
    var, eps = x.var((0, 2, 3)) + 0.5, 1e-5
    try:
        threshold = aten.threshold_backward
        relu_ok = torch.allclose(threshold(grad, x, 0), _relu_backward_public(grad, x))
    except Exception:  # noqa: BLE001 (any failure of an internal operator means: do not use it)
        threshold, relu_ok = None, False
    try:
        norm = aten.native_batch_norm_backward
        ours = norm(grad, x, weight, mean, var, None, None, False, eps, [True, True, True])
        public = _batch_norm_eval_backward_public(grad, x, weight, mean, var, eps, True)
        norm_ok = all(torch.allclose(a, b) for a, b in zip(ours, public))
    except Exception:  # noqa: BLE001
        norm, norm_ok = None, False
    return (threshold if relu_ok else None), (norm if norm_ok else None)


_THRESHOLD_BACKWARD, _BATCH_NORM_BACKWARD = _lookup_batch_norm_ops()


def fused_batch_norm_backward_available() -> bool:
    """Whether :func:`relu_backward` and :func:`batch_norm_eval_backward` use aten's kernels."""
    return _THRESHOLD_BACKWARD is not None and _BATCH_NORM_BACKWARD is not None


# A gradient whose memory layout is not its output's (channels last from a 1×1 product over the
# grid's rows, grid_cells.bottleneck_on_rows, against a channels-first output) copied to the
# output's contiguous layout first: the element-wise kernels (this one, then the batch norm's
# backward) on mixed strides are several times slower than the copy. False: as it comes.
MATCH_GRADIENT_LAYOUT = True


def relu_backward(grad: Tensor, out: Tensor) -> Tensor:
    """The gradient through a ReLU from its output ``out``: ``grad`` where out > 0, else 0."""
    if MATCH_GRADIENT_LAYOUT and out.is_contiguous() and not grad.is_contiguous():
        grad = grad.contiguous()
    if _THRESHOLD_BACKWARD is not None:
        return _THRESHOLD_BACKWARD(grad, out, 0)
    return _relu_backward_public(grad, out)


def batch_norm_eval_backward(grad: Tensor, x: Tensor, weight: Tensor, mean: Tensor, var: Tensor,
                             eps: float, need_x: bool):
    """(∂/∂x or None, ∂/∂w, ∂/∂b) of batch normalization of x (B, C, T, S) with the statistics
    ``mean`` and ``var`` held constant (torch's evaluation mode)."""
    if _BATCH_NORM_BACKWARD is not None:
        return tuple(_BATCH_NORM_BACKWARD(grad, x, weight, mean, var, None, None, False, eps,
                                          [need_x, True, True]))
    return _batch_norm_eval_backward_public(grad, x, weight, mean, var, eps, need_x)
