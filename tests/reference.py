"""Reference implementations, tolerances and sample inputs for the op tests.

Every reference runs the plain PyTorch computation in float32 (float64 for
float64 inputs) and casts the result to the input dtype: that is what an ideal
float16/bfloat16 kernel that accumulates in float returns, so the comparison
measures the kernel's own error instead of the rounding of intermediate 16-bit
results that an all-float16 PyTorch computation would add.

Samples are described by builders, so that pytest ids exist at collection time
and the tensors are made inside the (seeded) test for any dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import op_extension
from op_extension import _reference, ops

# Tolerances and the forward references live in the library (op_extension.debug
# compares kernels against the same references at the same tolerances);
# op_extension/_reference.py gives the reason for each tolerance.
from op_extension._reference import TOLERANCES, acc_dtype, default_rms_norm_eps, tolerance  # noqa: F401
from op_extension._reference import round_through as _round_through  # noqa: F401

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
DTYPE_IDS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64"}

OPS = ("add", "gelu", "rms_norm", "fused_add_rms_norm", "layer_norm", "softmax", "swiglu", "geglu")

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


# The forward references, by op (each defined in op_extension/op_defs/<op>.py).
REFERENCES: dict[str, Callable] = {op: _reference.REFERENCES[op] for op in OPS}

# The functional API under test.
FUNCTIONS: dict[str, Callable] = {name: getattr(ops, name) for name in OPS}


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
# Tensor factory
# ---------------------------------------------------------------------------

LAYOUTS = ("contiguous", "transposed", "strided", "row_strided")


@dataclass
class Maker:
    """Makes random tensors of one dtype/device; every tensor it makes is a leaf
    that requires grad when `requires_grad` (and `grad` at the call) say so.

    layout:
      contiguous   dense, row-major
      transposed   the transpose of a dense tensor (last two dims swapped)
      strided      every other element of a twice-as-long last dim
      row_strided  every other row (first dim) of a twice-as-tall tensor
    """

    dtype: torch.dtype = torch.float32
    requires_grad: bool = False
    device: str | torch.device = "cpu"

    def __call__(self, *shape: int, layout: str = "contiguous", grad: bool = True, scale: float = 1.0,
                 offset: float = 0.0) -> torch.Tensor:
        shape = tuple(shape)
        acc = acc_dtype(self.dtype)

        def rand(s):
            return (torch.randn(s, dtype=acc) * scale + offset).to(self.dtype).to(self.device)

        if layout == "contiguous" or len(shape) == 0:
            t = rand(shape)
        elif layout == "transposed":
            assert len(shape) >= 2, "transposed needs two dims"
            t = rand(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
        elif layout == "strided":
            t = rand(shape[:-1] + (2 * shape[-1],))[..., ::2]
        elif layout == "row_strided":
            t = rand((2 * shape[0],) + shape[1:])[::2]
        else:
            raise ValueError(layout)
        assert t.shape == shape
        if layout != "contiguous" and t.numel() > 1:
            assert not t.is_contiguous(), (layout, shape)
        return t.requires_grad_(self.requires_grad and grad)


# ---------------------------------------------------------------------------
# Samples
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One call of an op: build(make) -> (args, kwargs) in the op's schema order."""

    id: str
    build: Callable[[Maker], tuple[tuple, dict]]
    large: bool = False  # only for the reference tests (opcheck's compile time would not buy coverage)


def _s(id, build, large=False):
    return Sample(id, build, large)


def _add_samples():
    return [
        _s("same_shape_3x769", lambda m: ((m(3, 769), m(3, 769)), {})),
        _s("row_vector", lambda m: ((m(3, 769), m(769)), {})),
        _s("row_vector_alpha2.5", lambda m: ((m(3, 769), m(769), 2.5), {})),
        _s("column_times_row", lambda m: ((m(5, 1), m(1, 7)), {})),
        _s("column_vector_alpha_neg", lambda m: ((m(5, 7), m(5, 1), -0.75), {})),
        _s("scalar_other", lambda m: ((m(3, 769), m()), {})),
        _s("scalar_input", lambda m: ((m(), m(4, 5), 0.5), {})),
        _s("both_scalar", lambda m: ((m(), m(), 3.0), {})),
        _s("leading_dims", lambda m: ((m(2, 3, 5), m(3, 5)), {})),
        _s("input_broadcast_leading", lambda m: ((m(3, 5), m(2, 3, 5), 2.0), {})),
        _s("middle_channel_1c1", lambda m: ((m(2, 3, 5), m(1, 3, 1), 1.5), {})),
        _s("alternating_dims", lambda m: ((m(2, 1, 4, 1, 3), m(5, 1, 6, 1)), {})),
        _s("transposed_plus_strided", lambda m: ((m(5, 33, layout="transposed"), m(5, 33, layout="strided"), 2.0), {})),
        _s("row_strided_plus_row", lambda m: ((m(6, 17, layout="row_strided"), m(17)), {})),
        _s("empty_rows", lambda m: ((m(0, 769), m(769)), {})),
        _s("empty_reduced", lambda m: ((m(0, 7), m(1, 7), 2.0), {})),
        _s("one_element", lambda m: ((m(1, 1), m(1)), {})),
        _s("large_5125", lambda m: ((m(4, 5125), m(5125), 0.5), {}), True),
    ]


