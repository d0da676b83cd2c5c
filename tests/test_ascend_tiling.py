"""Host tiling functions of the Ascend kernels, over many generated shapes.

Each TilingData is read back through the simulator module's tiling inspection
(ascend_sim.tiling) and checked against the contract its header documents:
every element covered exactly once, cores balanced to within one aligned unit
(so no core is idle while another has two extra tiles), 32-byte alignment of
tiles and core boundaries, the Unified Buffer never exceeded, tails handled.
A few tilings at the UB limit are also run on the simulator, which checks the
kernel's real buffer allocations against the UB size.
"""

from __future__ import annotations

import random
import zlib

import pytest
import torch

from op_extension import ascend_sim

SOCS = ascend_sim.SOCS
BLOCK = 32
DTYPE_BYTES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}
SOC_LIMITS = {"Ascend910B": (48, 196608), "Ascend310P": (8, 262144)}


def dtypes_for(soc):
    return [torch.float32, torch.float16] + ([torch.bfloat16] if soc == "Ascend910B" else [])


def generated_lengths(seed: int, count: int) -> list[int]:
    """Lengths around the interesting edges (block, tile and core counts) and at random."""
    rng = random.Random(seed)
    edges = [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097,
             48 * 256, 48 * 256 + 1, 65536 * 3 + 11]
    return edges + [rng.randint(1, 3_000_000) for _ in range(count)]


# ---------------------------------------------------------------------------
# Elementwise split (add; the other elementwise ops share it)
# ---------------------------------------------------------------------------


def core_ranges(t: dict, block_elems: int) -> list[tuple[int, int]]:
    """[start, end) of every core, by the formula in elementwise_tiling.h."""
    ranges = []
    per, big, total = int(t["blocksPerCore"]), int(t["bigCoreNum"]), int(t["totalLength"])
    for c in range(int(t["usedCoreNum"])):
        start = (c * per + min(c, big)) * block_elems
        end = min(total, start + (per + (1 if c < big else 0)) * block_elems)
        ranges.append((start, end))
    return ranges


