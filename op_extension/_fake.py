"""Fake (meta) kernels: output shapes and input checks, for FakeTensor,
torch.compile(dynamic=True) and torch.export.

They apply the same rules, with the same messages, as the C++ checks in
csrc/torch_ext/checks.cpp, but on possibly symbolic sizes: every comparison of a
size goes through torch._check_* so that it becomes a runtime assertion instead
of a guard or a specialisation. Output shapes follow the `shape` rule of each
output in the op's prototype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch._prims_common  # layout rules (keeps_layout, in_memory_format)

from ._protos import load_protos

PROTOS = load_protos()
DTYPES = {name: tuple(getattr(torch, d) for d in proto.dtypes) for name, proto in PROTOS.items()}

_GELU_APPROXIMATIONS = ("none", "tanh")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_dtype(op: str, t: torch.Tensor, name: str) -> None:
    allowed = DTYPES[op]
    torch._check_type(
        t.dtype in allowed,
        lambda: f"custom::{op}: {name} has dtype {_dtype_name(t.dtype)}, which is not supported; "
        f"supported dtypes: {', '.join(_dtype_name(d) for d in allowed)}",
    )


def check_same(op: str, ref: torch.Tensor, ref_name: str, t: torch.Tensor, name: str) -> None:
    torch._check(
        t.device == ref.device,
        lambda: f"custom::{op}: {name} is on {t.device} but {ref_name} is on {ref.device}; "
        "all tensors must be on the same device",
    )
    torch._check_type(
        t.dtype == ref.dtype,
        lambda: f"custom::{op}: {name} has dtype {_dtype_name(t.dtype)} but {ref_name} has dtype "
        f"{_dtype_name(ref.dtype)}; all tensors must have the same dtype",
    )


def check_same_shape(op: str, ref: torch.Tensor, ref_name: str, t: torch.Tensor, name: str) -> None:
    def message():
        return f"custom::{op}: {name} has shape {list(t.shape)} but {ref_name} has shape {list(ref.shape)}; they must be equal"

    torch._check_value(t.dim() == ref.dim(), message)
    for a, b in zip(t.shape, ref.shape):
        torch._check_value(a == b, message)


def check_normalized_shape(op: str, input: torch.Tensor, normalized_shape: Sequence) -> None:
    shape = list(normalized_shape)
    torch._check_value(
        len(shape) >= 1, lambda: f"custom::{op}: normalized_shape must have at least one dim, got {shape}"
    )
    torch._check_value(
        input.dim() >= len(shape),
        lambda: f"custom::{op}: normalized_shape {shape} has more dims than the input of shape {list(input.shape)}",
    )
    lead = input.dim() - len(shape)
    for i, size in enumerate(shape):
        torch._check_value(size >= 0, lambda: f"custom::{op}: normalized_shape {shape} has a negative size")
        torch._check_value(
            input.shape[lead + i] == size,
            lambda: f"custom::{op}: normalized_shape {shape} does not match the trailing dims of the "
            f"input of shape {list(input.shape)}",
        )


def check_affine(op: str, param, name: str, input: torch.Tensor, normalized_shape: Sequence) -> None:
    if param is None:
        return
    check_same(op, input, "input", param, name)
    shape = list(normalized_shape)

    def message():
        return f"custom::{op}: {name} has shape {list(param.shape)} but normalized_shape is {shape}"

    torch._check_value(param.dim() == len(shape), message)
    for a, b in zip(param.shape, shape):
        torch._check_value(a == b, message)


def wrap_dim(op: str, dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    torch._check_index(
        -n <= dim < n,
        lambda: f"custom::{op}: dim {dim} is out of range for a tensor with {ndim} dims "
        f"(expected a dim in [{-n}, {n - 1}])",
    )
    return dim % n


def check_gelu_approximate(op: str, approximate: str) -> None:
    torch._check_value(
        approximate in _GELU_APPROXIMATIONS,
        lambda: f"custom::{op}: approximate must be 'none' or 'tanh', got '{approximate}'",
    )


def broadcast_shape(op: str, a: Sequence, b: Sequence) -> torch.Size:
    try:
        return torch.broadcast_shapes(tuple(a), tuple(b))
    except RuntimeError:
        raise ValueError(f"custom::{op}: shapes {list(a)} and {list(b)} are not broadcastable") from None


def keeps_layout(*operands: torch.Tensor) -> bool:
    """The output layout rule of csrc/torch_ext/ops_glue.h (keeps_layout): the
    operands' layout when they all share one dense, non-overlapping layout other
    than row-major (channels_last, a transpose, ...), as torch's elementwise ops."""
    first = operands[0]
    if first.is_contiguous() or not torch._prims_common.is_non_overlapping_and_dense_or_false(first):
        return False
    return all(t.shape == first.shape and t.stride() == first.stride() for t in operands[1:])


