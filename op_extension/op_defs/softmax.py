"""softmax: softmax along `dim`, as torch.softmax (op_protos/softmax.json), and
softmax_backward."""

from __future__ import annotations

import torch

from op_extension.toolkit import (ROW, FakeRule, batch_first, eager, fast_path, first_order_jvp, int64_arg,
                                  row_sharding, traced, wrap_dim)

_custom = torch.ops.custom


def softmax(input: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax along `dim`, as torch.softmax."""
    if not isinstance(dim, int):
        raise TypeError(f"custom::softmax: dim must be an int, got {type(dim).__name__}")
    if eager(input):
        return fast_path.softmax(input, dim)
    return _softmax(input, int64_arg("softmax", "dim", dim))


def _check_dim(op, input, dim):
    wrap_dim(op, dim, input.dim())


def _check_backward_dim(op, grad_output, output, dim):
    wrap_dim(op, dim, output.dim())


FAKE = {
    "softmax": FakeRule(check=_check_dim),
    "softmax_backward": FakeRule(dtype_of="output", same=("grad_output",), same_shape=("grad_output",),
                                 check=_check_backward_dim),
}


def ref_softmax(input, dim, *, dtype):
    return torch.softmax(input, dim)


def ref_softmax_backward(grad_output, output, dim, *, dtype):
    return torch.ops.aten._softmax_backward_data(grad_output, output, dim, output.dtype)


REFERENCES = {"softmax": ref_softmax, "softmax_backward": ref_softmax_backward}
# torch's own ops (the references, run in the inputs' dtype): implementations op_extension.tune times.
NATIVE = REFERENCES


def _vmap_softmax(op, call):
    """Rule for softmax(input, dim) and softmax_backward(grad_output, output, dim):
    the batch dim first, dim shifted by one."""

    def rule(info, in_dims, *args):
        *tensors, dim = args
        tensors = [batch_first(t, d, info.batch_size) for t, d in zip(tensors, in_dims)]
        ndim = tensors[0].dim() - 1
        dim = wrap_dim(op, dim, ndim)  # the op's own check and message
        if ndim == 0:  # a 0-dim softmax is over the one element
            return call(*(t.unsqueeze(1) for t in tensors), 1).squeeze(1), 0
        return call(*tensors, dim + 1), 0

    return rule


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(input, dim):
        return _custom.softmax(input, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim = inputs[1]
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (output,) = ctx.saved_tensors
        return _custom.softmax_backward(grad, output, ctx.dim), None

    @staticmethod
    def jvp(ctx, t_input, _):
        # J = diag(y) - y y^T along dim is symmetric: J t = softmax_backward(t, y).
        first_order_jvp("softmax")
        (output,) = ctx.saved_tensors
        return _custom.softmax_backward(t_input, output, ctx.dim)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_softmax("softmax", _Softmax.apply)(info, in_dims, *args)


TRANSFORM = _Softmax
VMAP = {"softmax": _vmap_softmax("softmax", _custom.softmax.default),
        "softmax_backward": _vmap_softmax("softmax_backward", _custom.softmax_backward.default)}
_softmax = traced(_custom.softmax.default, _Softmax.apply)


# ---- the Ascend simulator -------------------------------------------------------------


def _zero_dim_as_vector(*names: str):
    """As the npu glue: a 0-dim tensor is softmaxed as the one-element vector it
    holds (ascend_sim.run views the result back to the prototype's shape). `dim`
    goes to aclnn as it is: aclnn wraps it, and for [1] accepts what torch does
    for 0-dim."""

    def convert(args: dict) -> dict:
        return dict(args, **{n: args[n].reshape(1) for n in names if args[n].dim() == 0})

    return convert


NPU_GLUE_ARGS = {"softmax": _zero_dim_as_vector("input"),
                 "softmax_backward": _zero_dim_as_vector("grad_output", "output")}


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _rows(input, dim):
    """Every dim of input but the softmax's."""
    return [d for d in range(input.ndim) if d != dim % max(input.ndim, 1)]


def _shard_softmax(input, dim):
    return row_sharding(_rows(input, dim), [ROW], [ROW])


def _shard_softmax_backward(grad_output, output, dim):
    return row_sharding(_rows(output, dim), [ROW], [ROW, ROW], linear=(0,))


SHARDING = {"softmax": _shard_softmax, "softmax_backward": _shard_softmax_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
from op_extension.bench_spec import Bench, OpSetup, activations  # noqa: E402


def composite_softmax(x):
    # Numerically-stable softmax over the last dim, written out.
    m = x.amax(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 1)
    return OpSetup(inputs, [0], {
        "ours": lambda x: ops.softmax(x, -1),
        "native": lambda x: torch.softmax(x, -1),
        "composite": composite_softmax,
    }, shape=shape)


# fwd: read x; write y.                 bwd: read dy, y; write dx.
BENCH = Bench(_bench_setup, fwd_bytes=(2, 0), bwd_bytes=(3, 0), order=60)
