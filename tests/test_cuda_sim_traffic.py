"""What a GPU's memory system would see of every CUDA kernel, held without a GPU.

op_extension.cuda_sim.traffic runs one op on the CPU harness and counts every
global load and store of its kernels (they all go through cuda_common.cuh's
load/store helpers): bytes read and written, launches, and the 32-byte sectors
each warp-wide access touches. The rules (issue 26), at LLM-like shapes
(tests/op_cases/<op>.py's TRAFFIC samples):

  * every access is seen: the kernels read at least each input's bytes and
    write at least each output's (an access that bypassed the helpers would
    show as less);
  * bytes moved, less the workspace written once and read back once, at most
    MAX_MOVED x min_bytes (each input read once, each output written once);
  * sector_efficiency at least MIN_EFFICIENCY on aligned rows (coalesced);
  * at most MAX_LAUNCHES launches per op call;
  * shared memory without bank conflicts (bank_efficiency MIN_BANK_EFFICIENCY:
    no warp-wide access takes more wavefronts than its phases);
  * every shared-memory access through the helpers too (shared_faults 0): the
    harness checks those in the call, any other through a page fault, which
    made the harness's tests ten times slower;
  * rows longer than any on-chip copy (TRAFFIC_LONG_ROWS: 65536 elements, the
    row ops' forwards and backwards) may read each row input once more (a
    statistics pass, then the output pass): that allowance is theirs and no
    other call's;
  * every launch is one a GPU accepts, as the occupancy model says
    (tests/test_cuda_occupancy.py holds the benchmark's shapes to the same):
    its block within the kernel's __launch_bounds__ and fitting an SM with its
    registers and shared memory (for the kernels in the resource table; a new
    one is added by check_cuda_compile.sh, which fails until it is).

A kernel not yet redesigned to meet them is held to the figures it has today
(TRAFFIC_CEILING in its op_cases module, per sample and direction): a regression fails, and so does an
improvement that leaves the recorded ceiling loose, so the table always says
where each kernel stands. The planted kernels of csrc/cuda_sim/misuse (an extra
pass over the input, a strided access) show that the rules see each mistake.
"""

from __future__ import annotations

import pytest
import torch

import op_cases
import reference
from op_cases import Maker
from op_extension import cuda_occupancy as occ
from op_extension import cuda_sim

MAX_MOVED = 1.15
MIN_EFFICIENCY = 0.9
# Shared memory: conflict-free (bank_efficiency 1.0: no access takes more
# wavefronts than its phases).
MIN_BANK_EFFICIENCY = 1.0
MAX_LAUNCHES = 2
# An improvement of more than this leaves a recorded ceiling loose: tighten it.
SLACK = 0.02

DTYPES = (torch.float32, torch.bfloat16)


def moved_ratio(t: dict) -> float:
    """Bytes moved beyond the workspace's own round trip (and, for a long row, its
    allowed extra read: "extra_read_bytes"), over the minimum."""
    moved = t["bytes_read"] + t["bytes_written"] - 2 * t["workspace_bytes"] - t.get("extra_read_bytes", 0)
    return moved / t["min_bytes"]


def broken_rules(t: dict, ceiling: dict | None = None) -> list[str]:
    """The rules `t` (cuda_sim.traffic's counts) breaks, against the targets or,
    where `ceiling` records a kernel still above them, against its figures."""
    ceiling = ceiling or {}
    broken = []
    if t["bytes_read"] < t["min_bytes_read"] or t["bytes_written"] < t["min_bytes_written"]:
        broken.append(f"unseen accesses: read {t['bytes_read']} of {t['min_bytes_read']} input bytes, "
                      f"wrote {t['bytes_written']} of {t['min_bytes_written']} output bytes")
    moved, efficiency = moved_ratio(t), t["sector_efficiency"]
    max_moved = ceiling.get("moved", MAX_MOVED)
    if moved > max_moved + 1e-9:
        broken.append(f"moves {moved:.3f}x its minimum (allowed {max_moved})")
    min_efficiency = ceiling.get("efficiency", MIN_EFFICIENCY)
    if efficiency < min_efficiency - 1e-9:
        broken.append(f"sector efficiency {efficiency:.3f} (at least {min_efficiency})")
    min_banks = ceiling.get("bank_efficiency", MIN_BANK_EFFICIENCY)
    if t["bank_efficiency"] < min_banks - 1e-9:
        broken.append(f"shared-memory bank efficiency {t['bank_efficiency']:.3f} (at least {min_banks}: "
                      f"{t['shared_wavefronts']} wavefronts)")
    if t.get("shared_faults"):
        broken.append(f"{t['shared_faults']} shared-memory accesses bypassed load_shared / store_shared / the pack "
                      f"helpers (each checked through a page fault, some 20 us apiece)")
    max_launches = ceiling.get("launches", MAX_LAUNCHES)
    if t["launches"] > max_launches:
        broken.append(f"{t['launches']} launches (at most {max_launches})")
    return broken


