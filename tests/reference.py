"""Reference implementations, tolerances and sample inputs for the op tests.

Every reference runs the plain PyTorch computation in float32 (float64 for
float64 inputs) and casts the result to the input dtype: that is what an ideal
float16/bfloat16 kernel that accumulates in float returns, so the comparison
measures the kernel's own error instead of the rounding of intermediate 16-bit
results that an all-float16 PyTorch computation would add.

Samples are described by builders (each op's SAMPLES in tests/op_cases/<op>.py),
so that pytest ids exist at collection time and the tensors are made inside the
(seeded) test for any dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import op_cases
import op_extension
from op_cases import Maker, Sample  # noqa: F401  (the samples' tensor factory, re-exported)
from op_extension import _reference, cuda_sim, ops

# Tolerances and the forward references live in the library (op_extension.debug
# compares kernels against the same references at the same tolerances);
# op_extension/_reference.py gives the reason for each tolerance; the helpers
# the references share are the toolkit's.
from op_extension._reference import TOLERANCES, tolerance  # noqa: F401
from op_extension.toolkit import acc_dtype, default_rms_norm_eps  # noqa: F401
from op_extension.toolkit import round_through as _round_through  # noqa: F401

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
DTYPE_IDS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64"}

# Every forward op of op_protos/ (tests/op_cases/ holds each one's samples).
FORWARD_OPS: tuple[str, ...] = op_cases.FORWARD_OPS
# The ops whose CUDA path the harness runs (op_extension.cuda_sim.OPS): what
# sample_params() gives by default, for tests/test_cuda_sim.py, and what
# tests/test_fuzz.py fuzzes (its own branch is giving rotary_embedding a fuzz
# model). Everything else takes FORWARD_OPS.
OPS: tuple[str, ...] = tuple(op for op in FORWARD_OPS if op in cuda_sim.OPS)

ISA_ORDER = ("default", "avx2", "avx512")


def supported_isas() -> list[str]:
    """The CPU kernel variants this machine can run, from the portable one up to the best."""
    best = op_extension._C.best_cpu_isa()
    return list(ISA_ORDER[: ISA_ORDER.index(best) + 1])


# Devices the kernel tests run on: the CPU, plus CUDA where torch sees a GPU.
# Without one the CUDA cases are not generated at all, rather than skipped.
HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
# Every CPU kernel variant, then each other device once: (id, device, CPU ISA or None).
KERNEL_TARGETS = [(isa, "cpu", isa) for isa in supported_isas()] + [(d, d, None) for d in DEVICES if d != "cpu"]


def _lacking(what: str) -> Callable:
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} does not exist")

    return fail


# The forward references, by op (each defined in op_extension/op_defs/<op>.py).
REFERENCES: dict[str, Callable] = {
    op: _reference.REFERENCES.get(op) or _lacking(f"the reference of {op} (op_extension/op_defs/{op}.py)")
    for op in FORWARD_OPS}

# The functional API under test.
FUNCTIONS: dict[str, Callable] = {
    op: getattr(ops, op, None) or _lacking(f"op_extension.ops.{op}") for op in FORWARD_OPS}


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def tensor_dtype(args: Sequence) -> torch.dtype:
    return next(a.dtype for a in args if isinstance(a, torch.Tensor))


def reference(op: str, args: Sequence, kwargs: dict | None = None, grad_outputs: Sequence | None = None):
    """(outputs, grads) of the reference: outputs as a tuple in the input dtype;
    grads[i] is the gradient of positional tensor argument i that requires grad
    (computed when grad_outputs is given), in the input dtype."""
    kwargs = dict(kwargs or {})
    dtype = tensor_dtype(args)
    acc = acc_dtype(dtype)
    leaves = {}
    up_args = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            leaf = a.detach().to(acc).requires_grad_(a.requires_grad and grad_outputs is not None)
            if leaf.requires_grad:
                leaves[i] = leaf
            up_args.append(leaf)
        else:
            up_args.append(a)
    with torch.enable_grad():
        outs = _as_tuple(REFERENCES[op](*up_args, dtype=dtype, **kwargs))
        grads = {}
        if grad_outputs is not None and leaves:
            pairs = [(o, g) for o, g in zip(outs, grad_outputs) if g is not None and o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [g.detach().to(acc) for _, g in pairs])
            grads = {i: leaf.grad.to(dtype) if leaf.grad is not None else None for i, leaf in leaves.items()}
    return tuple(o.detach().to(dtype) for o in outs), grads


# ---------------------------------------------------------------------------
# Samples: each op's SAMPLES, from tests/op_cases/<op>.py
# ---------------------------------------------------------------------------

LAYOUTS = ("contiguous", "transposed", "strided", "row_strided", "heads_transposed")

SAMPLES: dict[str, list[Sample]] = dict(op_cases.each("SAMPLES", FORWARD_OPS))


def sample_params(large: bool = True, ops: Sequence[str] | None = None):
    """(op, sample) pairs for pytest.mark.parametrize, with readable ids, for
    `ops` (default: OPS). An op without SAMPLES gives one failing "<op>-MISSING"."""
    import pytest

    params = []
    for op in OPS if ops is None else ops:
        samples = SAMPLES[op]
        if isinstance(samples, op_cases.Missing):
            params.append(pytest.param(op, samples, id=f"{op}-MISSING"))
            continue
        params += [pytest.param(op, s, id=f"{op}-{s.id}") for s in samples if large or not s.large]
    return params


def build(sample: Sample, dtype: torch.dtype = torch.float32, requires_grad: bool = False, device="cpu"):
    return sample.build(Maker(dtype, requires_grad, device))


def float_tensor_indices(args: Sequence) -> list[int]:
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]


# ---------------------------------------------------------------------------
# Backward-op samples, derived from the forward samples
# ---------------------------------------------------------------------------


def arg_names(op: str) -> tuple[str, ...]:
    """The op's arguments in schema order (its prototype's torch.arg_order)."""
    return op_cases.PROTOS[op].arg_order


def _defaults(op: str) -> dict:
    proto = op_cases.PROTOS[op]
    return {t.name: None for t in proto.inputs if t.optional} | {a.name: a.default for a in proto.attrs if a.has_default}


def custom_args(op: str, args: Sequence, kwargs: dict | None = None) -> list:
    """The positional arguments of the custom::<op> call that the call
    `op(*args, **kwargs)` of the functional API makes (defaults filled in)."""
    call = _defaults(op) | dict(zip(arg_names(op), args)) | dict(kwargs or {})
    return [call[n] for n in op_cases.PROTOS[op].arg_order]


def backward_args(op: str, args: Sequence, kwargs: dict | None = None) -> tuple[str, tuple]:
    """The custom::<op>_backward call that the forward call `op(*args)` leads to,
    with random incoming gradients and none of the tensors requiring grad.

    By the backward prototype: an argument grad_<x> is a random gradient of the
    forward's output x, any other is the forward's output or argument of that
    name (defaults filled in); tests/op_cases/<op>.py's backward_args(call,
    grad_like) replaces this where the backward takes something else."""
    kwargs = dict(kwargs or {})
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    call = _defaults(op) | dict(zip(arg_names(op), args)) | kwargs
    proto = op_cases.PROTOS[op]
    with torch.no_grad():
        outs = getattr(torch.ops.custom, op)(*[call[n] for n in proto.arg_order])
    outs = outs if isinstance(outs, tuple) else (outs,)
    call |= {o.name: t for o, t in zip(proto.outputs, outs)}

    def grad_like(t):
        return torch.randn(t.shape, dtype=torch.float64).to(device=t.device, dtype=t.dtype)

    name = proto.backward
    custom_args = op_cases.get(op, "backward_args", None)
    if custom_args is not None:
        return name, tuple(custom_args(call, grad_like))
    out_names = {o.name for o in proto.outputs}
    bw_args = []
    for arg in op_cases.PROTOS[name].arg_order:
        if arg.startswith("grad_") and arg[len("grad_"):] in out_names:
            bw_args.append(grad_like(call[arg[len("grad_"):]]))
        elif arg in call:
            bw_args.append(call[arg])
        elif arg == "grad_output" and len(proto.outputs) == 1:
            bw_args.append(grad_like(outs[0]))
        else:
            raise op_cases.OpCasesError(
                f"{name}'s argument {arg!r} is neither grad_<output> nor an output or argument of {op}: "
                f"write backward_args(call, grad_like) in tests/op_cases/{op}.py")
    return name, tuple(bw_args)


@contextmanager
def streaming(threshold: int):
    """CPU kernel calls moving more than `threshold` bytes write with streaming
    stores meanwhile (-1: never; 0: every call); the old threshold after."""
    old = op_extension._C.set_cpu_streaming_store_bytes(threshold)
    try:
        yield
    finally:
        op_extension._C.set_cpu_streaming_store_bytes(old)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers, so that NaNs (and -0.0) compare by payload."""
    t = t.detach().contiguous()
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def tensor_outputs(result) -> list[torch.Tensor]:
    """The tensors of an op's result (one tensor or a tuple)."""
    items = result if isinstance(result, (tuple, list)) else [result]
    return [t for t in items if isinstance(t, torch.Tensor)]


def sample_calls(op: str, dtype: torch.dtype):
    """(what, op name, custom:: args) for the forward and the backward call of
    each of the op's SAMPLES and TRAFFIC calls (tests/op_cases) in `dtype`."""
    samples = list(SAMPLES[op]) + list(op_cases.get(op, "TRAFFIC", []))
    for sample in samples:
        args, kwargs = build(sample, dtype)
        yield f"{op}[{sample.id}]", op, custom_args(op, args, kwargs)
        name, bw_args = backward_args(op, args, kwargs)
        yield f"{name}[{sample.id}]", name, list(bw_args)


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |a - e| / (1 + |e|), for messages."""
    if actual.numel() == 0:
        return 0.0
    d = (actual.double() - expected.double()).abs() / (1 + expected.double().abs())
    d = d[~torch.isnan(d)]
    return float(d.max()) if d.numel() else math.nan


class CustomOpCalls(TorchDispatchMode):
    """Records the names of the custom ops called under it, in order."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "custom":
            self.names.append(func._schema.name.removeprefix("custom::"))
        return func(*args, **(kwargs or {}))
