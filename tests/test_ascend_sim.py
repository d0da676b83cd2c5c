"""The Ascend NPU path (aclnn entry point -> tiling -> Ascend C kernel) on the CPU
simulator, against the PyTorch references of tests/reference.py.

Shapes are chosen per path rather than swept: one tile, many tiles (a shrunk
Unified Buffer, `_ub_size`, makes tiles small), tails that are not 32-byte
aligned, more cores than work, rows that do not fit in the UB; each dtype; both
SoCs. Simulated kernels are slow (every vector instruction is a Python-free but
element-by-element C++ loop), so shapes stay modest.

Tolerances: the float32/bfloat16/float16 defaults of reference.TOLERANCES apply,
except where a kernel computes in float16 itself: AddCustom adds float16 inputs
in float16, rounding after Muls and after Add, which ASCEND_TOLERANCES records.
"""

from __future__ import annotations

import math

import pytest
import torch

from op_extension import ascend_sim
from reference import DTYPE_IDS, reference, tolerance

SOCS = ascend_sim.SOCS
KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Ascend-specific tolerances, (atol, rtol), on top of reference.TOLERANCES:
# * add.forward in float16 with alpha != 1: two float16 roundings (Muls, then
#   Add) instead of one; each is half an ulp (2^-11 relative), so the result
#   is within 1.5 ulp of the float reference: 2e-3 relative plus 1e-3 absolute.
#   The exact float16 behaviour is checked separately (test_add_float16_rounds_per_instruction).
ASCEND_TOLERANCES = {
    (torch.float16, "add.forward"): (1e-3, 2e-3),
}


def ascend_tolerance(dtype: torch.dtype, op: str, kind: str = "forward") -> dict:
    if (dtype, f"{op}.{kind}") in ASCEND_TOLERANCES:
        atol, rtol = ASCEND_TOLERANCES[(dtype, f"{op}.{kind}")]
        return {"atol": atol, "rtol": rtol}
    return tolerance(dtype, op, kind)


def supported(dtype: torch.dtype, soc: str) -> bool:
    return not (dtype == torch.bfloat16 and soc == "Ascend310P")


def params(dtypes=KERNEL_DTYPES, socs=SOCS):
    return [
        pytest.param(dt, soc, id=f"{DTYPE_IDS[dt]}-{soc}") for dt in dtypes for soc in socs if supported(dt, soc)
    ]


def rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, dtype=torch.float32) * scale).to(dtype)


# ---------------------------------------------------------------------------
# add
# ---------------------------------------------------------------------------

# (id, input shape, other shape, alpha, simulator options)
ADD_CASES = [
    ("single_tile_3x769", (3, 769), (3, 769), 1.0, {}),
    ("alpha_2.5", (3, 769), (3, 769), 2.5, {}),
    ("many_tiles_small_ub", (5, 1000), (5, 1000), -0.5, {"_ub_size": 2048}),
    ("broadcast_row", (4, 77), (77,), 1.0, {}),
    ("broadcast_column_and_row", (6, 1), (1, 9), 0.75, {}),
    ("scalar_other", (3, 33), (), 2.0, {}),
    ("more_cores_than_work_17", (17,), (17,), 1.0, {}),
    ("tail_of_one_element", (1025,), (1025,), 1.0, {"_ub_size": 4096, "_core_num": 3}),
    ("every_core_busy", (48 * 300 + 5,), (48 * 300 + 5,), 1.0, {}),
]


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("case", ADD_CASES, ids=[c[0] for c in ADD_CASES])
def test_add_matches_reference(case, dtype, soc):
    _, xs, ys, alpha, options = case
    x, y = rand(*xs, dtype=dtype), rand(*ys, dtype=dtype)
    out = ascend_sim.run("add", x, y, alpha, soc=soc, **options)
    (expected,), _ = reference("add", (x, y, alpha))
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "add"))


@pytest.mark.parametrize("soc", SOCS)
def test_add_float16_rounds_per_instruction(soc):
    # Muls then Add, each rounded to float16 -- exactly what PyTorch's CPU float16
    # ops do one at a time (compute in float, round to half).
    x, y = rand(4, 1000, dtype=torch.float16, scale=3), rand(4, 1000, dtype=torch.float16, scale=3)
    out = ascend_sim.run("add", x, y, 2.7, soc=soc)
    scaled = y * torch.tensor(2.7, dtype=torch.float16)
    assert torch.equal(out, x + scaled)
    # ... which differs from rounding the float result once: the simulator really rounds twice.
    once = (x.float() + torch.tensor(2.7, dtype=torch.float16).float() * y.float()).half()
    assert not torch.equal(out, once)


def test_add_number_other():
    x = rand(3, 40)
    torch.testing.assert_close(ascend_sim.run("add", x, 1.5), x + 1.5)


@pytest.mark.parametrize("soc", SOCS)
def test_add_empty(soc):
    out = ascend_sim.run("add", torch.empty(0, 5), torch.empty(0, 5), soc=soc)
    assert out.shape == (0, 5)


# ---------------------------------------------------------------------------
# gelu, forward and backward
# ---------------------------------------------------------------------------

# (id, shape, simulator options); every case runs with both approximations.
GELU_CASES = [
    ("single_tile_3x769", (3, 769), {}),
    ("many_tiles_small_ub", (5, 1000), {"_ub_size": 4096}),
    ("unaligned_tail_3_cores", (1025,), {"_ub_size": 4096, "_core_num": 3}),
    ("more_cores_than_work_17", (17,), {}),
    ("hidden_4096", (2, 4096), {}),
]


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("case", GELU_CASES, ids=[c[0] for c in GELU_CASES])
def test_gelu_matches_reference(case, approximate, dtype, soc):
    _, shape, options = case
    x = rand(*shape, dtype=dtype, scale=3).requires_grad_()
    dy = rand(*shape, dtype=dtype)
    out = ascend_sim.run("gelu", x.detach(), approximate, soc=soc, **options)
    grad = ascend_sim.run_backward("gelu", dy, x.detach(), approximate, soc=soc, **options)
    (expected,), grads = reference("gelu", (x, approximate), grad_outputs=(dy,))
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "gelu"))
    torch.testing.assert_close(grad, grads[0], **ascend_tolerance(dtype, "gelu", "backward"))