def _gelu_samples():
    out = []
    for approx in ("none", "tanh"):
        out += [
            _s(f"{approx}-3x769", lambda m, a=approx: ((m(3, 769, scale=3), a), {})),
            _s(f"{approx}-transposed", lambda m, a=approx: ((m(7, 33, layout="transposed", scale=3), a), {})),
            _s(f"{approx}-strided_3d", lambda m, a=approx: ((m(2, 3, 5, layout="strided", scale=3), a), {})),
            _s(f"{approx}-empty", lambda m, a=approx: ((m(0, 5), a), {})),
            _s(f"{approx}-one_element", lambda m, a=approx: ((m(1), a), {})),
            _s(f"{approx}-0dim", lambda m, a=approx: ((m(scale=2), a), {})),
            _s(f"{approx}-large_5125", lambda m, a=approx: ((m(4, 5125, scale=4), a), {}), True),
        ]
    out.append(_s("default_approximate", lambda m: ((m(3, 769, scale=3),), {})))
    return out


def _glu_samples(approximations):
    out = []
    for approx in approximations:
        extra = () if approx is None else (approx,)
        tag = "" if approx is None else f"{approx}-"
        out += [
            _s(f"{tag}3x769", lambda m, e=extra: ((m(3, 769, scale=3), m(3, 769)) + e, {})),
            _s(f"{tag}3d", lambda m, e=extra: ((m(2, 3, 5, scale=3), m(2, 3, 5)) + e, {})),
            _s(f"{tag}transposed_gate", lambda m, e=extra: ((m(7, 33, layout="transposed", scale=3), m(7, 33)) + e, {})),
            _s(f"{tag}strided_both", lambda m, e=extra: ((m(4, 65, layout="strided", scale=3), m(4, 65, layout="row_strided")) + e, {})),
            _s(f"{tag}empty", lambda m, e=extra: ((m(0, 9), m(0, 9)) + e, {})),
            _s(f"{tag}one_element", lambda m, e=extra: ((m(1), m(1)) + e, {})),
            _s(f"{tag}large_5125", lambda m, e=extra: ((m(4, 5125, scale=3), m(4, 5125)) + e, {}), True),
        ]
    return out


def _rms_norm_samples():
    # Weights are near 1 (offset 1, scale 0.2), as trained norm weights are, so
    # that no output is a near-cancellation.
    def w(m, *shape, **kw):
        return m(*shape, scale=0.2, offset=1.0, **kw)

    return [
        _s("3x769_weight", lambda m: ((m(3, 769), [769], w(m, 769)), {})),
        _s("3x769_no_weight", lambda m: ((m(3, 769), [769]), {})),
        _s("3x769_weight_eps1e-6", lambda m: ((m(3, 769), [769], w(m, 769), 1e-6), {})),
        _s("3d_normalized_last", lambda m: ((m(2, 3, 5), [5], w(m, 5)), {})),
        _s("multi_dim_normalized_4x6", lambda m: ((m(2, 4, 6), [4, 6], w(m, 4, 6), 1e-5), {})),
        _s("normalized_all_dims", lambda m: ((m(4, 6), [4, 6]), {})),
        _s("1d_input", lambda m: ((m(769), [769], w(m, 769)), {})),
        _s("transposed_input", lambda m: ((m(9, 33, layout="transposed"), [33], w(m, 33)), {})),
        _s("strided_input_and_weight", lambda m: ((m(4, 65, layout="strided"), [65], w(m, 65, layout="strided")), {})),
        _s("row_strided_input", lambda m: ((m(5, 40, layout="row_strided"), [40], w(m, 40)), {})),
        _s("one_element_rows", lambda m: ((m(5, 1), [1], w(m, 1)), {})),
        _s("one_element_rows_no_weight", lambda m: ((m(5, 1), [1]), {})),
        _s("empty_rows", lambda m: ((m(0, 769), [769], w(m, 769)), {})),
        _s("empty_normalized_dim", lambda m: ((m(3, 0), [0], w(m, 0)), {})),
        _s("large_5125", lambda m: ((m(4, 5125), [5125], w(m, 5125)), {}), True),
        _s("many_rows_70x33", lambda m: ((m(70, 33), [33], w(m, 33)), {}), True),
    ]


