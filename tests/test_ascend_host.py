"""Host side of the Ascend path: the SoC table, the aclnn entry points' use of CANN's public API,
and what one launch costs in the (simulated) ACL runtime."""

import re
from pathlib import Path

import pytest
import torch

from op_extension import _ascend_sim, ascend_sim

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "op_extension" / "csrc" / "host"

# ---------------------------------------------------------------------------
# SoC table (host/tiling/soc_spec.cpp)
# ---------------------------------------------------------------------------

# SoC version -> (short SoC version, vector cores, UB bytes): CANN 8.1.RC1 platform_config/<SoC>.ini
# (Ascend910_9392: as quoted in public CANN material; see soc_spec.cpp).
EXPECTED_SOCS = {
    "Ascend910B1": ("Ascend910B", 48, 196608),
    "Ascend910B2": ("Ascend910B", 48, 196608),
    "Ascend910B2C": ("Ascend910B", 48, 196608),
    "Ascend910B3": ("Ascend910B", 40, 196608),
    "Ascend910B4": ("Ascend910B", 40, 196608),
    "Ascend910_9362": ("Ascend910_93", 40, 196608),
    "Ascend910_9391": ("Ascend910_93", 48, 196608),
    "Ascend910_9392": ("Ascend910_93", 48, 196608),
    "Ascend310P1": ("Ascend310P", 10, 262144),
    "Ascend310P3": ("Ascend310P", 8, 262144),
    "Ascend310P5": ("Ascend310P", 8, 262144),
    "Ascend310P7": ("Ascend310P", 8, 262144),
}


def test_soc_table_has_each_soc_version_with_its_figures():
    rows = {r["soc_version"]: r for r in _ascend_sim.soc_table()}
    assert set(rows) == set(EXPECTED_SOCS)
    for soc, (family, cores, ub) in EXPECTED_SOCS.items():
        row = rows[soc]
        assert (row["name"], row["vector_core_num"], row["ub_size"]) == (family, cores, ub), soc
        assert row["source"], soc  # every figure says where it comes from
        a2a3 = family in ("Ascend910B", "Ascend910_93")
        assert (row["has_data_copy_pad"], row["has_bfloat16"], row["reduce_sum_tree"]) == (a2a3, a2a3, not a2a3)


@pytest.mark.parametrize("soc", sorted(EXPECTED_SOCS))
def test_each_soc_runs_with_its_own_core_count(soc):
    family, cores, ub = EXPECTED_SOCS[soc]
    x = torch.randn(4096, 64)
    [t] = ascend_sim.tiling("gelu", [tuple(x.shape)], torch.float32, soc=soc, approximate="none")
    assert t["usedCoreNum"] == cores  # enough work for every core, no more cores than the SoC has
    current = _ascend_sim.current_soc()
    assert (current["soc_version"], current["name"], current["vector_core_num"], current["ub_size"]) == (
        soc, family, cores, ub)
    torch.testing.assert_close(ascend_sim.run("gelu", x, soc=soc), torch.nn.functional.gelu(x))


def test_short_soc_versions_simulate_a_representative_soc():
    for short, soc in [("Ascend910B", "Ascend910B2"), ("Ascend910_93", "Ascend910_9391"), ("Ascend310P", "Ascend310P3")]:
        ascend_sim.run("add", torch.ones(64), torch.ones(64), soc=short)
        assert _ascend_sim.current_soc()["soc_version"] == soc


def test_a3_parts_are_accepted_and_keep_a2_capabilities():
    x = torch.randn(3, 100, dtype=torch.bfloat16)  # bfloat16 and an unaligned row: DataCopyPad
    for soc in ("Ascend910_9362", "Ascend910_9391", "Ascend910_9392"):
        torch.testing.assert_close(ascend_sim.run("gelu", x, soc=soc), torch.nn.functional.gelu(x))


def test_unknown_soc_message_names_the_soc_and_what_is_supported():
    message = _ascend_sim.unsupported_soc_message("Ascend910_9999")
    assert message.startswith("op_extension Ascend kernels: unsupported SoC 'Ascend910_9999' (supported: Ascend910B1, ")
    for soc in EXPECTED_SOCS:
        assert soc in message
    assert "platform_config/<SoC>.ini" in message
    # A short SoC version is not an SoC version: aclrtGetSocName() never returns one.
    assert "unsupported SoC 'Ascend910B'" in _ascend_sim.unsupported_soc_message("Ascend910B")
    with pytest.raises(ValueError, match=r"ascend_sim: unknown soc 'Ascend910B9'"):
        ascend_sim.run("add", torch.ones(8), torch.ones(8), soc="Ascend910B9")