def test_gelu_extreme_inputs():
    # Large |x|: exp under/overflows inside the formulas; the results stay finite and exact.
    x = torch.tensor([-100.0, -30.0, -10.0, -1e-30, 0.0, 1e-30, 10.0, 30.0, 100.0] + [0.5] * 7)
    for approximate in ("none", "tanh"):
        out = ascend_sim.run("gelu", x, approximate)
        torch.testing.assert_close(out, torch.nn.functional.gelu(x, approximate=approximate), atol=1e-6, rtol=1e-6)
        grad = ascend_sim.run_backward("gelu", torch.ones_like(x), x, approximate)
        assert torch.isfinite(grad).all(), grad


def _gelu_float64(x: torch.Tensor) -> torch.Tensor:
    # 0.5 x erfc(-x / sqrt2), not F.gelu(x.double()): 1 + erf(x / sqrt2) cancels for x < -5.
    x = x.double()
    return 0.5 * x * torch.special.erfc(-x / math.sqrt(2))


def _gelu_grad_float64(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # (Phi(x) + x phi(x), Phi(x) + |x| phi(x)): the derivative, and the size of its
    # two terms, which bounds what float evaluation of either can be expected to do
    # (the derivative has a root near x = -0.75, where no relative bound holds).
    x = x.double()
    cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return cdf + x * pdf, cdf + x.abs() * pdf


@pytest.mark.parametrize("dtype,soc", params())
def test_gelu_erf_relative_accuracy_in_tails(dtype, soc):
    # Exact GELU, forward and backward and through GEGLU, against the float64
    # reference on [-10, 10]: float32 within 2e-6 relative wherever the reference
    # is a normal float (ATen's own float32 GELU is off by 100% below x = -5.4 there);
    # 16-bit results within one rounding of the float32 answer.
    x = torch.linspace(-10, 10, 40001).to(dtype)
    ref = _gelu_float64(x)
    normal = ref.abs() >= torch.finfo(dtype).tiny
    bound = 2e-6 if dtype == torch.float32 else torch.finfo(dtype).eps
    y = ascend_sim.run("gelu", x, "none", soc=soc).double()
    assert ((y - ref).abs() / ref.abs())[normal].max() <= bound
    geglu = ascend_sim.run("geglu", x, torch.ones_like(x), "none", soc=soc).double()
    assert ((geglu - ref).abs() / ref.abs())[normal].max() <= bound
    grad = ascend_sim.run_backward("gelu", torch.ones_like(x), x, "none", soc=soc).double()
    dref, size = _gelu_grad_float64(x)
    big = size >= torch.finfo(dtype).tiny
    assert ((grad - dref).abs() / size)[big].max() <= bound


@pytest.mark.parametrize("soc", SOCS)
def test_gelu_tanh_backward_of_huge_inputs_is_not_nan(soc):
    # u' = 2 sqrt(2/pi) (1 + 3c x^2) overflowed past |x| ~ 7e12 and met s (1 - s) = 0: NaN.
    x = torch.tensor([4.25e37, -4.25e37, 7e12, -7e12, 1e20, 12.0, -12.0, 3.0])
    g = ascend_sim.run_backward("gelu", torch.ones_like(x), x, "tanh", soc=soc)
    expected = torch.ops.custom.gelu_backward(torch.ones_like(x), x, "tanh")
    assert torch.equal(g[:7], torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])), g
    torch.testing.assert_close(g, expected)


@pytest.mark.parametrize("soc", SOCS)
def test_gelu_erf_sign_gives_tail_not_x_times_2pow25_and_inf_not_nan(soc):
    # The sign used to be x / (|x| + tiny), so Phi(x) for x <= -8 was 0.5 - 0.5 * (1 - tiny)
    # (x * 2^-25 after cancellation) and gelu(+inf) was inf * NaN.
    x = torch.tensor([-13.0, -10.0, -9.0, -8.0, -0.0, 0.0, float("inf"), float("-inf"), float("nan")] + [1.0] * 7)
    y = ascend_sim.run("gelu", x, "none", soc=soc)
    torch.testing.assert_close(y[:4].double(), _gelu_float64(x[:4]), rtol=2e-6, atol=0)
    assert torch.isfinite(y[4]) and y[4] == 0 and y[5] == 0
    assert y[6] == float("inf")
    assert torch.isnan(y[7]) == torch.isnan(torch.nn.functional.gelu(x[7:8]))[0]  # -inf * 0: NaN, as torch
    assert torch.isnan(y[8])
    g = ascend_sim.run_backward("gelu", torch.ones_like(x), x, "none", soc=soc)
    dref, _ = _gelu_grad_float64(x[:4])
    torch.testing.assert_close(g[:4].double(), dref, rtol=2e-6, atol=0)
    assert g[4] == 0.5 and g[5] == 0.5 and torch.isnan(g[8])


# ---------------------------------------------------------------------------
# rms_norm, forward and backward
# ---------------------------------------------------------------------------


def weight_like(n, dtype):
    return (1 + 0.2 * torch.randn(n)).to(dtype)


# (id, input shape, normalized shape, weight, eps, options, socs). Every case on
# both SoCs: Ascend310P (no DataCopyPad) moves rows that are not whole 32-byte
# blocks as whole blocks (the kernels' RowCopier, kernel_common.h).
RMS_CASES = [
    ("3x769_weight", (3, 769), [769], True, 1e-6, {}, SOCS),
    ("3x769_no_weight", (3, 769), [769], False, None, {}, SOCS),
    ("hidden_4096_few_rows", (4, 4096), [4096], True, 1e-6, {}, SOCS),
    ("rows_of_768", (3, 768), [768], True, 1e-5, {}, SOCS),
    ("many_rows_per_tile_70x33", (70, 33), [33], True, 1e-6, {}, SOCS),
    ("many_rows_70x64_3_cores", (70, 64), [64], True, 1e-6, {"_core_num": 3}, SOCS),
    ("row_split_small_ub", (3, 1000), [1000], True, 1e-6, {"_ub_size": 8192}, SOCS),
    ("row_split_aligned", (3, 1024), [1024], True, 1e-6, {"_ub_size": 8192}, SOCS),
    ("row_split_real_ub_9001", (2, 9001), [9001], True, 1e-6, {}, SOCS),
    ("multi_dim_normalized", (2, 4, 6), [4, 6], True, 1e-5, {}, SOCS),
    ("one_row", (1, 64), [64], False, 1e-6, {}, SOCS),
]


def rms_params():
    return [
        pytest.param(case, dt, soc, id=f"{case[0]}-{DTYPE_IDS[dt]}-{soc}")
        for case in RMS_CASES
        for dt in KERNEL_DTYPES
        for soc in case[6]
        if supported(dt, soc)
    ]


