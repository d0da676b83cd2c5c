"""The Ascend NPU path of fused_add_rms_norm, layer_norm, softmax, swiglu and
geglu (forward kernels) on the CPU simulator, against tests/reference.py.

Same approach as test_ascend_sim.py (whose helpers this file reuses): shapes
chosen per path -- one tile, many tiles (a shrunk UB via `_ub_size`), tails that
are not 32-byte aligned, more cores than work, rows that do not fit in the UB --
in each dtype on both SoCs (bfloat16 on Ascend910B only; Ascend310P, which has no
DataCopyPad, moves rows that are not whole 32-byte blocks as whole blocks).
"""

from __future__ import annotations

import pytest
import torch

from op_extension import ascend_sim
from reference import DTYPE_IDS, reference
from test_ascend_sim import KERNEL_DTYPES, SOCS, ascend_tolerance, params, rand, supported, weight_like



def case_params(cases, socs_at: int):
    """(case, dtype, soc) for every dtype and every SoC listed at case[socs_at]."""
    return [
        pytest.param(case, dt, soc, id=f"{case[0]}-{DTYPE_IDS[dt]}-{soc}")
        for case in cases
        for dt in KERNEL_DTYPES
        for soc in case[socs_at]
        if supported(dt, soc)
    ]


# ---------------------------------------------------------------------------
# swiglu, geglu: elementwise over same-shape gate/up
# ---------------------------------------------------------------------------

# (id, shape, simulator options)
GLU_CASES = [
    ("single_tile_3x769", (3, 769), {}),
    ("many_tiles_small_ub", (5, 1000), {"_ub_size": 4096}),
    ("unaligned_tail_3_cores", (1025,), {"_ub_size": 4096, "_core_num": 3}),
    ("more_cores_than_work_17", (17,), {}),
    ("hidden_4096", (2, 4096), {}),
]


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("case", GLU_CASES, ids=[c[0] for c in GLU_CASES])
def test_swiglu_matches_reference(case, dtype, soc):
    _, shape, options = case
    gate, up = rand(*shape, dtype=dtype, scale=3), rand(*shape, dtype=dtype)
    out = ascend_sim.run("swiglu", gate, up, soc=soc, **options)
    (expected,), _ = reference("swiglu", (gate, up))
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "swiglu"))


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("case", GLU_CASES, ids=[c[0] for c in GLU_CASES])
def test_geglu_matches_reference(case, approximate, dtype, soc):
    _, shape, options = case
    gate, up = rand(*shape, dtype=dtype, scale=3), rand(*shape, dtype=dtype)
    out = ascend_sim.run("geglu", gate, up, approximate, soc=soc, **options)
    (expected,), _ = reference("geglu", (gate, up, approximate))
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "geglu"))


def test_glu_extreme_gates():
    # exp(-g) overflows for very negative g: silu -> -0, not NaN; gelu's formulas stay finite.
    gate = torch.tensor([-200.0, -90.0, -30.0, -1e-30, 0.0, 1e-30, 30.0, 90.0] + [0.5] * 8)
    up = torch.full_like(gate, 2.0)
    torch.testing.assert_close(ascend_sim.run("swiglu", gate, up), torch.nn.functional.silu(gate) * up)
    for approximate in ("none", "tanh"):
        expected = torch.nn.functional.gelu(gate, approximate=approximate) * up
        torch.testing.assert_close(ascend_sim.run("geglu", gate, up, approximate), expected, atol=1e-6, rtol=1e-6)


def test_glu_empty():
    assert ascend_sim.run("swiglu", torch.empty(0, 8), torch.empty(0, 8)).shape == (0, 8)


def test_glu_non_contiguous_made_contiguous_by_the_binding():
    gate, up = rand(33, 9).t(), rand(9, 66)[:, ::2]
    torch.testing.assert_close(ascend_sim.run("swiglu", gate, up), torch.nn.functional.silu(gate) * up)


# ---------------------------------------------------------------------------
# fused_add_rms_norm
# ---------------------------------------------------------------------------

