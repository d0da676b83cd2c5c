"""Rows that are not whole 32-byte blocks on Ascend310P (issue 12): each way the
row kernels move them without DataCopyPad (kernel_common.h, RowCopier), forced by
a shape the tiling is asserted to give, for every row op forward and backward,
against tests/reference.py. Outputs start as NaN (the binding's Unwritten), so an
element nobody wrote fails, and the simulator's race check fails a core that
overwrites another core's output with a different value.

The paths:
  short rows        rows under one block: stored element by element, one core;
  whole rows        rows of one block or more: whole blocks, then the last block
                    staged through one UB block (several rows per tile, several cores);
  split, tail < 1B  rows in chunks whose last chunk is under one block: moved back
                    to end on the row's end (it rewrites a few elements, same values);
  split, tail >= 1B the same with a longer last chunk;
  weight columns    weight/bias gradients over several cores, cols not whole blocks;
  softmax slabs     dim not last: inner under one block, one unaligned slab, and a
                    last slab under one block moved back, on one core and across cores.
"""

from __future__ import annotations

import pytest
import torch

from op_extension import ascend_sim
from reference import DTYPE_IDS, reference
from test_ascend_sim import ascend_tolerance, rand, weight_like
from test_ascend_sim_glu_softmax_grad import softmax_backward_reference, softmax_inputs
from test_ascend_sim_norm_backward import fused_expected

SOC = "Ascend310P"
DTYPES = (torch.float32, torch.float16)  # no bfloat16 on 310P


def block_elems(dtype: torch.dtype) -> int:
    return 32 // torch.empty((), dtype=dtype).element_size()


def row_tiling(op: str, shape, dtype, options) -> dict:
    return ascend_sim.tiling(op, [shape], dtype, soc=SOC, **options)[0]


# (id, rows, cols per dtype {f32, f16}, options, what the tiling must show)
def _short(t, cols, b):
    return cols < b and t["usedCoreNum"] == 1


def _whole_many_cores(t, cols, b):
    return cols > b and cols % b != 0 and t["splitRow"] == 0 and t["usedCoreNum"] > 1 and t["rowsPerTile"] > 1


def _split_tail(short: bool):
    def check(t, cols, b):
        tail = cols % int(t["chunkLength"]) if t["splitRow"] else 0
        return t["splitRow"] == 1 and cols % b != 0 and (0 < tail < b if short else tail > b)
    return check


ROW_CASES = [
    ("short_rows", 33, {torch.float32: 7, torch.float16: 15}, {}, _short),
    ("one_column", 6, {torch.float32: 1, torch.float16: 1}, {}, _short),
    ("whole_rows_many_cores", 200, {torch.float32: 33, torch.float16: 35}, {}, _whole_many_cores),
    ("split_tail_under_a_block", 2, "split_short", {"_ub_size": 8192}, _split_tail(short=True)),
    ("split_tail_over_a_block", 2, "split_long", {"_ub_size": 8192}, _split_tail(short=False)),
]


def case_cols(case, dtype, ops) -> int:
    """The case's row length: fixed, or for the split cases the first one from 801 on
    whose chunks end as the case needs under every tiling in `ops` (the ops' UB
    plans differ, so their chunk lengths do)."""
    _, rows, cols_for, options, path = case
    if isinstance(cols_for, dict):
        return cols_for[dtype]
    for cols in range(801, 40000):
        if all(path(as_rows(row_tiling(op, (rows, cols, 1) if op.startswith("softmax") else (rows, cols), dtype,
                                       options)), cols, block_elems(dtype)) for op in ops):
            return cols
    raise AssertionError(f"no row length gives {case[0]} for {ops}")


def as_rows(t: dict) -> dict:
    """A softmax rows-mode tiling under the row tilings' field names."""
    return dict(t, splitRow=t["split"]) if "split" in t else t


def row_params():
    return [pytest.param(case, dt, id=f"{case[0]}-{DTYPE_IDS[dt]}") for case in ROW_CASES for dt in DTYPES]


@pytest.mark.parametrize("case,dtype", row_params())
def test_rms_norm_forward_and_backward(case, dtype):
    name, rows, _, options, path = case
    cols = case_cols(case, dtype, ("rms_norm", "rms_norm_backward"))
    assert path(row_tiling("rms_norm", (rows, cols), dtype, options), cols, block_elems(dtype)), name
    assert path(row_tiling("rms_norm_backward", (rows, cols), dtype, options), cols, block_elems(dtype)), name
    x, dy = rand(rows, cols, dtype=dtype).requires_grad_(), rand(rows, cols, dtype=dtype)
    w = weight_like([cols], dtype).requires_grad_()
    (expected,), grads = reference("rms_norm", (x, [cols], w, 1e-6), grad_outputs=(dy,))
    out = ascend_sim.run("rms_norm", x.detach(), [cols], w.detach(), 1e-6, soc=SOC, **options)
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "rms_norm"))
    dx, dw = ascend_sim.run_backward("rms_norm", dy, x.detach(), [cols], w.detach(), 1e-6, soc=SOC, **options)
    torch.testing.assert_close(dx, grads[0], **ascend_tolerance(dtype, "rms_norm", "backward"))
    torch.testing.assert_close(dw, grads[2], **ascend_tolerance(dtype, "row_sum", "backward"))


