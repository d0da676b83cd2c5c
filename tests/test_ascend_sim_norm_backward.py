"""The Ascend NPU path of layer_norm_backward (LayerNormGradCustom) and
fused_add_rms_norm_backward (FusedAddRmsNormGradCustom, RmsNormGradCustom's
kernel with gradResidualOut) on the CPU simulator, against tests/reference.py.

Same approach as test_ascend_sim.py: shapes per path -- one tile, many tiles (a
shrunk UB via `_ub_size`), unaligned tails, more cores than work, many cores
(`_core_num`), rows that do not fit in the UB -- in each dtype on both SoCs
(bfloat16 on Ascend910B only; Ascend310P without DataCopyPad too). The
outputs start as NaN (the binding's Unwritten), so an element never written fails.
Also: weight/bias gradients bit-identical for any core count, rows whose float32
statistics overflow (against float64), layer_norm eps=0 constant rows (NaN, as
the CPU op), the tiling contracts and the aclnn checks.
"""

from __future__ import annotations

import math
import random
import zlib

import pytest
import torch
import torch.nn.functional as F

from op_extension import ascend_sim
from reference import DTYPE_IDS, reference
from test_ascend_sim import (
    KERNEL_DTYPES,
    SOCS,
    ascend_tolerance,
    overflow_params,
    overflow_rows,
    overflow_tolerance,
    params,
    rand,
    supported,
    weight_like,
)
from test_ascend_tiling import SOC_LIMITS, check_rows, dtypes_for, generated_row_shapes



def case_params(cases, socs_at: int):
    return [
        pytest.param(case, dt, soc, id=f"{case[0]}-{DTYPE_IDS[dt]}-{soc}")
        for case in cases
        for dt in KERNEL_DTYPES
        for soc in case[socs_at]
        if supported(dt, soc)
    ]


