"""Regression tests for the edge-case defects of issue 11, one test per defect,
named after it. Each runs on every CPU kernel variant and on CUDA where present
(the kernel_device fixture); the Ascend versions are in test_ascend_sim*.py.
A defect found on every target at once is tested on each here: the CPU kernel
variants, the CUDA kernels on the harness and the Ascend kernels on the
simulator.

References are float64 computations of the same (already rounded) inputs.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import op_extension
from op_extension import ops

F32_MAX = torch.finfo(torch.float32).max


def gelu_exact_f64(x: torch.Tensor) -> torch.Tensor:
    """GELU(x) = x * Phi(x) through erfc: F.gelu in float64 sums 1 + erf and loses
    all relative accuracy below x = -8 (it is itself 5% off at x = -8)."""
    x = x.double()
    return 0.5 * x * torch.special.erfc(-x / math.sqrt(2.0))


def gelu_exact_grad_f64(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return 0.5 * torch.special.erfc(-x / math.sqrt(2.0)) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def assert_close_f64(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5, atol: float = 0.0) -> None:
    torch.testing.assert_close(actual.double().cpu(), expected.double().cpu(), rtol=rtol, atol=atol, equal_nan=True)


# ---- 1. sums of squares and dot products that overflow float ---------------------


def test_layer_norm_row_whose_squares_overflow_is_not_zeroed(kernel_device):
    # (x - mean)^2 = 4.4e39 overflows float: the row came out [0, -0, -0].
    x = torch.tensor([[1e20, 1.0, 1.0], [1.0, 2.0, 4.0]], device=kernel_device)
    y = ops.layer_norm(x, [3])
    assert_close_f64(y, F.layer_norm(x.double(), [3]))
    assert y[0, 0].item() == pytest.approx(math.sqrt(2.0), rel=1e-6)


def test_layer_norm_row_whose_sum_overflows_is_not_nan(kernel_device):
    # sum(x) itself overflows float here; float64 has room.
    x = torch.tensor([[3e38, 3e38, -1e38, 0.5]], device=kernel_device)
    w = torch.tensor([0.5, 2.0, 1.0, -1.0], device=kernel_device)
    b = torch.tensor([0.0, 1.0, 0.0, 3.0], device=kernel_device)
    y = ops.layer_norm(x, [4], w, b)
    assert_close_f64(y, F.layer_norm(x.double(), [4], w.double(), b.double()))


def test_layer_norm_backward_row_whose_squares_overflow(kernel_device):
    x = torch.tensor([[1e20, 1.0, 3.0], [-2e19, 5e18, 1.0]], device=kernel_device)
    w = torch.tensor([1.5, -0.5, 2.0], device=kernel_device)
    dy = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], device=kernel_device)
    dx, dw, db = torch.ops.custom.layer_norm_backward(dy, x, [3], w, torch.zeros_like(w), 1e-5)
    # The float64 reference on the CPU, whatever device the kernel ran on.
    x64 = x.cpu().double().requires_grad_()
    w64 = w.cpu().double().requires_grad_()
    b64 = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    F.layer_norm(x64, [3], w64, b64, 1e-5).backward(dy.cpu().double())
    # dx of these rows is ~1e-20 and cancels to ~1e-27 in the first element.
    assert_close_f64(dx, x64.grad, atol=1e-25)
    assert_close_f64(dw, w64.grad)
    assert_close_f64(db, b64.grad)


# Found by the fuzz suite at 2000 examples: a weight gradient of NaN where it is
# finite. A NaN weight (or an inf dy) makes sum(g * d) NaN, which sent the row
# to the overflow rescue: for a row of subnormals its scale was 2^129 = inf, and
# for a constant near-max row eps * s^2 underflowed to 0 * inf. The weight
# gradient, sum(dy * xhat), does not depend on the weight.
LAYER_NORM_RESCUE_ROWS = [[1e-39, 3e-39], [1.7e38, 1.7e38], [0.5, 0.25]]


def _layer_norm_weight_grad_f64(dy, x):
    """sum over rows of dy * xhat, from the centred values in float64 (torch's
    float64 layer_norm gives 1e24 for the constant near-max row, not 0)."""
    x64, dy64 = x.cpu().double(), dy.cpu().double()
    d = x64 - x64.mean(-1, keepdim=True)
    xhat = d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5)
    return (dy64 * xhat).sum(0)


def test_layer_norm_weight_grad_is_finite_with_a_nan_weight(kernel_device):
    dy = torch.tensor([[0.7, -0.3]], device=kernel_device)
    w = torch.tensor([math.nan, 2.0], device=kernel_device)
    for row in LAYER_NORM_RESCUE_ROWS:
        x = torch.tensor([row], device=kernel_device)
        dx, dw, _ = torch.ops.custom.layer_norm_backward(dy, x, [2], w, None, 1e-5)
        expected = _layer_norm_weight_grad_f64(dy, x)
        assert torch.isfinite(dw).all(), (row, dw)
        assert_close_f64(dw, expected, atol=1e-40)
        assert torch.isnan(dx[0, 0])  # dy * w is NaN there


def test_layer_norm_weight_grad_is_finite_with_a_nan_weight_on_the_cuda_harness():
    from op_extension import cuda_sim

    dy = torch.tensor([[0.7, -0.3]])
    w = torch.tensor([math.nan, 2.0])
    for row in LAYER_NORM_RESCUE_ROWS:
        x = torch.tensor([row])
        dx, dw, _ = cuda_sim.run_backward("layer_norm", dy, x, [2], w, None, 1e-5)
        assert torch.isfinite(dw).all(), (row, dw)
        assert_close_f64(dw, _layer_norm_weight_grad_f64(dy, x), atol=1e-40)


# A constant row of near-max values: its sum overflows float, so the kernels take
# its statistics on x * 2^-e, where its variance is 0 and eps * 2^-2e underflows;
# rstd at that scale was inf and xhat = 0 * inf: NaN where the output is the bias
# and the input gradient rstd * (g - mean(g)), on every target (torch's own float32
# layer_norm gives NaN there too). Rows of 2 and 5 (a rounded scaled mean, refined)
# and of 70000 (the CUDA long-row kernels, split rows on Ascend). With eps 0 the
# row is 0 / 0: NaN.
CONSTANT_NEAR_MAX_ROWS = [(-3e38, 2, 1e-5), (3e38, 5, 1e-5), (2e38, 70000, 1e-2)]


def _on_target(target: str, op: str, *args, backward: bool = False):
    """op (or its backward) on one target: "cpu-<isa>", "cuda-<arch>" (the
    harness) or "ascend-<soc>" (the simulator)."""
    from op_extension import ascend_sim, cuda_sim

    kind, name = target.split("-", 1)
    if kind == "cpu":
        op_extension._C.set_cpu_isa(name)
        try:
            return getattr(torch.ops.custom, f"{op}_backward" if backward else op)(*args)
        finally:
            op_extension._C.set_cpu_isa(op_extension._C.best_cpu_isa())
    if kind == "cuda":
        return (cuda_sim.run_backward if backward else cuda_sim.run)(op, *args, arch=name)
    return (ascend_sim.run_backward if backward else ascend_sim.run)(op, *args, soc=name)


def _run_layer_norm(target: str, x, w, b, eps, dy):
    """(y, dx, dw, db) of layer_norm on one target."""
    norm = [x.shape[-1]]
    return (_on_target(target, "layer_norm", x, norm, w, b, eps),) + tuple(
        _on_target(target, "layer_norm", dy, x, norm, w, b, eps, backward=True))


def _every_target() -> list[str]:
    from op_extension import ascend_sim
    from reference import supported_isas

    return ([f"cpu-{isa}" for isa in supported_isas()] + ["cuda-sm_80", "cuda-sm_90"]
            + [f"ascend-{soc}" for soc in ascend_sim.SOCS])


@pytest.mark.parametrize("target", _every_target())
def test_layer_norm_of_a_constant_near_max_row_is_its_bias(target):
    torch.manual_seed(0)
    for value, n, eps in CONSTANT_NEAR_MAX_ROWS:
        x = torch.full((4, n), value)
        w, b, dy = torch.randn(n), torch.randn(n), torch.randn(4, n)
        y, dx, dw, db = _run_layer_norm(target, x, w, b, eps, dy)
        where = f"{target}, rows of {n} x {value}"
        assert torch.equal(y, b.expand_as(y)), where
        g = (dy * w).double()
        expected_dx = (g - g.mean(-1, keepdim=True)) / math.sqrt(eps)
        assert_close_f64(dx, expected_dx, rtol=1e-5, atol=1e-5 * expected_dx.abs().max().item())
        assert torch.equal(dw, torch.zeros_like(dw)), where
        assert_close_f64(db, dy.double().sum(0), rtol=1e-5, atol=1e-5)
        # eps 0: xhat is 0 / 0.
        y0, dx0, _, _ = _run_layer_norm(target, x, w, b, 0.0, dy)
        assert torch.isnan(y0).all() and torch.isnan(dx0).all(), where


def _run_rms_norm(target: str, x, w, eps, dy):
    """(y, dx, dw) of rms_norm on one target."""
    norm = [x.shape[-1]]
    return (_on_target(target, "rms_norm", x, norm, w, eps),) + tuple(
        _on_target(target, "rms_norm", dy, x, norm, w, eps, backward=True))


def _run_fused_add_rms_norm(target: str, x, residual, w, eps):
    """(y, residual_out) of fused_add_rms_norm on one target."""
    return tuple(_on_target(target, "fused_add_rms_norm", x, residual, [x.shape[-1]], w, eps))


# ---- rows whose squares underflow float ------------------------------------------
#
# With eps 0, a float row below |x| ~ 1e-19 has squares below float's normal range,
# rounded to 2^-149 absolute, or 0: rstd came out 1 / sqrt(0) (inf on the CPU and
# CUDA kernels, unknown, NaN, on Ascend, whose Sqrt of 0 is undefined) and the row
# inf and NaN, forward and backward, on every target -- torch's own float
# rms_norm and layer_norm give inf and NaN there too -- where x / rms(x) is finite.
# Every kernel now takes such a row on x * 2^k. A norm with eps 0 is scale
# invariant: norm(c x) = norm(x), its input gradient is the unscaled one over c
# and its weight and bias gradients are unchanged. So each target's results on
# c x are held to its own results on x, rows of ordinary size it normalises
# without a rescue: c = 2^-100 (every square 0), 2^-70 (subnormal squares); rows
# of 37 and of 70000 (the CUDA long-row kernels, split rows on Ascend).
UNDERFLOW_SCALES = [2.0**-100, 2.0**-70]
UNDERFLOW_ROWS = [(4, 37), (2, 70000)]


def _underflow_inputs(rows: int, n: int):
    torch.manual_seed(n)
    x = torch.randn(rows, n)
    x = torch.where(x.abs() < 2**-10, torch.full_like(x, 0.5), x)  # x * 2^-100 stays normal: exact
    return x, torch.randn(n), torch.randn(n), torch.randn(rows, n)


def _assert_scaled_copy(got, expected, where):
    """Equal within a few float ulps of the row's largest value: the Ascend
    LayerNorm corrects a rescued row's mean, which the unscaled row skips."""
    assert torch.isfinite(got).all(), f"{where}: not finite"
    atol = 8 * torch.finfo(torch.float32).eps * expected.abs().max().item()
    torch.testing.assert_close(got, expected, rtol=8 * torch.finfo(torch.float32).eps, atol=atol,
                               msg=lambda m: f"{where}: {m}")


