"""gelu: GELU, exact (erf) or with the tanh approximation, as F.gelu
(op_protos/gelu.json), and gelu_backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from op_extension.toolkit import (KEEP_LAYOUT, ROW, FakeRule, eager, fast_path, first_order_jvp, row_sharding, traced,
                                  vmap_same_shape)

_custom = torch.ops.custom


def gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU, exact (erf) or with the tanh approximation, as F.gelu."""
    if eager(input):
        return fast_path.gelu(input, approximate)
    return _gelu(input, approximate)


FAKE = {
    "gelu": FakeRule(layout=KEEP_LAYOUT),
    "gelu_backward": FakeRule(dtype_of="input", same=("grad_output",), same_shape=("grad_output",),
                              layout=KEEP_LAYOUT),
}


def ref_gelu(input, approximate="none", *, dtype):
    return F.gelu(input, approximate=approximate)


def ref_gelu_backward(grad_output, input, approximate="none", *, dtype):
    return torch.ops.aten.gelu_backward(grad_output, input, approximate=approximate)


REFERENCES = {"gelu": ref_gelu, "gelu_backward": ref_gelu_backward}
# torch's own ops (the references, run in the inputs' dtype): implementations op_extension.tune times.
NATIVE = REFERENCES


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(input, approximate):
        return _custom.gelu(input, approximate)

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, ctx.approximate = inputs
        ctx.save_for_backward(input)
        ctx.save_for_forward(input)

    @staticmethod
    def backward(ctx, grad):
        (input,) = ctx.saved_tensors
        return _custom.gelu_backward(grad, input, ctx.approximate), None

    @staticmethod
    def jvp(ctx, t_input, _):
        first_order_jvp("gelu")
        (input,) = ctx.saved_tensors
        return _custom.gelu_backward(t_input, input, ctx.approximate)

    @staticmethod
    def vmap(info, in_dims, *args):
        return vmap_same_shape(_Gelu.apply)(info, in_dims, *args)


TRANSFORM = _Gelu
VMAP = {"gelu": vmap_same_shape(_custom.gelu.default),
        "gelu_backward": vmap_same_shape(_custom.gelu_backward.default)}
_gelu = traced(_custom.gelu.default, _Gelu.apply)


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_gelu(input, approximate="none"):
    # Not linear: a Partial input is summed first.
    return row_sharding(range(input.ndim), [ROW], [ROW])


def _shard_gelu_backward(grad_output, input, approximate="none"):
    return row_sharding(range(input.ndim), [ROW], [ROW, ROW], linear=(0,))


SHARDING = {"gelu": _shard_gelu, "gelu_backward": _shard_gelu_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
import math  # noqa: E402

from op_extension.bench_spec import GELU_APPROX, Bench, OpSetup, activations  # noqa: E402


def composite_gelu_tanh(x):
    # Written-out tanh GELU, as in HF NewGELUActivation (GPT-2 and friends).
    return 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 1)
    return OpSetup(inputs, [0], {
        "ours": lambda x: ops.gelu(x, approximate=GELU_APPROX),
        "native": lambda x: F.gelu(x, approximate=GELU_APPROX),
        "composite": composite_gelu_tanh,
    }, shape=shape)


# fwd: read x; write y.                 bwd: read dy, x; write dx.
BENCH = Bench(_bench_setup, fwd_bytes=(2, 0), bwd_bytes=(3, 0), order=20)