@pytest.mark.parametrize("case,dtype", row_params())
def test_layer_norm_forward_and_backward(case, dtype):
    name, rows, _, options, path = case
    cols = case_cols(case, dtype, ("layer_norm", "layer_norm_backward"))
    assert path(row_tiling("layer_norm", (rows, cols), dtype, options), cols, block_elems(dtype)), name
    assert path(row_tiling("layer_norm_backward", (rows, cols), dtype, options), cols, block_elems(dtype)), name
    x, dy = rand(rows, cols, dtype=dtype).requires_grad_(), rand(rows, cols, dtype=dtype)
    w = weight_like([cols], dtype).requires_grad_()
    b = (0.1 * rand(cols)).to(dtype).requires_grad_()
    (expected,), grads = reference("layer_norm", (x, [cols], w, b, 1e-5), grad_outputs=(dy,))
    out = ascend_sim.run("layer_norm", x.detach(), [cols], w.detach(), b.detach(), 1e-5, soc=SOC, **options)
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "layer_norm"))
    dx, dw, db = ascend_sim.run_backward("layer_norm", dy, x.detach(), [cols], w.detach(), b.detach(), 1e-5,
                                         soc=SOC, **options)
    torch.testing.assert_close(dx, grads[0], **ascend_tolerance(dtype, "layer_norm", "backward"))
    torch.testing.assert_close(dw, grads[2], **ascend_tolerance(dtype, "row_sum", "backward"))
    torch.testing.assert_close(db, grads[3], **ascend_tolerance(dtype, "row_sum", "backward"))


@pytest.mark.parametrize("case,dtype", row_params())
def test_fused_add_rms_norm_forward_and_backward(case, dtype):
    name, rows, _, options, path = case
    cols = case_cols(case, dtype, ("fused_add_rms_norm", "fused_add_rms_norm_backward"))
    assert path(row_tiling("fused_add_rms_norm", (rows, cols), dtype, options), cols, block_elems(dtype)), name
    assert path(row_tiling("fused_add_rms_norm_backward", (rows, cols), dtype, options), cols,
                block_elems(dtype)), name
    x, r = rand(rows, cols, dtype=dtype), rand(rows, cols, dtype=dtype)
    w = weight_like([cols], dtype)
    expected, residual = reference("fused_add_rms_norm", (x, r, [cols], w, 1e-6))[0]
    out, residual_out = ascend_sim.run("fused_add_rms_norm", x, r, [cols], w, 1e-6, soc=SOC, **options)
    # residualOut is x + r rounded once: exact. Its split rows' last chunk is
    # written after the pass, moved back (fused_add_rms_norm_custom.cpp).
    assert torch.equal(residual_out, (x.float() + r.float()).to(dtype))
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "fused_add_rms_norm"))
    dy, gr = rand(rows, cols, dtype=dtype), rand(rows, cols, dtype=dtype)
    dx, dw = ascend_sim.run_backward("fused_add_rms_norm", dy, gr, residual_out, [cols], w, 1e-6, soc=SOC,
                                     **options)
    want_dx, want_dw = fused_expected(dy, gr, residual_out, [cols], w, 1e-6, dtype)
    torch.testing.assert_close(dx, want_dx, **ascend_tolerance(dtype, "fused_add_rms_norm", "backward"))
    torch.testing.assert_close(dw, want_dw, **ascend_tolerance(dtype, "row_sum", "backward"))


@pytest.mark.parametrize("case,dtype", row_params())
def test_softmax_last_dim_forward_and_backward(case, dtype):
    name, rows, _, options, path = case
    cols = case_cols(case, dtype, ("softmax", "softmax_backward"))
    for op in ("softmax", "softmax_backward"):
        assert path(as_rows(row_tiling(op, (rows, cols, 1), dtype, options)), cols, block_elems(dtype)), name
    x = rand(rows, cols, dtype=dtype, scale=3)
    (expected,), _ = reference("softmax", (x, -1))
    torch.testing.assert_close(ascend_sim.run("softmax", x, -1, soc=SOC, **options), expected,
                               **ascend_tolerance(dtype, "softmax"))
    dy, y = softmax_inputs((rows, cols), -1, dtype)
    torch.testing.assert_close(ascend_sim.run_backward("softmax", dy, y, -1, soc=SOC, **options),
                               softmax_backward_reference(dy, y, -1), **ascend_tolerance(dtype, "softmax", "backward"))