@pytest.mark.parametrize("target", _every_target())
def test_norms_of_a_row_whose_squares_underflow_are_those_of_the_row_scaled_up(target):
    for rows, n in UNDERFLOW_ROWS:
        x, w, b, dy = _underflow_inputs(rows, n)
        plain_rms = _run_rms_norm(target, x, w, 0.0, dy)
        plain_ln = _run_layer_norm(target, x, w, b, 0.0, dy)
        plain_fused = _run_fused_add_rms_norm(target, x, 0.5 * x.flip(-1), w, 0.0)
        assert all(torch.isfinite(t).all() for t in plain_rms + plain_ln + plain_fused)
        for c in UNDERFLOW_SCALES:
            xc = x * c
            assert torch.equal(xc / c, x)
            where = f"{target}, {rows} rows of {n}, x * 2^{int(math.log2(c))}"
            y, dx, dw = _run_rms_norm(target, xc, w, 0.0, dy)
            _assert_scaled_copy(y, plain_rms[0], f"rms_norm y, {where}")
            _assert_scaled_copy(dx * c, plain_rms[1], f"rms_norm dx, {where}")
            _assert_scaled_copy(dw, plain_rms[2], f"rms_norm dw, {where}")
            y, dx, dw, db = _run_layer_norm(target, xc, w, b, 0.0, dy)
            _assert_scaled_copy(y, plain_ln[0], f"layer_norm y, {where}")
            _assert_scaled_copy(dx * c, plain_ln[1], f"layer_norm dx, {where}")
            _assert_scaled_copy(dw, plain_ln[2], f"layer_norm dw, {where}")
            _assert_scaled_copy(db, plain_ln[3], f"layer_norm db, {where}")
            y, z = _run_fused_add_rms_norm(target, xc, 0.5 * xc.flip(-1), w, 0.0)
            assert torch.equal(z, plain_fused[1] * c), where
            _assert_scaled_copy(y, plain_fused[0], f"fused_add_rms_norm y, {where}")


