"""swiglu: silu(gate) * up, the gated unit of LLaMA-style MLPs (op_protos/swiglu.json),
and swiglu_backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from op_extension.toolkit import (KEEP_LAYOUT, ROW, FakeRule, eager, fast_path, first_order_jvp, plus, row_sharding,
                                  traced, vmap_same_shape)

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


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_swiglu(gate, up):
    return row_sharding(range(gate.ndim), [ROW], [ROW, ROW], linear=(1,))  # silu(gate) * up


def _shard_swiglu_backward(grad_output, gate, up):
    return row_sharding(range(gate.ndim), [ROW, ROW], [ROW, ROW, ROW], linear=(0,))


SHARDING = {"swiglu": _shard_swiglu, "swiglu_backward": _shard_swiglu_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
from op_extension.bench_spec import INTERMEDIATE, Bench, OpSetup, activations  # noqa: E402


def composite_swiglu(gate, up):
    # LlamaMLP: act_fn(gate_proj(x)) * up_proj(x) with act_fn = SiLU.
    return F.silu(gate) * up


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 2)
    return OpSetup(inputs, [0, 1], {
        "ours": lambda g, u: ops.swiglu(g, u),
        "native": lambda g, u: F.silu(g) * u,
        "composite": composite_swiglu,
    }, shape=shape)


def _liger():
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    return lambda g, u: LigerSiLUMulFunction.apply(g, u)


# fwd: read gate, up; write out.        bwd: read dout, gate, up; write dgate, dup.
BENCH = Bench(_bench_setup, fwd_bytes=(3, 0), bwd_bytes=(5, 0), hidden=INTERMEDIATE, order=70, liger=_liger)