def _fused_add_rms_norm_samples():
    def w(m, *shape, **kw):
        return m(*shape, scale=0.2, offset=1.0, **kw)

    return [
        _s("3x769_weight", lambda m: ((m(3, 769), m(3, 769), [769], w(m, 769)), {})),
        _s("3x769_no_weight", lambda m: ((m(3, 769), m(3, 769), [769]), {})),
        _s("3x769_weight_eps1e-6", lambda m: ((m(3, 769), m(3, 769), [769], w(m, 769), 1e-6), {})),
        _s("3d_normalized_last", lambda m: ((m(2, 3, 5), m(2, 3, 5), [5], w(m, 5)), {})),
        _s("multi_dim_normalized_4x6", lambda m: ((m(2, 4, 6), m(2, 4, 6), [4, 6], w(m, 4, 6)), {})),
        _s("transposed_residual", lambda m: ((m(9, 33), m(9, 33, layout="transposed"), [33], w(m, 33)), {})),
        _s("strided_input", lambda m: ((m(4, 65, layout="strided"), m(4, 65), [65], w(m, 65)), {})),
        _s("one_element_rows", lambda m: ((m(5, 1), m(5, 1), [1], w(m, 1)), {})),
        _s("empty_rows", lambda m: ((m(0, 769), m(0, 769), [769], w(m, 769)), {})),
        _s("large_5125", lambda m: ((m(4, 5125), m(4, 5125), [5125], w(m, 5125)), {}), True),
        _s("many_rows_70x33", lambda m: ((m(70, 33), m(70, 33), [33], w(m, 33)), {}), True),
    ]


def _layer_norm_samples():
    def w(m, *shape, **kw):
        return m(*shape, scale=0.2, offset=1.0, **kw)

    return [
        _s("3x769_weight_bias", lambda m: ((m(3, 769), [769], w(m, 769), m(769)), {})),
        _s("3x769_weight_only", lambda m: ((m(3, 769), [769], w(m, 769)), {})),
        _s("3x769_bias_only", lambda m: ((m(3, 769), [769], None, m(769)), {})),
        _s("3x769_no_affine", lambda m: ((m(3, 769), [769]), {})),
        _s("3x769_eps1e-3", lambda m: ((m(3, 769), [769], w(m, 769), m(769), 1e-3), {})),
        _s("shifted_mean", lambda m: ((m(3, 257, offset=100.0), [257], w(m, 257), m(257)), {})),
        _s("3d_normalized_last", lambda m: ((m(2, 3, 5), [5], w(m, 5), m(5)), {})),
        _s("multi_dim_normalized_4x6", lambda m: ((m(2, 4, 6), [4, 6], w(m, 4, 6), m(4, 6)), {})),
        _s("1d_input", lambda m: ((m(769), [769], w(m, 769), m(769)), {})),
        _s("transposed_input", lambda m: ((m(9, 33, layout="transposed"), [33], w(m, 33), m(33)), {})),
        _s("strided_params", lambda m: ((m(4, 65, layout="row_strided"), [65], w(m, 65, layout="strided"), m(65, layout="strided")), {})),
        _s("one_element_rows", lambda m: ((m(5, 1), [1], w(m, 1), m(1)), {})),
        _s("empty_rows", lambda m: ((m(0, 769), [769], w(m, 769), m(769)), {})),
        _s("empty_normalized_dim", lambda m: ((m(3, 0), [0], w(m, 0), m(0)), {})),
        _s("large_5125", lambda m: ((m(4, 5125), [5125], w(m, 5125), m(5125)), {}), True),
        _s("many_rows_70x33", lambda m: ((m(70, 33), [33], w(m, 33), m(33)), {}), True),
    ]


def _softmax_samples():
    return [
        _s("3x769_dim-1", lambda m: ((m(3, 769, scale=3), -1), {})),
        _s("3x769_dim0", lambda m: ((m(3, 769, scale=3), 0), {})),
        _s("3d_dim0", lambda m: ((m(2, 3, 5, scale=3), 0), {})),
        _s("3d_dim1", lambda m: ((m(2, 3, 5, scale=3), 1), {})),
        _s("3d_dim-1", lambda m: ((m(2, 3, 5, scale=3), -1), {})),
        _s("3d_dim-2_wide_inner", lambda m: ((m(2, 7, 37, scale=3), -2), {})),
        _s("transposed_dim-1", lambda m: ((m(9, 33, layout="transposed", scale=3), -1), {})),
        _s("strided_dim1", lambda m: ((m(3, 4, 10, layout="strided", scale=3), 1), {})),
        _s("one_element_rows", lambda m: ((m(4, 1), -1), {})),
        _s("0dim", lambda m: ((m(), 0), {})),
        _s("empty_rows", lambda m: ((m(0, 7), -1), {})),
        _s("empty_softmax_dim", lambda m: ((m(3, 0), 1), {})),
        _s("large_5125", lambda m: ((m(4, 5125, scale=3), -1), {}), True),
        _s("large_5125_dim0", lambda m: ((m(4, 5125, scale=3), 0), {}), True),
    ]


