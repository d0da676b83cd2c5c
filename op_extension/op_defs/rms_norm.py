"""rms_norm: RMSNorm over the trailing `normalized_shape` dims, as F.rms_norm
(op_protos/rms_norm.json), and rms_norm_backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from op_extension.toolkit import (MEMORY_FORMAT, ROW, SUM, WHOLE, FakeRule, absent_grad, batch_first, batched_param,
                                  check_affine, check_normalized_shape, check_same, check_same_shape, common_float,
                                  default_eps, default_rms_norm_eps, eager, fast_path, first_order_jvp, given,
                                  int64_list_arg, leading_dims, optional_eps, other_dtype, per_sample_sum, plus,
                                  row_sharding, shape_list, traced)

_custom = torch.ops.custom


# ---- the functional API: op_extension.ops.rms_norm --------------------------------


def rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """RMSNorm over the trailing `normalized_shape` dims, as F.rms_norm.

    eps=None uses the machine epsilon of the computation dtype: float32's for
    float16/bfloat16 inputs, as F.rms_norm does.
    """
    shape = shape_list("rms_norm", normalized_shape)
    if eager(input, weight):
        out = fast_path.rms_norm(input, shape, weight, eps)
        # NotImplemented: a weight of another dtype (the fast path's check).
        return out if out is not NotImplemented else _mixed_rms_norm(input, shape, weight, eps)
    if other_dtype(input, weight):
        return _mixed_rms_norm(input, shape, weight, eps)
    return _rms_norm(input, int64_list_arg("rms_norm", "normalized_shape", shape), weight, optional_eps("rms_norm", eps))


def _mixed_rms_norm(input, shape, weight, eps):
    """A weight of another floating dtype (the toolkit: mixed dtypes): the call in the wider dtype."""
    wide = common_float(input, weight)
    if wide is None:
        return _rms_norm(input, shape, weight, optional_eps("rms_norm", eps))
    out = rms_norm(input.to(wide), shape, weight.to(wide), default_eps(eps, input))
    return out.to(input.dtype)


# ---- fake kernels: the rules of check_rms_norm(_backward) in csrc/torch_ext/ops/rms_norm.h --------------------


def _check(op, input, normalized_shape, weight=None, eps=None):
    check_normalized_shape(op, input, normalized_shape)
    check_affine(op, weight, "weight", input, normalized_shape)


def _check_backward(op, grad_output, input, normalized_shape, weight=None, eps=None):
    # In check_rms_norm_backward's order, so that two bad arguments give its message.
    check_same(op, input, "input", grad_output, "grad_output")
    check_same_shape(op, input, "input", grad_output, "grad_output")
    _check(op, input, normalized_shape, weight)


FAKE = {
    "rms_norm": FakeRule(same=(), check=_check, layout=MEMORY_FORMAT),
    "rms_norm_backward": FakeRule(dtype_of="input", same=(), check=_check_backward),
}


# ---- references ----------------------------------------------------------------------


def ref_rms_norm(input, normalized_shape, weight=None, eps=None, *, dtype):
    eps = default_rms_norm_eps(dtype) if eps is None else eps
    return F.rms_norm(input, list(normalized_shape), weight, eps)


def rms_norm_grads(grad_output, input, normalized_shape, weight, eps, dtype):
    """(grad_input, grad_weight) of RMSNorm in closed form (fused_add_rms_norm's too)."""
    eps = default_rms_norm_eps(dtype) if eps is None else eps
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    rstd = torch.rsqrt(input.pow(2).mean(dims, keepdim=True) + eps)
    normed = input * rstd
    weighted = grad_output if weight is None else grad_output * weight
    grad_input = rstd * (weighted - normed * (weighted * normed).mean(dims, keepdim=True))
    if weight is None:
        return grad_input, absent_grad(input)
    row_dims = tuple(range(input.dim() - len(normalized_shape)))
    return grad_input, (grad_output * normed).sum(row_dims) if row_dims else grad_output * normed


def ref_rms_norm_backward(grad_output, input, normalized_shape, weight=None, eps=None, *, dtype):
    return rms_norm_grads(grad_output, input, normalized_shape, weight, eps, dtype)


REFERENCES = {"rms_norm": ref_rms_norm, "rms_norm_backward": ref_rms_norm_backward}
# torch's own op (the forward's reference, run in the inputs' dtype): an implementation op_extension.tune
# times. The backward's reference is a composite of several ops, not torch's.
NATIVE = {"rms_norm": ref_rms_norm}


# ---- torch.func transforms and forward-mode AD ------------------------------------------


def _vmap_rms_norm(call):
    def rule(info, in_dims, input, normalized_shape, weight=None, eps=None):
        x_bdim, w_bdim = in_dims[0], in_dims[2]
        x = input if x_bdim is None else input.movedim(x_bdim, 0)
        lead = leading_dims("rms_norm", x, x_bdim is not None, normalized_shape)
        if w_bdim is None:
            return call(x, normalized_shape, weight, eps), 0
        w = batched_param("rms_norm", "weight", weight, w_bdim, x, normalized_shape, lead)
        return call(x, normalized_shape, None, eps) * w, 0

    return rule


def _vmap_rms_norm_backward(info, in_dims, grad_output, input, normalized_shape, weight=None, eps=None):
    # The input gradient from the backward op (a batched weight folded into
    # grad_output, where it multiplies), the weight gradient a per-sample sum,
    # which the backward op cannot give.
    B = info.batch_size
    g, x = batch_first(grad_output, in_dims[0], B), batch_first(input, in_dims[1], B)
    lead = leading_dims("rms_norm_backward", x, True, normalized_shape)
    if weight is None:
        grad_input, placeholder = _custom.rms_norm_backward(g, x, normalized_shape, None, eps)
        return (grad_input, placeholder), (0, None)
    if in_dims[3] is None:
        grad_input, _ = _custom.rms_norm_backward(g, x, normalized_shape, weight, eps)
    else:
        w = batched_param("rms_norm_backward", "weight", weight, in_dims[3], x, normalized_shape, lead)
        grad_input, _ = _custom.rms_norm_backward(g * w, x, normalized_shape, None, eps)
    grad_weight = per_sample_sum(g, lead, _custom.rms_norm(x, normalized_shape, None, eps))
    return (grad_input, grad_weight), (0, 0)


class _RmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(input, normalized_shape, weight, eps):
        return _custom.rms_norm(input, normalized_shape, weight, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, ctx.normalized_shape, weight, ctx.eps = inputs
        ctx.save_for_backward(input, weight)
        ctx.save_for_forward(input, weight)

    @staticmethod
    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        grad_input, grad_weight = _custom.rms_norm_backward(grad, input, ctx.normalized_shape, weight, ctx.eps)
        return grad_input, None, None if weight is None else grad_weight, None

    @staticmethod
    def jvp(ctx, t_input, _, t_weight, __):
        # y = w * n(x), n(x) = x * rstd(x): J t = w * (dn t_x) + n(x) * t_w.
        first_order_jvp("rms_norm")
        input, weight = ctx.saved_tensors
        shape, eps = ctx.normalized_shape, ctx.eps
        tangent = None
        if t_input is not None:
            tangent = _custom.rms_norm_backward(t_input, input, shape, None, eps)[0]
            if weight is not None:
                tangent = tangent * weight
        if t_weight is not None:
            tangent = plus(tangent, _RmsNorm.apply(input, shape, None, eps) * t_weight)
        return tangent

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_rms_norm(_RmsNorm.apply)(info, in_dims, *args)


TRANSFORM = _RmsNorm
VMAP = {"rms_norm": _vmap_rms_norm(_custom.rms_norm.default), "rms_norm_backward": _vmap_rms_norm_backward}
_rms_norm = traced(_custom.rms_norm.default, _RmsNorm.apply)


# ---- the simulators ---------------------------------------------------------------------


def eps_value(tensor: str):
    """SIMULATOR_ARGS entry: eps=None as the machine epsilon of the computation
    dtype of `tensor` (float32 for 16-bit inputs), as ops.rms_norm; the
    simulators' entry points take a number."""

    def convert(args: dict) -> dict:
        if args["eps"] is not None:
            return args
        return dict(args, eps=default_rms_norm_eps(args[tensor].dtype))

    return convert


SIMULATOR_ARGS = {"rms_norm": eps_value("input"), "rms_norm_backward": eps_value("input")}


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_rms_norm(input, normalized_shape, weight=None, eps=None):
    # A row's statistics need the whole row: only the leading dims split.
    return row_sharding(range(input.ndim - len(normalized_shape)), [ROW], [ROW, given(weight, WHOLE)])


def _shard_rms_norm_backward(grad_output, input, normalized_shape, weight=None, eps=None):
    return row_sharding(range(input.ndim - len(normalized_shape)), [ROW, SUM if weight is not None else WHOLE],
                        [ROW, ROW, given(weight, WHOLE)], linear=(0,))


SHARDING = {"rms_norm": _shard_rms_norm, "rms_norm_backward": _shard_rms_norm_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
from op_extension.bench_spec import RMS_EPS, Bench, OpSetup, activations, randn  # noqa: E402


def composite_rms_norm(x, weight):
    # Hugging Face LlamaRMSNorm.forward.
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + RMS_EPS)
    return weight * h.to(input_dtype)


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 1)
    weight = randn((hidden,), dtype, device, 0.1).add_(1.0)
    return OpSetup(inputs + [weight], [0, 1], {
        "ours": lambda x, w: ops.rms_norm(x, (hidden,), w, RMS_EPS),
        "native": lambda x, w: F.rms_norm(x, (hidden,), w, RMS_EPS),
        "composite": composite_rms_norm,
    }, shape=shape, weight_numel=hidden)


def _liger():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    # in_place=False: in place, Liger's backward overwrites the output gradient,
    # which the timed step reuses rep after rep.
    return lambda x, w: LigerRMSNormFunction.apply(x, w, RMS_EPS, 0.0, "llama", False)


# fwd: read x, w; write y.              bwd: read dy, x, w; write dx, dw.
BENCH = Bench(_bench_setup, fwd_bytes=(2, 1), bwd_bytes=(3, 2), order=30, liger=_liger)