def unlaunchable(t: dict, arch: str) -> list[str]:
    """The launches of `t` a GPU of `arch` would refuse, as the occupancy model
    says (op_extension/cuda_occupancy.py): a block beyond the kernel's
    __launch_bounds__, or none that fits an SM with its registers and shared
    memory. A kernel not yet in the resource table (a new op's, before
    `check_cuda_compile.sh --write-resources` has run where nvcc is) is left to
    that script's check, which fails on it by name."""
    found = []
    for launch in t["per_launch"]:
        try:
            occ.launch_occupancy(launch, arch)
        except occ.LaunchError as e:
            found.append(str(e))
        except KeyError:
            pass
    return found


def loose(t: dict, ceiling: dict) -> list[str]:
    """Where a kernel now does better than its recorded ceiling by more than SLACK."""
    found = []
    if "moved" in ceiling and moved_ratio(t) < ceiling["moved"] - SLACK:
        found.append(f"moved {moved_ratio(t):.3f} < ceiling {ceiling['moved']}")
    if "efficiency" in ceiling and t["sector_efficiency"] > ceiling["efficiency"] + SLACK:
        found.append(f"efficiency {t['sector_efficiency']:.3f} > floor {ceiling['efficiency']}")
    if "launches" in ceiling and t["launches"] < ceiling["launches"]:
        found.append(f"{t['launches']} launches < ceiling {ceiling['launches']}")
    return found


def _cases():
    params = []
    for op in reference.OPS:
        samples = op_cases.get(op, "TRAFFIC", None)
        if samples is None:
            params.append(pytest.param(op, None, "forward", id=f"{op}-MISSING"))
            continue
        for s in samples:
            for direction in ("forward", "backward"):
                params.append(pytest.param(op, s, direction, "sm_80", id=f"{op}-{s.id}-{direction}"))
        # On sm_90 too where a thread-block cluster holds the rows
        # (TRAFFIC_NO_EXTRA_READ).
        held = op_cases.get(op, "TRAFFIC_NO_EXTRA_READ", set())
        for s in op_cases.get(op, "TRAFFIC_LONG_ROWS", []):
            for direction in ("forward", "backward"):
                for arch in ("sm_80", "sm_90"):
                    if arch == "sm_90" and (s.id, direction, arch) not in held:
                        continue
                    params.append(pytest.param(op, s, direction, arch, id=f"{op}-{s.id}-{direction}-{arch}"))
    return params


def is_long_row(op: str, sample) -> bool:
    return sample in op_cases.get(op, "TRAFFIC_LONG_ROWS", [])


def measure(op: str, sample, direction: str, dtype: torch.dtype, arch: str = "sm_80") -> dict:
    """cuda_sim.traffic of the call with `arch`'s launch limits; for a long-row
    sample, with extra_read_bytes: the bytes of the call's row-shaped inputs (2
    dims or more: not a weight or a bias), which such a row may read once more
    (unless the op's TRAFFIC_NO_EXTRA_READ names the call)."""
    args, kwargs = sample.build(Maker(dtype))
    if direction == "forward":
        call_args, t = args, cuda_sim.traffic(op, *args, arch=arch, **kwargs)
    else:
        name, call_args = reference.backward_args(op, args, kwargs)
        assert name == f"{op}_backward"
        t = cuda_sim.traffic(op, *call_args, backward=True, arch=arch)
    if is_long_row(op, sample) and (sample.id, direction, arch) not in op_cases.get(op, "TRAFFIC_NO_EXTRA_READ", set()):
        t["extra_read_bytes"] = sum(a.numel() * a.element_size() for a in call_args
                                    if isinstance(a, torch.Tensor) and a.dim() >= 2)
    return t


def ceiling_of(op: str, sample_id: str, direction: str, arch: str) -> dict | None:
    """The op's TRAFFIC_CEILING for the call: keyed (sample, direction, arch), or
    (sample, direction) for every arch."""
    ceilings = op_cases.get(op, "TRAFFIC_CEILING", {})
    return ceilings.get((sample_id, direction, arch), ceilings.get((sample_id, direction)))