@pytest.mark.parametrize("case,dtype,soc", rms_params())
def test_rms_norm_matches_reference(case, dtype, soc):
    _, shape, normalized, has_weight, eps, options, _ = case
    x = rand(*shape, dtype=dtype).requires_grad_()
    w = weight_like(normalized, dtype).requires_grad_() if has_weight else None
    dy = rand(*shape, dtype=dtype)
    out = ascend_sim.run("rms_norm", x.detach(), normalized, None if w is None else w.detach(), eps, soc=soc,
                         **options)
    dx, dw = ascend_sim.run_backward("rms_norm", dy, x.detach(), normalized, None if w is None else w.detach(), eps,
                                     soc=soc, **options)
    (expected,), grads = reference("rms_norm", (x, normalized, w, eps), grad_outputs=(dy,))
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "rms_norm"))
    torch.testing.assert_close(dx, grads[0], **ascend_tolerance(dtype, "rms_norm", "backward"))
    if has_weight:
        torch.testing.assert_close(dw, grads[2], **ascend_tolerance(dtype, "row_sum", "backward"))
    else:
        assert dw.shape == (0,)


@pytest.mark.parametrize("soc", SOCS)
def test_rms_norm_backward_no_rows_gives_zero_weight_grad(soc):
    x = torch.empty(0, 64)
    dx, dw = ascend_sim.run_backward("rms_norm", torch.empty(0, 64), x, [64], torch.ones(64), 1e-6, soc=soc)
    assert dx.shape == (0, 64)
    assert torch.equal(dw, torch.zeros(64))


@pytest.mark.parametrize("soc", SOCS)
def test_rms_norm_zero_rows_unaligned(soc):
    # Zero rows of 7 (not a whole block): an empty output, and a zero weight grad
    # from the gradWeight pass, on both SoCs (310P without DataCopyPad).
    x, w = torch.empty(0, 7), torch.ones(7)
    dx, dw = ascend_sim.run_backward("rms_norm", torch.empty(0, 7), x, [7], w, 1e-6, soc=soc)
    assert dx.shape == (0, 7) and torch.equal(dw, torch.zeros(7))
    assert ascend_sim.run("rms_norm", x, [7], w, 1e-6, soc=soc).shape == (0, 7)


# Rows whose float32 sum of squares overflows; against float64. (id, cols, options, socs):
# whole rows, and split rows (a shrunk UB), on both SoCs.
OVERFLOW_LAYOUTS = [
    ("two_cols", 2, {}, SOCS),
    ("whole_rows", 8, {}, SOCS),
    ("split_rows", 1024, {"_ub_size": 8192}, SOCS),
]


def overflow_params(dtypes=(torch.float32, torch.bfloat16)):
    # float16 cannot hold values whose square overflows float32.
    return [
        pytest.param(layout, dt, soc, id=f"{layout[0]}-{DTYPE_IDS[dt]}-{soc}")
        for layout in OVERFLOW_LAYOUTS
        for dt in dtypes
        for soc in layout[3]
        if supported(dt, soc)
    ]


def overflow_rows(cols, dtype):
    # Row 0: [3e38, 1, ...]; row 1: -2e38 and 1e30 among ones; row 2: ordinary.
    x = torch.ones(3, cols)
    x[0, 0] = 3e38
    x[1, cols - 1] = -2e38
    x[1, cols // 2] = 1e30
    x[2] = torch.randn(cols)
    return x.to(dtype)


def overflow_tolerance(dtype):
    # float32: rtol 1e-5 against float64; bfloat16: one bfloat16 rounding.
    return {"rtol": 1e-5 if dtype == torch.float32 else 8e-3, "atol": 1e-44}


@pytest.mark.parametrize("layout,dtype,soc", overflow_params())
def test_rms_norm_sum_of_squares_overflow_matches_float64(layout, dtype, soc):
    _, cols, options, _ = layout
    x, w = overflow_rows(cols, dtype), torch.ones(cols, dtype=dtype)
    out = ascend_sim.run("rms_norm", x, [cols], w, 1e-6, soc=soc, **options)
    expected = torch.nn.functional.rms_norm(x.double(), [cols], w.double(), 1e-6)
    torch.testing.assert_close(out.double(), expected.to(dtype).double(), **overflow_tolerance(dtype))


@pytest.mark.parametrize("layout,dtype,soc", overflow_params())
def test_rms_norm_backward_sum_of_squares_overflow_matches_float64(layout, dtype, soc):
    # Weight grad was (dy * x) * rstd (overflow) and dx used rstd^3 (underflow).
    _, cols, options, _ = layout
    x, w = overflow_rows(cols, dtype), torch.ones(cols, dtype=dtype)
    dy = torch.full_like(x, 2.0)
    dx, dw = ascend_sim.run_backward("rms_norm", dy, x, [cols], w, 1e-6, soc=soc, **options)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    torch.nn.functional.rms_norm(x64, [cols], w64, 1e-6).backward(dy.double())
    tol = overflow_tolerance(dtype)
    assert torch.isfinite(dw).all()
    torch.testing.assert_close(dw.double(), w64.grad.to(dtype).double(), **tol)
    # dx of the ordinary row and of each rescued row, against the size of its terms
    # (rstd * |g|): dx[0, 0] is the difference of two such terms, ~0 in float64.
    size = (dy.double().abs() / torch.linalg.vector_norm(x.double(), dim=-1, keepdim=True)) * math.sqrt(cols)
    assert ((dx.double() - x64.grad).abs() / size).max() <= tol["rtol"] * 4


@pytest.mark.parametrize("layout,dtype,soc", overflow_params())
def test_fused_add_rms_norm_sum_of_squares_overflow_matches_float64(layout, dtype, soc):
    _, cols, options, _ = layout
    x, w = overflow_rows(cols, dtype), torch.ones(cols, dtype=dtype)
    out, residual_out = ascend_sim.run("fused_add_rms_norm", x, torch.zeros_like(x), [cols], w, 1e-6, soc=soc,
                                       **options)
    assert torch.equal(residual_out, x)
    expected = torch.nn.functional.rms_norm(x.double(), [cols], w.double(), 1e-6)
    torch.testing.assert_close(out.double(), expected.to(dtype).double(), **overflow_tolerance(dtype))


@pytest.mark.parametrize("layout,dtype,soc", overflow_params())
def test_layer_norm_variance_overflow_matches_float64(layout, dtype, soc):
    # layer_norm([[1e20, 1, 1]]) gave zeros: (x - mean)^2 overflows float32.
    _, cols, options, _ = layout
    x = overflow_rows(cols, dtype)
    x[1, 0] = 1e20
    if cols == 2:
        x = torch.tensor([[1e20, 1.0, 1.0]], dtype=dtype)
        cols = 3
    w, b = (1 + 0.1 * torch.randn(cols)).to(dtype), (0.1 * torch.randn(cols)).to(dtype)
    out = ascend_sim.run("layer_norm", x, [cols], w, b, 1e-5, soc=soc, **options)
    expected = torch.nn.functional.layer_norm(x.double(), [cols], w.double(), b.double(), 1e-5)
    # Outputs are O(1) with a bias added: absolute error too (xhat * w + b can cancel).
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 8e-3, "atol": 8e-3}
    torch.testing.assert_close(out.double(), expected.to(dtype).double(), **tol)


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("options", [{}, {"_ub_size": 8192}], ids=["whole_rows", "split_rows"])
def test_layer_norm_eps0_constant_row_gives_nan(options, dtype, soc):
    # The mean of a constant row is not exactly the constant (sum * (1/cols) rounds),
    # so the centred values were +-1 ulp and, with eps = 0, the output +-1; torch and
    # the CPU op give (x - mean) * inf = 0 * inf = NaN.
    cols = 1008 if options else 112  # lengths where most of these means round, in every dtype
    # 32 constants: most rows' means round (which ones depends on dtype and layout).
    constants = torch.randn(32, 1, generator=torch.Generator().manual_seed(11)) * 3
    x = constants.expand(32, cols).contiguous().to(dtype)
    out = ascend_sim.run("layer_norm", x, [cols], None, None, 0.0, soc=soc, **options)
    assert torch.isnan(torch.nn.functional.layer_norm(x.float(), [cols], eps=0.0)).all()
    if soc == "Ascend310P" and dtype != torch.float32:
        assert (out == 0).all(), out[:, :4]  # saturation mode: a NaN float16 result is 0 (docs/ascend.md)
        return
    assert torch.isnan(out).all(), out[:, :4]
    if soc == "Ascend910B" and not options:
        three = ascend_sim.run("layer_norm", torch.full((1, 3), 0.1, dtype=dtype), [3], None, None, 0.0, soc=soc)
        assert torch.isnan(three).all(), three


