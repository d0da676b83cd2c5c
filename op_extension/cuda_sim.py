"""Run the CUDA path of an op -- the shared glue, the CUDA launcher and its
kernels -- on the CPU harness, without a GPU.

    from op_extension import cuda_sim
    y = cuda_sim.run("gelu", x, "tanh")                       # like ops.gelu
    dgate, dup = cuda_sim.run_backward("swiglu", dy, gate, up)  # like custom::swiglu_backward

Arguments are those of the op's ``op_extension.ops`` function (``run``) or of
``torch.ops.custom.<op>_backward`` (``run_backward``); tensors are CPU tensors
and results are CPU tensors. The kernels are the .cu files compiled by g++
against the harness (csrc/cuda_sim): every block and thread runs, threads as
fibers, so barriers and warp shuffles keep their GPU meaning. Outputs are
filled with NaN before the launch. A misuse the harness detects (a
__syncthreads not reached by every thread, a shuffle mask naming a lane that
does not take part, shared memory (dynamic, or a static __shared__ array)
accessed out of bounds or raced on between two barriers, a launch beyond the
GPU's limits) raises RuntimeError naming the kernel, block and thread; so do the
op's input checks.

``arch`` ("sm_80" or "sm_90") picks the GPU whose launch limits are checked.
``block_order`` ("linear" or "reverse") the order a launch's blocks run in: a GPU
runs them in any order, so a result must not change with it (see
tests/test_cuda_sim.py's bit-identical gradient test).
"""

from __future__ import annotations

import torch

from . import _cuda_sim, _sim_args

__all__ = ["ARCHS", "BLOCK_ORDERS", "OPS", "launch_count", "launch_plan", "run", "run_backward", "shared_fault_count", "traffic"]

ARCHS = ("sm_80", "sm_90")
BLOCK_ORDERS = ("linear", "reverse")


def _has_kernel(name: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"cuda_sim::{name}", "CPU")
    except RuntimeError:  # not registered: an op newer than this build of the harness
        return False


# Every op with CUDA kernels on the harness (forward and backward), from the prototypes.
OPS = _sim_args.forward_ops(_has_kernel)


def _op(name: str):
    return getattr(torch.ops.cuda_sim, name)


def _configure(arch: str, block_order: str) -> None:
    _cuda_sim.set_arch(arch)
    _cuda_sim.set_block_order(block_order)


def _without_prototype(name: str) -> bool:
    """An op the harness binds that no prototype describes (a file of
    csrc/cuda_sim/probes registers it, as the op's own files register custom::<name>;
    op_defs.extra_ops() lists them)."""
    return name not in _sim_args.load_protos() and _has_kernel(name)


def run(op: str, *args, arch: str = "sm_80", block_order: str = "linear", **kwargs):
    """Forward op `op` (one of OPS, or an op without a prototype that the harness
    binds: op_defs.extra_ops()) on the CPU harness, launch limits of `arch`,
    blocks in `block_order`."""
    if op not in OPS and not _without_prototype(op):
        raise ValueError(f"cuda_sim: no CUDA kernel for op {op!r} (available: {', '.join(OPS)})")
    _configure(arch, block_order)
    return _call(op, args, kwargs)


def run_backward(op: str, *args, arch: str = "sm_80", block_order: str = "linear", **kwargs):
    """Backward op of `op` (custom::<op>_backward's arguments) on the CPU harness."""
    if op not in OPS:
        raise ValueError(f"cuda_sim: no CUDA backward kernel for op {op!r} (available: {', '.join(OPS)})")
    _configure(arch, block_order)
    return _call(f"{op}_backward", args, kwargs)


def traffic(op: str, *args, backward: bool = False, arch: str = "sm_80", **kwargs) -> dict:
    """Runs forward op `op` (or, with backward=True, custom::<op>_backward on its
    arguments) once on the harness and returns what a GPU's memory system would
    see of it, counted at every global load and store of its kernels:

      launches           kernel launches
      bytes_read         global bytes the kernels read
      bytes_written      global bytes the kernels wrote
      min_bytes          each input tensor read once plus each output written once
                         (min_bytes_read + min_bytes_written)
      workspace_bytes    the workspace the glue allocated for the kernels (its
                         traffic is in bytes_read and bytes_written)
      sector_efficiency  the bytes the accesses asked for over the bytes of the
                         32-byte sectors each warp-wide access touched: 1.0 when
                         every warp's accesses use whole sectors (coalesced)
      per_launch         each launch in order: {"kernel": its name without
                         namespaces and template arguments, "signature": the full
                         name, "cluster_blocks": blocks per thread-block cluster
                         (1: none), "grid" and "block" (x, y, z),
                         "dynamic_shared_bytes", "bytes_read", "bytes_written"};
                         the bytes sum to the totals
      shared_wavefronts  the wavefronts the kernels' warp-wide shared-memory
                         accesses take through its 32 banks (4-byte words; an
                         access is served in phases of at most 128 bytes, and
                         distinct words of one bank in a phase take one each)
      bank_efficiency    the wavefronts those accesses would take without bank
                         conflicts over shared_wavefronts: 1.0 when conflict-free
      shared_faults      shared-memory accesses that bypassed the kernels'
                         load/store helpers (checked through a page fault each,
                         some 20 us apiece; CI holds every kernel to 0)

    Every read counts, as on a GPU without caches: a row read twice counts twice,
    a weight re-read for every row counts each time. Timing is not modelled.
    """
    out, counts = _counted(lambda: (run_backward if backward else run)(op, *args, arch=arch, **kwargs))
    counts["min_bytes_read"] = sum(t.numel() * t.element_size() for t in _tensors((args, kwargs)))
    counts["min_bytes_written"] = sum(t.numel() * t.element_size() for t in _tensors(out))
    counts["min_bytes"] = counts["min_bytes_read"] + counts["min_bytes_written"]
    return counts


