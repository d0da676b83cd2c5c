"""add: input + alpha * other, with broadcasting (op_protos/add.json); its backward
add_backward sums a gradient over the dims an operand was broadcast along."""

from __future__ import annotations

import numbers

import torch

from op_extension.toolkit import (KEEP_LAYOUT, FakeRule, batch_first, eager, fast_path, first_order_jvp, float_arg,
                                  own_tangent, pad_after_batch, placements, traced)

_custom = torch.ops.custom


# ---- the functional API: op_extension.ops.add ------------------------------------


def add(input: torch.Tensor, other: torch.Tensor | numbers.Number, alpha: float = 1.0) -> torch.Tensor:
    """input + alpha * other, with broadcasting. A number `other` becomes a 0-dim tensor."""
    if not isinstance(other, torch.Tensor):
        if not isinstance(other, numbers.Real):
            raise TypeError(f"custom::add: other must be a tensor or a real number, got {type(other).__name__}")
        other = torch.full((), other, dtype=input.dtype, device=input.device)
    alpha = float_arg("add", "alpha", alpha)
    if eager(input, other):
        out = fast_path.add(input, other, alpha)
        if out is not NotImplemented:  # other of another dtype: the op's check refuses it
            return out
    return _add(input, other, alpha)


# ---- fake kernels ------------------------------------------------------------------


def _check_input_size(op, grad_output, input_size, alpha=1.0):
    """As check_add_backward_size in checks.cpp."""
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


FAKE = {
    "add": FakeRule(layout=KEEP_LAYOUT),
    "add_backward": FakeRule(check=_check_input_size),
}


# ---- references ----------------------------------------------------------------------


def ref_add(input, other, alpha=1.0, *, dtype):
    return input + alpha * other


def ref_add_backward(grad_output, input_size, alpha=1.0, *, dtype):
    # The gradient of a broadcast operand sums over the dims it was broadcast along.
    return (grad_output * alpha).sum_to_size(list(input_size))


REFERENCES = {"add": ref_add, "add_backward": ref_add_backward}


def native_add(input, other, alpha=1.0, *, dtype):
    return torch.add(input, other, alpha=alpha)


# torch's own op, in the inputs' dtype: one of the implementations op_extension.tune times.
NATIVE = {"add": native_add}

# add backward in float32: the gradient of a broadcast operand is a sum over up
# to a few hundred rows, accumulated in float32 in row order (so that it is
# deterministic), where ATen sums pairwise: for 300 terms of |g| ~ 1 scaled by
# alpha the two differ by ~sqrt(300) * eps * |partial sum| ~ 3e-5. atol 1e-4,
# rtol 1e-5 (still ~100x below the error of a missing or duplicated term).
TOLERANCES = {torch.float32: {"add.backward": (1e-4, 1e-5)}}


# ---- torch.func transforms and forward-mode AD ------------------------------------------


def _vmap_add(call):
    def rule(info, in_dims, input, other, alpha):
        # Broadcasting aligns trailing dims, so a batched operand of lower
        # logical rank gets 1s after its batch dim; an unbatched one broadcasts
        # against the batch dim as it is.
        ndim = max(t.dim() - (d is not None) for t, d in ((input, in_dims[0]), (other, in_dims[1])))
        moved = []
        for t, d in ((input, in_dims[0]), (other, in_dims[1])):
            if d is not None:
                t = t.movedim(d, 0)
                t = pad_after_batch(t, ndim - (t.dim() - 1))
            moved.append(t)
        return call(moved[0], moved[1], alpha), 0

    return rule


def _vmap_add_backward(info, in_dims, grad_output, input_size, alpha):
    # grad_output has the output's logical dims after the batch dim; the
    # operand's size, padded to that rank, keeps the batch dim out of the sum.
    g = batch_first(grad_output, in_dims[0], info.batch_size)
    size = list(input_size)
    padded = [info.batch_size] + [1] * (g.dim() - 1 - len(size)) + size
    out = _custom.add_backward(g, padded, alpha)
    return out.reshape([info.batch_size] + size), 0


