"""The norms and softmax of rows held by a thread-block cluster (sm_90) on the
CPU harness: rows longer than one block holds in registers take a cluster of 2,
4 or 8 blocks, each owning a slice of the columns (its slice of the weight and
bias held, its slice of a step's rows cached) and combining the row statistics
with the others through distributed shared memory (norm.cu, "rows held by a
cluster" and "backward rows held by a cluster"; softmax.cu). Against float64 on
the same inputs; the launch is checked to be the cluster kernel, and the same
call configured as sm_80 (no clusters) to take the one-block (forward) or
long-row (backward) kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from op_extension import cuda_sim
from reference import DTYPE_IDS, backward_args, tolerance
from test_cuda_sim_long_rows import assert_backward_matches_float64

# (op, dtype, cols, cluster blocks): the smallest cluster whose blocks hold a
# slice (512 threads x twice the one-block held slices) is taken. float16 runs
# the bfloat16 kernels' template and plan. Few, as the harness (and ASan, in
# check_sanitizers.sh) pays per shared-memory access.
CASES = [
    ("rms_norm", torch.float32, 20480, 2),        # one block holds 16384
    ("rms_norm", torch.bfloat16, 40960, 4),
    ("fused_add_rms_norm", torch.bfloat16, 24576, 2),
    ("layer_norm", torch.bfloat16, 32776, 8),    # slices of 4104, the last one 4048
    ("layer_norm", torch.float32, 24580, 4),     # slices of 6148, the last one 6136
    ("layer_norm", torch.float32, 16392, 4),
]
# Without weight (and bias): the one-block kernels' other path, on two of them.
PLAIN = [CASES[0], CASES[5]]


def _case_id(case):
    op, dtype, cols, blocks = case
    return f"{op}-{DTYPE_IDS[dtype]}-{cols}-x{blocks}"


def _rows(cols: int, dtype: torch.dtype) -> torch.Tensor:
    """5 rows (steps of 2: a last step of 1): plain, one whose squares overflow
    float (rescaled), a constant row far from 0 (LayerNorm refines its mean, and
    its output is the bias), a mean of 1e4 over a unit spread (refined too), and
    one outlier."""
    g = torch.Generator().manual_seed(cols)
    x = torch.randn(5, cols, dtype=torch.float64, generator=g)
    x[1, 3] = 3e38
    x[2] = 1000.1
    spread = 200.0 if dtype == torch.bfloat16 else 1.0  # bfloat16's spacing at 1e4 is 64
    x[3] = 1e4 + spread * x[3]
    x[4, cols // 3] = 1e4
    return x.to(dtype)


def _call(op, x, w, b, arch):
    cols = x.shape[-1]
    if op == "layer_norm":
        return cuda_sim.run(op, x, [cols], w, b, 1e-5, arch=arch)
    if op == "rms_norm":
        return cuda_sim.run(op, x, [cols], w, 1e-6, arch=arch)
    got, residual_out = cuda_sim.run(op, x, torch.zeros_like(x), [cols], w, 1e-6, arch=arch)
    assert torch.equal(residual_out, x), "residual_out of a zero residual is the input"
    return got


def _expected(op, x, w, b):
    cols = x.shape[-1]
    x64 = x.double()
    w64 = None if w is None else w.double()
    if op == "layer_norm":
        return F.layer_norm(x64, [cols], w64, None if b is None else b.double(), 1e-5)
    return F.rms_norm(x64, [cols], w64, 1e-6)


def _launch_of(op, x, w, b, arch) -> dict:
    cols = x.shape[-1]
    if op == "layer_norm":
        t = cuda_sim.traffic(op, x, [cols], w, b, 1e-5, arch=arch)
    elif op == "rms_norm":
        t = cuda_sim.traffic(op, x, [cols], w, 1e-6, arch=arch)
    else:
        t = cuda_sim.traffic(op, x, torch.zeros_like(x), [cols], w, 1e-6, arch=arch)
    assert t["launches"] == 1
    return t["per_launch"][0]


@pytest.mark.parametrize("case,affine", [pytest.param(c, True, id=_case_id(c)) for c in CASES] +
                         [pytest.param(c, False, id=f"{_case_id(c)}-plain") for c in PLAIN])
def test_forward_norms_of_rows_held_by_a_cluster(case, affine):
    op, dtype, cols, blocks = case
    x = _rows(cols, dtype)
    g = torch.Generator().manual_seed(7)
    w = (1.0 + 0.2 * torch.randn(cols, dtype=torch.float64, generator=g)).to(dtype) if affine else None
    b = torch.randn(cols, dtype=torch.float64, generator=g).to(dtype) if affine and op == "layer_norm" else None
    got = _call(op, x, w, b, "sm_90")
    expected = _expected(op, x, w, b)
    assert torch.isfinite(got).all()
    if op == "layer_norm":
        assert torch.equal(got[2], b if b is not None else torch.zeros_like(got[2])), \
            "a constant row's output is its bias"
    tol = tolerance(dtype, op, "forward")
    if dtype == torch.float32:
        tol = {"atol": 1e-5, "rtol": 1e-5}
    # LayerNorm: the float mean's own rounding (a few ulp of 1e4), carried by rstd.
    x64 = x.double()
    rstd = torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5)
    w_max = 1.0 if w is None else w.double().abs().max().item()
    slack = 4 * torch.finfo(torch.float32).eps * x64.mean(-1).abs() * rstd * w_max if op == "layer_norm" \
        else torch.zeros(x.shape[0], dtype=torch.float64)
    for r in range(x.shape[0]):
        torch.testing.assert_close(got[r].double(), expected[r], rtol=tol["rtol"], atol=tol["atol"] + slack[r].item(),
                                   msg=lambda m, r=r: f"{_case_id(case)} row {r}: {m}")


# Which kernels run, from the traffic counts.
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_cluster_kernel_runs_on_sm_90_only(case):
    """The launch is the cluster instantiation (its last template argument,
    kCluster) in clusters of the planned size on sm_90; on sm_80, which has no
    clusters, the one-block kernel of the same op (kCluster defaulted, so not
    spelled). One row: the plan does not depend on the row count."""
    op, dtype, cols, blocks = case
    x = torch.randn(1, cols).to(dtype)
    w = torch.ones(cols, dtype=dtype)
    b = torch.zeros(cols, dtype=dtype) if op == "layer_norm" else None
    held = _launch_of(op, x, w, b, "sm_90")
    assert held["signature"].endswith(", true>") and held["cluster_blocks"] == blocks, held
    one_block = _launch_of(op, x, w, b, "sm_80")
    assert not one_block["signature"].endswith(", true>") and one_block["cluster_blocks"] == 1, one_block


# (dtype, cols, backward, cluster blocks): rows just past what one block caches
# (128 KiB; the backward caches dy and y).
SOFTMAX_CASES = [
    (torch.float32, 32776, False, 2),      # slices of 16392, the last one 16384
    (torch.bfloat16, 65544, False, 2),
    (torch.float32, 16392, True, 2),
    (torch.bfloat16, 32776, True, 2),
]


def _softmax_id(case):
    dtype, cols, backward, blocks = case
    return f"{DTYPE_IDS[dtype]}-{cols}-{'backward' if backward else 'forward'}-x{blocks}"


@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=_softmax_id)
def test_softmax_of_rows_held_by_a_cluster(case):
    """Softmax rows a cluster holds: the max and the sum (the backward's
    sum(dy * y)) of each block's cached slice combined across the cluster. Rows:
    plain, masked to -inf but for a few values in the last slice, all -inf (NaN,
    as torch), one +inf (NaN), one dominant value in the first slice. Against
    float64 torch; the launch is the cluster kernel."""
    dtype, cols, backward, _ = case
    g = torch.Generator().manual_seed(cols)
    rows = [torch.randn(cols, dtype=torch.float64, generator=g) * 3 for _ in range(5)]
    rows[1][: cols - 50] = float("-inf")
    rows[2][:] = float("-inf")
    rows[3][cols // 2] = float("inf")
    rows[4][5] = 60.0
    x = torch.stack(rows).to(dtype)
    if not backward:
        got = cuda_sim.run("softmax", x, -1, arch="sm_90")
        expected = torch.softmax(x.double(), -1)
        launch = cuda_sim.traffic("softmax", x[:1], -1, arch="sm_90")["per_launch"][0]
    else:
        y = torch.softmax(x.double(), -1).nan_to_num().to(dtype)  # an output without NaN rows
        dy = torch.randn(x.shape, dtype=torch.float64, generator=g).to(dtype)
        got = cuda_sim.run_backward("softmax", dy, y, -1, arch="sm_90")
        y64, dy64 = y.double(), dy.double()
        expected = y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
        launch = cuda_sim.traffic("softmax", dy[:1], y[:1], -1, backward=True, arch="sm_90")["per_launch"][0]
    assert launch["signature"].endswith(", true>") and launch["cluster_blocks"] == case[3], launch
    tol = tolerance(dtype, "softmax", "backward" if backward else "forward")
    torch.testing.assert_close(got.double(), expected, equal_nan=True, **tol)


# ---- backward norms -----------------------------------------------------------------

# (op, dtype, cols, cluster blocks): rows past the 8192 elements one block
# holds, which GPUs before sm_90 give the two long-row launches (x and dy read
# twice, test_cuda_sim_long_rows.py). A cluster block holds 256 threads x four
# times the one-block slices: 8192 columns, in float32 and the 16-bit types.
BACKWARD_CASES = [
    ("rms_norm", torch.float32, 20480, 4),        # slices of 5120
    ("rms_norm", torch.bfloat16, 16392, 4),       # slices of 4104, the last one 4080
    ("fused_add_rms_norm", torch.bfloat16, 12288, 2),
    ("layer_norm", torch.float32, 16392, 4),      # slices of 4100, the last one 4092
    ("layer_norm", torch.bfloat16, 32776, 8),     # slices of 4104, the last one 4048
]
# Without weight (and bias): weight_or_ones's other path, and LayerNorm's
# cluster kernel without its cached weight slice.
BACKWARD_PLAIN = [BACKWARD_CASES[0], BACKWARD_CASES[3]]


def _backward_args(op, x, w, b):
    cols = x.shape[-1]
    if op == "layer_norm":
        return (x, [cols], w, b, 1e-5)
    if op == "rms_norm":
        return (x, [cols], w, 1e-6)
    return (x, torch.zeros_like(x), [cols], w, 1e-6)


@pytest.mark.parametrize("case,affine", [pytest.param(c, True, id=_case_id(c)) for c in BACKWARD_CASES] +
                         [pytest.param(c, False, id=f"{_case_id(c)}-plain") for c in BACKWARD_PLAIN])
def test_backward_norms_of_rows_held_by_a_cluster(case, affine):
    """The rows of the forward test (plain, squares past float's range,
    constant, a mean of 1e4, an outlier): a cluster's blocks combine each row's
    sums (LayerNorm: its mean too, and the rescaled and refined statistics of
    those rows), and the 5 rows make 2 groups (clusters) of 3 and 2 rows whose
    partial weight (and bias) gradients sum_partials adds. Every output against
    the CPU kernel in float64 on the same inputs, as the long-row test compares."""
    op, dtype, cols, _ = case
    x = _rows(cols, dtype)
    g = torch.Generator().manual_seed(11)
    w = (1.0 + 0.2 * torch.randn(cols, dtype=torch.float64, generator=g)).to(dtype) if affine else None
    b = torch.randn(cols, dtype=torch.float64, generator=g).to(dtype) if affine and op == "layer_norm" else None
    assert_backward_matches_float64(op, dtype, _backward_args(op, x, w, b), arch="sm_90", label=_case_id(case))


@pytest.mark.parametrize("case", BACKWARD_CASES, ids=_case_id)
def test_the_backward_cluster_kernel_runs_on_sm_90_only(case):
    """On sm_90 the backward is the cluster kernel, in clusters of the planned
    size, then sum_partials; on sm_80 the long-row statistics and column
    launches. One row."""
    op, dtype, cols, blocks = case
    x = torch.randn(1, cols).to(dtype)
    w = torch.ones(cols, dtype=dtype)
    b = torch.zeros(cols, dtype=dtype) if op == "layer_norm" else None
    _, bw_args = backward_args(op, _backward_args(op, x, w, b))
    held = cuda_sim.traffic(op, *bw_args, backward=True, arch="sm_90")["per_launch"]
    assert [launch["kernel"] for launch in held] == [f"{'layer' if op == 'layer_norm' else 'rms'}_norm_backward_kernel",
                                                     "sum_partials_kernel"], held
    assert held[0]["signature"].endswith(", true>") and held[0]["cluster_blocks"] == blocks, held[0]
    long_rows = cuda_sim.traffic(op, *bw_args, backward=True, arch="sm_80")["per_launch"]
    assert [launch["kernel"] for launch in long_rows] == [
        f"{'layer' if op == 'layer_norm' else 'rms'}_norm_long_row_stats_kernel", "long_row_backward_columns_kernel"]
    assert all(launch["cluster_blocks"] == 1 for launch in long_rows), long_rows