@pytest.mark.parametrize("op,sample,direction,arch", _cases())
def test_kernels_move_their_minimum_coalesced(op, sample, direction, arch):
    assert sample is not None, f"tests/op_cases/{op}.py has no TRAFFIC (LLM-like calls for the traffic model)"
    ceiling = ceiling_of(op, sample.id, direction, arch)
    problems, slack = [], []
    for dtype in DTYPES:
        t = measure(op, sample, direction, dtype, arch)
        problems += [f"{reference.DTYPE_IDS[dtype]}: {p}" for p in broken_rules(t, ceiling) + unlaunchable(t, arch)]
        slack.append(loose(t, ceiling) if ceiling else [])
    assert not problems, f"{op} {direction} ({sample.id}, {arch}): " + "; ".join(problems)
    # A ceiling is the worst dtype's figure: it is loose only if every dtype beats it.
    if ceiling and all(slack):
        pytest.fail(f"{op} {direction}: better than TRAFFIC_CEILING in tests/op_cases/{op}.py "
                    f"({'; '.join(slack[0])}): tighten it, or drop it once the targets are met")


def test_a_launch_beyond_a_kernels_launch_bounds_is_seen():
    """unlaunchable() on a real kernel's launch record with its block doubled
    past the kernel's __launch_bounds__ (the harness itself ignores the bound)."""
    x, w = torch.randn(4, 1024), torch.ones(1024)
    t = cuda_sim.traffic("rms_norm", x, [1024], w, 1e-6)
    assert unlaunchable(t, "sm_80") == []
    launch = t["per_launch"][0]
    bound = occ.kernel_resources(launch["signature"], "sm_80").max_threads
    assert bound is not None
    too_big = dict(launch, block=(bound * 2, 1, 1) if bound <= 512 else (1024, 2, 1))
    found = unlaunchable(t | {"per_launch": [too_big]}, "sm_80")
    assert len(found) == 1 and f"beyond its __launch_bounds__({bound})" in found[0], found


def test_ceilings_are_above_the_targets_only():
    """A recorded ceiling may only relax a target, never sit inside it."""
    for op in reference.OPS:
        ids = {s.id for s in op_cases.get(op, "TRAFFIC", []) + op_cases.get(op, "TRAFFIC_LONG_ROWS", [])}
        for key, ceiling in op_cases.get(op, "TRAFFIC_CEILING", {}).items():
            sample_id, direction, *arch = key
            assert sample_id in ids and direction in ("forward", "backward"), (op, key)
            assert arch in ([], ["sm_80"], ["sm_90"]), (op, key)
            assert ceiling.get("moved", MAX_MOVED + 1) > MAX_MOVED, (op, direction)
            assert ceiling.get("efficiency", 0) < MIN_EFFICIENCY, (op, direction)
            assert ceiling.get("launches", MAX_LAUNCHES + 1) > MAX_LAUNCHES, (op, direction)
            assert ceiling.get("bank_efficiency", 0) < MIN_BANK_EFFICIENCY, (op, direction)


# ---- the planted kernels: each mistake is seen -------------------------------------------

PLANTED_MIN = {"min_bytes_read": 4096 * 4, "min_bytes_written": 4096 * 4, "min_bytes": 2 * 4096 * 4}


def planted(name: str) -> dict:
    return cuda_sim._misuse_traffic(name) | PLANTED_MIN


def test_a_plain_copy_moves_its_minimum_in_whole_sectors():
    t = planted("traffic_copy")
    assert (t["bytes_read"], t["bytes_written"], t["launches"]) == (16384, 16384, 1)
    assert t["sector_efficiency"] == 1.0
    assert broken_rules(t) == []


def test_an_extra_pass_over_the_input_is_seen():
    t = planted("traffic_extra_pass")
    assert t["bytes_read"] == 2 * 16384
    assert broken_rules(t) == ["moves 1.500x its minimum (allowed 1.15)"]


def test_a_strided_access_is_seen():
    t = planted("traffic_strided")
    # Each lane's 4-byte load takes a sector of its own: reads at 1/8, writes whole.
    assert t["sector_efficiency"] == pytest.approx((16384 + 16384) / (8 * 16384 + 16384))
    assert broken_rules(t) == [f"sector efficiency {t['sector_efficiency']:.3f} (at least 0.9)"]


def test_an_access_that_bypasses_the_helpers_is_seen():
    t = planted("traffic_copy") | {"min_bytes_read": 2 * 16384}
    assert broken_rules(t)[0].startswith("unseen accesses: read 16384 of 32768 input bytes")


