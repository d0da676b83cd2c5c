"""Drop-in nn.Modules built on the custom ops.

Constructor arguments, parameter names and state_dict keys match the PyTorch
(or Hugging Face) module each one replaces, so a checkpoint loads either way.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from . import ops

__all__ = [
    "CustomGELU",
    "CustomGEGLUMLP",
    "CustomLayerNorm",
    "CustomRMSNorm",
    "CustomSoftmax",
    "CustomSwiGLUMLP",
    "FusedAddRMSNorm",
]


def _as_shape(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


class CustomGELU(nn.Module):
    """As torch.nn.GELU(approximate='none' | 'tanh')."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"CustomGELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return ops.gelu(input, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class CustomSoftmax(nn.Module):
    """As torch.nn.Softmax(dim). The dim is required: the implicit choice is deprecated in PyTorch."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        if dim is None:
            raise ValueError("CustomSoftmax: dim is required")
        self.dim = dim

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return ops.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class CustomRMSNorm(nn.Module):
    """As torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class FusedAddRMSNorm(CustomRMSNorm):
    """RMSNorm of (input + residual), also returning the sum as the next residual.

    forward(input, residual) -> (rms_norm(input + residual), input + residual),
    the pre-norm transformer step that vLLM calls fused_add_rms_norm.
    """

    def forward(self, input: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ops.fused_add_rms_norm(input, residual, self.normalized_shape, self.weight, self.eps)


class CustomLayerNorm(nn.Module):
    """As torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True)."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
            if bias:
                self.bias = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return ops.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            f"bias={self.bias is not None}"
        )


class _GatedMLP(nn.Module):
    """LLaMA-style MLP: down_proj(act(gate_proj(x)) * up_proj(x)).

    Same submodule names as Hugging Face's LlamaMLP, so its state_dict loads as is.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        factory = {"device": device, "dtype": dtype}
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias, **factory)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias, **factory)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias, **factory)

    @classmethod
    def from_config(cls, config, **kwargs):
        """Builds from a Hugging Face config (hidden_size, intermediate_size, mlp_bias)."""
        return cls(config.hidden_size, config.intermediate_size, bias=getattr(config, "mlp_bias", False), **kwargs)


class CustomSwiGLUMLP(_GatedMLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.swiglu(self.gate_proj(x), self.up_proj(x)))


class CustomGEGLUMLP(_GatedMLP):
    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, approximate: str = "tanh", device=None, dtype=None) -> None:
        super().__init__(hidden_size, intermediate_size, bias=bias, device=device, dtype=dtype)
        if approximate not in ("none", "tanh"):
            raise ValueError(f"CustomGEGLUMLP: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.geglu(self.gate_proj(x), self.up_proj(x), self.approximate))

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"