def in_layout(result, like: torch.Tensor, keep: bool):
    """`result` (an output or a tuple of them) in like's layout when keep."""
    if not keep:
        return result
    if isinstance(result, tuple):
        return tuple(torch.empty_like(like) for _ in result)
    return torch.empty_like(like)


def in_memory_format(result: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """ops_glue.h's in_memory_format_of: like's channels_last (3d) format, else row-major."""
    fmt = torch._prims_common.suggest_memory_format(like)
    if fmt == torch.contiguous_format or like.is_contiguous():
        return result
    return torch.empty_like(result, memory_format=fmt)


def outputs(op: str, **args):
    """Empty outputs shaped by each output's `shape` rule in the op's prototype:
    the name of an argument (its shape; an absent parameter gives an empty
    placeholder), or broadcast(a, b)."""
    like = next(v for v in args.values() if isinstance(v, torch.Tensor))
    results = []
    for desc in PROTOS[op].outputs:
        rule = desc.shape
        if rule.startswith("broadcast(") and rule.endswith(")"):
            a, b = (args[name.strip()] for name in rule[len("broadcast(") : -1].split(","))
            shape = broadcast_shape(op, a.shape, b.shape)
        else:
            source = args[rule]
            if source is None:
                shape = (0,)
            elif isinstance(source, torch.Tensor):
                shape = source.shape
            else:
                shape = list(source)
        results.append(like.new_empty(shape))
    return results[0] if len(results) == 1 else tuple(results)


@torch.library.register_fake("custom::add")
def _add_fake(input, other, alpha=1.0):
    check_dtype("add", input, "input")
    check_same("add", input, "input", other, "other")
    return in_layout(outputs("add", input=input, other=other), input, keeps_layout(input, other))


@torch.library.register_fake("custom::add_backward")
def _add_backward_fake(grad_output, input_size, alpha=1.0):
    op = "add_backward"
    check_dtype(op, grad_output, "grad_output")
    size = list(input_size)
    offset = grad_output.dim() - len(size)
    torch._check_value(
        offset >= 0,
        lambda: f"custom::{op}: input_size {size} has more dims than grad_output of shape {list(grad_output.shape)}",
    )
    for i, s in enumerate(size):
        g = grad_output.shape[i + offset]
        torch._check_value(
            (s == g) or (s == 1),
            lambda: f"custom::{op}: input_size {size} does not broadcast to grad_output of shape {list(grad_output.shape)}",
        )
    return outputs(op, grad_output=grad_output, input_size=size)


@torch.library.register_fake("custom::gelu")
def _gelu_fake(input, approximate="none"):
    check_dtype("gelu", input, "input")
    check_gelu_approximate("gelu", approximate)
    return in_layout(outputs("gelu", input=input), input, keeps_layout(input))


@torch.library.register_fake("custom::gelu_backward")
def _gelu_backward_fake(grad_output, input, approximate="none"):
    op = "gelu_backward"
    check_dtype(op, input, "input")
    check_same(op, input, "input", grad_output, "grad_output")
    check_same_shape(op, input, "input", grad_output, "grad_output")
    check_gelu_approximate(op, approximate)
    return in_layout(outputs("gelu_backward", grad_output=grad_output, input=input), input,
                     keeps_layout(input, grad_output))


def _check_glu(op, gate, up):
    check_dtype(op, gate, "gate")
    check_same(op, gate, "gate", up, "up")
    check_same_shape(op, gate, "gate", up, "up")


@torch.library.register_fake("custom::swiglu")
def _swiglu_fake(gate, up):
    _check_glu("swiglu", gate, up)
    return in_layout(outputs("swiglu", gate=gate, up=up), gate, keeps_layout(gate, up))


@torch.library.register_fake("custom::swiglu_backward")
def _swiglu_backward_fake(grad_output, gate, up):
    op = "swiglu_backward"
    _check_glu(op, gate, up)
    check_same(op, gate, "gate", grad_output, "grad_output")
    check_same_shape(op, gate, "gate", grad_output, "grad_output")
    return in_layout(outputs("swiglu_backward", grad_output=grad_output, gate=gate, up=up), gate,
                     keeps_layout(gate, up, grad_output))


@torch.library.register_fake("custom::geglu")
def _geglu_fake(gate, up, approximate="none"):
    _check_glu("geglu", gate, up)
    check_gelu_approximate("geglu", approximate)
    return in_layout(outputs("geglu", gate=gate, up=up), gate, keeps_layout(gate, up))


@torch.library.register_fake("custom::geglu_backward")
def _geglu_backward_fake(grad_output, gate, up, approximate="none"):
    op = "geglu_backward"
    _check_glu(op, gate, up)
    check_same(op, gate, "gate", grad_output, "grad_output")
    check_same_shape(op, gate, "gate", grad_output, "grad_output")
    check_gelu_approximate(op, approximate)
    return in_layout(outputs("geglu_backward", grad_output=grad_output, gate=gate, up=up), gate,
                     keeps_layout(gate, up, grad_output))


def _check_norm(op, input, normalized_shape, weight, bias=None):
    check_dtype(op, input, "input")
    check_normalized_shape(op, input, normalized_shape)
    check_affine(op, weight, "weight", input, normalized_shape)
    check_affine(op, bias, "bias", input, normalized_shape)


@torch.library.register_fake("custom::rms_norm")
def _rms_norm_fake(input, normalized_shape, weight=None, eps=None):
    _check_norm("rms_norm", input, normalized_shape, weight)
    return in_memory_format(outputs("rms_norm", input=input, normalized_shape=normalized_shape, weight=weight), input)


@torch.library.register_fake("custom::rms_norm_backward")
def _rms_norm_backward_fake(grad_output, input, normalized_shape, weight=None, eps=None):
    op = "rms_norm_backward"
    _check_norm(op, input, normalized_shape, weight)
    check_same(op, input, "input", grad_output, "grad_output")
    check_same_shape(op, input, "input", grad_output, "grad_output")
    return outputs("rms_norm_backward", grad_output=grad_output, input=input, normalized_shape=normalized_shape, weight=weight)


@torch.library.register_fake("custom::fused_add_rms_norm")
def _fused_add_rms_norm_fake(input, residual, normalized_shape, weight=None, eps=None):
    op = "fused_add_rms_norm"
    check_dtype(op, input, "input")
    check_same(op, input, "input", residual, "residual")
    check_same_shape(op, input, "input", residual, "residual")
    _check_norm(op, input, normalized_shape, weight)
    return outputs("fused_add_rms_norm", input=input, residual=residual, normalized_shape=normalized_shape, weight=weight)


@torch.library.register_fake("custom::fused_add_rms_norm_backward")
def _fused_add_rms_norm_backward_fake(grad_output, grad_residual_out, residual_out, normalized_shape, weight=None, eps=None):
    op = "fused_add_rms_norm_backward"
    check_dtype(op, residual_out, "residual_out")
    check_same(op, residual_out, "residual_out", grad_output, "grad_output")
    check_same_shape(op, residual_out, "residual_out", grad_output, "grad_output")
    if grad_residual_out is not None:
        check_same(op, residual_out, "residual_out", grad_residual_out, "grad_residual_out")
        check_same_shape(op, residual_out, "residual_out", grad_residual_out, "grad_residual_out")
    check_normalized_shape(op, residual_out, normalized_shape)
    check_affine(op, weight, "weight", residual_out, normalized_shape)
    return outputs("fused_add_rms_norm_backward", grad_output=grad_output, grad_residual_out=grad_residual_out, residual_out=residual_out, normalized_shape=normalized_shape, weight=weight)


@torch.library.register_fake("custom::layer_norm")
def _layer_norm_fake(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    _check_norm("layer_norm", input, normalized_shape, weight, bias)
    return outputs("layer_norm", input=input, normalized_shape=normalized_shape, weight=weight, bias=bias)


@torch.library.register_fake("custom::layer_norm_backward")
def _layer_norm_backward_fake(grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    op = "layer_norm_backward"
    _check_norm(op, input, normalized_shape, weight, bias)
    check_same(op, input, "input", grad_output, "grad_output")
    check_same_shape(op, input, "input", grad_output, "grad_output")
    return outputs("layer_norm_backward", grad_output=grad_output, input=input, normalized_shape=normalized_shape, weight=weight, bias=bias)


@torch.library.register_fake("custom::softmax")
def _softmax_fake(input, dim):
    check_dtype("softmax", input, "input")
    wrap_dim("softmax", dim, input.dim())
    return outputs("softmax", input=input)


@torch.library.register_fake("custom::softmax_backward")
def _softmax_backward_fake(grad_output, output, dim):
    op = "softmax_backward"
    check_dtype(op, output, "output")
    check_same(op, output, "output", grad_output, "grad_output")
    check_same_shape(op, output, "output", grad_output, "grad_output")
    wrap_dim(op, dim, output.dim())
    return outputs("softmax_backward", grad_output=grad_output, output=output)


def _check_rotary(op, q, q_name, k, k_name, cos, sin, unsqueeze_dim):
    """As check_rotary and rotary_args in ops_glue.h, with the same messages."""
    check_dtype(op, q, q_name)
    check_same(op, q, q_name, k, k_name)
    check_same(op, q, q_name, cos, "cos")
    check_same(op, q, q_name, sin, "sin")
    check_same_shape(op, cos, "cos", sin, "sin")
    nd = cos.dim()
    torch._check_value(nd >= 1, lambda: f"custom::{op}: cos must have at least one dim (the head dim), got shape {list(cos.shape)}")
    torch._check_index(-(nd + 1) <= unsqueeze_dim <= nd, lambda: f"custom::{op}: unsqueeze_dim {unsqueeze_dim} is out of range "
                       f"for cos of {nd} dims (allowed: {-(nd + 1)} to {nd})")
    dim = unsqueeze_dim + nd + 1 if unsqueeze_dim < 0 else unsqueeze_dim
    torch._check_value(dim != nd, lambda: f"custom::{op}: unsqueeze_dim {unsqueeze_dim} would put cos's head dim off the "
                       "last position; use a dim before the last")
    cos_u = cos.unsqueeze(dim)
    for x, name in ((q, q_name), (k, k_name)):
        torch._check_value(2 <= x.dim() <= 17, lambda: f"custom::{op}: {name} must have 2 to 17 dims (leading dims, then "
                           f"the head dim), got shape {list(x.shape)}")
        torch._check_value(x.shape[-1] % 2 == 0, lambda: f"custom::{op}: the head dim (last) of {name} must be even, "
                           f"got {x.shape[-1]}")
        ok = cos_u.dim() <= x.dim() and cos_u.shape[-1] == x.shape[-1]
        for d in range(1, cos_u.dim()):
            ok = ok and (cos_u.shape[-1 - d] == 1 or cos_u.shape[-1 - d] == x.shape[-1 - d])
        torch._check_value(ok, lambda: f"custom::{op}: cos.unsqueeze({dim}) of shape {list(cos_u.shape)} does not "
                           f"broadcast to {name}'s shape {list(x.shape)} (the result must have {name}'s shape)")


@torch.library.register_fake("custom::rotary_embedding")
def _rotary_embedding_fake(q, k, cos, sin, unsqueeze_dim=1):
    _check_rotary("rotary_embedding", q, "q", k, "k", cos, sin, unsqueeze_dim)
    return outputs("rotary_embedding", q=q, k=k, cos=cos, sin=sin, unsqueeze_dim=unsqueeze_dim)


@torch.library.register_fake("custom::rotary_embedding_backward")
def _rotary_embedding_backward_fake(grad_q_embed, grad_k_embed, cos, sin, unsqueeze_dim=1):
    _check_rotary("rotary_embedding_backward", grad_q_embed, "grad_q_embed", grad_k_embed, "grad_k_embed", cos, sin,
                  unsqueeze_dim)
    return outputs("rotary_embedding_backward", grad_q_embed=grad_q_embed, grad_k_embed=grad_k_embed, cos=cos,
                   sin=sin, unsqueeze_dim=unsqueeze_dim)
