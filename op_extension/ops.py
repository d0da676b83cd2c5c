"""The functional API, mirroring torch.nn.functional.

Each function is a thin call into the dispatcher op torch.ops.custom.<name>, so
eager mode, autograd, torch.compile and torch.export all see one custom op.
Outside tracing, plain tensors take a C++ fast path into the same dispatcher op
(see csrc/torch_ext/python_module.cpp): it saves the ~2 us that parsing
arguments through torch.ops costs. Argument checks happen in the op itself (C++ for real tensors, the fake kernel
under tracing), before any kernel runs.

op_extension.debug needs nothing here: its switches hook in at the dispatcher
(a BackendSelect kernel registered only while one is on), below this path and
every other way an op is reached.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch._C import _has_torch_function

from . import _C, _transforms

__all__ = ["add", "fused_add_rms_norm", "geglu", "gelu", "layer_norm", "rms_norm", "rotary_embedding", "softmax",
           "swiglu"]

_ops = torch.ops.custom
# Outside tracing, the traced path's calls (a tensor subclass or torch function
# mode is involved) go to _transforms' autograd.Functions under torch.func
# transforms and forward-mode AD; the C++ fast path does that by itself.
_add = _transforms.traced(_ops.add.default, _transforms.add)
_gelu = _transforms.traced(_ops.gelu.default, _transforms.gelu)
_rms_norm = _transforms.traced(_ops.rms_norm.default, _transforms.rms_norm)
_fused_add_rms_norm = _transforms.traced(_ops.fused_add_rms_norm.default, _transforms.fused_add_rms_norm)
_layer_norm = _transforms.traced(_ops.layer_norm.default, _transforms.layer_norm)
_softmax = _transforms.traced(_ops.softmax.default, _transforms.softmax)
_swiglu = _transforms.traced(_ops.swiglu.default, _transforms.swiglu)
_geglu = _transforms.traced(_ops.geglu.default, _transforms.geglu)


def _eager(*tensors) -> bool:
    """Whether the C++ fast path may run the op: not while Dynamo traces this
    function (it must see torch.ops.custom.*), and only for tensors without
    __torch_function__ overrides or an active torch function mode."""
    return not torch.compiler.is_compiling() and not _has_torch_function(tensors)


def _shape_list(op: str, normalized_shape) -> list[int]:
    if isinstance(normalized_shape, (int, torch.SymInt)):
        return [normalized_shape]
    if isinstance(normalized_shape, (Sequence, torch.Size)):
        return list(normalized_shape)
    raise TypeError(f"custom::{op}: normalized_shape must be an int or a sequence of ints, got {type(normalized_shape).__name__}")


# Argument conversions for the traced path (the C++ fast path does the same in
# python_module.cpp): a value the schema cannot hold is refused by name, rather
# than by torch's argument parser or by Python's float().

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int64(op: str, name: str, value):
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"custom::{op}: {name}={value!r} does not fit in an int64")
    return value


def _int64_list(op: str, name: str, values: list) -> list:
    for v in values:
        if isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError(f"custom::{op}: {name} {values} holds {v}, which does not fit in an int64")
    return values


def _float(op: str, name: str, value):
    """A real number as a float (symbolic values pass through), or an error naming op and argument."""
    if type(value) is float:  # the common case, without the ABC checks below
        return value
    if isinstance(value, (torch.SymFloat, torch.SymInt)):
        return value
    if not isinstance(value, numbers.Real):
        raise TypeError(f"custom::{op}: {name} must be a float, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"custom::{op}: {name}={value!r} does not fit in a float64") from None


def _optional_float(op: str, value):
    return None if value is None else _float(op, "eps", value)


def add(input: torch.Tensor, other: torch.Tensor | numbers.Number, alpha: float = 1) -> torch.Tensor:
    """input + alpha * other, with broadcasting. A number `other` becomes a 0-dim tensor."""
    if not isinstance(other, torch.Tensor):
        if not isinstance(other, numbers.Real):
            raise TypeError(f"custom::add: other must be a tensor or a real number, got {type(other).__name__}")
        other = torch.full((), other, dtype=input.dtype, device=input.device)
    alpha = _float("add", "alpha", alpha)
    if _eager(input, other):
        return _C.add(input, other, alpha)
    return _add(input, other, alpha)


def gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, exact (erf) or with the tanh approximation, as F.gelu."""
    if _eager(input):
        return _C.gelu(input, approximate)
    return _gelu(input, approximate)


def rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """RMSNorm over the trailing `normalized_shape` dims, as F.rms_norm.

    eps=None uses the machine epsilon of the computation dtype: float32's for
    float16/bfloat16 inputs, as F.rms_norm does.
    """
    shape = _shape_list("rms_norm", normalized_shape)
    if _eager(input, weight):
        out = _C.rms_norm(input, shape, weight, eps)
        # NotImplemented: a weight of another dtype (the fast path's check).
        return out if out is not NotImplemented else _mixed_rms_norm(input, shape, weight, eps)
    if _other_dtype(input, weight):
        return _mixed_rms_norm(input, shape, weight, eps)
    return _rms_norm(input, _int64_list("rms_norm", "normalized_shape", shape), weight, _optional_float("rms_norm", eps))


