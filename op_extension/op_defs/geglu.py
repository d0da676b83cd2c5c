"""geglu: gelu(gate, approximate) * up (op_protos/geglu.json), and geglu_backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from op_extension.toolkit import (KEEP_LAYOUT, ROW, FakeRule, eager, fast_path, first_order_jvp, plus, row_sharding,
                                  traced, vmap_same_shape)

_custom = torch.ops.custom


def geglu(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(gate, approximate) * up."""
    if eager(gate, up):
        out = fast_path.geglu(gate, up, approximate)
        if out is not NotImplemented:  # up of another dtype: the op's check refuses it
            return out
    return _geglu(gate, up, approximate)


FAKE = {
    "geglu": FakeRule(same_shape=("up",), layout=KEEP_LAYOUT),
    "geglu_backward": FakeRule(dtype_of="gate", same=("up", "grad_output"), same_shape=("up", "grad_output"),
                               layout=KEEP_LAYOUT),
}


def ref_geglu(gate, up, approximate="none", *, dtype):
    return F.gelu(gate, approximate=approximate) * up


def ref_geglu_backward(grad_output, gate, up, approximate="none", *, dtype):
    grad_gate = torch.ops.aten.gelu_backward(grad_output * up, gate, approximate=approximate)
    return grad_gate, grad_output * F.gelu(gate, approximate=approximate)


REFERENCES = {"geglu": ref_geglu, "geglu_backward": ref_geglu_backward}


class _Geglu(torch.autograd.Function):
    @staticmethod
    def forward(gate, up, approximate):
        return _custom.geglu(gate, up, approximate)

    @staticmethod
    def setup_context(ctx, inputs, output):
        gate, up, ctx.approximate = inputs
        ctx.save_for_backward(gate, up)
        ctx.save_for_forward(gate, up)

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        return *_custom.geglu_backward(grad, gate, up, ctx.approximate), None

    @staticmethod
    def jvp(ctx, t_gate, t_up, _):
        first_order_jvp("geglu")
        gate, up = ctx.saved_tensors
        from_gate = None if t_gate is None else _custom.geglu_backward(t_gate, gate, up, ctx.approximate)[0]
        from_up = None if t_up is None else _custom.geglu_backward(t_up, gate, up, ctx.approximate)[1]
        return plus(from_gate, from_up)

    @staticmethod
    def vmap(info, in_dims, *args):
        return vmap_same_shape(_Geglu.apply)(info, in_dims, *args)


TRANSFORM = _Geglu
VMAP = {"geglu": vmap_same_shape(_custom.geglu.default),
        "geglu_backward": vmap_same_shape(_custom.geglu_backward.default)}
_geglu = traced(_custom.geglu.default, _Geglu.apply)


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_geglu(gate, up, approximate="none"):
    return row_sharding(range(gate.ndim), [ROW], [ROW, ROW], linear=(1,))  # gelu(gate) * up


def _shard_geglu_backward(grad_output, gate, up, approximate="none"):
    return row_sharding(range(gate.ndim), [ROW, ROW], [ROW, ROW, ROW], linear=(0,))


SHARDING = {"geglu": _shard_geglu, "geglu_backward": _shard_geglu_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
from op_extension.bench_spec import GELU_APPROX, INTERMEDIATE, Bench, OpSetup, activations  # noqa: E402


def composite_geglu(gate, up):
    # GemmaMLP: gelu_pytorch_tanh(gate_proj(x)) * up_proj(x).
    return F.gelu(gate, approximate=GELU_APPROX) * up


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 2)
    return OpSetup(inputs, [0, 1], {
        "ours": lambda g, u: ops.geglu(g, u, approximate=GELU_APPROX),
        "native": lambda g, u: F.gelu(g, approximate=GELU_APPROX) * u,
        "composite": composite_geglu,
    }, shape=shape)


def _liger():
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    return lambda g, u: LigerGELUMulFunction.apply(g, u)  # tanh GELU, as GELU_APPROX


# fwd: read gate, up; write out.        bwd: read dout, gate, up; write dgate, dup.
BENCH = Bench(_bench_setup, fwd_bytes=(3, 0), bwd_bytes=(5, 0), hidden=INTERMEDIATE, order=80, liger=_liger)
