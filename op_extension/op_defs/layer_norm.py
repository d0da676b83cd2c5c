"""layer_norm: LayerNorm over the trailing `normalized_shape` dims, as F.layer_norm
(op_protos/layer_norm.json), and layer_norm_backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from op_extension.toolkit import (ROW, SUM, WHOLE, FakeRule, absent_grad, batch_first, batched_param, check_affine,
                                  check_normalized_shape, check_same, check_same_shape, common_float, eager, fast_path,
                                  first_order_jvp, float_arg, given, int64_list_arg, leading_dims, other_dtype,
                                  own_tangent, per_sample_sum, plus, row_sharding, shape_list, traced)

_custom = torch.ops.custom


# ---- the functional API: op_extension.ops.layer_norm ------------------------------


def layer_norm(
    input: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the trailing `normalized_shape` dims, as F.layer_norm."""
    shape = shape_list("layer_norm", normalized_shape)
    eps = float_arg("layer_norm", "eps", eps)
    if eager(input, weight, bias):
        out = fast_path.layer_norm(input, shape, weight, bias, eps)
        return out if out is not NotImplemented else _mixed_layer_norm(input, shape, weight, bias, eps)
    if other_dtype(input, weight) or other_dtype(input, bias):
        return _mixed_layer_norm(input, shape, weight, bias, eps)
    return _layer_norm(input, int64_list_arg("layer_norm", "normalized_shape", shape), weight, bias, eps)


def _mixed_layer_norm(input, shape, weight, bias, eps):
    """Parameters of another floating dtype (the toolkit: mixed dtypes): the call in the wider dtype."""
    wide = common_float(input, weight, bias)
    if wide is None:
        return _layer_norm(input, shape, weight, bias, eps)
    out = layer_norm(input.to(wide), shape, None if weight is None else weight.to(wide),
                     None if bias is None else bias.to(wide), eps)
    return out.to(input.dtype)


# ---- fake kernels: the rules of check_layer_norm(_backward) in csrc/torch_ext/ops/layer_norm.h ----------------


