"""The functional API, mirroring torch.nn.functional.

Each function is a thin call into the dispatcher op torch.ops.custom.<name>, so
eager mode, autograd, torch.compile and torch.export all see one custom op.
Argument checks happen in the op itself (C++ for real tensors, the fake kernel
under tracing), before any kernel runs.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

__all__ = ["add", "fused_add_rms_norm", "geglu", "gelu", "layer_norm", "rms_norm", "softmax", "swiglu"]

_ops = torch.ops.custom
_add = _ops.add.default
_gelu = _ops.gelu.default
_rms_norm = _ops.rms_norm.default
_fused_add_rms_norm = _ops.fused_add_rms_norm.default
_layer_norm = _ops.layer_norm.default
_softmax = _ops.softmax.default
_swiglu = _ops.swiglu.default
_geglu = _ops.geglu.default


def _shape_list(op: str, normalized_shape) -> list[int]:
    if isinstance(normalized_shape, (int, torch.SymInt)):
        return [normalized_shape]
    if isinstance(normalized_shape, (Sequence, torch.Size)):
        return list(normalized_shape)
    raise TypeError(f"custom::{op}: normalized_shape must be an int or a sequence of ints, got {type(normalized_shape).__name__}")


def add(input: torch.Tensor, other: torch.Tensor | numbers.Number, alpha: float = 1) -> torch.Tensor:
    """input + alpha * other, with broadcasting. A number `other` becomes a 0-dim tensor."""
    if not isinstance(other, torch.Tensor):
        if not isinstance(other, numbers.Real):
            raise TypeError(f"custom::add: other must be a tensor or a real number, got {type(other).__name__}")
        other = torch.full((), other, dtype=input.dtype, device=input.device)
    return _add(input, other, float(alpha))


def gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, exact (erf) or with the tanh approximation, as F.gelu."""
    return _gelu(input, approximate)


def rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """RMSNorm over the trailing `normalized_shape` dims, as F.rms_norm.

    eps=None uses torch.finfo(input.dtype).eps.
    """
    return _rms_norm(input, _shape_list("rms_norm", normalized_shape), weight, eps)


def fused_add_rms_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(input + residual), input + residual) in one pass over memory."""
    return _fused_add_rms_norm(input, residual, _shape_list("fused_add_rms_norm", normalized_shape), weight, eps)


def layer_norm(
    input: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the trailing `normalized_shape` dims, as F.layer_norm."""
    return _layer_norm(input, _shape_list("layer_norm", normalized_shape), weight, bias, eps)


def softmax(input: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax along `dim`, as torch.softmax."""
    if not isinstance(dim, int):
        raise TypeError(f"custom::softmax: dim must be an int, got {type(dim).__name__}")
    return _softmax(input, dim)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, the gated unit of LLaMA-style MLPs."""
    return _swiglu(gate, up)


def geglu(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(gate, approximate) * up."""
    return _geglu(gate, up, approximate)