SAMPLES: dict[str, list[Sample]] = {
    "add": _add_samples(),
    "gelu": _gelu_samples(),
    "rms_norm": _rms_norm_samples(),
    "fused_add_rms_norm": _fused_add_rms_norm_samples(),
    "layer_norm": _layer_norm_samples(),
    "softmax": _softmax_samples(),
    "swiglu": _glu_samples([None]),
    "geglu": _glu_samples(["none", "tanh"]),
}


def sample_params(large: bool = True):
    """(op, sample) pairs for pytest.mark.parametrize, with readable ids."""
    import pytest

    return [
        pytest.param(op, s, id=f"{op}-{s.id}")
        for op in OPS
        for s in SAMPLES[op]
        if large or not s.large
    ]


def build(sample: Sample, dtype: torch.dtype = torch.float32, requires_grad: bool = False, device="cpu"):
    return sample.build(Maker(dtype, requires_grad, device))


def float_tensor_indices(args: Sequence) -> list[int]:
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]


# ---------------------------------------------------------------------------
# Backward-op samples, derived from the forward samples
# ---------------------------------------------------------------------------


def backward_args(op: str, args: Sequence, kwargs: dict | None = None) -> tuple[str, tuple]:
    """The custom::<op>_backward call that the forward call `op(*args)` leads to,
    with random incoming gradients and none of the tensors requiring grad."""
    kwargs = dict(kwargs or {})
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    call = dict(zip(_ARG_NAMES[op], args)) | kwargs

    def grad_like(t):
        return torch.randn(t.shape, dtype=torch.float64).to(device=t.device, dtype=t.dtype)

    if op == "add":
        x, o = call["input"], call["other"]
        out_shape = torch.broadcast_shapes(x.shape, o.shape)
        g = torch.randn(out_shape, dtype=torch.float64).to(device=x.device, dtype=x.dtype)
        return "add_backward", (g, list(o.shape), float(call.get("alpha", 1.0)))
    if op == "gelu":
        x = call["input"]
        return "gelu_backward", (grad_like(x), x, call.get("approximate", "none"))
    if op == "swiglu":
        return "swiglu_backward", (grad_like(call["gate"]), call["gate"], call["up"])
    if op == "geglu":
        return "geglu_backward", (grad_like(call["gate"]), call["gate"], call["up"], call.get("approximate", "none"))
    if op == "rms_norm":
        x = call["input"]
        return "rms_norm_backward", (grad_like(x), x, call["normalized_shape"], call.get("weight"), call.get("eps"))
    if op == "fused_add_rms_norm":
        z = call["input"] + call["residual"]
        return "fused_add_rms_norm_backward", (
            grad_like(z), grad_like(z), z, call["normalized_shape"], call.get("weight"), call.get("eps"))
    if op == "layer_norm":
        x = call["input"]
        return "layer_norm_backward", (
            grad_like(x), x, call["normalized_shape"], call.get("weight"), call.get("bias"), call.get("eps", 1e-5))
    if op == "softmax":
        x, dim = call["input"], call["dim"]
        y = torch.softmax(x.to(acc_dtype(x.dtype)), dim).to(x.dtype)
        return "softmax_backward", (grad_like(y), y, dim)
    raise KeyError(op)


_ARG_NAMES = {
    "add": ("input", "other", "alpha"),
    "gelu": ("input", "approximate"),
    "rms_norm": ("input", "normalized_shape", "weight", "eps"),
    "fused_add_rms_norm": ("input", "residual", "normalized_shape", "weight", "eps"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "softmax": ("input", "dim"),
    "swiglu": ("gate", "up"),
    "geglu": ("gate", "up", "approximate"),
}


def arg_names(op: str) -> tuple[str, ...]:
    return _ARG_NAMES[op]


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |a - e| / (1 + |e|), for messages."""
    if actual.numel() == 0:
        return 0.0
    d = (actual.double() - expected.double()).abs() / (1 + expected.double().abs())
    d = d[~torch.isnan(d)]
    return float(d.max()) if d.numel() else math.nan
