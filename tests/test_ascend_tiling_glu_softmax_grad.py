"""Host tilings of the Ascend swiglu_backward, geglu_backward and softmax_backward
kernels (SwiGluGradCustom, GeGluGradCustom, SoftmaxGradCustom), over many
generated shapes, against the contracts their headers document -- with the
checks of test_ascend_tiling.py (elementwise split, row split) and of
test_ascend_tiling_part2.py (softmax slabs). Tilings at small UB sizes also run
on the simulator, which checks the kernels' real buffer allocations.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from op_extension import ascend_sim
from test_ascend_tiling import (BLOCK, DTYPE_BYTES, SOC_LIMITS, SOCS, check_elementwise, check_rows, dtypes_for,
                                generated_lengths, generated_row_shapes)
from test_ascend_tiling_part2 import generated_softmax_columns, softmax_as_rows

GLU_GRADS = [("swiglu_backward", {}), ("geglu_backward", {"approximate": "none"}),
             ("geglu_backward", {"approximate": "tanh"})]
GLU_IDS = ["swiglu", "geglu_erf", "geglu_tanh"]


def glu_grad_ub_bytes_per_element(op: str, attrs: dict, dtype: torch.dtype) -> int:
    """The UB plan of glu_tiling.h's GluGradUbBytesPerElement, restated: five
    double-buffered queues (dy, gate, up in; gradGate, gradUp out) and float
    scratch rows -- SiLU 2, GELU 4, plus dy/gate/up in float for 16-bit types."""
    e = DTYPE_BYTES[dtype]
    rows = (2 if op == "swiglu_backward" else 4) + (0 if dtype == torch.float32 else 3)
    return 5 * 2 * e + 4 * rows


@pytest.mark.parametrize("op,attrs", GLU_GRADS, ids=GLU_IDS)
@pytest.mark.parametrize("soc", SOCS)
def test_glu_grad_tilings_follow_the_elementwise_contract(op, attrs, soc):
    core_num, ub_size = SOC_LIMITS[soc]
    activation = {"swiglu": 0, "none": 1, "tanh": 2}[attrs.get("approximate", "swiglu")]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        per_elem = glu_grad_ub_bytes_per_element(op, attrs, dtype)
        for total in generated_lengths(seed=zlib.crc32(f"{op}{attrs}{soc}{dtype}".encode()), count=60):
            (t,) = ascend_sim.tiling(op, [(total,)], dtype, soc=soc, **attrs)
            check_elementwise(t, total, dtype, soc, core_num, ub_size)
            assert t["activation"] == activation
            assert t["_ubBytes"] == per_elem * t["tileLength"]


@pytest.mark.parametrize("op,attrs", GLU_GRADS, ids=GLU_IDS)
@pytest.mark.parametrize("core_num,ub_size", [(1, 1024), (3, 2048), (7, 4096), (48, 8192)])
def test_glu_grad_tilings_on_shrunk_socs(op, attrs, core_num, ub_size):
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for total in generated_lengths(seed=core_num * 7 + ub_size, count=30):
            (t,) = ascend_sim.tiling(op, [(total,)], dtype, _core_num=core_num, _ub_size=ub_size, **attrs)
            check_elementwise(t, total, dtype, "Ascend910B", core_num, ub_size)


@pytest.mark.parametrize("soc", SOCS)
def test_softmax_grad_rows_tiling_contract(soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for rows, cols in generated_row_shapes(seed=zlib.crc32(f"softmax_backward{soc}{dtype}".encode()), count=60):
            shape = (rows, cols, 1)
            (t,) = ascend_sim.tiling("softmax_backward", [shape], dtype, soc=soc)
            assert t["columns"] == 0
            check_rows(softmax_as_rows(t), rows, cols, dtype, core_num, ub_size, soc)
            # ReduceSum's work tensor: one float per 256-byte repeat, whole blocks.
            reduced = t["chunkLength"] if t["split"] else cols
            assert t["reduceWorkLength"] >= max(1, -(-reduced // 64)) and t["reduceWorkLength"] % 8 == 0


@pytest.mark.parametrize("soc", SOCS)
def test_softmax_grad_columns_tiling_contract(soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for outer, dim, inner in generated_softmax_columns(seed=zlib.crc32(f"grad{soc}{dtype}".encode()), count=80):
            (t,) = ascend_sim.tiling("softmax_backward", [(outer, dim, inner)], dtype, soc=soc)
            assert t["columns"] == 1 and t["dimSize"] == dim and t["inner"] == inner
            assert t["tailMode"] == (1 if soc == "Ascend310P" else 0)
            if soc == "Ascend310P" and inner < block_elems:
                assert t["usedCoreNum"] == 1  # slab rows under one block are stored element by element
            width, tiles = int(t["innerTile"]), int(t["innerTiles"])
            assert width > 0 and width % block_elems == 0
            assert (tiles - 1) * width < inner <= tiles * width
            used, per, big = int(t["usedCoreNum"]), int(t["unitsPerCore"]), int(t["bigCoreNum"])
            counts = [per + (1 if c < big else 0) for c in range(used)]
            assert 1 <= used <= core_num and min(counts) >= 1 and max(counts) - min(counts) <= 1
            assert sum(counts) == outer * tiles
            rows = int(t["chunkLength"])
            if t["split"] == 0:
                assert rows == dim <= 4095
            else:
                assert 1 <= rows < dim and rows <= 4095
            assert t["_ubBytes"] <= ub_size
            assert t["stridedCopyPad"] == (1 if soc == "Ascend910B" else 0)


def test_softmax_grad_uses_the_forward_modes():
    # Same [outer, dim, inner] -> same mode as the forward kernel; the backward's
    # buffers are larger (three queues), so its tiles are never larger.
    for shape in [(8, 4096, 1), (2, 100_000, 1), (4, 7, 33), (1, 7, 4096), (2, 5000, 16)]:
        (f,) = ascend_sim.tiling("softmax", [shape], torch.float32)
        (b,) = ascend_sim.tiling("softmax_backward", [shape], torch.float32)
        assert f["columns"] == b["columns"]
        if b["columns"]:
            assert b["innerTile"] * b["chunkLength"] <= f["innerTile"] * f["chunkLength"]
        else:
            assert b["split"] >= f["split"]


UB_LIMIT_RUNS = [
    ("swiglu_backward", lambda soc, ub: ascend_sim.run_backward("swiglu", torch.randn(1001), torch.randn(1001),
                                                                torch.randn(1001), soc=soc, _ub_size=ub)),
    ("geglu_backward", lambda soc, ub: ascend_sim.run_backward("geglu", torch.randn(1001), torch.randn(1001),
                                                               torch.randn(1001), "none", soc=soc, _ub_size=ub)),
    ("geglu_backward_half", lambda soc, ub: ascend_sim.run_backward("geglu", *(torch.randn(1001).half(),) * 3,
                                                                    "tanh", soc=soc, _ub_size=ub)),
    ("softmax_backward_rows", lambda soc, ub: ascend_sim.run_backward(
        "softmax", torch.randn(9, 512), torch.softmax(torch.randn(9, 512), -1), -1, soc=soc, _ub_size=ub)),
    ("softmax_backward_rows_half", lambda soc, ub: ascend_sim.run_backward(
        "softmax", torch.randn(9, 512).half(), torch.softmax(torch.randn(9, 512), -1).half(), -1, soc=soc,
        _ub_size=ub)),
    ("softmax_backward_columns", lambda soc, ub: ascend_sim.run_backward(
        "softmax", torch.randn(3, 200, 24), torch.softmax(torch.randn(3, 200, 24), 1), 1, soc=soc, _ub_size=ub)),
]


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("ub_size", [2048, 4096, 8192])
@pytest.mark.parametrize("name,call", UB_LIMIT_RUNS, ids=[r[0] for r in UB_LIMIT_RUNS])
def test_small_ub_tilings_run(name, call, soc, ub_size):
    out = call(soc, ub_size)
    for o in out if isinstance(out, tuple) else (out,):
        assert torch.isfinite(o).all()