# (id, input shape, normalized shape, weight, eps, options, socs). Every case on
# both SoCs: Ascend310P (no DataCopyPad) moves rows that are not whole 32-byte
# blocks as whole blocks (the kernels' RowCopier, kernel_common.h).
NORM_CASES = [
    ("3x769_weight", (3, 769), [769], True, 1e-6, {}, SOCS),
    ("3x769_no_weight", (3, 769), [769], False, None, {}, SOCS),
    ("hidden_4096_few_rows", (4, 4096), [4096], True, 1e-6, {}, SOCS),
    ("many_rows_per_tile_70x33", (70, 33), [33], True, 1e-6, {}, SOCS),
    ("many_rows_70x64_3_cores", (70, 64), [64], True, 1e-6, {"_core_num": 3}, SOCS),
    ("many_tiles_small_ub", (40, 128), [128], True, 1e-5, {"_ub_size": 8192, "_core_num": 2}, SOCS),
    ("row_split_small_ub", (3, 1000), [1000], True, 1e-6, {"_ub_size": 8192}, SOCS),
    ("row_split_aligned_no_weight", (3, 1024), [1024], False, 1e-6, {"_ub_size": 8192}, SOCS),
    ("row_split_real_ub_9001", (2, 9001), [9001], True, 1e-6, {}, SOCS),
    ("multi_dim_normalized", (2, 4, 6), [4, 6], True, 1e-5, {}, SOCS),
    ("one_row", (1, 64), [64], False, 1e-6, {}, SOCS),
]


@pytest.mark.parametrize("case,dtype,soc", case_params(NORM_CASES, 6))
def test_fused_add_rms_norm_matches_reference(case, dtype, soc):
    _, shape, normalized, has_weight, eps, options, _ = case
    x, r = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype)
    w = weight_like(normalized, dtype) if has_weight else None
    out, residual_out = ascend_sim.run("fused_add_rms_norm", x, r, normalized, w, eps, soc=soc, **options)
    expected, expected_residual = reference("fused_add_rms_norm", (x, r, normalized, w, eps))[0]
    # residual_out is one float addition rounded once: exactly the reference's.
    assert torch.equal(residual_out, expected_residual)
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "fused_add_rms_norm"))


@pytest.mark.parametrize("soc", SOCS)
def test_fused_add_rms_norm_is_rms_norm_of_the_stored_sum(soc):
    # The norm reads residual_out as stored (rounded to float16), not the float sum.
    x, r = rand(6, 256, dtype=torch.float16, scale=4), rand(6, 256, dtype=torch.float16, scale=4)
    w = weight_like([256], torch.float16)
    out, residual_out = ascend_sim.run("fused_add_rms_norm", x, r, [256], w, 1e-6, soc=soc, _ub_size=4096)
    assert torch.equal(out, ascend_sim.run("rms_norm", residual_out, [256], w, 1e-6, soc=soc))


# ---------------------------------------------------------------------------
# layer_norm
# ---------------------------------------------------------------------------

# (id, input shape, normalized shape, weight, bias, eps, options, socs)
LAYER_NORM_CASES = [
    ("3x769_weight_bias", (3, 769), [769], True, True, 1e-5, {}, SOCS),
    ("3x769_plain", (3, 769), [769], False, False, 1e-5, {}, SOCS),
    ("hidden_4096_weight_only", (4, 4096), [4096], True, False, 1e-5, {}, SOCS),
    ("bias_only_768", (3, 768), [768], False, True, 1e-6, {}, SOCS),
    ("many_rows_per_tile_70x33", (70, 33), [33], True, True, 1e-5, {}, SOCS),
    ("many_tiles_small_ub", (40, 128), [128], True, True, 1e-5, {"_ub_size": 8192, "_core_num": 2}, SOCS),
    ("row_split_small_ub", (3, 1000), [1000], True, True, 1e-5, {"_ub_size": 8192}, SOCS),
    ("row_split_aligned_plain", (3, 1024), [1024], False, False, 1e-5, {"_ub_size": 8192}, SOCS),
    ("row_split_aligned_bias_only", (2, 1024), [1024], False, True, 1e-5, {"_ub_size": 8192}, SOCS),
    ("row_split_real_ub_9001", (2, 9001), [9001], True, True, 1e-5, {}, SOCS),
    ("multi_dim_normalized", (2, 4, 6), [4, 6], True, True, 1e-5, {}, SOCS),
    ("more_cores_than_work", (5, 64), [64], True, True, 1e-5, {}, SOCS),
]