@pytest.mark.parametrize("target", _every_target())
def test_norms_of_subnormal_rows_match_float64(target):
    """Rows of subnormals and zeros (the fuzz suite's find: one subnormal in a
    row of zeros is sqrt(n) there, where the kernels gave inf), and an eps that
    is itself below float's normal range (2^-140), or small enough that it
    outweighs the rescued row's squares (2^-110 against rows near 2^-120)."""
    n = 24
    x = torch.zeros(4, n)
    x[0, 5] = 1e-39
    x[1] = torch.linspace(-3e-39, 2e-39, n)
    x[2, ::3] = 2.0**-149
    torch.manual_seed(3)
    x[3] = torch.randn(n) * 2.0**-120
    w, b, dy = torch.randn(n), torch.randn(n), torch.randn(4, n)
    for eps in (0.0, 2.0**-140, 2.0**-110):
        where = f"{target}, eps {eps:g}"
        y, dx, dw = _run_rms_norm(target, x, w, eps, dy)
        x64 = x.double().requires_grad_()
        w64 = w.double().requires_grad_()
        expected = F.rms_norm(x64, [n], w64, eps=eps)
        expected.backward(dy.double())
        assert torch.isfinite(y).all() and torch.isfinite(dw).all(), where
        assert_close_f64(y, expected.detach(), rtol=1e-5, atol=1e-6)
        assert_close_f64(dw, w64.grad, rtol=1e-5, atol=1e-5)
        # dx ~ 1 / rms(x): past float's range for rows near 2^-149, inf in float
        finite = torch.isfinite(x64.grad.float())
        assert_close_f64(dx[finite], x64.grad[finite], rtol=1e-4, atol=1e-5 * x64.grad[finite].abs().max().item())
        y, _, dw, _ = _run_layer_norm(target, x, w, b, eps, dy)
        expected = F.layer_norm(x.double(), [n], w.double(), b.double(), eps=eps)
        assert_close_f64(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", [t for t in _every_target() if not t.startswith("ascend")])
def test_float64_norms_of_a_row_whose_squares_underflow_are_those_of_the_row_scaled_up(target):
    """The same in float64 (the CPU and CUDA kernels), where squares underflow
    below |x| ~ 1e-162: x * 2^-600 and x * 2^-1000."""
    x, w, b, dy = (t.double() for t in _underflow_inputs(3, 45))
    plain_rms = _run_rms_norm(target, x, w, 0.0, dy)
    plain_ln = _run_layer_norm(target, x, w, b, 0.0, dy)
    for c in (2.0**-600, 2.0**-1000):
        xc = x * c
        where = f"{target}, float64 x * 2^{int(math.log2(c))}"
        y, dx, dw = _run_rms_norm(target, xc, w, 0.0, dy)
        for got, expected in ((y, plain_rms[0]), (dx * c, plain_rms[1]), (dw, plain_rms[2])):
            assert torch.isfinite(got).all(), where
            torch.testing.assert_close(got, expected, rtol=1e-14, atol=1e-14 * expected.abs().max().item())
        y, dx, dw, db = _run_layer_norm(target, xc, w, b, 0.0, dy)
        for got, expected in ((y, plain_ln[0]), (dx * c, plain_ln[1]), (dw, plain_ln[2]), (db, plain_ln[3])):
            assert torch.isfinite(got).all(), where
            torch.testing.assert_close(got, expected, rtol=1e-14, atol=1e-14 * expected.abs().max().item())


def test_rms_norm_row_whose_squares_overflow_is_not_zeroed(kernel_device):
    # x^2 = 9e76 overflows float: rstd came out 0 and the row [0, 0].
    x = torch.tensor([[3e38, 1.0], [1e20, -1e20]], device=kernel_device)
    w = torch.tensor([2.0, 0.5], device=kernel_device)
    y = ops.rms_norm(x, [2], w)
    expected = F.rms_norm(x.double(), [2], w.double(), eps=torch.finfo(torch.float32).eps)
    # 3e38 * rstd: rstd ~ 4.7e-39 is a float denormal, exact to ~2^-21.
    assert_close_f64(y, expected, rtol=2e-6, atol=1e-44)
    assert y[0, 0].item() == pytest.approx(2 * math.sqrt(2.0), rel=1e-6)


def test_fused_add_rms_norm_row_whose_squares_overflow_is_not_zeroed(kernel_device):
    x = torch.tensor([[2e38, 1.0, -3.0]], device=kernel_device)
    residual = torch.tensor([[1e38, 0.5, 1.0]], device=kernel_device)
    y, z = ops.fused_add_rms_norm(x, residual, [3])
    assert torch.equal(z, x + residual)
    expected = F.rms_norm(z.double(), [3], eps=torch.finfo(torch.float32).eps)
    assert_close_f64(y, expected, rtol=2e-6, atol=1e-44)


def test_rms_norm_backward_weight_grad_where_dy_times_x_overflows(kernel_device):
    # dy * x = 6e38 overflowed before the multiply by rstd: weight grad [nan, 0].
    x = torch.tensor([[3e38, 1.0]], device=kernel_device, requires_grad=True)
    w = torch.ones(2, device=kernel_device, requires_grad=True)
    ops.rms_norm(x, [2], w).backward(torch.full((1, 2), 2.0, device=kernel_device))
    x64 = x.detach().cpu().double().requires_grad_()  # the reference on the CPU
    w64 = torch.ones(2, dtype=torch.float64, requires_grad=True)
    F.rms_norm(x64, [2], w64, eps=torch.finfo(torch.float32).eps).backward(torch.full((1, 2), 2.0, dtype=torch.float64))
    assert torch.isfinite(w.grad).all() and torch.isfinite(x.grad).all()
    assert_close_f64(w.grad, w64.grad, rtol=2e-6, atol=1e-44)
    assert_close_f64(x.grad, x64.grad, rtol=2e-6, atol=1e-44)


def test_rms_norm_backward_wide_row_does_not_underflow_rstd_cubed(kernel_device):
    # rstd^3 = 1e-45 underflowed to a float denormal and took the x-term of dx with it.
    x = torch.tensor([[1e15, 1.0, 3.0], [2e13, -1e13, 7.0]], device=kernel_device)
    dy = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], device=kernel_device)
    w = torch.tensor([1.0, 0.5, -2.0], device=kernel_device)
    dx, dw = torch.ops.custom.rms_norm_backward(dy, x, [3], w, 1e-6)
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    F.rms_norm(x64, [3], w64, eps=1e-6).backward(dy.double())
    # The first element of dx cancels (its two terms agree to ~1e-8 relative).
    assert_close_f64(dx, x64.grad, atol=1e-21)
    assert_close_f64(dw, w64.grad)