def launch_plan(op: str, *args, backward: bool = False, arch: str = "sm_90", **kwargs) -> list[dict]:
    """The launches forward op `op` (or, with backward=True, custom::<op>_backward)
    makes on these arguments, without running them: each checked against the
    launch limits of `arch` and recorded as traffic()'s per_launch records (no
    bytes). The kernels do not run, so the arguments may be as large as the
    benchmark's (thousands of rows) and the call still takes no time; the
    outputs hold no result. What op_extension.cuda_occupancy models a GPU's
    occupancy from."""
    _cuda_sim._traffic_begin(launches_only=True)
    try:
        (run_backward if backward else run)(op, *args, arch=arch, **kwargs)
    finally:
        counts = _cuda_sim._traffic_end()
    return [_launch_record(*launch) for launch in counts["per_launch"]]


def _counted(call):
    """call()'s result and the harness's counts of its launches (traffic()'s keys
    but the min_bytes ones)."""
    faults = _cuda_sim.shared_fault_count()
    _cuda_sim._traffic_begin()
    try:
        out = call()
    finally:
        counts = _cuda_sim._traffic_end()
    return out, _with_efficiency(counts) | {"shared_faults": _cuda_sim.shared_fault_count() - faults}


def _with_efficiency(counts: dict) -> dict:
    """The harness's counts with requested and sector bytes turned into sector_efficiency."""
    requested, sectors = counts.pop("requested_bytes"), counts.pop("sector_bytes")
    counts["sector_efficiency"] = requested / sectors if sectors else 1.0
    ideal = counts.pop("shared_ideal_wavefronts")
    counts["bank_efficiency"] = ideal / counts["shared_wavefronts"] if counts["shared_wavefronts"] else 1.0
    counts["per_launch"] = [_launch_record(*launch) for launch in counts["per_launch"]]
    return counts


def _launch_record(name, cluster, read, written, grid, block, dynamic_shared) -> dict:
    return {"kernel": kernel_short_name(name), "signature": name, "cluster_blocks": cluster,
            "grid": tuple(grid), "block": tuple(block), "dynamic_shared_bytes": dynamic_shared,
            "bytes_read": read, "bytes_written": written}


def kernel_short_name(signature: str) -> str:
    """'op_ext::cuda::detail::rms_norm_forward_kernel<float, 4, 8>' -> 'rms_norm_forward_kernel'."""
    return signature.split("<", 1)[0].rsplit("::", 1)[-1].strip()


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def launch_count() -> int:
    """Kernel launches made on the harness in this process so far."""
    return _cuda_sim.launch_count()


def shared_fault_count() -> int:
    """Shared-memory accesses of kernel threads in this process so far that
    bypassed the kernels' load/store helpers: each was checked through a page
    fault (for its first byte only, and some 20 us apiece) instead of by the
    helper (every byte, at the cost of a call)."""
    return _cuda_sim.shared_fault_count()


def _call(name: str, args: tuple, kwargs: dict):
    """cuda_sim::<name>, its arguments converted as its op module's SIMULATOR_ARGS says, if it has one."""
    if name not in _sim_args.load_protos() or _sim_args.converter(name) is None:
        return _op(name)(*args, **kwargs)
    bound = _sim_args.simulator_args("cuda_sim", name, args, kwargs)
    return _op(name)(**bound)


def _run_misuse(name: str, arch: str = "sm_80", block_order: str = "linear") -> None:
    """Runs one of the harness's planted-mistake kernels (csrc/cuda_sim/misuse);
    raises RuntimeError with the harness's report. "clean" runs without error."""
    _configure(arch, block_order)
    _cuda_sim._run_misuse(name)


def _misuse_traffic(name: str) -> dict:
    """The traffic of a planted kernel of csrc/cuda_sim/misuse ("traffic_copy",
    "traffic_extra_pass", "traffic_strided": 4096 floats copied; "clean" indexes
    its shared arrays directly, "clean_helpers" through the helpers), as traffic()
    counts it, without min_bytes (the planted kernel's is 2 * 4096 * 4)."""
    _configure("sm_80", "linear")
    return _counted(lambda: _cuda_sim._run_misuse(name))[1]


def _order_dependent_sum(block_order: str) -> float:
    """A planted kernel that adds one float per block to a total in block order
    (csrc/cuda_sim/misuse): its bits depend on `block_order`."""
    _configure("sm_80", block_order)
    return _cuda_sim._order_dependent_sum()


def _cluster_clean(threads: int, block_order: str = "linear") -> tuple[list[float], list[float]]:
    """A planted correct cluster kernel (csrc/cuda_sim/misuse, sm_90): 8 blocks
    of `threads` threads in clusters of 4, each thread summing one value of every
    block of its cluster through distributed shared memory. Returns the
    per-thread sums and the per-block totals."""
    _configure("sm_90", block_order)
    return _cuda_sim._cluster_clean(threads)
