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

``run_rotary_embedding`` calls rotary_embedding's launchers directly, one
tensor per call, without the op's glue.

``arch`` ("sm_80" or "sm_90") picks the GPU whose launch limits are checked.
``block_order`` ("linear" or "reverse") the order a launch's blocks run in: a GPU
runs them in any order, so a result must not change with it (see
tests/test_cuda_sim.py's bit-identical gradient test).
"""

from __future__ import annotations

import torch

from . import _cuda_sim, _sim_args

__all__ = ["ARCHS", "BLOCK_ORDERS", "OPS", "rotary_embedding_cos_row_strides", "run", "run_backward",
           "run_rotary_embedding"]

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


def run(op: str, *args, arch: str = "sm_80", block_order: str = "linear", **kwargs):
    """Forward op `op` (one of OPS) on the CPU harness, launch limits of `arch`,
    blocks in `block_order`."""
    if op not in OPS:
        raise ValueError(f"cuda_sim: no CUDA kernel for op {op!r} (available: {', '.join(OPS)})")
    _configure(arch, block_order)
    return _call(op, args, kwargs)


def run_backward(op: str, *args, arch: str = "sm_80", block_order: str = "linear", **kwargs):
    """Backward op of `op` (custom::<op>_backward's arguments) on the CPU harness."""
    if op not in OPS:
        raise ValueError(f"cuda_sim: no CUDA backward kernel for op {op!r} (available: {', '.join(OPS)})")
    _configure(arch, block_order)
    return _call(f"{op}_backward", args, kwargs)


def _call(name: str, args: tuple, kwargs: dict):
    """cuda_sim::<name>, its arguments converted as its op module's SIMULATOR_ARGS says, if it has one."""
    if _sim_args.converter(name) is None:
        return _op(name)(*args, **kwargs)
    bound = _sim_args.simulator_args("cuda_sim", name, args, kwargs)
    return _op(name)(**bound)


def _run_misuse(name: str, arch: str = "sm_80") -> None:
    """Runs one of the harness's planted-mistake kernels (csrc/cuda_sim/misuse);
    raises RuntimeError with the harness's report. "clean" runs without error."""
    _configure(arch, "linear")
    _cuda_sim._run_misuse(name)


def _order_dependent_sum(block_order: str) -> float:
    """A planted kernel that adds one float per block to a total in block order
    (csrc/cuda_sim/misuse): its bits depend on `block_order`."""
    _configure("sm_80", block_order)
    return _cuda_sim._order_dependent_sum()


def rotary_embedding_cos_row_strides(x_shape, cos_shape, unsqueeze_dim: int = 1) -> list[int]:
    """cos_row_strides of RotaryEmbeddingArgs (kernel/cpu/rotary_embedding.h) for
    Hugging Face's apply_rotary_pos_emb: a dense cos of `cos_shape` ([B or 1, S, D])
    broadcast to x's `x_shape` by cos.unsqueeze(unsqueeze_dim). One stride per
    leading dim of x, in rows of D elements; 0 where cos broadcasts."""
    cos = torch.empty(cos_shape, device="meta").unsqueeze(unsqueeze_dim).expand(x_shape)
    dim = x_shape[-1]
    assert cos.stride(-1) == 1 and all(s % dim == 0 for s in cos.stride()[:-1])
    return [0 if size == 1 else stride // dim for size, stride in zip(cos.shape[:-1], cos.stride()[:-1])]


def run_rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1, *,
                         backward: bool = False, cos_row_strides=None, arch: str = "sm_80",
                         block_order: str = "linear") -> torch.Tensor:
    """rotary_embedding's CUDA launchers on the harness, for ONE tensor, without
    the op's glue (the op calls them for q, then k): the forward of `x`
    ([..., D], contiguous), or with `backward` the gradient of x given `x` =
    the gradient of the output. cos and sin are contiguous with rows of D; their
    row for each row of x is Hugging Face's cos.unsqueeze(unsqueeze_dim)
    broadcast, or `cos_row_strides` (one per leading dim of x) when given.
    The output is NaN before the launch, and a write past either end of it
    raises RuntimeError."""
    if cos_row_strides is None:
        cos_row_strides = rotary_embedding_cos_row_strides(x.shape, cos.shape, unsqueeze_dim)
    _configure(arch, block_order)
    return _cuda_sim._rotary_embedding(x, cos, sin, list(cos_row_strides), backward)