def check_elementwise(t: dict, total: int, dtype: torch.dtype, soc: str, core_num: int, ub_size: int):
    block_elems = BLOCK // DTYPE_BYTES[dtype]
    assert t["totalLength"] == total
    used = int(t["usedCoreNum"])
    assert 1 <= used <= core_num
    if total < block_elems:
        assert used == 1  # one core writes a tensor below one block (element-wise on 310P)
    ranges = core_ranges(t, block_elems)
    # Every element exactly once, cores in order, no gaps, no empty core.
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    for (s0, e0), (s1, e1) in zip(ranges, ranges[1:]):
        assert e0 == s1
    assert all(e > s for s, e in ranges)
    # Core boundaries on 32-byte blocks; only the last range may end mid-block.
    assert all(s % block_elems == 0 for s, _ in ranges)
    assert all(e % block_elems == 0 for _, e in ranges[:-1])
    # Balanced: block counts differ by at most one, so tile counts differ by at most one.
    blocks = [-(-(e - s) // block_elems) for s, e in ranges]
    assert max(blocks) - min(blocks) <= 1
    tile = int(t["tileLength"])
    assert tile > 0 and tile % block_elems == 0
    tiles = [-(-(e - s) // tile) for s, e in ranges]
    assert max(tiles) - min(tiles) <= 1, (tiles, blocks)
    # A tile is never longer than the largest core range needs.
    assert tile <= max(blocks) * block_elems
    # Tail handling: DataCopyPad where the SoC has it, else the overlapping last block.
    assert t["tailMode"] == (0 if soc == "Ascend910B" else 1)
    assert t["_ubBytes"] <= ub_size


@pytest.mark.parametrize("soc", SOCS)
def test_add_tiling_contract(soc):
    core_num, ub_size = SOC_LIMITS[soc]
    block_bytes_min_per_core = 1024  # kMinBytesPerCore
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for total in generated_lengths(seed=zlib.crc32(f"{soc}{dtype}".encode()), count=150):
            (t,) = ascend_sim.tiling("add", [(total,)], dtype, soc=soc, alpha=0.5)
            check_elementwise(t, total, dtype, soc, core_num, ub_size)
            assert t["alpha"] == 0.5
            # Small tensors use few cores: at least 1 KiB per core (but never zero cores).
            blocks = -(-total // block_elems)
            assert t["usedCoreNum"] == max(1, min(core_num, blocks, blocks // (block_bytes_min_per_core // BLOCK)))


@pytest.mark.parametrize("core_num,ub_size", [(1, 1024), (3, 2048), (7, 4096), (48, 8192), (2, 196608)])
def test_add_tiling_contract_on_shrunk_socs(core_num, ub_size):
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for total in generated_lengths(seed=core_num * 7 + ub_size, count=40):
            (t,) = ascend_sim.tiling("add", [(total,)], dtype, _core_num=core_num, _ub_size=ub_size)
            check_elementwise(t, total, dtype, "Ascend910B", core_num, ub_size)


def test_add_tile_fills_the_ub():
    # Large enough per core: the tile is the largest block multiple the UB holds.
    for dtype, per_elem in ((torch.float32, 24), (torch.float16, 12), (torch.bfloat16, 20)):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        (t,) = ascend_sim.tiling("add", [(48 * 100_000,)], dtype)
        assert t["tileLength"] == 196608 // per_elem // block_elems * block_elems
        assert t["_ubBytes"] <= 196608 < t["_ubBytes"] + per_elem * block_elems


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("ub_size", [1024, 1056, 3008])
def test_add_at_the_ub_limit_runs(soc, ub_size):
    # The tiling fills a tiny UB; the simulator checks the kernel's InitBuffer calls fit.
    x, y = torch.randn(3001), torch.randn(3001)
    (t,) = ascend_sim.tiling("add", [(3001,)], torch.float32, soc=soc, _ub_size=ub_size)
    assert ub_size - t["_ubBytes"] < 24 * 8
    out = ascend_sim.run("add", x, y, soc=soc, _ub_size=ub_size)
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("op", ["gelu", "gelu_backward"])
@pytest.mark.parametrize("soc", SOCS)
def test_gelu_tilings_follow_the_elementwise_contract(op, soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for total in generated_lengths(seed=zlib.crc32(f"{op}{soc}{dtype}".encode()), count=60):
            (t,) = ascend_sim.tiling(op, [(total,)], dtype, soc=soc, approximate="tanh")
            check_elementwise(t, total, dtype, soc, core_num, ub_size)
            assert t["approximate"] == 1


# ---------------------------------------------------------------------------
# Row split (rms_norm, rms_norm_backward pass 0)
# ---------------------------------------------------------------------------


def generated_row_shapes(seed: int, count: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    shapes = [(1, 1), (1, 7), (3, 769), (4, 4096), (1, 9001), (70, 33), (48, 64), (49, 64), (1000, 8), (5, 65536),
              (2, 100_000), (4095 * 2 + 1, 8), (10_000, 1)]
    shapes += [(rng.randint(1, 5000), rng.randint(1, 20000)) for _ in range(count)]
    return shapes


def check_rows(t: dict, rows: int, cols: int, dtype, core_num: int, ub_size: int, soc: str = "Ascend910B"):
    block_elems = BLOCK // DTYPE_BYTES[dtype]
    assert (t["rows"], t["cols"]) == (rows, cols)
    assert t["rowStride"] == -(-cols // block_elems) * block_elems
    used, per, big = int(t["usedCoreNum"]), int(t["rowsPerCore"]), int(t["bigCoreNum"])
    assert 1 <= used <= core_num and big < used
    # Without DataCopyPad (310P) runs that are not whole blocks move as whole blocks
    # (tailMode 1), and rows under one block, stored element by element, get one core.
    assert t["tailMode"] == (1 if soc.startswith("Ascend310P") else 0)
    if soc.startswith("Ascend310P") and cols < block_elems:
        assert used == 1
    counts = [per + (1 if c < big else 0) for c in range(used)]
    assert sum(counts) == rows and min(counts) >= 1 and max(counts) - min(counts) <= 1
    assert t["_ubBytes"] <= ub_size
    if t["splitRow"] == 0:
        assert 1 <= t["rowsPerTile"] <= min(4095, max(counts))
        tiles = [-(-c // int(t["rowsPerTile"])) for c in counts]
        assert max(tiles) - min(tiles) <= 1
    else:
        # Split rows: chunks of whole blocks, at most one row (the chunk layout needs
        # fewer bytes per element than whole rows, so a row may be a single chunk).
        chunk = int(t["chunkLength"])
        assert chunk % block_elems == 0 and 0 < chunk <= t["rowStride"]


@pytest.mark.parametrize("op", ["rms_norm", "rms_norm_backward"])
@pytest.mark.parametrize("soc", SOCS)
def test_row_tilings_contract(op, soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for rows, cols in generated_row_shapes(seed=zlib.crc32(f"{op}{soc}{dtype}".encode()), count=60):
            (t,) = ascend_sim.tiling(op, [(rows, cols)], dtype, soc=soc, eps=1e-5)
            check_rows(t, rows, cols, dtype, core_num, ub_size, soc)
            assert t["eps"] == pytest.approx(1e-5) and t["invCols"] == pytest.approx(1 / cols)


def test_rows_split_only_when_one_row_does_not_fit():
    # float32 RMSNorm keeps ~24 bytes per element of a row in the UB (192 KiB): 8000
    # columns fit, 9000 do not.
    (fits,) = ascend_sim.tiling("rms_norm", [(4, 8000)], torch.float32)
    (split,) = ascend_sim.tiling("rms_norm", [(4, 9000)], torch.float32)
    assert fits["splitRow"] == 0 and split["splitRow"] == 1
    # A smaller UB splits smaller rows; a bigger one does not.
    (small,) = ascend_sim.tiling("rms_norm", [(4, 1000)], torch.float32, _ub_size=8192)
    assert small["splitRow"] == 1 and small["_ubBytes"] <= 8192


def test_rms_norm_grad_workspace_layout():
    # Every row's rstd has its own float in the workspace, inside it, and each
    # pass-0 tile writes one whole-block slot of its core.
    for rows, cols, core_num, ub in [(70, 33, 48, 196608), (130, 64, 7, 196608), (5, 1000, 3, 8192), (1, 8, 48, 196608)]:
        (t,) = ascend_sim.tiling("rms_norm_backward", [(rows, cols)], torch.float32, _core_num=core_num, _ub_size=ub)
        per, big, slot_rows, pitch, tiles = (int(t[k]) for k in
                                             ("rowsPerCore", "bigCoreNum", "statRowsPerSlot", "statPitch",
                                              "statTilesPerCore"))
        assert pitch % 8 == 0 and pitch >= slot_rows
        assert t["_workspaceBytes"] == t["usedCoreNum"] * tiles * pitch * 4
        seen = set()
        for r in range(rows):
            if r < big * (per + 1):
                core, local = divmod(r, per + 1)
            else:
                core, local = big + (r - big * (per + 1)) // per, (r - big * (per + 1)) % per
            assert local // slot_rows < tiles
            index = (core * tiles + local // slot_rows) * pitch + local % slot_rows
            assert index < t["_workspaceBytes"] / 4 and index not in seen
            seen.add(index)
        # Pass 1: gradWeight's column blocks over cores, balanced.
        blocks = -(-cols // 8)
        used, per_b, big_b = int(t["dwUsedCoreNum"]), int(t["dwBlocksPerCore"]), int(t["dwBigCoreNum"])
        counts = [per_b + (1 if c < big_b else 0) for c in range(used)]
        assert sum(counts) == blocks and max(counts) - min(counts) <= 1 and min(counts) >= 1
        assert t["dwChunkCols"] % 8 == 0 and t["_dwUbBytes"] <= ub


# ---------------------------------------------------------------------------
# add_backward: grouped dims and unit split
# ---------------------------------------------------------------------------


def generated_reductions(seed: int, count: int):
    rng = random.Random(seed)
    out = [((3, 769), (3, 769)), ((3, 769), (769,)), ((5, 7), (5, 1)), ((5, 7), (1, 7)), ((2, 3, 5), (1, 3, 1)),
           ((2, 5, 4, 6, 3), (5, 1, 6, 1)), ((4, 5), ()), ((1000, 4096), (4096,)), ((64, 3000), (64, 1))]
    for _ in range(count):
        ndim = rng.randint(1, 5)
        grad = tuple(rng.choice([1, 2, 3, 7, 16, 33, 100]) for _ in range(ndim))
        keep = rng.randint(0, ndim)
        size = tuple(d if rng.random() < 0.5 else 1 for d in grad[ndim - keep:])
        out.append((grad, size))
    return out


@pytest.mark.parametrize("soc", SOCS)
def test_add_backward_tiling_contract(soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for grad, size in generated_reductions(seed=zlib.crc32(f"{soc}{dtype}".encode()), count=120):
            (t,) = ascend_sim.tiling("add_backward", [grad, size], dtype, soc=soc, alpha=2.0)
            groups = [int(t[f"groupSize{g}"]) for g in range(int(t["groupNum"]))]
            numel = 1
            for d in grad:
                numel *= d
            assert torch.Size(groups).numel() == numel
            mask = int(t["reducedMask"])
            # Groups alternate between kept and summed.
            assert all(((mask >> g) & 1) != ((mask >> (g + 1)) & 1) for g in range(len(groups) - 1))
            kept = torch.Size([n for g, n in enumerate(groups) if not (mask >> g) & 1]).numel()
            out_numel = torch.Size(size).numel()
            assert kept == out_numel
            if t["mode"] == 0:
                assert t["outRows"] * t["outCols"] == out_numel and t["colBlocks"] == -(-t["outCols"] // block_elems)
                units = t["outRows"] * t["colBlocks"]
            else:
                assert t["outRows"] == out_numel
                assert t["sumCount"] * t["runLength"] == numel // max(out_numel, 1)
                units = -(-t["outRows"] // block_elems)
                assert 0 < t["outTile"] and t["reduceWorkLength"] % 8 == 0
            used, per, big = int(t["usedCoreNum"]), int(t["unitsPerCore"]), int(t["bigCoreNum"])
            counts = [per + (1 if c < big else 0) for c in range(used)]
            assert 1 <= used <= core_num and sum(counts) == units and max(counts) - min(counts) <= 1
            assert t["chunkLength"] % block_elems == 0 and t["_ubBytes"] <= ub_size
            assert t["alpha"] == 2.0


# ---------------------------------------------------------------------------
# Tilings at the UB limit run on the simulator (which checks every InitBuffer)
# ---------------------------------------------------------------------------

UB_LIMIT_RUNS = [
    ("gelu", lambda soc, ub: ascend_sim.run("gelu", torch.randn(1001), "none", soc=soc, _ub_size=ub)),
    ("gelu_backward", lambda soc, ub: ascend_sim.run_backward("gelu", torch.randn(1001), torch.randn(1001), "tanh",
                                                              soc=soc, _ub_size=ub)),
    ("rms_norm", lambda soc, ub: ascend_sim.run("rms_norm", torch.randn(9, 256), [256], torch.ones(256), 1e-6,
                                                soc=soc, _ub_size=ub)),
    ("rms_norm_backward", lambda soc, ub: ascend_sim.run_backward("rms_norm", torch.randn(9, 256), torch.randn(9, 256),
                                                                  [256], torch.ones(256), 1e-6, soc=soc, _ub_size=ub)),
    ("add_backward", lambda soc, ub: ascend_sim.run_backward("add", torch.randn(9, 256), [9, 1], 1.0, soc=soc,
                                                             _ub_size=ub)),
]


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("ub_size", [2048, 4096, 8192])
@pytest.mark.parametrize("name,call", UB_LIMIT_RUNS, ids=[r[0] for r in UB_LIMIT_RUNS])
def test_small_ub_tilings_run(name, call, soc, ub_size):
    out = call(soc, ub_size)
    out = out if isinstance(out, torch.Tensor) else out[0]
    assert torch.isfinite(out).all()