@pytest.mark.parametrize("case,dtype,soc", case_params(LAYER_NORM_CASES, 7))
def test_layer_norm_matches_reference(case, dtype, soc):
    _, shape, normalized, has_weight, has_bias, eps, options, _ = case
    x = rand(*shape, dtype=dtype)
    w = weight_like(normalized, dtype) if has_weight else None
    b = rand(*normalized, dtype=dtype, scale=0.5) if has_bias else None
    out = ascend_sim.run("layer_norm", x, normalized, w, b, eps, soc=soc, **options)
    (expected,), _ = reference("layer_norm", (x, normalized, w, b, eps))
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "layer_norm"))


@pytest.mark.parametrize("options", [{}, {"_ub_size": 8192}], ids=["whole_rows", "split_rows"])
def test_layer_norm_large_mean_is_stable(options):
    # Mean 1000, spread 1: a one-pass E[x^2] - mean^2 variance would lose most
    # of its bits in float32; the kernel's centred two-pass variance does not.
    x = torch.randn(4, 1024, dtype=torch.float64) + 1000
    out = ascend_sim.run("layer_norm", x.float(), [1024], None, None, 1e-5, **options)
    exact = torch.nn.functional.layer_norm(x, [1024], eps=1e-5)
    torch.testing.assert_close(out.double(), exact, atol=2e-4, rtol=0)


# ---------------------------------------------------------------------------
# softmax: rows mode (last dim) and columns mode (any other dim)
# ---------------------------------------------------------------------------

# (id, shape, dim, options, socs)
SOFTMAX_CASES = [
    ("last_dim_3x769", (3, 769), -1, {}, SOCS),
    ("last_dim_hidden_4096", (4, 4096), 1, {}, SOCS),
    ("last_dim_many_rows_per_tile", (70, 64), -1, {"_core_num": 3}, SOCS),
    ("last_dim_many_tiles_small_ub", (40, 128), -1, {"_ub_size": 4096, "_core_num": 2}, SOCS),
    ("last_dim_split_small_ub", (5, 1000), -1, {"_ub_size": 4096}, SOCS),
    ("last_dim_split_aligned", (3, 1024), -1, {"_ub_size": 4096}, SOCS),
    ("last_dim_split_real_ub", (2, 30001), -1, {}, SOCS),
    ("middle_dim_unaligned_inner", (4, 7, 33), 1, {}, SOCS),
    ("middle_dim_aligned_inner", (3, 16, 32), 1, {}, SOCS),
    ("first_dim", (6, 5, 64), 0, {}, SOCS),
    ("middle_dim_wide_inner_many_cores", (1, 7, 4096), 1, {}, SOCS),
    ("middle_dim_many_slabs_small_ub", (3, 20, 96), -2, {"_ub_size": 2048, "_core_num": 2}, SOCS),
    ("middle_dim_split_small_ub", (2, 300, 40), 1, {"_ub_size": 4096}, SOCS),
    ("middle_dim_split_aligned", (2, 300, 32), 1, {"_ub_size": 4096}, SOCS),
    ("4d_dim_2", (2, 3, 4, 5), 2, {}, SOCS),
    ("more_cores_than_work", (1, 9), -1, {}, SOCS),
]


@pytest.mark.parametrize("case,dtype,soc", case_params(SOFTMAX_CASES, 4))
def test_softmax_matches_reference(case, dtype, soc):
    _, shape, dim, options, _ = case
    x = rand(*shape, dtype=dtype, scale=3)
    out = ascend_sim.run("softmax", x, dim, soc=soc, **options)
    (expected,), _ = reference("softmax", (x, dim))
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "softmax"))


@pytest.mark.parametrize("dim,options", [(-1, {}), (-1, {"_ub_size": 4096}), (0, {}), (0, {"_ub_size": 2048})],
                         ids=["rows", "rows_split", "columns", "columns_split"])
