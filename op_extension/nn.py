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


CASTING_MODES = ("none", "llama", "gemma")


class CustomRMSNorm(nn.Module):
    """As torch.nn.RMSNorm, and as the RMSNorm classes of Hugging Face models.

    Constructor: torch's ``(normalized_shape, eps=None, elementwise_affine=True,
    device=None, dtype=None)``, or Hugging Face's ``(hidden_size, eps=1e-6)``
    (Llama, Mistral, Qwen2/3, Phi-3) and ``(dim, eps=1e-6)`` (Gemma 1/2/3), by
    keyword too. Parameter ``weight``, as all of them, so checkpoints load.

    offset: the weight is used as ``offset + weight`` (Gemma: 1.0, the weight then
    starts at zeros). Formed in float32, as Gemma does, whatever the weight's dtype.

    casting_mode: where the result is rounded to the input's dtype, so a patched
    model computes what the model it patches computes:
      * "none" (torch.nn.RMSNorm's own semantics, most accurate): x * rstd *
        (offset + w) in float32, rounded once;
      * "gemma" (Gemma 1/2/3): the same, by Gemma's definition (normalise in float32,
        multiply by (1 + w) in float32, cast last);
      * "llama" (Llama and the models that copy its RMSNorm): x * rstd rounded to the
        input's dtype first, then multiplied by the weight in the weight's dtype
        (for a float32 weight and a bfloat16 input the result is float32, as there).
    The statistics (mean of squares, rsqrt) are float32 as in every mode; on CPU
    the squares are summed in torch's order, so the result is the model's bit for
    bit (docs/transformers.md).
    """

    def __init__(
        self,
        normalized_shape=None,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
        *,
        hidden_size: int | None = None,
        dim: int | None = None,
        offset: float = 0.0,
        casting_mode: str = "none",
    ) -> None:
        super().__init__()
        given = [v for v in (normalized_shape, hidden_size, dim) if v is not None]
        if len(given) != 1:
            raise TypeError(f"{type(self).__name__}: give exactly one of normalized_shape, hidden_size, dim "
                            f"(got {len(given)})")
        if casting_mode not in CASTING_MODES:
            raise ValueError(f"{type(self).__name__}: casting_mode must be one of {CASTING_MODES}, got {casting_mode!r}")
        self.normalized_shape = _as_shape(given[0])
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.offset = float(offset)
        self.casting_mode = casting_mode
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    @property
    def variance_epsilon(self) -> float | None:
        """Hugging Face's name for eps (LlamaRMSNorm and its copies)."""
        return self.eps

    @variance_epsilon.setter
    def variance_epsilon(self, value: float | None) -> None:
        self.eps = value

    def reset_parameters(self) -> None:
        # The weight as used is offset + weight: start at 1.
        if self.weight is not None:
            nn.init.constant_(self.weight, 1.0 - self.offset)

    def _scale(self) -> torch.Tensor | None:
        """The weight as used: offset + weight (float32 when there is an offset)."""
        if self.weight is None or self.offset == 0.0:
            return self.weight
        return self.offset + self.weight.float()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.casting_mode == "llama":
            return _times_weight(self._scale(), ops.rms_norm(input, self.normalized_shape, None, self.eps))
        return ops.rms_norm(input, self.normalized_shape, self._scale(), self.eps)

    def extra_repr(self) -> str:
        extra = f", offset={self.offset}" if self.offset else ""
        extra += f", casting_mode={self.casting_mode!r}" if self.casting_mode != "none" else ""
        return nn.RMSNorm.extra_repr(self) + extra  # torch's own text first, as this torch prints it


def _times_weight(weight: torch.Tensor | None, normed: torch.Tensor) -> torch.Tensor:
    # Llama's order (weight * hidden_states.to(input_dtype)): the product in the
    # promoted dtype of the two.
    return normed if weight is None else weight * normed


