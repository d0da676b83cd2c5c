"""Weights, biases and residuals of another dtype than the input's (issue 14), as
F.rms_norm / F.layer_norm take them and as torch.autocast produces them: the
functional API and the modules compute in the wider dtype and return the
input's dtype; the dispatcher ops themselves keep one dtype per call and say so.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from op_extension import nn as onn
from op_extension import ops

LOW = [torch.bfloat16, torch.float16]


def _wide_reference(fn, x, *params):
    """fn in float64 on the same values, rounded to x's dtype once."""
    return fn(x.double(), *(None if p is None else p.double() for p in params)).to(x.dtype)


@pytest.mark.parametrize("dtype", LOW)
def test_rms_norm_low_input_float32_weight(dtype):
    x = torch.randn(5, 33).to(dtype).requires_grad_()
    w = (1 + 0.3 * torch.randn(33)).requires_grad_()
    y = ops.rms_norm(x, [33], w, 1e-6)
    assert y.dtype == dtype
    want = _wide_reference(lambda a, b: F.rms_norm(a, [33], b, 1e-6), x, w)
    torch.testing.assert_close(y, want)  # one rounding: within the dtype's tolerance of float64
    # torch rounds twice (the normalised value first); within one ulp of ours.
    torch.testing.assert_close(y, F.rms_norm(x, [33], w, 1e-6), atol=0, rtol=2 * torch.finfo(dtype).eps)
    y.float().sum().backward()
    assert x.grad.dtype == dtype and w.grad.dtype == torch.float32
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    F.rms_norm(xr, [33], wr, 1e-6).sum().backward()
    torch.testing.assert_close(w.grad, wr.grad.float(), atol=1e-2, rtol=1e-2)


def test_rms_norm_default_eps_is_the_inputs():
    # eps=None: float32's epsilon for a bfloat16 input, also when the call runs in float64.
    x = torch.full((2, 4), 1e-4).bfloat16()
    w = torch.ones(4, dtype=torch.float64)
    torch.testing.assert_close(ops.rms_norm(x, [4], w), ops.rms_norm(x, [4], w.bfloat16()))


@pytest.mark.parametrize("dtype", LOW)
def test_layer_norm_mixed_weight_and_bias(dtype):
    x = torch.randn(4, 40).to(dtype)
    w, b = torch.randn(40), torch.randn(40)
    for weight, bias in [(w, b), (w, None), (None, b), (w.to(dtype), b)]:
        y = ops.layer_norm(x, [40], weight, bias, 1e-5)
        assert y.dtype == dtype
        torch.testing.assert_close(y, _wide_reference(lambda a, c, d: F.layer_norm(a, [40], c, d, 1e-5), x, weight,
                                                      bias))


def test_fused_add_rms_norm_float32_residual_stream():
    # A float32 residual with bfloat16 activations: the sum stays float32, the
    # normalised output is the input's dtype.
    x, r, w = torch.randn(3, 64).bfloat16(), torch.randn(3, 64), torch.randn(64)
    normed, total = ops.fused_add_rms_norm(x, r, [64], w, 1e-6)
    assert total.dtype == torch.float32 and normed.dtype == torch.bfloat16
    torch.testing.assert_close(total, x.float() + r)
    torch.testing.assert_close(normed, F.rms_norm(total.double(), [64], w.double(), 1e-6).bfloat16())
    # Same-dtype input and residual, float32 weight: the sum is rounded to bfloat16 first.
    normed, total = ops.fused_add_rms_norm(x, r.bfloat16(), [64], w, 1e-6)
    assert torch.equal(total, x + r.bfloat16())
    torch.testing.assert_close(normed, F.rms_norm(total.double(), [64], w.double(), 1e-6).bfloat16())


def test_modules_under_autocast():
    norm = onn.CustomRMSNorm(64, eps=1e-6)
    ln = onn.CustomLayerNorm(64)
    fused = onn.FusedAddRMSNorm(64, eps=1e-6)
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(3, 64)
    with torch.autocast("cpu", torch.bfloat16):
        h = lin(x)
        assert h.dtype == torch.bfloat16
        assert norm(h).dtype == torch.bfloat16 and ln(h).dtype == torch.bfloat16
        y, z = fused(h, h)
        assert y.dtype == z.dtype == torch.bfloat16
        torch.testing.assert_close(norm(h), F.rms_norm(h, [64], norm.weight, 1e-6), atol=0,
                                   rtol=2 * torch.finfo(torch.bfloat16).eps)


def test_dispatcher_op_keeps_one_dtype_and_says_so():
    x, w = torch.randn(2, 8).bfloat16(), torch.ones(8)
    with pytest.raises(TypeError, match="custom::rms_norm: weight has dtype Float but input has dtype BFloat16"):
        torch.ops.custom.rms_norm(x, [8], w, None)
    # ... and the fake kernel says the same under tracing.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode, pytest.raises((TypeError, RuntimeError), match="weight has dtype"):
        torch.ops.custom.rms_norm(mode.from_tensor(x), [8], mode.from_tensor(w), None)


def test_integer_weight_is_refused_by_name():
    with pytest.raises((TypeError, RuntimeError), match="custom::rms_norm: weight has dtype Int"):
        ops.rms_norm(torch.randn(2, 8), [8], torch.ones(8, dtype=torch.int32))


def test_mixed_dtypes_under_compile():
    # Traced through the functional API: the graph holds the casts and the one-dtype op.
    def f(x, w):
        return ops.rms_norm(x, [16], w, 1e-6)

    x, w = torch.randn(4, 16).bfloat16(), torch.randn(16)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, w), f(x, w), atol=0, rtol=0)