def test_softmax_minus_inf_masks(dim, options):
    # A causal-style mask: -inf entries get exactly 0; a fully masked row (or
    # column) is NaN, as torch.softmax.
    x = rand(64, 64, scale=2)
    mask = torch.ones(64, 64, dtype=torch.bool).triu(1)
    x = x.masked_fill(mask if dim == -1 else mask.t(), float("-inf"))
    if dim == -1:
        x[5] = float("-inf")
    else:
        x[:, 5] = float("-inf")
    out = ascend_sim.run("softmax", x, dim, **options)
    expected = torch.softmax(x, dim)
    torch.testing.assert_close(out, expected, equal_nan=True)
    assert torch.equal(out == 0, expected == 0)
    assert out.isnan().sum() == 64


@pytest.mark.parametrize("soc", ["Ascend910B", "Ascend310P"])
@pytest.mark.parametrize("cols", [320, 336, 1000, 4096])  # 310P: whole 32-byte rows
def test_softmax_rows_reduce_max_work_is_large_enough(soc, cols):
    # Issue 12: ReduceMax's work tensor was sized like ReduceSum's; from 320 floats
    # ReduceMax's (value, index) pairs overran it (the simulator now refuses that).
    x = rand(3, cols, scale=3)
    torch.testing.assert_close(ascend_sim.run("softmax", x, -1, soc=soc), torch.softmax(x, -1))
    (t,) = ascend_sim.tiling("softmax", [(3, cols, 1)], torch.float32, soc=soc)
    assert t["reduceWorkLength"] >= 2 * (cols // 64) and t["reduceWorkLength"] % 8 == 0


@pytest.mark.parametrize("dim", [-1, 0], ids=["rows", "columns"])
def test_softmax_float16_masks_under_saturation(dim):
    # Under saturation (Ascend310P's only mode) a 16-bit NaN result becomes 0. The
    # rows path writes fully masked rows as NaN bits (torch's answer); the columns
    # path does not, so on 310P a fully masked column is 0 (docs/ascend.md).
    x = rand(64, 64, scale=2).half()
    if dim == -1:
        x[5] = float("-inf")
    else:
        x[:, 5] = float("-inf")
    expected = torch.softmax(x.float(), dim).half()
    for soc, sat_mode in [("Ascend310P", None), ("Ascend910B", "saturation")]:
        out = ascend_sim.run("softmax", x, dim, soc=soc, sat_mode=sat_mode)
        if dim == 0:
            expected = expected.nan_to_num(0.0)
        torch.testing.assert_close(out, expected, equal_nan=True, **ascend_tolerance(torch.float16, "softmax"))
        assert out.isnan().sum() == (64 if dim == -1 else 0)


def test_softmax_zero_dim_and_empty():
    x = torch.tensor(2.5)
    assert torch.equal(ascend_sim.run("softmax", x, 0), torch.tensor(1.0))
    assert ascend_sim.run("softmax", torch.empty(3, 0, 4), 1).shape == (3, 0, 4)


def test_softmax_non_contiguous_made_contiguous_by_the_binding():
    x = rand(40, 9).t()
    torch.testing.assert_close(ascend_sim.run("softmax", x, 0), torch.softmax(x, 0))


# ---------------------------------------------------------------------------
# Bad input: rejected by the aclnn entry point, naming the op
# ---------------------------------------------------------------------------

BAD_INPUT = [
    ("softmax_dim", lambda: ascend_sim.run("softmax", torch.ones(3, 8), 2),
     r"SoftmaxCustom: dim 2 is out of range for input \[3, 8\] \(expected \[-2, 1\]\)"),
    ("softmax_float64", lambda: ascend_sim.run("softmax", torch.ones(3, 8, dtype=torch.float64), 1),
     r"SoftmaxCustom: input has dtype float64; supported: float16, float32, bfloat16"),
    ("layer_norm_bias_shape", lambda: ascend_sim.run("layer_norm", torch.ones(3, 8), [8], None, torch.ones(7)),
     r"LayerNormCustom: biasOptional has shape \[7\] but normalizedShape \(input's trailing 1 dims\) is \[8\]"),
    ("layer_norm_out_of_range_shape", lambda: ascend_sim.run("layer_norm", torch.ones(8), [2, 8]),
     r"LayerNormCustom: normalizedShape has 2 dims, more than input \[8\]"),
    ("fused_residual_shape", lambda: ascend_sim.run("fused_add_rms_norm", torch.ones(3, 8), torch.ones(3, 9), [8]),
     r"FusedAddRmsNormCustom: residual has shape \[3, 9\] but input has \[3, 8\]"),
    ("fused_normalized_shape", lambda: ascend_sim.run("fused_add_rms_norm", torch.ones(3, 8), torch.ones(3, 8), [7],
                                                      torch.ones(7)),
     r"FusedAddRmsNormCustom: weightOptional has shape \[7\] but normalizedShape \(input's trailing 1 dims\) is \[8\]"),
    ("fused_weight_dtype", lambda: ascend_sim.run("fused_add_rms_norm", torch.ones(3, 8), torch.ones(3, 8), [8],
                                                  torch.ones(8).half()),
     r"FusedAddRmsNormCustom: weightOptional has dtype float16 but input has float32"),
    ("swiglu_shapes", lambda: ascend_sim.run("swiglu", torch.ones(3, 4), torch.ones(3, 5)),
     r"SwiGluCustom: up has shape \[3, 5\] but gate has \[3, 4\]"),
    ("swiglu_dtypes", lambda: ascend_sim.run("swiglu", torch.ones(3, 4), torch.ones(3, 4).half()),
     r"SwiGluCustom: up has dtype float16 but gate has float32"),
    ("swiglu_float64", lambda: ascend_sim.run("swiglu", torch.ones(8, dtype=torch.float64),
                                              torch.ones(8, dtype=torch.float64)),
     r"SwiGluCustom: gate has dtype float64; supported: float16, float32, bfloat16"),
    ("geglu_approximate", lambda: ascend_sim.run("geglu", torch.ones(8), torch.ones(8), "fast"),
     r"GeGluCustom: approximate must be 'none' or 'tanh', got 'fast'"),
    ("geglu_bf16_310p", lambda: ascend_sim.run("geglu", torch.ones(16).bfloat16(), torch.ones(16).bfloat16(),
                                               soc="Ascend310P"),
     r"GeGluCustom: gate is bfloat16, which Ascend310P does not support"),
]


@pytest.mark.parametrize("name,call,message", BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_rejected_naming_the_op(name, call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# ---------------------------------------------------------------------------
# Odd sizes on both SoCs (issue 12): on Ascend310P (no DataCopyPad) an unaligned
# end is the last whole block recomputed, and a tensor below one block is read
# as one block from the allocator's padding and written element by element.
# Outputs start as NaN (ascend_sim allocates them so), so any element a kernel
# leaves unwritten fails the comparison.
# ---------------------------------------------------------------------------

ODD_SIZES = (1, 3, 7, 9, 15, 17, 33, 1023)

# (op, extra arguments); the backward runs for all but add (add_backward: add_grad).
ELEMENTWISE_OPS = [("add", (0.5,)), ("gelu", ("none",)), ("gelu", ("tanh",)), ("swiglu", ()),
                   ("geglu", ("none",)), ("geglu", ("tanh",))]


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.parametrize("op,extra", ELEMENTWISE_OPS, ids=["add", "gelu_erf", "gelu_tanh", "swiglu", "geglu_erf",
                                                          "geglu_tanh"])
def test_elementwise_odd_sizes_match_reference(op, extra, n, dtype, soc):
    a = rand(n, dtype=dtype, scale=3).requires_grad_()
    b = rand(n, dtype=dtype).requires_grad_()
    inputs = (a,) if op == "gelu" else (a, b)
    out = ascend_sim.run(op, *(t.detach() for t in inputs), *extra, soc=soc)
    dy = rand(n, dtype=dtype)
    (expected,), grads = reference(op, (*inputs, *extra), grad_outputs=None if op == "add" else (dy,))
    assert out.shape == (n,) and out.dtype == dtype
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, op))
    if op == "add":
        return
    got = ascend_sim.run_backward(op, dy, *(t.detach() for t in inputs), *extra, soc=soc)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(inputs)
    for i, g in enumerate(got):
        w = grads[i]
        torch.testing.assert_close(g, w, **ascend_tolerance(dtype, op, "backward"), msg=lambda m: f"grad {i}: {m}")