def _check(op, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    check_normalized_shape(op, input, normalized_shape)
    check_affine(op, weight, "weight", input, normalized_shape)
    check_affine(op, bias, "bias", input, normalized_shape)


def _check_backward(op, grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    # In check_layer_norm_backward's order, so that two bad arguments give its message.
    check_same(op, input, "input", grad_output, "grad_output")
    check_same_shape(op, input, "input", grad_output, "grad_output")
    _check(op, input, normalized_shape, weight, bias)


FAKE = {
    "layer_norm": FakeRule(same=(), check=_check),
    "layer_norm_backward": FakeRule(dtype_of="input", same=(), check=_check_backward),
}


# ---- references ----------------------------------------------------------------------


def ref_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, *, dtype):
    return F.layer_norm(input, list(normalized_shape), weight, bias, eps)


def ref_layer_norm_backward(grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5, *, dtype):
    shape = list(normalized_shape)
    _, mean, rstd = torch.ops.aten.native_layer_norm(input, shape, weight, bias, eps)
    grad_input, grad_weight, grad_bias = torch.ops.aten.native_layer_norm_backward(
        grad_output, input, shape, mean, rstd, weight, bias, [True, weight is not None, bias is not None])
    return (grad_input,
            absent_grad(input) if grad_weight is None else grad_weight,
            absent_grad(input) if grad_bias is None else grad_bias)


REFERENCES = {"layer_norm": ref_layer_norm, "layer_norm_backward": ref_layer_norm_backward}
# torch's own ops (the references, run in the inputs' dtype): implementations op_extension.tune times.
NATIVE = REFERENCES

# layer_norm in float32: rows whose mean is large next to their spread (the
# "shifted_mean" samples, mean 100, std 1). The mean itself is only known to
# ~eps * |mean| ~ 1.2e-5 in float32 -- in the float32 reference as much as in
# the kernel (both are ~1e-5 away from a float64 evaluation, in different
# directions) -- and rstd ~ 1 carries that into every output and gradient.
# atol 5e-5; the kernel's accuracy itself is checked against float64 in
# test_layer_norm_large_mean_is_stable.
TOLERANCES = {torch.float32: {"layer_norm.forward": (5e-5, 1.3e-6), "layer_norm.backward": (5e-5, 1.3e-6)}}


# ---- torch.func transforms and forward-mode AD ------------------------------------------


def _vmap_layer_norm(call):
    def rule(info, in_dims, input, normalized_shape, weight=None, bias=None, eps=1e-5):
        op = "layer_norm"
        x_bdim, w_bdim, b_bdim = in_dims[0], in_dims[2], in_dims[3]
        x = input if x_bdim is None else input.movedim(x_bdim, 0)
        lead = leading_dims(op, x, x_bdim is not None, normalized_shape)
        # The op applies the parameters that are not batched, unless a batched
        # weight must multiply before the bias is added.
        op_weight = weight if w_bdim is None else None
        op_bias = bias if b_bdim is None and w_bdim is None else None
        y = call(x, normalized_shape, op_weight, op_bias, eps)
        if w_bdim is not None:
            y = y * batched_param(op, "weight", weight, w_bdim, x, normalized_shape, lead)
        if bias is not None and op_bias is None:
            y = y + (bias if b_bdim is None else batched_param(op, "bias", bias, b_bdim, x, normalized_shape, lead))
        return y, 0

    return rule


def _vmap_layer_norm_backward(info, in_dims, grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    # As rms_norm's: the input gradient from the backward op, the parameter
    # gradients per-sample sums.
    op = "layer_norm_backward"
    B = info.batch_size
    g, x = batch_first(grad_output, in_dims[0], B), batch_first(input, in_dims[1], B)
    lead = leading_dims(op, x, True, normalized_shape)
    if weight is not None and in_dims[3] is not None:
        w = batched_param(op, "weight", weight, in_dims[3], x, normalized_shape, lead)
        grad_input = _custom.layer_norm_backward(g * w, x, normalized_shape, None, None, eps)[0]
    else:
        grad_input = _custom.layer_norm_backward(g, x, normalized_shape, weight, None, eps)[0]
    grad_weight = grad_bias = absent_grad(grad_input)
    weight_dim = bias_dim = None
    if weight is not None:
        grad_weight, weight_dim = per_sample_sum(g, lead, _custom.layer_norm(x, normalized_shape, None, None, eps)), 0
    if bias is not None:
        grad_bias, bias_dim = per_sample_sum(g, lead), 0
    return (grad_input, grad_weight, grad_bias), (0, weight_dim, bias_dim)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(input, normalized_shape, weight, bias, eps):
        return _custom.layer_norm(input, normalized_shape, weight, bias, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, ctx.normalized_shape, weight, bias, ctx.eps = inputs
        ctx.has_bias = bias is not None
        ctx.save_for_backward(input, weight, bias)
        ctx.save_for_forward(input, weight)
        ctx.output_shape = output.shape

    @staticmethod
    def backward(ctx, grad):
        input, weight, bias = ctx.saved_tensors
        grad_input, grad_weight, grad_bias = _custom.layer_norm_backward(
            grad, input, ctx.normalized_shape, weight, bias, ctx.eps
        )
        return (
            grad_input,
            None,
            None if weight is None else grad_weight,
            None if bias is None else grad_bias,
            None,
        )

    @staticmethod
    def jvp(ctx, t_input, _, t_weight, t_bias, __):
        # y = w * n(x) + b, n(x) = (x - mean) * rstd: J t = w * (dn t_x) + n(x) * t_w + t_b.
        first_order_jvp("layer_norm")
        input, weight = ctx.saved_tensors
        shape, eps = ctx.normalized_shape, ctx.eps
        tangent = None
        if t_input is not None:
            tangent = _custom.layer_norm_backward(t_input, input, shape, None, None, eps)[0]
            if weight is not None:
                tangent = tangent * weight
        if t_weight is not None:
            tangent = plus(tangent, _LayerNorm.apply(input, shape, None, None, eps) * t_weight)
        if t_bias is not None:
            tangent = own_tangent(t_bias, ctx.output_shape) if tangent is None else tangent + t_bias
        return tangent

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_layer_norm(_LayerNorm.apply)(info, in_dims, *args)


TRANSFORM = _LayerNorm
VMAP = {"layer_norm": _vmap_layer_norm(_custom.layer_norm.default), "layer_norm_backward": _vmap_layer_norm_backward}
_layer_norm = traced(_custom.layer_norm.default, _LayerNorm.apply)


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return row_sharding(range(input.ndim - len(normalized_shape)), [ROW],
                        [ROW, given(weight, WHOLE), given(bias, WHOLE)])


def _shard_layer_norm_backward(grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return row_sharding(range(input.ndim - len(normalized_shape)),
                        [ROW, SUM if weight is not None else WHOLE, SUM if bias is not None else WHOLE],
                        [ROW, ROW, given(weight, WHOLE), given(bias, WHOLE)], linear=(0,))


SHARDING = {"layer_norm": _shard_layer_norm, "layer_norm_backward": _shard_layer_norm_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
from op_extension.bench_spec import LN_EPS, Bench, OpSetup, activations, randn  # noqa: E402


def composite_layer_norm(x, weight, bias):
    # Mean / biased variance written out, statistics in float32.
    input_dtype = x.dtype
    h = x.to(torch.float32)
    mean = h.mean(-1, keepdim=True)
    centered = h - mean
    var = centered.pow(2).mean(-1, keepdim=True)
    h = centered * torch.rsqrt(var + LN_EPS)
    return h.to(input_dtype) * weight + bias


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 1)
    weight = randn((hidden,), dtype, device, 0.1).add_(1.0)
    bias = randn((hidden,), dtype, device, 0.1)
    return OpSetup(inputs + [weight, bias], [0, 1, 2], {
        "ours": lambda x, w, b: ops.layer_norm(x, (hidden,), w, b, LN_EPS),
        "native": lambda x, w, b: F.layer_norm(x, (hidden,), w, b, LN_EPS),
        "composite": composite_layer_norm,
    }, shape=shape, weight_numel=hidden)


def _liger():
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, LN_EPS)


# fwd: read x, w, b; write y.           bwd: read dy, x, w; write dx, dw, db.
BENCH = Bench(_bench_setup, fwd_bytes=(2, 2), bwd_bytes=(3, 3), order=50, liger=_liger)
