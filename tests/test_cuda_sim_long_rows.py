"""The CUDA backward norms of rows too long to hold (more than a block keeps in
registers: 8192 elements, 2048-4096 in double) on the CPU harness: their two
launches (row statistics, then a column launch that writes the weight and
bias gradients once) against the CPU kernels in float64. Apart from
test_cuda_sim.py so that `--dist loadfile` can give it a worker of its own."""

from __future__ import annotations

import pytest
import torch

from op_extension import cuda_sim
from reference import DTYPE_IDS, backward_args, tolerance


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _twice(tol: dict) -> dict:
    return {k: 2 * v for k, v in tol.items()}


@pytest.mark.parametrize("extra", [8, 9], ids=["packs", "odd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "layer_norm"])
def test_backward_norms_of_rows_too_long_to_hold(op, dtype, extra):
    """Backward rows past what a block holds in registers (8192 elements; 2048
    for LayerNorm in double) take a statistics launch (steps of 4 rows, 2 in
    double) and a launch whose blocks own 32 column packs over every row,
    staging 32 rows' statistics at a time across up to 8 warps, and write the
    weight (and bias) gradient once: 37 rows make a last step of 1, a last batch
    of 5 and uneven warps (6 rows for the other dtypes and paths: steps of 4
    and 2, or 3 steps of 2 in double). Among them a row whose squares overflow float (it is
    rescaled), a constant row far from 0 and a row with a mean of 1e4 over a unit
    spread (LayerNorm refines their means; its statistics come from one read,
    per-thread moments and co-moments combined). The 128-bit path and the
    one-element one (an odd length). Every output against the CPU kernel in
    float64 on the same inputs."""
    torch.manual_seed(3)
    # 37 rows on float32's 128-bit path (the kernels are one template over the
    # dtypes and paths); 6 elsewhere, which the harness (and ASan, in
    # check_sanitizers.sh) runs at a fraction of the cost.
    rows, cols = (37 if extra == 8 and dtype == torch.float32 else 6), 8192 + extra
    x = torch.randn(rows, cols, dtype=torch.float64)
    x[1, 3] = 3e38
    x[2] = 1000.1
    x[5] = 1e4 + (200.0 if dtype == torch.bfloat16 else 1.0) * x[5]  # bfloat16's spacing at 1e4 is 64
    x = x.to(dtype)
    w = (torch.randn(cols, dtype=torch.float64) * 0.2 + 1.0).to(dtype)
    if op == "layer_norm":
        args = (x, [cols], w, torch.randn(cols, dtype=torch.float64).to(dtype), 1e-5)
    elif op == "rms_norm":
        args = (x, [cols], w, 1e-6)
    else:
        args = (x, torch.zeros_like(x), [cols], w, 1e-6)
    assert_backward_matches_float64(op, dtype, args, arch="sm_80", label=f"{op} {DTYPE_IDS[dtype]}")


def assert_backward_matches_float64(op, dtype, args, arch, label):
    """custom::<op>_backward on the harness (launch limits of `arch`) against the
    CPU kernel in float64 on the same inputs: every output finite, within twice
    the op's backward tolerance (LayerNorm: plus its mean's rounding, when it
    has a weight)."""
    name, bw_args = backward_args(op, args)
    got = _tuple(cuda_sim.run_backward(op, *bw_args, arch=arch))
    as64 = [a.double() if isinstance(a, torch.Tensor) else a for a in bw_args]
    expected = _tuple(getattr(torch.ops.custom, name)(*as64))
    tol = _twice(tolerance(dtype, op, "backward"))
    # LayerNorm's backward arguments: grad_output, input, normalized_shape, weight, ...
    with_weight = op == "layer_norm" and isinstance(as64[3], torch.Tensor)
    slack = _layer_norm_mean_rounding_slack(as64, dtype) if with_weight else (0.0, 0.0)
    for k, (a, e) in enumerate(zip(got, expected)):
        if e is None:
            assert a is None, f"{label} {name} output {k}: expected none"
            continue
        assert a.dtype == dtype and a.shape == e.shape, f"{label} {name} output {k}"
        assert torch.isfinite(a).all(), f"{label} {name} output {k}: not finite"
        extra_atol = slack[k] if k < 2 else 0.0
        assert ((a.double() - e).abs() <= tol["atol"] + extra_atol + tol["rtol"] * e.abs()).all(), (
            f"{label} {name} output {k}: greatest difference "
            f"{(a.double() - e).abs().max().item():.3g} past atol {tol['atol']} + rtol {tol['rtol']} "
            f"(+ the mean's rounding, for LayerNorm)")


def _layer_norm_mean_rounding_slack(bw_args64, dtype):
    """What the accumulator's own rounding of a row's mean (4 ulp of |mean|: a
    mean of 1e4 in float is off by ~1e-3) moves xhat = (x - mean) * rstd by,
    delta_r = 4 eps |mean_r| rstd_r, carried into dx (per row: rstd * delta *
    (|mean(g xhat)| + max|xhat| |mean(g)|), twice) and into the weight gradient
    (per column: sum over rows of |dy| delta_r, twice): the only slack added to
    the float64 comparison, as the forward's test adds it; none for a constant
    row, whose refined mean is exact."""
    grad, x, _, w = bw_args64[:4]
    acc_eps = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    xhat = (x - mean) * rstd
    g = grad * w
    # A constant row's mean is exact (refined: mean(x - mean) is 0), so is its xhat.
    var = x.var(-1, unbiased=False, keepdim=True)
    delta = torch.where(var > 0, 4 * acc_eps * mean.abs() * rstd, torch.zeros_like(var))
    dx = 2 * rstd * delta * ((g * xhat).mean(-1, keepdim=True).abs() +
                             xhat.abs().amax(-1, keepdim=True) * g.mean(-1, keepdim=True).abs())
    dw = 2 * (grad.abs() * delta).sum(0)
    return dx, dw