def test_norms_of_rows_holding_inf_or_nan_stay_nan(kernel_device):
    # The overflow fallback must not hide an inf or NaN in the input.
    x = torch.tensor([[math.inf, 1.0, 2.0], [math.nan, 1.0, 2.0], [1e20, 1.0, 1.0]], device=kernel_device)
    for y in (ops.layer_norm(x, [3]), ops.rms_norm(x, [3])):
        assert torch.isnan(y[:2]).any(dim=1).all()
        assert torch.isfinite(y[2]).all()


# ---- 2. exact GELU in float32 ------------------------------------------------------

GELU_REGIONS = [(-14.0, -10.0), (-10.0, -5.5), (-5.5, -3.0), (-3.0, 0.0), (0.0, 14.0)]


def _max_rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    keep = expected.abs() > torch.finfo(torch.float32).tiny  # normal float results
    return ((actual.double().cpu() - expected.cpu()).abs() / expected.cpu().abs())[keep.cpu()].max().item()


@pytest.mark.parametrize("lo,hi", GELU_REGIONS, ids=[f"{lo}..{hi}" for lo, hi in GELU_REGIONS])
def test_exact_gelu_float32_at_aten_accuracy_or_better(kernel_device, lo, hi):
    # 1 + erf(x / sqrt 2) cancelled for negative x: -4.049867e-3 at x = -3
    # (float64: -4.049694e-3). The bound is the larger of ATen's own error in the
    # region and 2e-6; past x = -5.5 the rounding of x / sqrt 2 to float alone
    # costs 2 z^2 * 2^-24 relative (~1e-5 at x = -13).
    x = torch.linspace(lo, hi, 20001, device=kernel_device)
    expected = gelu_exact_f64(x)
    ours = _max_rel_error(ops.gelu(x), expected)
    aten = _max_rel_error(F.gelu(x), expected)
    bound = max(aten, 2e-6) if hi <= -5.5 else 2e-6
    if lo < -10:
        bound = 2e-5
    assert ours <= bound, f"max relative error {ours:.3g} (ATen {aten:.3g}) in [{lo}, {hi})"
    assert ours <= aten or ours <= 2e-6


