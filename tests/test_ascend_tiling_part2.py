"""Host tilings of the Ascend fused_add_rms_norm, layer_norm, softmax, swiglu and
geglu kernels, over many generated shapes, against the contracts their headers
document -- with the checks of test_ascend_tiling.py (elementwise split, row
split) and, for softmax's columns mode, its own: every (outer, inner tile) slab
covered exactly once, cores balanced to within one slab, slab rows whole blocks,
the UB never exceeded. Tilings at small UB sizes also run on the simulator,
which checks the kernels' real buffer allocations.
"""

from __future__ import annotations

import random
import zlib

import pytest
import torch

from op_extension import ascend_sim
from test_ascend_tiling import (BLOCK, DTYPE_BYTES, SOC_LIMITS, SOCS, check_elementwise, check_rows, dtypes_for,
                                generated_lengths, generated_row_shapes)


@pytest.mark.parametrize("op,attrs", [("swiglu", {}), ("geglu", {"approximate": "none"}),
                                      ("geglu", {"approximate": "tanh"})], ids=["swiglu", "geglu_erf", "geglu_tanh"])
@pytest.mark.parametrize("soc", SOCS)
def test_glu_tilings_follow_the_elementwise_contract(op, attrs, soc):
    core_num, ub_size = SOC_LIMITS[soc]
    activation = {"swiglu": 0, "none": 1, "tanh": 2}[attrs.get("approximate", "swiglu")]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for total in generated_lengths(seed=zlib.crc32(f"{op}{attrs}{soc}{dtype}".encode()), count=60):
            (t,) = ascend_sim.tiling(op, [(total,)], dtype, soc=soc, **attrs)
            check_elementwise(t, total, dtype, soc, core_num, ub_size)
            assert t["activation"] == activation


def softmax_as_rows(t: dict) -> dict:
    """A rows-mode softmax TilingData under the field names check_rows reads."""
    return dict(t, rows=t["outer"], cols=t["dimSize"], rowsPerCore=t["unitsPerCore"], splitRow=t["split"])


@pytest.mark.parametrize("op", ["fused_add_rms_norm", "layer_norm", "softmax"])
@pytest.mark.parametrize("soc", SOCS)
def test_row_tilings_contract(op, soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for rows, cols in generated_row_shapes(seed=zlib.crc32(f"{op}{soc}{dtype}".encode()), count=60):
            shape = (rows, cols, 1) if op == "softmax" else (rows, cols)
            (t,) = ascend_sim.tiling(op, [shape], dtype, soc=soc, eps=1e-5)
            if op == "softmax":
                assert t["columns"] == 0
                check_rows(softmax_as_rows(t), rows, cols, dtype, core_num, ub_size, soc)
            else:
                check_rows(t, rows, cols, dtype, core_num, ub_size, soc)
                assert t["eps"] == pytest.approx(1e-5) and t["invCols"] == pytest.approx(1 / cols)


def test_layer_norm_and_fused_tilings_record_their_optional_inputs():
    (t,) = ascend_sim.tiling("layer_norm", [(4, 64)], torch.float32, hasWeight=0, hasBias=1)
    assert (t["hasWeight"], t["hasBias"]) == (0, 1)
    (t,) = ascend_sim.tiling("fused_add_rms_norm", [(4, 64)], torch.float32, hasWeight=0)
    assert t["hasWeight"] == 0


def generated_softmax_columns(seed: int, count: int) -> list[tuple[int, int, int]]:
    """[outer, dimSize, inner] with inner > 1: edges (tiny, wide, dims past the UB
    or past 4095 rows) and random shapes."""
    rng = random.Random(seed)
    shapes = [(1, 1, 2), (4, 7, 33), (6, 5, 64), (1, 7, 4096), (1, 4096, 8), (2, 5000, 16), (3, 100_000, 8),
              (1000, 3, 8), (1, 2, 1_000_000), (7, 1, 9)]
    shapes += [(rng.randint(1, 300), rng.randint(1, 6000), rng.randint(2, 3000)) for _ in range(count)]
    return shapes


@pytest.mark.parametrize("soc", SOCS)
def test_softmax_columns_tiling_contract(soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for outer, dim, inner in generated_softmax_columns(seed=zlib.crc32(f"{soc}{dtype}".encode()), count=80):
            (t,) = ascend_sim.tiling("softmax", [(outer, dim, inner)], dtype, soc=soc)
            assert t["columns"] == 1 and t["dimSize"] == dim and t["inner"] == inner
            assert t["tailMode"] == (1 if soc == "Ascend310P" else 0)
            width, tiles = int(t["innerTile"]), int(t["innerTiles"])
            # Slab rows are whole blocks and the inner tiles cover inner exactly.
            assert width > 0 and width % block_elems == 0
            assert (tiles - 1) * width < inner <= tiles * width
            # Slabs over cores: each exactly once, balanced to within one.
            used, per, big = int(t["usedCoreNum"]), int(t["unitsPerCore"]), int(t["bigCoreNum"])
            counts = [per + (1 if c < big else 0) for c in range(used)]
            assert 1 <= used <= core_num and min(counts) >= 1 and max(counts) - min(counts) <= 1
            assert sum(counts) == outer * tiles
            # dim in one slab, or in chunks of at most 4095 rows (DataCopyPad's blockCount).
            rows = int(t["chunkLength"])
            if t["split"] == 0:
                assert rows == dim <= 4095
            else:
                assert 1 <= rows < dim and rows <= 4095
            assert t["_ubBytes"] <= ub_size
            assert t["stridedCopyPad"] == (1 if soc == "Ascend910B" else 0)


def test_softmax_columns_spread_narrow_problems_over_cores():
    # One outer index, a wide inner: many slabs, so many cores (each >= 1 KiB).
    (t,) = ascend_sim.tiling("softmax", [(1, 7, 4096)], torch.float32)
    assert t["usedCoreNum"] > 32


# Tilings at the UB limit run on the simulator (which checks every InitBuffer).
UB_LIMIT_RUNS = [
    ("swiglu", lambda soc, ub: ascend_sim.run("swiglu", torch.randn(1001), torch.randn(1001), soc=soc, _ub_size=ub)),
    ("geglu", lambda soc, ub: ascend_sim.run("geglu", torch.randn(1001), torch.randn(1001), "none", soc=soc,
                                             _ub_size=ub)),
    ("fused_add_rms_norm", lambda soc, ub: ascend_sim.run("fused_add_rms_norm", torch.randn(9, 256),
                                                          torch.randn(9, 256), [256], torch.ones(256), 1e-6, soc=soc,
                                                          _ub_size=ub)),
    ("layer_norm", lambda soc, ub: ascend_sim.run("layer_norm", torch.randn(9, 256), [256], torch.ones(256),
                                                  torch.zeros(256), 1e-5, soc=soc, _ub_size=ub)),
    ("softmax_rows", lambda soc, ub: ascend_sim.run("softmax", torch.randn(9, 512), -1, soc=soc, _ub_size=ub)),
    ("softmax_columns", lambda soc, ub: ascend_sim.run("softmax", torch.randn(3, 200, 24), 1, soc=soc, _ub_size=ub)),
]


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("ub_size", [2048, 4096, 8192])
@pytest.mark.parametrize("name,call", UB_LIMIT_RUNS, ids=[r[0] for r in UB_LIMIT_RUNS])
def test_small_ub_tilings_run(name, call, soc, ub_size):
    out = call(soc, ub_size)
    out = out if isinstance(out, torch.Tensor) else out[0]
    assert torch.isfinite(out).all()