def generated_cases(seed: int, count: int, with_bias: bool):
    """Random (rows, cols, weight, bias, options) beyond the hand-picked cases: odd
    sizes and block multiples, on both SoCs, sometimes a shrunk UB or core count."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        aligned = rng.random() < 0.5
        cols = rng.choice([16, 32, 48, 64, 144, 512]) if aligned else rng.choice([1, 3, 5, 17, 33, 100, 257, 771])
        rows = rng.randint(1, 40)
        options = rng.choice([{}, {"_core_num": rng.randint(1, 7)}, {"_ub_size": 4096}, {"_ub_size": 2048,
                                                                                          "_core_num": 3}])
        weight, bias = rng.random() < 0.7, with_bias and rng.random() < 0.6
        socs = SOCS
        out.append((f"gen{i}_{rows}x{cols}", (rows, cols), [cols], weight, bias, options, socs))
    return out


# ---------------------------------------------------------------------------
# layer_norm_backward
# ---------------------------------------------------------------------------

# (id, input shape, normalized shape, weight, bias, eps, options, socs)
LAYER_NORM_CASES = [
    ("3x769_weight_bias", (3, 769), [769], True, True, 1e-5, {}, SOCS),
    ("3x769_plain", (3, 769), [769], False, False, 1e-5, {}, SOCS),
    ("hidden_4096_weight_only", (4, 4096), [4096], True, False, 1e-5, {}, SOCS),
    ("bias_only_768", (3, 768), [768], False, True, 1e-6, {}, SOCS),
    ("many_rows_per_tile_70x33", (70, 33), [33], True, True, 1e-5, {}, SOCS),
    ("many_tiles_small_ub", (40, 128), [128], True, True, 1e-5, {"_ub_size": 8192, "_core_num": 2}, SOCS),
    ("many_cores_130x64", (130, 64), [64], True, True, 1e-5, {"_core_num": 7}, SOCS),
    ("row_split_small_ub", (3, 1000), [1000], True, True, 1e-5, {"_ub_size": 8192}, SOCS),
    ("row_split_aligned_plain", (3, 1024), [1024], False, False, 1e-5, {"_ub_size": 8192}, SOCS),
    ("row_split_aligned_bias_only", (2, 1024), [1024], False, True, 1e-5, {"_ub_size": 8192}, SOCS),
    ("row_split_many_cores", (9, 1024), [1024], True, True, 1e-5, {"_ub_size": 8192, "_core_num": 4}, SOCS),
    ("row_split_real_ub_9001", (2, 9001), [9001], True, True, 1e-5, {}, SOCS),
    ("multi_dim_normalized", (2, 4, 6), [4, 6], True, True, 1e-5, {}, SOCS),
    ("more_cores_than_work", (5, 64), [64], True, True, 1e-5, {}, SOCS),
    ("one_column", (6, 1), [1], True, True, 1e-5, {}, SOCS),
]
LAYER_NORM_GENERATED = [c[:5] + (1e-5,) + c[5:] for c in generated_cases(zlib.crc32(b"ln_bwd"), 12, True)]


def layer_norm_check(case, dtype, soc):
    _, shape, normalized, has_weight, has_bias, eps, options, _ = case
    x = rand(*shape, dtype=dtype).requires_grad_()
    w = weight_like(normalized, dtype).requires_grad_() if has_weight else None
    b = rand(*normalized, dtype=dtype, scale=0.5).requires_grad_() if has_bias else None
    dy = rand(*shape, dtype=dtype)
    dx, dw, db = ascend_sim.run_backward("layer_norm", dy, x.detach(), normalized,
                                         None if w is None else w.detach(), None if b is None else b.detach(), eps,
                                         soc=soc, **options)
    _, grads = reference("layer_norm", (x, normalized, w, b, eps), grad_outputs=(dy,))
    assert dx.shape == x.shape and dx.dtype == dtype
    torch.testing.assert_close(dx, grads[0], **ascend_tolerance(dtype, "layer_norm", "backward"))
    for has, got, index in ((has_weight, dw, 2), (has_bias, db, 3)):
        if has:
            torch.testing.assert_close(got, grads[index], **ascend_tolerance(dtype, "row_sum", "backward"))
        else:
            assert got.shape == (0,)


@pytest.mark.parametrize("case,dtype,soc", case_params(LAYER_NORM_CASES, 7))
def test_layer_norm_backward_matches_reference(case, dtype, soc):
    layer_norm_check(case, dtype, soc)


@pytest.mark.parametrize("case,dtype,soc", case_params(LAYER_NORM_GENERATED, 7))
def test_layer_norm_backward_generated_shapes(case, dtype, soc):
    layer_norm_check(case, dtype, soc)


@pytest.mark.parametrize("options", [{}, {"_ub_size": 8192}], ids=["whole_rows", "split_rows"])
def test_layer_norm_backward_large_mean_is_stable(options):
    # Mean 1000, spread 1: against float64 (the float32 reference is itself ~1e-5 off).
    x = torch.randn(4, 1024, dtype=torch.float64) + 1000
    dy, w = torch.randn(4, 1024, dtype=torch.float64), 1 + 0.1 * torch.randn(1024, dtype=torch.float64)
    dx, dw, db = ascend_sim.run_backward("layer_norm", dy.float(), x.float(), [1024], w.float(), w.float(), 1e-5,
                                         **options)
    x64, w64, b64 = (t.clone().requires_grad_() for t in (x, w, w))
    F.layer_norm(x64, [1024], w64, b64, 1e-5).backward(dy)
    torch.testing.assert_close(dx.double(), x64.grad, atol=5e-4, rtol=0)
    torch.testing.assert_close(dw.double(), w64.grad, atol=5e-4, rtol=0)
    torch.testing.assert_close(db.double(), b64.grad, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("layout,dtype,soc", overflow_params())
def test_layer_norm_backward_statistics_overflow_matches_float64(layout, dtype, soc):
    # Rows whose float32 variance (or sum of g * (x - mean)) overflows: rescued by a
    # power-of-two scale as in the forward.
    _, cols, options, _ = layout
    x = overflow_rows(cols, dtype)
    if cols == 2:
        x, cols = torch.tensor([[1e20, 1.0, 1.0], [3e38, -3e38, 1.0]], dtype=dtype), 3
    w = (1 + 0.1 * torch.randn(cols)).to(dtype)
    dy = torch.randn(x.shape).to(dtype)
    dx, dw, db = ascend_sim.run_backward("layer_norm", dy, x, [cols], w, w, 1e-5, soc=soc, **options)
    x64, w64, b64 = x.double().requires_grad_(), w.double().requires_grad_(), w.double().requires_grad_()
    F.layer_norm(x64, [cols], w64, b64, 1e-5).backward(dy.double())
    assert torch.isfinite(dx).all() and torch.isfinite(dw).all()
    # dx against the size of its terms (rstd * |g|); dw, db: O(1) sums.
    rstd = 1 / (x.double().var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    size = rstd * (dy.double().abs() * w64.detach().abs()).amax(-1, keepdim=True)
    tol = overflow_tolerance(dtype)["rtol"] * 8
    assert ((dx.double() - x64.grad).abs() / size).max() <= tol
    torch.testing.assert_close(dw.double(), w64.grad.to(dtype).double(), atol=tol, rtol=tol)
    torch.testing.assert_close(db.double(), b64.grad.to(dtype).double(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("options", [{}, {"_ub_size": 8192}], ids=["whole_rows", "split_rows"])
def test_layer_norm_backward_eps0_constant_row_gives_nan(options, dtype, soc):
    # As the forward: a constant row centres to exact zeros, xhat = 0 * inf = NaN,
    # so every gradient of the row is NaN -- as the CPU op (torch's own backward
    # gives NaN for dx too). An uncorrected mean gave finite +-rstd * ulp values.
    cols = 1008 if options else 112
    constants = torch.randn(32, 1, generator=torch.Generator().manual_seed(11)) * 3
    x = constants.expand(32, cols).contiguous().to(dtype)
    dy, w = torch.randn(32, cols).to(dtype), torch.ones(cols, dtype=dtype)
    dx, dw, db = ascend_sim.run_backward("layer_norm", dy, x, [cols], w, w, 0.0, soc=soc, **options)
    cpu_dx, cpu_dw, _ = torch.ops.custom.layer_norm_backward(dy, x, [cols], w, w, 0.0)
    assert torch.isnan(cpu_dx).all() and torch.isnan(cpu_dw).all()
    if soc == "Ascend310P" and dtype != torch.float32:
        # Saturation mode (310P's only one): a NaN float16 result is stored as 0 (docs/ascend.md).
        assert (dx == 0).all(), dx[:, :4]
        assert (dw == 0).all()
    else:
        assert torch.isnan(dx).all(), dx[:, :4]
        assert torch.isnan(dw).all()
    torch.testing.assert_close(db, dy.float().sum(0).to(dtype),
                               **ascend_tolerance(dtype, "row_sum", "backward"))


# ---------------------------------------------------------------------------
# fused_add_rms_norm_backward
# ---------------------------------------------------------------------------

# (id, input shape, normalized shape, weight, grad_residual_out, eps, options, socs)
FUSED_CASES = [
    ("3x769_weight", (3, 769), [769], True, True, 1e-6, {}, SOCS),
    ("3x769_no_weight_no_grad_residual", (3, 769), [769], False, False, None, {}, SOCS),
    ("hidden_4096_few_rows", (4, 4096), [4096], True, True, 1e-6, {}, SOCS),
    ("no_grad_residual_768", (3, 768), [768], True, False, 1e-5, {}, SOCS),
    ("many_rows_per_tile_70x33", (70, 33), [33], True, True, 1e-6, {}, SOCS),
    ("many_rows_70x64_3_cores", (70, 64), [64], True, True, 1e-6, {"_core_num": 3}, SOCS),
    ("many_tiles_small_ub", (40, 128), [128], True, True, 1e-5, {"_ub_size": 8192, "_core_num": 2}, SOCS),
    ("row_split_small_ub", (3, 1000), [1000], True, True, 1e-6, {"_ub_size": 8192}, SOCS),
    ("row_split_aligned_no_weight", (3, 1024), [1024], False, True, 1e-6, {"_ub_size": 8192}, SOCS),
    ("row_split_many_cores", (9, 1024), [1024], True, True, 1e-6, {"_ub_size": 8192, "_core_num": 4}, SOCS),
    ("row_split_real_ub_9001", (2, 9001), [9001], True, True, 1e-6, {}, SOCS),
    ("multi_dim_normalized", (2, 4, 6), [4, 6], True, True, 1e-5, {}, SOCS),
    ("one_row", (1, 64), [64], False, True, 1e-6, {}, SOCS),
]
FUSED_GENERATED = [c[:5] + (1e-6,) + c[5:] for c in generated_cases(zlib.crc32(b"fused_bwd"), 12, True)]


def fused_expected(dy, gr, z, normalized, w, eps, dtype):
    """(grad_input, grad_weight) in float32 from the rms_norm reference of z, gr added
    before the one rounding to dtype, as the kernel (and the CPU op) do."""
    z32 = z.float().requires_grad_()
    w32 = None if w is None else w.float().requires_grad_()
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    F.rms_norm(z32, normalized, w32, eps).backward(dy.float())
    dx = z32.grad + (0 if gr is None else gr.float())
    return dx.to(dtype), None if w is None else w32.grad.to(dtype)


def fused_check(case, dtype, soc):
    _, shape, normalized, has_weight, has_gr, eps, options, _ = case
    z, dy = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype)
    gr = rand(*shape, dtype=dtype) if has_gr else None
    w = weight_like(normalized, dtype) if has_weight else None
    dx, dw = ascend_sim.run_backward("fused_add_rms_norm", dy, gr, z, normalized, w, eps, soc=soc, **options)
    want_dx, want_dw = fused_expected(dy, gr, z, normalized, w, eps, dtype)
    assert dx.shape == z.shape and dx.dtype == dtype
    torch.testing.assert_close(dx, want_dx, **ascend_tolerance(dtype, "fused_add_rms_norm", "backward"))
    if has_weight:
        torch.testing.assert_close(dw, want_dw, **ascend_tolerance(dtype, "row_sum", "backward"))
    else:
        assert dw.shape == (0,)


@pytest.mark.parametrize("case,dtype,soc", case_params(FUSED_CASES, 7))
def test_fused_add_rms_norm_backward_matches_reference(case, dtype, soc):
    fused_check(case, dtype, soc)


@pytest.mark.parametrize("case,dtype,soc", case_params(FUSED_GENERATED, 7))
def test_fused_add_rms_norm_backward_generated_shapes(case, dtype, soc):
    fused_check(case, dtype, soc)


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("options", [{}, {"_ub_size": 4096}], ids=["whole_rows", "split_rows"])
def test_fused_add_rms_norm_backward_is_rms_norm_backward_plus_grad_residual(options, soc):
    # float32: gradInput is RmsNormGradCustom's, plus gradResidualOut before the one
    # rounding; without gradResidualOut the two ops are the same bits.
    z, dy, gr, w = rand(6, 256), rand(6, 256), rand(6, 256), weight_like([256], torch.float32)
    dx, dw = ascend_sim.run_backward("fused_add_rms_norm", dy, None, z, [256], w, 1e-6, soc=soc, **options)
    rms_dx, rms_dw = ascend_sim.run_backward("rms_norm", dy, z, [256], w, 1e-6, soc=soc, **options)
    assert torch.equal(dx, rms_dx) and torch.equal(dw, rms_dw)
    dx_gr, dw_gr = ascend_sim.run_backward("fused_add_rms_norm", dy, gr, z, [256], w, 1e-6, soc=soc, **options)
    # (the gradResidualOut queue may change the chunk length of split rows, so the
    # chunk sums, hence the last bits, may differ)
    torch.testing.assert_close(dw_gr, rms_dw, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(dx_gr, rms_dx + gr, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("layout,dtype,soc", overflow_params())
def test_fused_add_rms_norm_backward_sum_of_squares_overflow_matches_float64(layout, dtype, soc):
    _, cols, options, _ = layout
    z, w = overflow_rows(cols, dtype), torch.ones(cols, dtype=dtype)
    dy, gr = torch.full_like(z, 2.0), torch.full_like(z, 0.5)
    dx, dw = ascend_sim.run_backward("fused_add_rms_norm", dy, gr, z, [cols], w, 1e-6, soc=soc, **options)
    z64, w64 = z.double().requires_grad_(), w.double().requires_grad_()
    F.rms_norm(z64, [cols], w64, 1e-6).backward(dy.double())
    tol = overflow_tolerance(dtype)
    assert torch.isfinite(dw).all()
    torch.testing.assert_close(dw.double(), w64.grad.to(dtype).double(), **tol)
    size = (dy.double().abs() / torch.linalg.vector_norm(z.double(), dim=-1, keepdim=True)) * math.sqrt(cols) + 0.5
    assert ((dx.double() - (z64.grad + gr.double())).abs() / size).max() <= tol["rtol"] * 4


# ---------------------------------------------------------------------------
# Both: determinism, empty inputs, SoC limits, argument checks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"_ub_size": 4096}], ids=["whole_rows", "split_rows"])
def test_weight_and_bias_grads_independent_of_core_count(options):
    # Each column is summed over the rows in row order: the same bits on 1 core or 48.
    x, dy, gr, w = rand(50, 520), rand(50, 520), rand(50, 520), weight_like([520], torch.float32)
    ln = [ascend_sim.run_backward("layer_norm", dy, x, [520], w, w, 1e-5, _core_num=n, **options) for n in (1, 3, 48)]
    fused = [ascend_sim.run_backward("fused_add_rms_norm", dy, gr, x, [520], w, 1e-6, _core_num=n, **options)
             for n in (1, 5, 48)]
    for results in (ln, fused):
        for other in results[1:]:
            for a, b in zip(results[0], other, strict=True):
                assert torch.equal(a, b)


@pytest.mark.parametrize("soc", SOCS)
def test_no_rows_give_zero_parameter_grads(soc):
    x, w = torch.empty(0, 64), torch.ones(64)
    dx, dw, db = ascend_sim.run_backward("layer_norm", x, x, [64], w, w, 1e-5, soc=soc)
    assert dx.shape == (0, 64) and torch.equal(dw, torch.zeros(64)) and torch.equal(db, torch.zeros(64))
    dx, dw, db = ascend_sim.run_backward("layer_norm", x, x, [64], None, w, 1e-5, soc=soc)
    assert dw.shape == (0,) and torch.equal(db, torch.zeros(64))
    dx, dw = ascend_sim.run_backward("fused_add_rms_norm", x, x, x, [64], w, 1e-6, soc=soc)
    assert dx.shape == (0, 64) and torch.equal(dw, torch.zeros(64))


BAD_INPUT = [
    ("ln_bf16_310p", lambda: ascend_sim.run_backward("layer_norm", torch.ones(2, 16).bfloat16(),
                                                     torch.ones(2, 16).bfloat16(), [16], soc="Ascend310P"),
     r"LayerNormGradCustom: input is bfloat16, which Ascend310P does not support"),
    ("ln_grad_shape", lambda: ascend_sim.run_backward("layer_norm", torch.ones(3, 9), torch.ones(3, 8), [8]),
     r"LayerNormGradCustom: gradOutput has shape \[3, 9\] but input has \[3, 8\]"),
    ("ln_bias_shape", lambda: ascend_sim.run_backward("layer_norm", torch.ones(3, 8), torch.ones(3, 8), [8], None,
                                                      torch.ones(7)),
     r"LayerNormGradCustom: biasOptional has shape \[7\] but normalizedShape \(input's trailing 1 dims\) is \[8\]"),
    ("ln_float64", lambda: ascend_sim.run_backward("layer_norm", torch.ones(3, 8).double(), torch.ones(3, 8).double(),
                                                   [8]),
     r"LayerNormGradCustom: input has dtype float64; supported: float16, float32, bfloat16"),
    ("fused_grad_residual_shape", lambda: ascend_sim.run_backward("fused_add_rms_norm", torch.ones(3, 8),
                                                                  torch.ones(3, 9), torch.ones(3, 8), [8]),
     r"FusedAddRmsNormGradCustom: gradResidualOutOptional has shape \[3, 9\] but residualOut has \[3, 8\]"),
    ("fused_grad_residual_dtype", lambda: ascend_sim.run_backward("fused_add_rms_norm", torch.ones(3, 8),
                                                                  torch.ones(3, 8).half(), torch.ones(3, 8), [8]),
     r"FusedAddRmsNormGradCustom: gradResidualOutOptional has dtype float16 but residualOut has float32"),
    ("fused_weight_shape", lambda: ascend_sim.run_backward("fused_add_rms_norm", torch.ones(3, 8), None,
                                                           torch.ones(3, 8), [8], torch.ones(4)),
     r"FusedAddRmsNormGradCustom: weightOptional has shape \[4\] but normalizedShape \(input's trailing 1 dims\) is \[8\]"),
]


@pytest.mark.parametrize("name,call,message", BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_rejected_naming_the_op(name, call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_non_contiguous_inputs_are_made_contiguous_by_the_binding():
    x, dy = rand(40, 6).t(), rand(40, 6).t()
    w = weight_like([40], torch.float32)
    got = ascend_sim.run_backward("layer_norm", dy, x, [40], w, w, 1e-5)
    want = ascend_sim.run_backward("layer_norm", dy.contiguous(), x.contiguous(), [40], w, w, 1e-5)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


# ---------------------------------------------------------------------------
# Tiling contracts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["layer_norm_backward", "fused_add_rms_norm_backward"])
@pytest.mark.parametrize("soc", SOCS)
def test_row_tilings_contract(op, soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = 32 // (4 if dtype == torch.float32 else 2)
        for rows, cols in generated_row_shapes(seed=zlib.crc32(f"{op}{soc}{dtype}".encode()), count=40):
            (t,) = ascend_sim.tiling(op, [(rows, cols)], dtype, soc=soc, eps=1e-5)
            check_rows(t, rows, cols, dtype, core_num, ub_size, soc)
            repeats = -(-(t["chunkLength"] if t["splitRow"] else cols) // 64)  # ReduceSum: a float per repeat
            assert t["reduceWorkLength"] == -(-2 * repeats // 8) * 8  # ReduceMax: (value, index) pairs
            assert t["_dwUbBytes"] <= ub_size and t["dwChunkCols"] % block_elems == 0


def test_layer_norm_grad_workspace_layout():
    # Every row's statistics have their own 4 floats in the workspace, inside it, and
    # each pass-0 tile writes one whole-block slot of its core.
    for rows, cols, core_num, ub in [(70, 33, 48, 196608), (130, 64, 7, 196608), (5, 1000, 3, 8192),
                                     (1, 8, 48, 196608)]:
        (t,) = ascend_sim.tiling("layer_norm_backward", [(rows, cols)], torch.float32, _core_num=core_num,
                                 _ub_size=ub)
        per, big, slot_rows, pitch, tiles = (int(t[k]) for k in ("rowsPerCore", "bigCoreNum", "statRowsPerSlot",
                                                                 "statPitch", "statTilesPerCore"))
        assert pitch % 8 == 0 and pitch >= 4 * slot_rows
        assert t["_workspaceBytes"] == t["usedCoreNum"] * tiles * pitch * 4
        seen = set()
        for r in range(rows):
            if r < big * (per + 1):
                core, local = divmod(r, per + 1)
            else:
                core, local = big + (r - big * (per + 1)) // per, (r - big * (per + 1)) % per
            index = (core * tiles + local // slot_rows) * pitch + (local % slot_rows) * 4
            assert index + 4 <= t["_workspaceBytes"] / 4 and index not in seen
            seen.add(index)
        blocks = -(-cols // 8)
        used, per_b, big_b = int(t["dwUsedCoreNum"]), int(t["dwBlocksPerCore"]), int(t["dwBigCoreNum"])
        counts = [per_b + (1 if c < big_b else 0) for c in range(used)]
        assert sum(counts) == blocks and max(counts) - min(counts) <= 1 and min(counts) >= 1
    # Without a weight no statistics are kept; without weight and bias there is no pass 1.
    (t,) = ascend_sim.tiling("layer_norm_backward", [(9, 64)], torch.float32, hasWeight=0)
    assert t["_workspaceBytes"] == 0 and t["dwUsedCoreNum"] > 0
    (t,) = ascend_sim.tiling("layer_norm_backward", [(9, 64)], torch.float32, hasWeight=0, hasBias=0)
    assert t["dwUsedCoreNum"] == 0


UB_LIMIT_RUNS = [
    ("layer_norm_backward", lambda soc, ub: ascend_sim.run_backward(
        "layer_norm", torch.randn(9, 256), torch.randn(9, 256), [256], torch.ones(256), torch.ones(256), 1e-5, soc=soc,
        _ub_size=ub)),
    ("fused_add_rms_norm_backward", lambda soc, ub: ascend_sim.run_backward(
        "fused_add_rms_norm", torch.randn(9, 256), torch.randn(9, 256), torch.randn(9, 256), [256], torch.ones(256),
        1e-6, soc=soc, _ub_size=ub)),
]


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("ub_size", [2048, 4096, 8192])
@pytest.mark.parametrize("name,call", UB_LIMIT_RUNS, ids=[r[0] for r in UB_LIMIT_RUNS])
def test_small_ub_tilings_run(name, call, soc, ub_size):
    for out in call(soc, ub_size):
        assert torch.isfinite(out).all()