def test_exact_gelu_at_minus_three(kernel_device):
    y = ops.gelu(torch.tensor([-3.0], device=kernel_device)).item()
    assert y == pytest.approx(-4.0496940949e-3, rel=1e-6)


def test_exact_gelu_backward_float32_accuracy(kernel_device):
    x = torch.linspace(-8.0, 8.0, 16001, device=kernel_device)
    dy = torch.ones_like(x)
    dx = torch.ops.custom.gelu_backward(dy, x, "none")
    # The derivative Phi(x) + x phi(x) cancels near its zero at x ~ -0.75; an
    # absolute bound there, relative elsewhere.
    torch.testing.assert_close(dx.double().cpu(), gelu_exact_grad_f64(x).cpu(), rtol=4e-6, atol=1e-7)


def test_geglu_exact_float32_accuracy_in_the_negative_tail(kernel_device):
    gate = torch.linspace(-8.0, 0.0, 8001, device=kernel_device)
    up = torch.full_like(gate, 3.0)
    expected = gelu_exact_f64(gate) * 3.0
    assert _max_rel_error(ops.geglu(gate, up), expected) <= 1e-5


def test_exact_gelu_special_values(kernel_device):
    x = torch.tensor([math.inf, -math.inf, math.nan, -0.0, 0.0, -20.0, 20.0], device=kernel_device)
    y = ops.gelu(x).cpu()
    expected = F.gelu(x.double()).cpu()  # inf, nan (-inf * 0), nan, -0, 0, ~0, 20
    assert torch.equal(torch.isnan(y), torch.isnan(expected))
    assert y[0].item() == math.inf and y[6].item() == 20.0 and -1e-80 < y[5].item() <= 0.0
    assert math.copysign(1.0, y[3]) == -1.0


