"""How many blocks of a launch a GPU keeps resident, modelled without a GPU.

A memory-bound kernel reaches the GPU's bandwidth only with enough loads in
flight, and what it keeps in flight is bounded by how many of its warps an SM
holds at once and how many SMs its grid reaches. Both follow from the launch
(grid, block, dynamic shared memory: the CUDA harness records them,
op_extension.cuda_sim.launch_plan) and from what the compiler gave the kernel
(registers per thread, static shared memory: ptxas's report, kept for every
kernel in csrc/kernel/cuda/kernel_resources.json by
`bash scripts/check_cuda_compile.sh --write-resources`, and checked against a
fresh compile by CI). The rules are those of the CUDA occupancy calculator as
the toolkit states them (cuda_occupancy.h) and the per-SM limits of the CUDA C++
Programming Guide's table "Technical Specifications per Compute Capability":

  * warps: an SM holds at most 2048 threads (64 warps); a block takes its
    threads rounded up to whole warps;
  * blocks: at most 32 resident blocks per SM (compute capability 8.0 and 9.0);
  * registers: allocated per warp, in units of 256 (a thread's registers x 32,
    rounded up), from four sub-partitions of 16384 each: warps per SM = 4 x
    floor(16384 / registers per warp), blocks = that // warps per block; a block
    whose warps (rounded up to a multiple of 4) need more than the 65536
    registers of an SM, or a thread of more than 255 registers, cannot launch;
  * shared memory: a block takes its static and dynamic shared memory plus 1 KiB
    the driver reserves per block (compute capability 8.x and later), rounded up
    to 128 bytes; an SM has 228 KiB (sm_90) / 164 KiB (sm_80) with the default
    carveout, a block at most 227 KiB / 163 KiB (opt-in, with
    cudaFuncAttributeMaxDynamicSharedMemorySize; 48 KiB without).

A block of more threads than the kernel's __launch_bounds__ (ptxas's
EIATTR_MAX_THREADS, in the table as max_threads) cannot launch either.

Resident blocks per SM are the least of the four; the limit that sets it is
named. Thread-block clusters (sm_90) are modelled as their blocks: the GPU also
needs a cluster's blocks in one GPC at once, which this model does not see (a
cluster launch's residency here is an upper bound).

What the model says (op_occupancy, one record per launch):

  blocks_per_sm   resident blocks of the launch per SM, and `limited_by`
  occupancy       resident warps / 64
  waves           grid blocks / (blocks_per_sm x SMs): 0.5 = half the GPU's
                  slots ever used, 1.0 = every slot once, 1.1 = a full wave and
                  a tail of 10%
  sm_fill         the share of the slots, over ceil(waves) rounds, that hold a
                  block: 1.0 = every round full; a launch of fewer blocks than the
                  GPU holds leaves the rest idle (its bandwidth too)
  active_sms      SMs that get a block in the first round
  warps_per_sm    the launch's warps resident on each SM that holds a block,
                  in the first round (averaged over those SMs): what keeps its
                  loads in flight; a grid smaller than the GPU's slots leaves it
                  below blocks_per_sm x warps per block

This module imports nothing of the package (scripts/cuda_kernel_resources.py
loads it by path before the package is built).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

RESOURCES_PATH = Path(__file__).resolve().parent / "csrc" / "kernel" / "cuda" / "kernel_resources.json"


@dataclass(frozen=True)
class Gpu:
    """The per-SM limits of one GPU (Programming Guide's table; cuda_occupancy.h)."""

    name: str
    sms: int
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    register_subpartitions: int = 4
    register_unit_per_warp: int = 256
    max_registers_per_thread: int = 255
    shared_per_sm: int = 233472             # with the default carveout: all of it
    shared_per_block_optin: int = 232448
    reserved_shared_per_block: int = 1024
    shared_unit: int = 128
    max_threads_per_block: int = 1024


# The GPUs the project is built for, by the arch the harness checks launches
# against: sm_90 as the H100 SXM5 and H200 (132 SMs, 228 KiB of shared memory
# per SM), sm_80 as the A100 (108 SMs, 164 KiB).
GPUS = {
    "sm_90": Gpu(name="H100 SXM / H200", sms=132),
    "sm_80": Gpu(name="A100", sms=108, shared_per_sm=167936, shared_per_block_optin=166912),
}


@dataclass(frozen=True)
class KernelResources:
    registers: int            # per thread
    static_shared_bytes: int  # per block
    # The kernel's __launch_bounds__ maximum (EIATTR_MAX_THREADS); None: it has
    # none, and any block of up to 1024 threads is allowed.
    max_threads: int | None = None


class LaunchError(ValueError):
    """A launch no block of which fits an SM: the GPU refuses it ("too many
    resources requested for launch")."""


def normalize_signature(signature: str) -> str:
    """One spelling for a kernel's name as GCC's __PRETTY_FUNCTION__ gives it to
    the harness ('ns::{anonymous}::k<float, 4>') and as c++filt demangles nvcc's
    symbol ('void ns::(anonymous namespace)::k<float, 4>(args)'): no return type,
    no parameter list, no anonymous namespaces, template arguments without
    their namespaces, single spaces."""
    s = signature.strip()
    if s.startswith("void "):
        s = s[len("void "):]
    # Drop the parameter list: the last top-level '(...)' after the template arguments.
    depth = 0
    for i, c in enumerate(s):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and not s.startswith("anonymous namespace)", i + 1):
            s = s[:i]
            break
    s = s.replace("(anonymous namespace)::", "").replace("{anonymous}::", "")
    # GCC names a class template argument as written at the launch (unqualified
    # inside its own namespace), c++filt fully qualified: keep the last component.
    head, angle, args = s.partition("<")
    s = head + angle + re.sub(r"\b(?:\w+::)+(?=\w)", "", args)
    return re.sub(r"\s+", " ", s).strip()


def load_resources(path: Path | str = RESOURCES_PATH) -> dict:
    """The committed table: {"nvcc": version, "archs": {arch: {signature:
    {"registers", "static_shared_bytes"[, "max_threads"]}}}}."""
    return json.loads(Path(path).read_text())


_TABLE: dict | None = None


def kernel_resources(signature: str, arch: str) -> KernelResources:
    """The registers and static shared memory ptxas gave this kernel for `arch`
    (a KeyError naming the kernel and the command that refreshes the table when
    it is not in it)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = load_resources()
    key = normalize_signature(signature)
    entry = _TABLE["archs"].get(arch, {}).get(key)
    if entry is None:
        raise KeyError(f"cuda_occupancy: kernel {key} is not in {RESOURCES_PATH.name} for {arch}: a new or renamed "
                       f"kernel? Refresh the table with `bash scripts/check_cuda_compile.sh --write-resources`")
    return KernelResources(entry["registers"], entry["static_shared_bytes"], entry.get("max_threads"))


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def blocks_per_sm(threads: int, registers: int, shared_bytes: int, gpu: Gpu) -> tuple[int, str]:
    """(resident blocks per SM, the limit that sets it: "warps", "blocks",
    "registers" or "shared memory") for a block of `threads` threads of
    `registers` registers each using `shared_bytes` of static + dynamic shared
    memory. Raises LaunchError when not one block fits."""
    if threads < 1 or threads > gpu.max_threads_per_block:
        raise LaunchError(f"a block of {threads} threads (1 to {gpu.max_threads_per_block})")
    warps = -(-threads // 32)
    limits = {"warps": gpu.max_threads_per_sm // 32 // warps, "blocks": gpu.max_blocks_per_sm}
    if registers > gpu.max_registers_per_thread:
        raise LaunchError(f"{registers} registers per thread (at most {gpu.max_registers_per_thread})")
    if registers > 0:
        per_warp = _round_up(registers * 32, gpu.register_unit_per_warp)
        if per_warp * _round_up(warps, gpu.register_subpartitions) > gpu.registers_per_sm:
            raise LaunchError(f"{registers} registers x {threads} threads: {per_warp} per warp x {warps} warps "
                              f"(rounded up to {_round_up(warps, gpu.register_subpartitions)}) > the "
                              f"{gpu.registers_per_sm} registers of an SM")
        per_subpartition = gpu.registers_per_sm // gpu.register_subpartitions // per_warp
        limits["registers"] = per_subpartition * gpu.register_subpartitions // warps
    allocated = _round_up(shared_bytes + gpu.reserved_shared_per_block, gpu.shared_unit)
    # The opt-in maximum: the harness already refuses more than 48 KiB of dynamic
    # memory from a kernel that did not opt in (cudaFuncSetAttribute).
    per_block_limit = gpu.shared_per_block_optin + gpu.reserved_shared_per_block
    if allocated > per_block_limit:
        raise LaunchError(f"{shared_bytes} bytes of shared memory per block ({allocated} with the driver's "
                          f"reserve) > {per_block_limit - gpu.reserved_shared_per_block}")
    limits["shared memory"] = gpu.shared_per_sm // allocated
    limited_by = min(limits, key=limits.get)  # the first of equals, in the order above
    if limits[limited_by] < 1:
        raise LaunchError(f"no block fits an SM (limited by {limited_by})")
    return limits[limited_by], limited_by


def launch_occupancy(launch: dict, arch: str = "sm_90", resources: KernelResources | None = None) -> dict:
    """The model's figures (module docstring) for one launch record of
    cuda_sim.launch_plan / traffic()["per_launch"] on `arch`'s GPU."""
    gpu = GPUS[arch]
    if resources is None:
        resources = kernel_resources(launch["signature"], arch)
    threads = math.prod(launch["block"])
    blocks = math.prod(launch["grid"])
    shared = resources.static_shared_bytes + launch["dynamic_shared_bytes"]
    if resources.max_threads is not None and threads > resources.max_threads:
        # ptxas allocated the kernel's registers for at most that many threads
        # (CUDA C++ Programming Guide, "Launch Bounds"); cudaFuncAttributes'
        # maxThreadsPerBlock is "the maximum number of threads per block, beyond
        # which a launch of the function would fail".
        raise LaunchError(f"kernel {launch['kernel']} on {arch}: a block of {threads} threads, beyond its "
                          f"__launch_bounds__({resources.max_threads}): the launch fails")
    try:
        per_sm, limited_by = blocks_per_sm(threads, resources.registers, shared, gpu)
    except LaunchError as e:
        raise LaunchError(f"kernel {launch['kernel']} on {arch}: {e}") from None
    slots = per_sm * gpu.sms
    waves = blocks / slots
    rounds = math.ceil(waves)
    return {
        "kernel": launch["kernel"],
        "grid_blocks": blocks,
        "threads": threads,
        "registers": resources.registers,
        "shared_bytes": shared,
        "blocks_per_sm": per_sm,
        "limited_by": limited_by,
        "occupancy": per_sm * -(-threads // 32) / (gpu.max_threads_per_sm // 32),
        "waves": waves,
        "sm_fill": blocks / (rounds * slots) if rounds else 0.0,
        "active_sms": min(gpu.sms, blocks),
        "warps_per_sm": min(blocks, slots) * -(-threads // 32) / max(1, min(gpu.sms, blocks)),
    }