def test_weight_gradients_over_several_cores_with_unaligned_columns():
    # 100 float32 columns: 12 whole blocks over 8 cores, the last core's columns
    # [88, 100) include the partial block (ColumnUnits) and end with a staged block.
    (t,) = ascend_sim.tiling("layer_norm_backward", [(40, 100)], torch.float32, soc=SOC)
    assert t["dwUsedCoreNum"] > 1 and t["tailMode"] == 1
    units = int(t["dwBlocksPerCore"]) * int(t["dwUsedCoreNum"]) + int(t["dwBigCoreNum"])
    assert units == 100 // 8
    x, dy = rand(40, 100).requires_grad_(), rand(40, 100)
    w, b = weight_like([100], torch.float32).requires_grad_(), rand(100).requires_grad_()
    _, grads = reference("layer_norm", (x, [100], w, b, 1e-5), grad_outputs=(dy,))
    _, dw, db = ascend_sim.run_backward("layer_norm", dy, x.detach(), [100], w.detach(), b.detach(), 1e-5, soc=SOC)
    torch.testing.assert_close(dw, grads[2], **ascend_tolerance(torch.float32, "row_sum", "backward"))
    torch.testing.assert_close(db, grads[3], **ascend_tolerance(torch.float32, "row_sum", "backward"))
    # The same bits as on 910B (DataCopyPad) and for any core count: the column
    # sums run over the rows in order whatever moves them.
    _, dw910, db910 = ascend_sim.run_backward("layer_norm", dy, x.detach(), [100], w.detach(), b.detach(), 1e-5)
    _, dw1, db1 = ascend_sim.run_backward("layer_norm", dy, x.detach(), [100], w.detach(), b.detach(), 1e-5,
                                          soc=SOC, _core_num=1)
    assert torch.equal(dw, dw910) and torch.equal(db, db910) and torch.equal(dw, dw1) and torch.equal(db, db1)


# (id, [outer, dim, inner], options, what the tiling must show)
SLAB_CASES = [
    ("inner_under_a_block", (4, 5, 3), {}, lambda t, inner, b: inner < b and t["usedCoreNum"] == 1),
    ("one_unaligned_slab", (2, 3, 20), {}, lambda t, inner, b: t["innerTiles"] == 1 and inner % b != 0),
    ("last_slab_moved_back_one_core", (1, 5, 100), {"_ub_size": 2048},
     lambda t, inner, b: t["innerTiles"] > 1 and 0 < inner % t["innerTile"] < b and t["usedCoreNum"] == 1),
    ("last_slab_moved_back_across_cores", (1, 3, 94), {"_ub_size": 8192},
     lambda t, inner, b: t["innerTiles"] > 1 and 0 < inner % t["innerTile"] < b and t["usedCoreNum"] > 1),
    ("four_dims", (2, 3, 4, 5), {}, None),
]


@pytest.mark.parametrize("case", SLAB_CASES, ids=[c[0] for c in SLAB_CASES])
def test_softmax_over_a_middle_dim_float32(case):
    # float32: the slab shapes above are chosen for 8-element blocks.
    name, shape, options, path = case
    dim = 1 if len(shape) == 3 else 2
    outer, size = 1, shape[dim]
    for s in shape[:dim]:
        outer *= s
    inner = 1
    for s in shape[dim + 1:]:
        inner *= s
    (t,) = ascend_sim.tiling("softmax", [(outer, size, inner)], torch.float32, soc=SOC, **options)
    assert t["columns"] == 1 and t["tailMode"] == 1
    if path is not None:
        assert path(t, inner, 8), (name, t)
        (tg,) = ascend_sim.tiling("softmax_backward", [(outer, size, inner)], torch.float32, soc=SOC, **options)
        assert path(tg, inner, 8), (name, tg)
    x = rand(*shape, scale=3)
    (expected,), _ = reference("softmax", (x, dim))
    torch.testing.assert_close(ascend_sim.run("softmax", x, dim, soc=SOC, **options), expected,
                               **ascend_tolerance(torch.float32, "softmax"))
    dy, y = softmax_inputs(shape, dim, torch.float32)
    torch.testing.assert_close(ascend_sim.run_backward("softmax", dy, y, dim, soc=SOC, **options),
                               softmax_backward_reference(dy, y, dim),
                               **ascend_tolerance(torch.float32, "softmax", "backward"))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
def test_310p_and_910b_agree_bit_for_bit_on_unaligned_rows(op):
    # float32, where neither SoC rounds differently: whole blocks plus a staged
    # last block compute exactly what DataCopyPad's rows do.
    x = rand(70, 33)
    w = weight_like([33], torch.float32)
    args = {"rms_norm": (x, [33], w, 1e-6), "layer_norm": (x, [33], w, None, 1e-5), "softmax": (x, -1)}[op]
    assert torch.equal(ascend_sim.run(op, *args, soc=SOC), ascend_sim.run(op, *args, soc="Ascend910B"))