# ---- 3 and 4. argument conversions name the op and the argument ---------------------


class _ForceTracedPath(TorchFunctionMode):
    """An active torch function mode makes op_extension.ops skip the C++ fast
    path and call torch.ops.custom.* as under tracing."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


BAD_ARGUMENTS = [
    ("softmax_dim_beyond_int64", lambda x: ops.softmax(x, 2**70), ValueError, r"custom::softmax: dim=\d+ does not fit in an int64"),
    ("softmax_dim_below_int64", lambda x: ops.softmax(x, -(2**63) - 1), ValueError, r"custom::softmax: dim=-\d+ does not fit in an int64"),
    ("rms_norm_shape_beyond_int64", lambda x: ops.rms_norm(x, [2**64 + 4]), ValueError, r"custom::rms_norm: normalized_shape.*does not fit in an int64"),
    ("layer_norm_shape_beyond_int64", lambda x: ops.layer_norm(x, (2**63,)), ValueError, r"custom::layer_norm: normalized_shape.*does not fit in an int64"),
    ("fused_shape_beyond_int64", lambda x: ops.fused_add_rms_norm(x, x, [2**63]), ValueError, r"custom::fused_add_rms_norm: normalized_shape.*does not fit in an int64"),
    ("add_alpha_str", lambda x: ops.add(x, x, alpha="x"), TypeError, r"custom::add: alpha must be a float, got str"),
    ("add_alpha_numeric_str", lambda x: ops.add(x, x, alpha="2"), TypeError, r"custom::add: alpha must be a float, got str"),
    ("add_alpha_none", lambda x: ops.add(x, x, alpha=None), TypeError, r"custom::add: alpha must be a float, got NoneType"),
    ("add_alpha_beyond_float64", lambda x: ops.add(x, x, alpha=10**400), ValueError, r"custom::add: alpha=\d+ does not fit in a float64"),
    ("layer_norm_eps_none", lambda x: ops.layer_norm(x, [4], eps=None), TypeError, r"custom::layer_norm: eps must be a float, got NoneType"),
    ("layer_norm_eps_str", lambda x: ops.layer_norm(x, [4], eps="1e-5"), TypeError, r"custom::layer_norm: eps must be a float, got str"),
    ("rms_norm_eps_str", lambda x: ops.rms_norm(x, [4], eps="x"), TypeError, r"custom::rms_norm: eps must be a float, got str"),
    ("fused_eps_list", lambda x: ops.fused_add_rms_norm(x, x, [4], eps=[1e-5]), TypeError, r"custom::fused_add_rms_norm: eps must be a float, got list"),
    ("rms_norm_eps_beyond_float64", lambda x: ops.rms_norm(x, [4], eps=10**400), ValueError, r"custom::rms_norm: eps=\d+ does not fit in a float64"),
]


@pytest.mark.parametrize("path", ["fast", "traced"])
@pytest.mark.parametrize("call,error,message", [c[1:] for c in BAD_ARGUMENTS], ids=[c[0] for c in BAD_ARGUMENTS])
def test_argument_conversion_error_names_op_and_argument(path, call, error, message):
    x = torch.randn(3, 4)
    if path == "fast":
        with pytest.raises(error, match=message):
            call(x)
    else:
        with _ForceTracedPath(), pytest.raises(error, match=message):
            call(x)


def test_numpy_and_int_scalars_still_convert():
    np = pytest.importorskip("numpy")
    x = torch.randn(3, 4)
    torch.testing.assert_close(ops.add(x, x, alpha=np.float32(2.0)), x * 3)
    torch.testing.assert_close(ops.add(x, x, alpha=2), x * 3)
    torch.testing.assert_close(ops.layer_norm(x, [4], eps=np.float64(1e-5)), F.layer_norm(x, [4]))
    torch.testing.assert_close(ops.softmax(x, True), torch.softmax(x, 1))


# ---- 5. inputs made under torch.inference_mode() -----------------------------------


def _inference_inputs(*shapes):
    with torch.inference_mode():
        return [torch.randn(*s) for s in shapes]


INFERENCE_CASES = {
    # name: (our call, torch's functional form); arguments (inference tensor(s), params requiring grad)
    "rms_norm": (lambda a, p: ops.rms_norm(a, [4], p), lambda a, p: F.rms_norm(a, [4], p, eps=torch.finfo(torch.float32).eps)),
    "layer_norm": (lambda a, p: ops.layer_norm(a, [4], p, p * 0.5), lambda a, p: F.layer_norm(a.clone(), [4], p, p * 0.5)),
    "fused_add_rms_norm": (
        lambda a, p: ops.fused_add_rms_norm(a, p.expand(3, 4), [4], p)[0],
        lambda a, p: F.rms_norm(a + p.expand(3, 4), [4], p, eps=torch.finfo(torch.float32).eps),
    ),
    "add": (lambda a, p: ops.add(a, p, alpha=2.0), lambda a, p: torch.add(a, p, alpha=2.0)),
    "swiglu_gate": (lambda a, p: ops.swiglu(a, p.expand(3, 4)), lambda a, p: F.silu(a) * p.expand(3, 4)),
    "swiglu_up": (lambda a, p: ops.swiglu(p.expand(3, 4), a), lambda a, p: F.silu(p.expand(3, 4)) * a.clone()),
    "geglu_gate": (lambda a, p: ops.geglu(a, p.expand(3, 4)), lambda a, p: F.gelu(a) * p.expand(3, 4)),
}


@pytest.mark.parametrize("name", list(INFERENCE_CASES))
def test_inference_mode_input_with_parameter_requiring_grad(name):
    # "Inference tensors cannot be saved for backward" where torch's own form runs.
    ours, theirs = INFERENCE_CASES[name]
    (a,) = _inference_inputs((3, 4))
    assert a.is_inference()
    p_ours = (torch.rand(4) + 0.5).requires_grad_()
    p_theirs = p_ours.detach().clone().requires_grad_()
    y = ours(a, p_ours)
    y_ref = theirs(a, p_theirs)
    torch.testing.assert_close(y, y_ref)
    grad = torch.randn_like(y_ref)
    y.backward(grad)
    y_ref.backward(grad)
    torch.testing.assert_close(p_ours.grad, p_theirs.grad)


def test_inference_mode_call_inside_inference_mode():
    x, w = _inference_inputs((3, 4), (4,))
    with torch.inference_mode():
        y = ops.rms_norm(x, [4], w)
    assert y.is_inference()
    torch.testing.assert_close(y, F.rms_norm(x, [4], w, eps=torch.finfo(torch.float32).eps))


# ---- found by the fuzz suite (tests/test_fuzz.py) ------------------------------------


@pytest.mark.parametrize("value", [0.1, 3.0, -7.3, 1e-3])
def test_layer_norm_eps0_constant_row_with_inexact_mean_gives_nan(kernel_device, value):
    # A float mean of 769 copies of 0.1 is a few ulp off 0.1, so the centred row
    # was +-1 ulp and eps = 0 turned it into +-1 instead of 0 * inf = NaN.
    x = torch.full((2, 769), value, device=kernel_device)
    assert torch.isnan(ops.layer_norm(x, [769], eps=0.0)).all()
    dy = torch.randn(2, 769, device=kernel_device)
    dx, _, _ = torch.ops.custom.layer_norm_backward(dy, x, [769], None, None, 0.0)
    assert torch.isnan(dx).all()


def test_layer_norm_row_with_large_mean_matches_float64(kernel_device):
    # |mean| * rstd = 1e4: the refined mean keeps the outputs at float accuracy.
    g = torch.Generator().manual_seed(0)
    x = (1e4 + torch.randn(4, 1000, generator=g, dtype=torch.float64)).float().to(kernel_device)
    y = ops.layer_norm(x, [1000], eps=0.0)
    assert_close_f64(y, F.layer_norm(x.double(), [1000], eps=0.0), rtol=0, atol=2e-3)
    dy = torch.randn(4, 1000, generator=g).to(kernel_device)
    dx, _, _ = torch.ops.custom.layer_norm_backward(dy, x, [1000], None, None, 0.0)
    x64 = x.double().requires_grad_()
    F.layer_norm(x64, [1000], eps=0.0).backward(dy.double())
    assert_close_f64(dx, x64.grad, rtol=0, atol=2e-3)


@pytest.mark.parametrize("op", ["gelu", "geglu"])
def test_gelu_tanh_backward_of_huge_inputs_is_not_nan(kernel_device, op):
    # u' = sqrt(2/pi) (1 + 3 c x^2) overflowed for |x| > ~7e12 and met s (1 - s) = 0.
    x = torch.tensor([4.25e37, -4.25e37, 7e12, -7e12, 1e20, 12.0, -12.0], device=kernel_device)
    dy = torch.ones_like(x)
    if op == "gelu":
        dx = torch.ops.custom.gelu_backward(dy, x, "tanh")
    else:
        dx, _ = torch.ops.custom.geglu_backward(dy, x, torch.ones_like(x), "tanh")
    assert torch.equal(dx.cpu(), torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])), dx


@pytest.mark.parametrize("target", _every_target())
def test_layer_norm_of_a_row_whose_sum_is_inf_minus_inf_is_rescued(target):
    """[3e38, 3e38, -3e38, -3e38, 1..4]: pairwise sums give inf + -inf, a NaN mean
    and rstd, which the Ascend backward's rescue once read as an underflow (rstd
    NaN) and so left unscaled. Forward and backward against float64."""
    x = torch.tensor([[3e38, 3e38, -3e38, -3e38, 1.0, 2.0, 3.0, 4.0]])
    torch.manual_seed(0)
    w, b, dy = torch.randn(8), torch.randn(8), torch.randn(1, 8)
    y, dx, dw, db = _run_layer_norm(target, x, w, b, 1e-5, dy)
    x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, b))
    expected = F.layer_norm(x64, [8], w64, b64, eps=1e-5)
    expected.backward(dy.double())
    assert_close_f64(y, expected.detach(), rtol=1e-5, atol=1e-5)
    assert_close_f64(dx, x64.grad, rtol=1e-4, atol=1e-44)
    assert_close_f64(dw, w64.grad, rtol=1e-5, atol=1e-5)