# ---------------------------------------------------------------------------
# Public aclnn API only (aclnn/acl_meta.h): int arrays by their size
# ---------------------------------------------------------------------------

def test_host_code_uses_no_internal_cann_headers():
    for path in HOST.rglob("*.[ch]*"):
        text = path.read_text()
        assert not re.search(r'#include\s+[<"]opdev/', text), path
        assert "->Size()" not in text and "GetData()" not in text, path


def test_int_array_values_come_from_the_tensors_the_contract_ties_them_to():
    # aclGetIntArraySize is all CANN's public API reads of an aclIntArray: normalizedShape names the
    # trailing dims of input by its length. The torch glue checks the values before calling.
    x = torch.randn(3, 8)
    torch.testing.assert_close(ascend_sim.run("rms_norm", x, [7]), ascend_sim.run("rms_norm", x, [8]))
    with pytest.raises(RuntimeError, match=r"RmsNormCustom: normalizedShape has 3 dims, more than input \[3, 8\]"):
        ascend_sim.run("rms_norm", x, [1, 3, 8])
    with pytest.raises(RuntimeError, match=r"RmsNormCustom: normalizedShape is empty"):
        ascend_sim.run("rms_norm", x, [])


# ---------------------------------------------------------------------------
# Per-launch cost in the simulated ACL runtime
# ---------------------------------------------------------------------------

def _delta(before, after):
    return {k: after[k] - before[k] for k in after}


def test_no_pinned_allocation_or_event_per_launch_after_warm_up():
    x, w = torch.randn(16, 256), torch.randn(256)
    dy = torch.randn_like(x)
    for _ in range(2):  # warm-up: the stream's staging ring is allocated once
        ascend_sim.run_backward("rms_norm", dy, x, [256], w, 1e-6)
    before = _ascend_sim.runtime_counters()
    calls = 300
    for _ in range(calls):
        ascend_sim.run_backward("rms_norm", dy, x, [256], w, 1e-6)  # two launches per call
    d = _delta(before, _ascend_sim.runtime_counters())
    assert d["kernelLaunches"] == 2 * calls
    assert d["aclrtMallocHost"] == 0 and d["aclrtFreeHost"] == 0
    assert d["aclrtCreateEvent"] == 0 and d["aclrtDestroyEvent"] == 0
    assert d["aclrtMemcpyAsync"] == calls  # one upload of both launches' TilingData per call
    assert d["aclrtMemcpy"] == 0 and d["aclrtSynchronizeStream"] == 0
    # Only the caller's workspace (the binding allocates one per call, as the glue takes one
    # from torch_npu's caching allocator); the entry points allocate nothing.
    assert d["aclrtMalloc"] == calls and d["aclrtFree"] == calls
    # One event record per 64 KiB staging segment, not per call (TilingData of 2 launches: 128 bytes).
    # The earlier tests of the process leave the ring anywhere in a segment, so the
    # 300 calls may cross one boundary more than their bytes alone would.
    assert 0 < d["aclrtRecordEvent"] <= calls * 128 // (64 * 1024) + 2
    assert d["aclrtSynchronizeEvent"] <= d["aclrtRecordEvent"]


def test_staging_ring_wraps_and_results_stay_right():
    # Enough calls to go round the 4 x 64 KiB staging ring (512 calls of 128 bytes per segment):
    # segments are reused only after waiting for their event, and every call's kernels read their
    # own TilingData (eps differs between calls).
    x, w = torch.randn(4, 32), torch.randn(32)
    dy = torch.randn_like(x)
    ascend_sim.run_backward("rms_norm", dy, x, [32], w, 1e-6)  # warm-up
    before = _ascend_sim.runtime_counters()
    results = {}
    for i in range(2300):
        eps = 1e-6 * (1 + i % 3)
        dx, dw = ascend_sim.run_backward("rms_norm", dy, x, [32], w, eps)
        results.setdefault(eps, (dx, dw))
        torch.testing.assert_close((dx, dw), results[eps], rtol=0, atol=0)
    d = _delta(before, _ascend_sim.runtime_counters())
    assert d["aclrtRecordEvent"] >= 4 and d["aclrtSynchronizeEvent"] >= 1
    assert d["aclrtMallocHost"] == 0 and d["aclrtCreateEvent"] == 0