def test_rms_norm_weight_grad_independent_of_core_count():
    # gradWeight is summed per column in row order: the same bits on 1 core or 48.
    x, dy, w = rand(50, 96), rand(50, 96), weight_like([96], torch.float32)
    _, dw1 = ascend_sim.run_backward("rms_norm", dy, x, [96], w, 1e-6, _core_num=1)
    _, dw48 = ascend_sim.run_backward("rms_norm", dy, x, [96], w, 1e-6)
    assert torch.equal(dw1, dw48)


# ---------------------------------------------------------------------------
# add backward: sums to the operand's shape
# ---------------------------------------------------------------------------

# (id, gradOutput shape, input_size, alpha, options, socs)
ADD_GRAD_CASES = [
    ("same_shape", (3, 769), (3, 769), 1.0, {}, SOCS),
    ("row_vector_bias", (3, 769), (769,), 2.0, {}, SOCS),
    ("bias_many_chunks_small_ub", (6, 1000), (1000,), -0.5, {"_ub_size": 2048}, SOCS),
    ("column_vector", (5, 7), (5, 1), -0.75, {}, SOCS),
    ("column_vector_long_rows", (40, 9), (40, 1), 1.0, {}, SOCS),
    ("row_of_column_times_row", (5, 7), (1, 7), 1.0, {}, SOCS),
    ("middle_channel", (2, 3, 5), (1, 3, 1), 1.5, {}, SOCS),
    ("short_rows_kept_around_summed", (3, 4, 5), (3, 1, 5), 1.0, {}, SOCS),
    ("odd_run_sums", (1023,), (1,), 1.0, {}, SOCS),
    ("one_element", (1,), (1,), 2.0, {}, SOCS),
    ("seven_to_one_of_three", (7, 3), (1, 3), -1.0, {}, SOCS),
    ("alternating_dims", (2, 5, 4, 6, 3), (5, 1, 6, 1), 1.0, {}, SOCS),
    ("to_scalar", (4, 5), (), 0.5, {}, SOCS),
    ("empty_summed_dim", (0, 7), (1, 7), 2.0, {}, SOCS),
    ("runs_in_chunks_small_ub", (19, 1001), (19, 1), 1.0, {"_ub_size": 2048}, SOCS),
    ("more_cores_than_work", (17,), (17,), 3.0, {}, SOCS),
]


def add_grad_params():
    return [
        pytest.param(case, dt, soc, id=f"{case[0]}-{DTYPE_IDS[dt]}-{soc}")
        for case in ADD_GRAD_CASES
        for dt in KERNEL_DTYPES
        for soc in case[5]
        if supported(dt, soc)
    ]


@pytest.mark.parametrize("case,dtype,soc", add_grad_params())
def test_add_backward_matches_reference(case, dtype, soc):
    _, grad_shape, input_size, alpha, options, _ = case
    g = rand(*grad_shape, dtype=dtype)
    out = ascend_sim.run_backward("add", g, list(input_size), alpha, soc=soc, **options)
    expected = (alpha * g.double()).sum_to_size(input_size) if input_size else (alpha * g.double()).sum()
    assert out.shape == torch.Size(input_size)
    torch.testing.assert_close(out, expected.to(dtype), **ascend_tolerance(dtype, "add", "backward"))


@pytest.mark.parametrize("n", (1, 3, 7, 9, 15, 17, 33, 1023))
@pytest.mark.parametrize("soc", SOCS)
def test_add_backward_odd_sizes(n, soc):
    # Issue 12: outputs and rows below one block on 310P (element-wise writes);
    # outputs start as NaN, so an element left unwritten fails.
    for dtype in (torch.float32, torch.float16):
        g = rand(5, n, dtype=dtype)
        for size in ([1, n], [5, 1], [n], [5, n]):
            out = ascend_sim.run_backward("add", g, size, 1.5, soc=soc)
            expected = (1.5 * g.double()).sum_to_size(size).to(dtype)
            torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "add", "backward"))


# ---------------------------------------------------------------------------
# Bad input: rejected by the aclnn entry point, naming the op
# ---------------------------------------------------------------------------


def test_add_rejects_float64():
    x = torch.randn(4, 8, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"AddCustom: input has dtype float64; supported: float16, float32"):
        ascend_sim.run("add", x, x)


def test_add_rejects_mixed_dtypes():
    with pytest.raises(RuntimeError, match=r"AddCustom: other has dtype float16 but input has float32"):
        ascend_sim.run("add", torch.randn(4, 8), torch.randn(4, 8).half())