def test_shared_memory_bank_conflicts_are_seen():
    """2 warps each: consecutive floats, a broadcast and 16-byte packs take one
    wavefront per phase (10 a warp); a stride of 2 floats puts two words in each
    even bank (2 a phase); a column of a 32 x 32 float tile puts all 32 lanes in
    one bank (32)."""
    free = planted("traffic_banks_conflict_free")
    assert (free["bank_efficiency"], free["shared_wavefronts"]) == (1.0, 20)
    assert free["shared_faults"] == 0
    two_way = planted("traffic_banks_two_way")
    assert (two_way["bank_efficiency"], two_way["shared_wavefronts"]) == (0.5, 8)
    column = planted("traffic_banks_column")
    assert (column["bank_efficiency"], column["shared_wavefronts"]) == (1 / 32, 128)
    assert any(rule.startswith("shared-memory bank efficiency 0.031") for rule in broken_rules(column))
    assert not any("bank" in rule for rule in broken_rules(free))


def test_a_shared_access_that_bypasses_the_helpers_is_seen():
    """The planted clean kernel indexes its shared arrays directly: correct, but
    each access costs the harness a page fault; the same kernel through the
    helpers passes."""
    bypassing = planted("clean")
    assert bypassing["shared_faults"] > 0
    assert any("bypassed load_shared / store_shared" in rule for rule in broken_rules(bypassing))
    assert planted("clean_helpers")["shared_faults"] == 0


def test_traffic_leaves_the_counts_off_outside_its_window():
    x = torch.randn(4, 256)
    before = cuda_sim._cuda_sim._traffic_end()
    assert before["bytes_read"] == 0
    cuda_sim.run("gelu", x)
    assert cuda_sim._cuda_sim._traffic_end()["bytes_read"] == 0
    t = cuda_sim.traffic("gelu", x)
    assert t["bytes_read"] == x.numel() * 4 and t["bytes_written"] == x.numel() * 4


def test_each_launch_is_counted_on_its_own():
    """traffic()'s per_launch: the kernels in launch order, named, their bytes summing
    to the totals. RMSNorm's backward over 4 rows of 2048 launches the row kernel,
    then the weight-gradient sum over the groups' partial sums."""
    x, dy, w = torch.randn(4, 2048), torch.randn(4, 2048), torch.randn(2048)
    t = cuda_sim.traffic("rms_norm", dy, x, [2048], w, 1e-6, backward=True)
    assert len(t["per_launch"]) == t["launches"] >= 2
    assert sum(launch["bytes_read"] for launch in t["per_launch"]) == t["bytes_read"]
    assert sum(launch["bytes_written"] for launch in t["per_launch"]) == t["bytes_written"]
    assert all(launch["kernel"] and "<" not in launch["kernel"] and "::" not in launch["kernel"]
               for launch in t["per_launch"])
    assert all(launch["signature"].endswith(">") for launch in t["per_launch"])  # template arguments kept there
    # The row kernel reads dy, x and the weight (once per group) and writes dx: the most bytes.
    assert t["per_launch"][0]["bytes_read"] >= 2 * x.numel() * 4
    copy = planted("traffic_copy")
    assert [(launch["bytes_read"], launch["bytes_written"]) for launch in copy["per_launch"]] == [(16384, 16384)]


def test_the_long_row_allowance_is_one_read_of_the_row_inputs_only():
    """A long row's extra read covers the row-shaped inputs once (a statistics pass),
    not the weight, and no other call gets it: a second extra read still fails,
    and a row a cluster holds gets none."""
    sample = op_cases.get("rms_norm", "TRAFFIC_LONG_ROWS")[0]
    t = measure("rms_norm", sample, "forward", torch.float32)
    x_bytes = 4 * 65536 * 4
    assert t["extra_read_bytes"] == x_bytes
    assert broken_rules(t) == []
    twice = t | {"bytes_read": t["bytes_read"] + x_bytes}
    assert broken_rules(twice) and broken_rules(twice)[0].startswith("moves ")
    short = op_cases.get("rms_norm", "TRAFFIC")[0]
    assert "extra_read_bytes" not in measure("rms_norm", short, "forward", torch.float32)
    # On sm_90 a cluster holds the row (TRAFFIC_NO_EXTRA_READ): no allowance, and
    # none needed.
    held = measure("rms_norm", sample, "forward", torch.float32, "sm_90")
    assert "extra_read_bytes" not in held and moved_ratio(held) <= 1.0 + 1e-9