def fused_add_rms_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(input + residual), input + residual) in one pass over memory."""
    shape = _shape_list("fused_add_rms_norm", normalized_shape)
    if _eager(input, residual, weight):
        out = _C.fused_add_rms_norm(input, residual, shape, weight, eps)
        return out if out is not NotImplemented else _mixed_fused_add_rms_norm(input, residual, shape, weight, eps)
    if _other_dtype(input, residual) or _other_dtype(input, weight):
        return _mixed_fused_add_rms_norm(input, residual, shape, weight, eps)
    return _fused_add_rms_norm(
        input, residual, _int64_list("fused_add_rms_norm", "normalized_shape", shape), weight,
        _optional_float("fused_add_rms_norm", eps),
    )


def layer_norm(
    input: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the trailing `normalized_shape` dims, as F.layer_norm."""
    shape = _shape_list("layer_norm", normalized_shape)
    eps = _float("layer_norm", "eps", eps)
    if _eager(input, weight, bias):
        out = _C.layer_norm(input, shape, weight, bias, eps)
        return out if out is not NotImplemented else _mixed_layer_norm(input, shape, weight, bias, eps)
    if _other_dtype(input, weight) or _other_dtype(input, bias):
        return _mixed_layer_norm(input, shape, weight, bias, eps)
    return _layer_norm(input, _int64_list("layer_norm", "normalized_shape", shape), weight, bias, eps)


def softmax(input: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax along `dim`, as torch.softmax."""
    if not isinstance(dim, int):
        raise TypeError(f"custom::softmax: dim must be an int, got {type(dim).__name__}")
    if _eager(input):
        return _C.softmax(input, dim)
    return _softmax(input, _int64("softmax", "dim", dim))


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, the gated unit of LLaMA-style MLPs."""
    if _eager(gate, up):
        return _C.swiglu(gate, up)
    return _swiglu(gate, up)


def geglu(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(gate, approximate) * up."""
    if _eager(gate, up):
        return _C.geglu(gate, up, approximate)
    return _geglu(gate, up, approximate)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     position_ids: torch.Tensor | None = None, unsqueeze_dim: int = 1
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding, exactly Hugging Face's apply_rotary_pos_emb:
    ``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)`` with cos
    and sin unsqueezed at `unsqueeze_dim` (1 for q of [batch, heads, seq, dim],
    2 for [batch, seq, heads, dim]) and rotate_half(x) = cat(-x2, x1) of x's two
    halves. position_ids is accepted and unused, as there. Computed in float
    with one rounding per output; q, k, cos and sin are all differentiable."""
    del position_ids  # deprecated and unused in Hugging Face's function too
    if not isinstance(unsqueeze_dim, int) or isinstance(unsqueeze_dim, bool):
        raise TypeError(f"custom::rotary_embedding: unsqueeze_dim must be an int, got {type(unsqueeze_dim).__name__}")
    return _ops.rotary_embedding.default(q, k, cos, sin, unsqueeze_dim)


# ---------------------------------------------------------------------------
# Parameters (or a residual) of another floating dtype than the input's, as
# F.rms_norm / F.layer_norm take them: under torch.autocast a bfloat16
# activation meets a float32 weight. The dispatcher ops keep one dtype per call
# (their checks say so); here the call is made in the wider dtype of the two and
# the result rounded once to the input's dtype, as torch returns it. Non-floating
# dtypes go to the op as they are, whose dtype check names them.
# ---------------------------------------------------------------------------


def _other_dtype(input, t) -> bool:
    """t is a tensor of another dtype than the tensor input (anything else: the
    op's own argument checks speak)."""
    return isinstance(t, torch.Tensor) and isinstance(input, torch.Tensor) and t.dtype != input.dtype


def _common_float(input: torch.Tensor, *others: torch.Tensor | None) -> torch.dtype | None:
    dtype = input.dtype
    if not dtype.is_floating_point:
        return None
    for t in others:
        if t is not None:
            if not t.dtype.is_floating_point:
                return None
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _default_eps(eps, input: torch.Tensor):
    # eps=None means the epsilon of the input's computation dtype (float32 for
    # 16-bit inputs), not of the wider dtype the call is made in.
    if eps is not None:
        return eps
    return torch.finfo(torch.float64 if input.dtype == torch.float64 else torch.float32).eps


def _mixed_rms_norm(input, shape, weight, eps):
    wide = _common_float(input, weight)
    if wide is None:
        return _rms_norm(input, shape, weight, _optional_float("rms_norm", eps))
    out = rms_norm(input.to(wide), shape, weight.to(wide), _default_eps(eps, input))
    return out.to(input.dtype)


def _mixed_layer_norm(input, shape, weight, bias, eps):
    wide = _common_float(input, weight, bias)
    if wide is None:
        return _layer_norm(input, shape, weight, bias, eps)
    out = layer_norm(input.to(wide), shape, None if weight is None else weight.to(wide),
                     None if bias is None else bias.to(wide), eps)
    return out.to(input.dtype)


def _mixed_fused_add_rms_norm(input, residual, shape, weight, eps):
    """The sum in the promoted dtype of input and residual (a float32 residual
    stream stays float32; a same-dtype sum is rounded to that dtype, as in a
    model), its RMSNorm rounded once to the input's dtype."""
    wide = _common_float(input, residual, weight)
    if wide is None:
        return _fused_add_rms_norm(input, residual, shape, weight, _optional_float("fused_add_rms_norm", eps))
    total_dtype = torch.promote_types(input.dtype, residual.dtype)
    if total_dtype == input.dtype == residual.dtype:
        total = add(input, residual)
    else:
        total = add(input.to(total_dtype), residual.to(total_dtype))
    normed = rms_norm(total.to(wide), shape, None if weight is None else weight.to(wide), _default_eps(eps, input))
    return normed.to(input.dtype), total