def test_bfloat16_rejected_on_310p():
    x = rand(4, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"AddCustom: input is bfloat16, which Ascend310P does not support"):
        ascend_sim.run("add", x, x, soc="Ascend310P")


def test_310p_moves_tensor_below_one_block():
    # No DataCopyPad on 310P: 5 floats (20 bytes) are read as one block, its end
    # in the allocator's padding, and written element by element (issue 12).
    x = torch.randn(5)
    torch.testing.assert_close(ascend_sim.run("add", x, x, soc="Ascend310P"), 2 * x)
    # On 910B they move with DataCopyPad.
    torch.testing.assert_close(ascend_sim.run("add", x, x, soc="Ascend910B"), 2 * x)


BAD_INPUT = [
    ("gelu_approximate", lambda: ascend_sim.run("gelu", torch.ones(8), "fast"),
     r"GeluCustom: approximate must be 'none' or 'tanh', got 'fast'"),
    ("gelu_backward_shapes", lambda: ascend_sim.run_backward("gelu", torch.ones(3, 4), torch.ones(3, 5)),
     r"GeluGradCustom: gradOutput has shape \[3, 4\] but input has \[3, 5\]"),
    ("rms_norm_normalized_shape", lambda: ascend_sim.run("rms_norm", torch.ones(769), [3, 769]),
     r"RmsNormCustom: normalizedShape has 2 dims, more than input \[769\]"),
    ("rms_norm_weight_shape", lambda: ascend_sim.run("rms_norm", torch.ones(3, 769), [769], torch.ones(768)),
     r"RmsNormCustom: weightOptional has shape \[768\] but normalizedShape \(input's trailing 1 dims\) is \[769\]"),
    ("rms_norm_weight_dtype", lambda: ascend_sim.run("rms_norm", torch.ones(3, 8), [8], torch.ones(8).half()),
     r"RmsNormCustom: weightOptional has dtype float16 but input has float32"),
    ("rms_norm_backward_float64", lambda: ascend_sim.run_backward(
        "rms_norm", torch.ones(3, 8, dtype=torch.float64), torch.ones(3, 8, dtype=torch.float64), [8]),
     r"RmsNormGradCustom: input has dtype float64; supported: float16, float32, bfloat16"),
    ("add_backward_input_size", lambda: ascend_sim.run_backward("add", torch.ones(3, 5), [4], 1.0),
     r"AddGradCustom: inputSize \[4\] does not broadcast to gradOutput \[3, 5\]"),
]