class FusedAddRMSNorm(CustomRMSNorm):
    """RMSNorm of (input + residual), also returning the sum as the next residual.

    forward(input, residual) -> (rms_norm(input + residual), input + residual),
    the pre-norm transformer step that vLLM calls fused_add_rms_norm. The sum is
    rounded to the inputs' dtype, as ``residual + hidden_states`` is in a model;
    constructor, offset and casting_mode as CustomRMSNorm.
    """

    def forward(self, input: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.casting_mode == "llama":
            normed, total = ops.fused_add_rms_norm(input, residual, self.normalized_shape, None, self.eps)
            return _times_weight(self._scale(), normed), total
        return ops.fused_add_rms_norm(input, residual, self.normalized_shape, self._scale(), self.eps)


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
        # torch's own text, whatever this torch prints (2.11 has no bias=, 2.13 has).
        return nn.LayerNorm.extra_repr(self)


MLP_CASTING_MODES = ("none", "hf")


class _GatedMLP(nn.Module):
    """LLaMA-style MLP: down_proj(act(gate_proj(x)) * up_proj(x)).

    Same submodule names as Hugging Face's LlamaMLP (gate_proj, up_proj,
    down_proj), or with fused_gate_up=True Phi-3's (gate_up_proj, whose output is
    [gate, up] along the last dim, and down_proj), so a state_dict loads as is.
    Built from sizes, ``(hidden_size, intermediate_size, bias=False)``, or from a
    Hugging Face config as Hugging Face builds its MLPs: ``Cls(config)``.

    casting_mode: "none" computes act(gate) * up in float32 with one rounding (the
    fused kernel); "hf" is ``act_fn(gate) * up`` as the model computes it, with
    torch's activation (two rounded ops in a 16-bit model), so that logits are bit
    for bit the unpatched model's: only the norms then run our kernels.
    """

    def __init__(
        self,
        hidden_size=None,
        intermediate_size: int | None = None,
        bias: bool = False,
        device=None,
        dtype=None,
        *,
        fused_gate_up: bool = False,
        casting_mode: str = "none",
    ) -> None:
        super().__init__()
        if hasattr(hidden_size, "hidden_size"):  # a Hugging Face config, passed as HF does
            config = hidden_size
            hidden_size = config.hidden_size
            intermediate_size = config.intermediate_size if intermediate_size is None else intermediate_size
            bias = bool(getattr(config, "mlp_bias", bias))
        if hidden_size is None or intermediate_size is None:
            raise TypeError(f"{type(self).__name__}: needs hidden_size and intermediate_size (or a config)")
        if casting_mode not in MLP_CASTING_MODES:
            raise ValueError(f"{type(self).__name__}: casting_mode must be one of {MLP_CASTING_MODES}, "
                             f"got {casting_mode!r}")
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.fused_gate_up = fused_gate_up
        self.casting_mode = casting_mode
        factory = {"device": device, "dtype": dtype}
        if fused_gate_up:
            self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias, **factory)
        else:
            self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias, **factory)
            self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias, **factory)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias, **factory)

    @classmethod
    def from_config(cls, config, **kwargs):
        """Builds from a Hugging Face config (hidden_size, intermediate_size, mlp_bias)."""
        return cls(config, **kwargs)

    def _gate_up(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fused_gate_up:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return gate, up
        return self.gate_proj(x), self.up_proj(x)

    def extra_repr(self) -> str:
        return f"casting_mode={self.casting_mode!r}" if self.casting_mode != "none" else ""


class CustomSwiGLUMLP(_GatedMLP):
    """down_proj(silu(gate) * up): Llama, Mistral, Qwen2/3 (and Phi-3 with fused_gate_up)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self._gate_up(x)
        if self.casting_mode == "hf":
            # SiLU's value rounded first, as the model computes it (torch's silu).
            return self.down_proj(torch.nn.functional.silu(gate) * up)
        return self.down_proj(ops.swiglu(gate, up))


class CustomGEGLUMLP(_GatedMLP):
    """down_proj(gelu(gate) * up): Gemma 1/2/3 (approximate='tanh')."""

    def __init__(self, hidden_size=None, intermediate_size: int | None = None, bias: bool = False,
                 approximate: str = "tanh", device=None, dtype=None, **kwargs) -> None:
        super().__init__(hidden_size, intermediate_size, bias=bias, device=device, dtype=dtype, **kwargs)
        if approximate not in ("none", "tanh"):
            raise ValueError(f"CustomGEGLUMLP: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self._gate_up(x)
        if self.casting_mode == "hf":
            # torch's GELU, rounded first: our kernel's float GELU differs from
            # ATen's in the last bit for ~1e-4 of inputs, which a 16-bit rounding
            # then sometimes shows.
            return self.down_proj(torch.nn.functional.gelu(gate, approximate=self.approximate) * up)
        return self.down_proj(ops.geglu(gate, up, self.approximate))

    def extra_repr(self) -> str:
        extra = super().extra_repr()
        return f"approximate={self.approximate!r}" + (f", {extra}" if extra else "")