class _Add(torch.autograd.Function):
    @staticmethod
    def forward(input, other, alpha):
        return _custom.add(input, other, alpha)

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, other, alpha = inputs
        ctx.input_shape, ctx.other_shape, ctx.alpha = input.shape, other.shape, alpha
        ctx.output_shape = output.shape

    @staticmethod
    def backward(ctx, grad):
        def reduce(shape, scale):
            # As aten::add: the gradient passes through where nothing was
            # broadcast or scaled; otherwise add_backward sums the broadcast dims.
            if scale == 1.0 and grad.shape == shape:
                return grad
            return _custom.add_backward(grad, list(shape), scale)

        grad_input = reduce(ctx.input_shape, 1.0) if ctx.needs_input_grad[0] else None
        grad_other = reduce(ctx.other_shape, ctx.alpha) if ctx.needs_input_grad[1] else None
        return grad_input, grad_other, None

    @staticmethod
    def jvp(ctx, t_input, t_other, _):
        first_order_jvp("add")
        if t_input is not None and t_other is not None:
            return _custom.add(t_input, t_other, ctx.alpha)
        return own_tangent(t_input if t_other is None else ctx.alpha * t_other, ctx.output_shape)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_add(_Add.apply)(info, in_dims, *args)


TRANSFORM = _Add
VMAP = {"add": _vmap_add(_custom.add.default), "add_backward": _vmap_add_backward}
# Outside tracing, the traced path's calls (a tensor subclass or torch function
# mode is involved) go to _Add under torch.func transforms and forward-mode AD;
# the C++ fast path does that by itself.
_add = traced(_custom.add.default, _Add.apply)


# ---- the simulators ---------------------------------------------------------------------


def _number_other(args: dict) -> dict:
    # As ops.add: a number `other` becomes a 0-dim tensor of input's dtype.
    other = args["other"]
    if not isinstance(other, torch.Tensor):
        args = dict(args, other=torch.full((), other, dtype=args["input"].dtype))
    return args


def _materialised_broadcast(args: dict) -> dict:
    # As the npu glue: AddCustom takes operands of the output's shape, so a
    # broadcast operand is expanded (and made contiguous by the binding).
    shape = torch.broadcast_shapes(args["input"].shape, args["other"].shape)
    return dict(args, input=args["input"].expand(shape), other=args["other"].expand(shape))


SIMULATOR_ARGS = {"add": _number_other}
NPU_GLUE_ARGS = {"add": _materialised_broadcast}


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_add(input, other, alpha=1.0):
    # Elementwise with broadcasting: on an output dim an operand spans, it is
    # sharded as the output; on one it is broadcast along, replicated. input +
    # alpha * other is linear in both together: Partial + Partial is Partial.
    R, S, P = placements()
    shape = torch.broadcast_shapes(input.shape, other.shape)

    def along(t, d):
        i = d - (len(shape) - t.ndim)
        return S(i) if i >= 0 and t.shape[i] == shape[d] else R

    return ([([R], [R, R]), ([P], [P, P])]
            + [([S(d)], [along(input, d), along(other, d)]) for d in range(len(shape))])


def _shard_add_backward(grad_output, input_size, alpha=1.0):
    # A sum of grad_output over the dims the operand was broadcast along: one
    # of them sharded gives a Partial sum, a dim the operand spans stays sharded.
    R, S, P = placements()
    offset = grad_output.ndim - len(input_size)
    found = [([R], [R]), ([P], [P])]
    for d in range(grad_output.ndim):
        i = d - offset
        found.append(([S(i) if i >= 0 and input_size[i] == grad_output.shape[d] else P], [S(d)]))
    return found


SHARDING = {"add": _shard_add, "add_backward": _shard_add_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
from op_extension.bench_spec import Bench, OpSetup, activations  # noqa: E402


def composite_add(x, y):
    return torch.add(x, y)


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 2)
    return OpSetup(inputs, [0, 1], {
        "ours": lambda x, y: ops.add(x, y),
        "native": lambda x, y: torch.add(x, y),
        "composite": composite_add,
    }, shape=shape)


# fwd: read x, y; write out.            bwd: read dout; write dx, dy.
BENCH = Bench(_bench_setup, fwd_bytes=(3, 0), bwd_bytes=(3, 0), order=10)
