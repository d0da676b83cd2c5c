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
    if t["tailMode"] == 1 and total % block_elems:
        assert total >= block_elems
    assert t["_ubBytes"] <= ub_size


@pytest.mark.parametrize("soc", SOCS)
def test_add_tiling_contract(soc):
    core_num, ub_size = SOC_LIMITS[soc]
    block_bytes_min_per_core = 1024  # kMinBytesPerCore
    for dtype in dtypes_for(soc):
        block_elems = BLOCK // DTYPE_BYTES[dtype]
        for total in generated_lengths(seed=zlib.crc32(f"{soc}{dtype}".encode()), count=150):
            if soc == "Ascend310P" and total < block_elems:
                with pytest.raises(RuntimeError, match="smaller than one 32-byte block"):
                    ascend_sim.tiling("add", [(total,)], dtype, soc=soc)
                continue
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
