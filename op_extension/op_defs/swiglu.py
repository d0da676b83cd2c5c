"""swiglu: silu(gate) * up, the gated unit of LLaMA-style MLPs (op_protos/swiglu.json),
and swiglu_backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from op_extension.toolkit import KEEP_LAYOUT, FakeRule, eager, fast_path, first_order_jvp, plus, traced, vmap_same_shape

_custom = torch.ops.custom


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, the gated unit of LLaMA-style MLPs."""
    if eager(gate, up):
        out = fast_path.swiglu(gate, up)
        if out is not NotImplemented:  # up of another dtype: the op's check refuses it
            return out
    return _swiglu(gate, up)


FAKE = {
    "swiglu": FakeRule(same_shape=("up",), layout=KEEP_LAYOUT),
    "swiglu_backward": FakeRule(dtype_of="gate", same=("up", "grad_output"), same_shape=("up", "grad_output"),
                                layout=KEEP_LAYOUT),
}


def ref_swiglu(gate, up, *, dtype):
    return F.silu(gate) * up


def ref_swiglu_backward(grad_output, gate, up, *, dtype):
    sig = torch.sigmoid(gate)
    silu = gate * sig
    return grad_output * up * sig * (1 + gate * (1 - sig)), grad_output * silu


REFERENCES = {"swiglu": ref_swiglu, "swiglu_backward": ref_swiglu_backward}


class _Swiglu(torch.autograd.Function):
    @staticmethod
    def forward(gate, up):
        return _custom.swiglu(gate, up)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        return _custom.swiglu_backward(grad, gate, up)

    @staticmethod
    def jvp(ctx, t_gate, t_up):
        # swiglu_backward(t, g, u) = (t * silu'(g) * u, t * silu(g)): the two
        # diagonal Jacobians, one per input.
        first_order_jvp("swiglu")
        gate, up = ctx.saved_tensors
        from_gate = None if t_gate is None else _custom.swiglu_backward(t_gate, gate, up)[0]
        from_up = None if t_up is None else _custom.swiglu_backward(t_up, gate, up)[1]
        return plus(from_gate, from_up)

    @staticmethod
    def vmap(info, in_dims, *args):
        return vmap_same_shape(_Swiglu.apply)(info, in_dims, *args)


TRANSFORM = _Swiglu
VMAP = {"swiglu": vmap_same_shape(_custom.swiglu.default),
        "swiglu_backward": vmap_same_shape(_custom.swiglu_backward.default)}
_swiglu = traced(_custom.swiglu.default, _Swiglu.apply)