@pytest.mark.parametrize("name,call,message", BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_rejected_naming_the_op(name, call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_non_contiguous_inputs_are_made_contiguous_by_the_binding():
    x = rand(33, 9).t()  # [9, 33], transposed
    (expected,), _ = reference("gelu", (x, "tanh"))
    torch.testing.assert_close(ascend_sim.run("gelu", x, "tanh"), expected)


def test_unknown_soc():
    with pytest.raises(ValueError, match=r"unknown soc 'Ascend999'"):
        ascend_sim.run("add", torch.ones(8), torch.ones(8), soc="Ascend999")


# ---------------------------------------------------------------------------
# The simulator's own checks, on small kernels with one planted mistake each
# ---------------------------------------------------------------------------

MISUSE = [
    ("ub_overflow", r"UB overflow: TPipe::InitBuffer of TQue<VECIN, 2> #1 requests 327680 bytes \(2 x 163840\) at UB "
                    r"offset 0 but the Unified Buffer has 196608 bytes \(196608 available\)"),
    ("misaligned_copy_length", r"DataCopy\(GM->UB\): moves 5 x float = 20 bytes, not a multiple of 32 bytes"),
    ("misaligned_ub_address", r"DataCopy\(GM->UB\): LocalTensor start address UB\+12 is not 32-byte aligned"),
    ("deque_empty", r"TQue::DeQue on an empty queue"),
    ("never_freed", r"tensor never freed: a buffer of TQue<VECIN, 1> #1 \(UB\+0\) was allocated with AllocTensor"),
    ("alloc_past_depth", r"TQue::AllocTensor: all 2 buffers of TQue<VECIN, 2> #1 are in use"),
    ("free_foreign_tensor", r"TQue::FreeTensor: tensor was not allocated from TQue<VECOUT, 1> #2 \(it belongs to "
                            r"TQue<VECIN, 1> #1\)"),
    ("use_after_free", r"DataCopy\(UB->GM\): LocalTensor used after FreeTensor"),
    ("local_out_of_bounds", r"LocalTensor::SetValue: 65 elements of float requested but the LocalTensor has 64"),
    ("global_out_of_bounds", r"DataCopy\(GM->UB\): 128 elements requested from a GlobalTensor of 64 elements"),
    ("core_race", r"core 1 overwrites byte \d+ of GM buffer 'aclrtMalloc buffer' that core 0 wrote with a different "
                  r"value in the same launch"),
    ("padding_read", r"wrote NaN to element 5 \(it computed on undefined UB bytes\)"),
    # Issue 12: the allocator's padding may be read, not written, and only 32 bytes of it.
    ("gm_read_past_padding", r"GM access of 320 bytes at offset 0 of buffer 'aclrtMalloc buffer' "
                             r"runs past its end \(256 bytes \+ 32 bytes of allocator padding\)"),
    ("gm_write_past_end", r"DataCopy\(UB->GM\): GM write of 288 bytes at offset 0 of buffer 'aclrtMalloc buffer' "
                          r"runs past its end \(256 bytes; the allocator's padding"),
    # Issue 12: API rules the kernels had broken.
    ("reduce_max_small_work", r"ReduceMax: work tensor \(sharedTmpBuffer\) has 8 elements; reducing 320 elements of "
                              r"float on Ascend910B\w* needs at least 16 \(rule: reduce work size"),
    # Issue 28: with calIndex every round's (value, index) pairs are kept (ReduceMax
    # page, "需要返回最大值索引"): 5 repeats need 16 + 8 floats, not the 16 that do without.
    ("reduce_max_index_small_work", r"ReduceMax: work tensor \(sharedTmpBuffer\) has 16 elements; reducing 320 "
                                    r"elements of float with calIndex on Ascend910B\w* needs at least 24 \(rule: "
                                    r"reduce work size"),
    ("reduce_work_overlaps_source", r"ReduceMax: work tensor UB\+256\.\.288 partly overlaps the source UB\+0\.\.512 "
                                    r"\(rule: reduce work aliasing"),
    ("cast_none_to_bf16", r"Cast: RoundMode::CAST_NONE is not supported for float -> bfloat16_t on Ascend910B\w* "
                          r"\(rule: Cast round modes per SoC, Cast API page; supported: CAST_RINT, CAST_FLOOR, "
                          r"CAST_CEIL, CAST_ROUND, CAST_TRUNC\); on hardware no instruction runs"),
    ("rsqrt_rstd", r"kernel rsqrt_rstd: dst\[\d+\] = \S+ but 1/sqrt\(\d+\) = \S+: relative error \S+ > 1e-5"),
    # Issue 28: the scalar unit's data cache (64-byte lines, written back only when cleaned).
    ("dcache_no_clean", r"core 0 of 2\): lost write: GlobalTensor::SetValue stored GM buffer 'aclrtMalloc buffer' "
                        r"bytes \[48, 76\) into the core's data cache and no DataCacheCleanAndInvalid wrote it back"),
    # WriteShortTensor's old clean: at the first and the last element of a run over
    # bytes [48, 76); the second clean covers [72, 128) only, so [64, 72) is lost.
    ("dcache_clean_first_last", r"core 0 of 2\): lost write: GlobalTensor::SetValue stored GM buffer "
                                r"'aclrtMalloc buffer' bytes \[64, 72\) into the core's data cache"),
    ("dcache_stale_read", r"GlobalTensor::GetValue: stale read of GM buffer 'aclrtMalloc buffer' bytes \[4, 8\): the "
                          r"core's data cache filled line GM buffer 'aclrtMalloc buffer' bytes \[0, 64\) before a DMA "
                          r"write"),
    ("dcache_dma_reads_dirty", r"DataCopy\(GM->UB\): reads GM buffer 'aclrtMalloc buffer' bytes \[0, 4\), which "
                               r"GlobalTensor::SetValue stored into the core's data cache and no "
                               r"DataCacheCleanAndInvalid wrote back yet"),
    # A clean writes its line back whole (64-byte granularity): two cores storing
    # into one line put each other's bytes back (core 0's write-back of the
    # whole line, then core 1's with its own element changed).
    ("dcache_cores_share_line", r"core 1 of 2\): DataCacheCleanAndInvalid \(write-back of the data cache\): core 1 "
                                r"overwrites byte \d+ of GM buffer 'aclrtMalloc buffer' that core 0 wrote with a "
                                r"different value in the same launch"),
    # A line an earlier kernel left in a core's data cache, GM rewritten since by
    # another kernel: block 0's scalar load may meet it wherever it runs -- here
    # the line was filled by block 1, then (same_block) by block 0 itself.
    ("dcache_carried_stale_read", r"core 0 of 2\): GlobalTensor::GetValue: stale read of GM buffer 'aclrtMalloc "
                                  r"buffer' bytes \[4, 8\): kernel dcache_carried_stale_read\.fill \(launch \d+, "
                                  r"block 1, core 1\) left line GM buffer 'aclrtMalloc buffer' bytes \[0, 64\) in a "
                                  r"core's data cache, GM has changed since"),
    ("dcache_carried_stale_read_same_block", r"stale read of GM buffer 'aclrtMalloc buffer' bytes \[4, 8\): kernel "
                                             r"dcache_carried_stale_read_same_block\.fill \(launch \d+, block 0, "
                                             r"core 0\) left line"),
    # Issue 28: DataCopyExtParams ranges of the DataCopyPad pages (约束说明).
    # Issue 28: a core reading what another core wrote in the same launch (no
    # kernel synchronises cores): timing decides what it sees.
    ("cross_core_read_after_write", r"core 1 of 2\): DataCopy\(GM->UB\): core 1 reads byte 0 of GM buffer "
                                    r"'aclrtMalloc buffer' that core 0 wrote in the same launch"),
    # The simulator runs core 0 first, so the other order is caught at the write.
    ("cross_core_write_after_read", r"core 1 of 2\): DataCopy\(UB->GM\): core 1 changes byte \d+ of GM buffer "
                                    r"'aclrtMalloc buffer' that core 0 read in the same launch"),
    ("data_copy_pad_block_count", r"core 0 of 2\): DataCopyPad\(GM->UB\): DataCopyExtParams\.blockCount 4096 is out "
                                  r"of range \[0, 4095\] \(rule: DataCopyExtParams ranges, DataCopyPad page"),
    ("data_copy_pad_block_len", r"core 0 of 2\): DataCopyPad\(GM->UB\): DataCopyExtParams\.blockLen 2097152 bytes is "
                                r"out of range \[0, 2097151\] \(rule: DataCopyExtParams ranges, DataCopyPad page"),
]


@pytest.mark.parametrize("name,message", MISUSE, ids=[m[0] for m in MISUSE])
def test_misuse_is_reported(name, message):
    with pytest.raises(RuntimeError, match=r"AscendC simulator|kernel " + name) as info:
        ascend_sim._run_misuse(name, soc="Ascend910B")
    assert __import__("re").search(message, str(info.value)), str(info.value)


DCACHE_MISUSE = [m for m in MISUSE if m[0].startswith("dcache_")]


@pytest.mark.parametrize("name,message", DCACHE_MISUSE, ids=[m[0] for m in DCACHE_MISUSE])
def test_data_cache_misuse_is_reported_on_310p(name, message):
    # The data cache rules are the same on both SoCs (Atlas inference AI Core has
    # the prototype without dcciDst, which the kernels use).
    with pytest.raises(RuntimeError, match=r"AscendC simulator \(Ascend310P") as info:
        ascend_sim._run_misuse(name, soc="Ascend310P")
    assert __import__("re").search(message, str(info.value)), str(info.value)


@pytest.mark.parametrize("soc", ["Ascend910B", "Ascend310P"])
@pytest.mark.parametrize("name", ["dcache_clean_every_line", "dcache_clean_every_line_long", "dcache_clean_entire",
                                  "dcache_invalidate_before_read", "dcache_carried_invalidate_before_read",
                                  "dcache_cores_own_lines"])
def test_data_cache_used_correctly_is_not_reported(name, soc):
    # The controls: a clean at the run's start and at every 64-byte boundary
    # inside it (what WriteShortTensor does now) brings every store to GM -- the
    # harness checks dst holds 2 * i there, so a clean that wrote back too little
    # (or a model that dropped cleaned bytes) fails; ENTIRE_DATA_CACHE, given an
    # address in the middle of the run, writes back all three lines it touches;
    # an invalidate between the DMA
    # write and the scalar read makes the read fetch GM again, within a kernel
    # and across kernels (the harness checks the read kernel leaves dst = 2 i);
    # two cores storing into lines of their own both reach GM (dst[16] = 32).
    ascend_sim._run_misuse(name, soc=soc)


# ---------------------------------------------------------------------------
# The order between a core's pipes (issue 28): S, V, MTE2, MTE3 run in parallel
# on hardware; the simulator reports an access that nothing orders after an
# earlier one on another pipe, and overlapping MTE3 writes to GM.
# ---------------------------------------------------------------------------

PIPE_MISUSE = [
    ("pipe_mte2_v", r"pipe hazard \(RAW\): Muls \(instruction #2, PIPE_V\) reads UB bytes \[0, 256\) of "
                    r"TQue<VECIN, 1> #1 that DataCopy\(GM->UB\) \(instruction #1, PIPE_MTE2\) wrote; nothing orders the "
                    r"two: no EnQue/DeQue \(or FreeTensor/AllocTensor\) of the tensor, no SetFlag/WaitFlag"
                    r"<HardEvent::MTE2_V>, no PipeBarrier<PIPE_ALL> between them \(rule: pipe order"),
    ("pipe_v_mte3", r"pipe hazard \(RAW\): DataCopy\(UB->GM\) \(instruction #3, PIPE_MTE3\) reads UB bytes "
                    r"\[256, 512\) of TBuf<VECCALC> #2 that Muls \(instruction #2, PIPE_V\) wrote; nothing orders the "
                    r"two: .*SetFlag/WaitFlag<HardEvent::V_MTE3>"),
    ("pipe_war_mte2", r"pipe hazard \(WAR\): DataCopy\(GM->UB\) \(instruction #4, PIPE_MTE2\) overwrites UB bytes "
                      r"\[0, 128\) of TBuf<VECCALC> #1 that Muls \(instruction #2, PIPE_V\) read; nothing orders the "
                      r"two: .*SetFlag/WaitFlag<HardEvent::V_MTE2>"),
    ("gm_overlap", r"GM write order: DataCopy\(UB->GM\) \(instruction #4, PIPE_MTE3\) writes GM buffer "
                   r"'aclrtMalloc buffer' bytes \[64, 192\), which DataCopy\(UB->GM\) \(instruction #3, PIPE_MTE3\) "
                   r"also wrote, with no PipeBarrier<PIPE_MTE3> \(or PIPE_ALL\) between them: the two DMA writes may "
                   r"land in either order \(rule: overlapping GM writes, PipeBarrier page\)"),
    ("wait_without_set", r"WaitFlag<HardEvent::MTE2_V>\(2\) with no SetFlag<HardEvent::MTE2_V>\(2\) before it: on "
                         r"hardware the pipe waits forever \(rule: flag pairs"),
    # Issue 28, the pipe gaps: overlapping MTE2 writes into the UB, a DMA read of
    # GM the core's MTE3 wrote, a flag left set, an event ID past 7.
    ("ub_overlap", r"pipe hazard \(WAW\): DataCopy\(GM->UB\) \(instruction #2, PIPE_MTE2\) overwrites UB bytes "
                   r"\[64, 192\) of TQue<VECIN, 1> #1 that DataCopy\(GM->UB\) \(instruction #1, PIPE_MTE2\) wrote; no "
                   r"PipeBarrier<PIPE_MTE2> \(or PIPE_ALL\) between them: the two DMA writes may land in either order "
                   r"\(rule: overlapping UB writes, PipeBarrier page"),
    ("gm_read_after_write", r"pipe hazard \(RAW, GM\): DataCopy\(GM->UB\) \(instruction #4, PIPE_MTE2\) reads GM buffer "
                            r"'aclrtMalloc buffer' bytes \[0, 128\), which DataCopy\(UB->GM\) \(instruction #3, "
                            r"PIPE_MTE3\) of this core wrote, and nothing orders the write before the read: no "
                            r"SetFlag/WaitFlag<HardEvent::MTE3_MTE2>, no PipeBarrier<PIPE_ALL> between them"),
    ("flag_left_set", r"flag left set: SetFlag<HardEvent::MTE3_MTE2>\(3\) with no WaitFlag of the same event and ID "
                      r"before the core ended \(rule: flag pairs"),
    ("event_id_out_of_range", r"SetFlag<HardEvent::V_MTE3>\(8\): event ID out of range: Ascend\w+ has event IDs 0-7 "
                              r"\(rule: event IDs, SetFlag-WaitFlag\(ISASI\) page"),
]


@pytest.mark.parametrize("soc", ["Ascend910B", "Ascend310P"])
@pytest.mark.parametrize("name,message", PIPE_MISUSE, ids=[m[0] for m in PIPE_MISUSE])
def test_pipe_order_misuse_is_reported(name, message, soc):
    with pytest.raises(RuntimeError, match=r"kernel " + name + r" \(blockDim 2\): AscendC simulator \(" + soc +
                       r"\w*, core 0 of 2\)") as info:
        ascend_sim._run_misuse(name, soc=soc)
    assert __import__("re").search(message, str(info.value)), str(info.value)


@pytest.mark.parametrize("soc", ["Ascend910B", "Ascend310P"])
@pytest.mark.parametrize("name", ["pipe_mte2_v_ordered", "pipe_v_mte3_ordered", "pipe_war_mte2_ordered",
                                  "gm_overlap_ordered", "pipe_v_chain_ordered", "ub_overlap_ordered",
                                  "gm_read_after_write_ordered"])
def test_pipes_ordered_correctly_are_not_reported(name, soc):
    # The controls: the same kernels with their EnQue/DeQue, flag pair or
    # barrier (PipeBarrier<PIPE_MTE2> between the overlapping copies in,
    # SetFlag/WaitFlag<MTE3_MTE2> between the write of dst and its read back);
    # the harness checks dst holds 2 * src.
    ascend_sim._run_misuse(name, soc=soc)


@pytest.mark.parametrize("soc", ["Ascend910B", "Ascend310P"])
def test_reduce_max_with_index_writes_dst1(soc):
    # ReduceMax page, 约束说明: dst holds the maximum, then its index; without
    # calIndex only the maximum is stored. A kernel keeping the row's sum in
    # stat[1] keeps it with calIndex=false (control) and loses it to the index
    # (99, as the bits of an integer) with calIndex=true.
    ascend_sim._run_misuse("reduce_max_keeps_dst1", soc=soc)
    with pytest.raises(RuntimeError, match=r"kernel reduce_max_index_clobbers: dst\[0\] = 99\.0+, dst\[1\] = 0\.0+ "
                                           r"\(bits 99\), not the max 99 and the sum 4950 \(ReduceMax with calIndex "
                                           r"writes the index into its dst\[1\]"):
        ascend_sim._run_misuse("reduce_max_index_clobbers", soc=soc)


def test_data_copy_pad_with_no_blocks_is_a_nop():
    # DataCopyPad pages, 约束说明 (Atlas A2): a blockCount or blockLen of 0 is a NOP
    # -- neither an error nor a write (the harness checks dst holds 2 * src).
    ascend_sim._run_misuse("data_copy_pad_empty", soc="Ascend910B")


def test_dependent_vector_instructions_need_a_barrier_only_on_310p():
    # NPU arch 2201 (910B): the compiler inserts PipeBarrier<PIPE_V> between
    # dependent vector instructions; the devkit documents no such thing for
    # 2002 (310P), whose kernels write it themselves.
    ascend_sim._run_misuse("pipe_v_chain", soc="Ascend910B")
    with pytest.raises(RuntimeError, match=r"kernel pipe_v_chain \(blockDim 2\): AscendC simulator \(Ascend310P\w*, "
                                           r"core 0 of 2\): pipe hazard \(RAW\): Muls \(instruction #3, PIPE_V\) "
                                           r"reads UB bytes \[0, 256\) of TQue<VECIN, 1> #1 that Adds \(instruction #2, "
                                           r"PIPE_V\) wrote; no PipeBarrier<PIPE_V> \(or PIPE_ALL\) between them, and on "
                                           r"NPU arch 2002 the compiler inserts none \(rule: same-pipe vector order"):
        ascend_sim._run_misuse("pipe_v_chain", soc="Ascend310P")


def test_misuse_control_kernel_runs():
    ascend_sim._run_misuse("clean", soc="Ascend910B")
    ascend_sim._run_misuse("clean", soc="Ascend310P")


@pytest.mark.parametrize("soc", ["Ascend910B", "Ascend310P"])
def test_reading_one_block_of_allocator_padding_is_allowed(soc):
    # aclrtMalloc / torch_npu guarantee round_up(n, 32) + 32 bytes: a whole
    # last block read with DataCopy past a tensor's end stays inside them.
    ascend_sim._run_misuse("gm_read_in_padding", soc=soc)


def test_inverse_square_root_by_sqrt_and_div_is_accurate():
    # The control of "rsqrt_rstd": what the norm kernels do instead of Rsqrt.
    for soc in ("Ascend910B", "Ascend310P"):
        ascend_sim._run_misuse("sqrt_div_rstd", soc=soc)


def test_cast_round_modes_are_per_soc():
    # float -> half with CAST_RINT: fine on Atlas A2, an (empty) assert on Atlas inference.
    ascend_sim._run_misuse("cast_rint_to_half", soc="Ascend910B")
    with pytest.raises(RuntimeError, match=r"Cast: RoundMode::CAST_RINT is not supported for float -> half on "
                                           r"Ascend310P\w* \(rule: Cast round modes per SoC, Cast API page; supported: "
                                           r"CAST_NONE, CAST_ODD\)"):
        ascend_sim._run_misuse("cast_rint_to_half", soc="Ascend310P")


def test_reduce_sum_work_is_needed_only_on_310p():
    # 910B's first-n ReduceSum is one vcadd without the work tensor; 310P writes a partial per repeat.
    ascend_sim._run_misuse("reduce_sum_small_work", soc="Ascend910B")
    with pytest.raises(RuntimeError, match=r"ReduceSum: work tensor \(sharedTmpBuffer\) has 8 elements; reducing 1024 "
                                           r"elements of float on Ascend310P\w* needs at least 16"):
        ascend_sim._run_misuse("reduce_sum_small_work", soc="Ascend310P")


# ---------------------------------------------------------------------------
# Overflow mode: Ascend310P saturates float16 results (inf -> +-max, NaN -> 0)
# ---------------------------------------------------------------------------

def test_310p_saturates_float16_results_910b_keeps_inf_nan():
    # 16 elements: 310P moves whole 32-byte blocks only.
    x = torch.tensor([60000.0, -60000.0, float("nan"), 1.0] * 4, dtype=torch.float16)
    y = torch.tensor([60000.0, -60000.0, 1.0, float("inf")] * 4, dtype=torch.float16)
    inf = float("inf")
    a910 = ascend_sim.run("add", x, y)
    torch.testing.assert_close(a910, torch.tensor([inf, -inf, float("nan"), inf] * 4, dtype=torch.float16),
                               equal_nan=True)
    expected = torch.tensor([65504.0, -65504.0, 0.0, 65504.0] * 4, dtype=torch.float16)
    torch.testing.assert_close(ascend_sim.run("add", x, y, soc="Ascend310P"), expected)
    # Selectable as on hardware (aclrtSetDeviceSatMode): 910B in saturation mode does the same.
    torch.testing.assert_close(ascend_sim.run("add", x, y, sat_mode="saturation"), expected)
    # float32 results are not saturated (CTRL[48] covers half and bfloat16 only).
    f = ascend_sim.run("add", x.float() * 1e34, y.float() * 1e34, soc="Ascend310P")
    assert f[0] == inf and f[1] == -inf and f[2].isnan()


def test_310p_has_no_inf_nan_mode():
    with pytest.raises(RuntimeError, match=r"Ascend310P\w* supports only ACL_RT_OVERFLOW_MODE_SATURATION"):
        ascend_sim.run("add", torch.ones(8), torch.ones(8), soc="Ascend310P", sat_mode="inf_nan")


@pytest.mark.parametrize("soc,sat_mode", [("Ascend310P", None), ("Ascend910B", "saturation"), ("Ascend910B", None)])
def test_gelu_float16_special_values_per_overflow_mode(soc, sat_mode):
    # What the hardware returns, documented in docs/ascend.md: under saturation
    # gelu(+inf) is 65504 (not inf) and the NaN results (gelu(-inf) = -inf * 0, a
    # NaN input) are 0.
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), 1.0] * 4, dtype=torch.float16)
    got = ascend_sim.run("gelu", x, soc=soc, sat_mode=sat_mode)
    g1 = float(torch.nn.functional.gelu(torch.tensor(1.0)))
    if soc == "Ascend310P" or sat_mode == "saturation":
        expected = [65504.0, 0.0, 0.0, g1]
    else:
        expected = [float("inf"), float("nan"), float("nan"), g1]
    torch.testing.assert_close(got, torch.tensor(expected * 4, dtype=torch.float16), equal_nan=True)


def test_data_copy_pad_exists_only_on_910b():
    ascend_sim._run_misuse("data_copy_pad", soc="Ascend910B")
    with pytest.raises(RuntimeError, match=r"DataCopyPad is not available on Ascend310P"):
        ascend_sim._run_misuse("data_copy_pad", soc="Ascend310P")
