"""fused_add_rms_norm: (rms_norm(input + residual), input + residual) in one pass
over memory (op_protos/fused_add_rms_norm.json), and fused_add_rms_norm_backward."""

from __future__ import annotations

import torch

from op_extension.toolkit import (ROW, SUM, WHOLE, FakeRule, batch_first, batched_param, check_affine,
                                  check_normalized_shape, common_float, default_eps, eager, fast_path, first_order_jvp,
                                  given, int64_list_arg, leading_dims, optional_eps, other_dtype, own_tangent,
                                  per_sample_sum, plus, round_through, row_sharding, shape_list, traced)
from op_extension.op_defs.add import add
from op_extension.op_defs.rms_norm import _RmsNorm, eps_value, ref_rms_norm, rms_norm, rms_norm_grads

_custom = torch.ops.custom


# ---- the functional API: op_extension.ops.fused_add_rms_norm ----------------------


def fused_add_rms_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(input + residual), input + residual) in one pass over memory."""
    shape = shape_list("fused_add_rms_norm", normalized_shape)
    if eager(input, residual, weight):
        out = fast_path.fused_add_rms_norm(input, residual, shape, weight, eps)
        return out if out is not NotImplemented else _mixed_fused_add_rms_norm(input, residual, shape, weight, eps)
    if other_dtype(input, residual) or other_dtype(input, weight):
        return _mixed_fused_add_rms_norm(input, residual, shape, weight, eps)
    return _fused_add_rms_norm(
        input, residual, int64_list_arg("fused_add_rms_norm", "normalized_shape", shape), weight,
        optional_eps("fused_add_rms_norm", eps),
    )


def _mixed_fused_add_rms_norm(input, residual, shape, weight, eps):
    """The sum in the promoted dtype of input and residual (a float32 residual
    stream stays float32; a same-dtype sum is rounded to that dtype, as in a
    model), its RMSNorm rounded once to the input's dtype."""
    wide = common_float(input, residual, weight)
    if wide is None:
        return _fused_add_rms_norm(input, residual, shape, weight, optional_eps("fused_add_rms_norm", eps))
    total_dtype = torch.promote_types(input.dtype, residual.dtype)
    if total_dtype == input.dtype == residual.dtype:
        total = add(input, residual)
    else:
        total = add(input.to(total_dtype), residual.to(total_dtype))
    normed = rms_norm(total.to(wide), shape, None if weight is None else weight.to(wide), default_eps(eps, input))
    return normed.to(input.dtype), total


# ---- fake kernels: the rules of check_fused_add_rms_norm(_backward) in csrc/torch_ext/ops/fused_add_rms_norm.h -------------


def _check(op, input, residual, normalized_shape, weight=None, eps=None):
    check_normalized_shape(op, input, normalized_shape)
    check_affine(op, weight, "weight", input, normalized_shape)


def _check_backward(op, grad_output, grad_residual_out, residual_out, normalized_shape, weight=None, eps=None):
    check_normalized_shape(op, residual_out, normalized_shape)
    check_affine(op, weight, "weight", residual_out, normalized_shape)


FAKE = {
    "fused_add_rms_norm": FakeRule(same=("residual",), same_shape=("residual",), check=_check),
    "fused_add_rms_norm_backward": FakeRule(dtype_of="residual_out", same=("grad_output", "grad_residual_out"),
                                            same_shape=("grad_output", "grad_residual_out"), check=_check_backward),
}


# ---- references ----------------------------------------------------------------------


def ref_fused_add_rms_norm(input, residual, normalized_shape, weight=None, eps=None, *, dtype):
    # residual_out is stored in the input dtype and the norm reads the stored
    # values, exactly as `z = x + r; rms_norm(z)` would in that dtype.
    z = round_through(input + residual, dtype)
    return ref_rms_norm(z, normalized_shape, weight, eps, dtype=dtype), z


def ref_fused_add_rms_norm_backward(grad_output, grad_residual_out, residual_out, normalized_shape,
                                    weight=None, eps=None, *, dtype):
    # input and residual both reach the output only through their sum: one gradient for both.
    grad_sum, grad_weight = rms_norm_grads(grad_output, residual_out, normalized_shape, weight, eps, dtype)
    if grad_residual_out is not None:
        grad_sum = grad_sum + grad_residual_out
    return grad_sum, grad_weight


REFERENCES = {"fused_add_rms_norm": ref_fused_add_rms_norm,
              "fused_add_rms_norm_backward": ref_fused_add_rms_norm_backward}


# ---- torch.func transforms and forward-mode AD ------------------------------------------


def _vmap_fused_add_rms_norm(call):
    def rule(info, in_dims, input, residual, normalized_shape, weight=None, eps=None):
        op = "fused_add_rms_norm"
        rows_batched = in_dims[0] is not None or in_dims[1] is not None
        if rows_batched:
            x, r = batch_first(input, in_dims[0], info.batch_size), batch_first(residual, in_dims[1], info.batch_size)
        else:
            x, r = input, residual
        lead = leading_dims(op, x, rows_batched, normalized_shape)
        residual_dim = 0 if rows_batched else None
        if in_dims[3] is None:
            return call(x, r, normalized_shape, weight, eps), (0, residual_dim)
        w = batched_param(op, "weight", weight, in_dims[3], x, normalized_shape, lead)
        out, residual_out = call(x, r, normalized_shape, None, eps)
        return (out * w, residual_out), (0, residual_dim)

    return rule


def _vmap_fused_add_rms_norm_backward(
    info, in_dims, grad_output, grad_residual_out, residual_out, normalized_shape, weight=None, eps=None
):
    op = "fused_add_rms_norm_backward"
    B = info.batch_size
    g = batch_first(grad_output, in_dims[0], B)
    g_res = batch_first(grad_residual_out, in_dims[1], B)
    z = batch_first(residual_out, in_dims[2], B)
    lead = leading_dims(op, z, True, normalized_shape)
    if weight is None:
        grad_sum, placeholder = _custom.fused_add_rms_norm_backward(g, g_res, z, normalized_shape, None, eps)
        return (grad_sum, placeholder), (0, None)
    if in_dims[4] is None:
        grad_sum, _ = _custom.fused_add_rms_norm_backward(g, g_res, z, normalized_shape, weight, eps)
    else:
        w = batched_param(op, "weight", weight, in_dims[4], z, normalized_shape, lead)
        grad_sum, _ = _custom.fused_add_rms_norm_backward(g * w, g_res, z, normalized_shape, None, eps)
    grad_weight = per_sample_sum(g, lead, _custom.rms_norm(z, normalized_shape, None, eps))
    return (grad_sum, grad_weight), (0, 0)


class _FusedAddRmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(input, residual, normalized_shape, weight, eps):
        return _custom.fused_add_rms_norm(input, residual, normalized_shape, weight, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, _, ctx.normalized_shape, weight, ctx.eps = inputs
        residual_out = output[1]
        ctx.save_for_backward(residual_out, weight)
        ctx.save_for_forward(residual_out, weight)
        # Only one output may be used: its gradient then comes as None, not as zeros.
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad_output, grad_residual_out):
        residual_out, weight = ctx.saved_tensors
        if grad_output is None:
            grad_output = torch.zeros_like(residual_out)
        grad_sum, grad_weight = _custom.fused_add_rms_norm_backward(
            grad_output, grad_residual_out, residual_out, ctx.normalized_shape, weight, ctx.eps
        )
        # d(input + residual)/d input = d/d residual = identity
        return grad_sum, grad_sum, None, None if weight is None else grad_weight, None

    @staticmethod
    def jvp(ctx, t_input, t_residual, _, t_weight, __):
        # z = input + residual (the second output): t_z = t_input + t_residual;
        # the first output is rms_norm(z), whose jvp is as in _RmsNorm.
        first_order_jvp("fused_add_rms_norm")
        z, weight = ctx.saved_tensors
        shape, eps = ctx.normalized_shape, ctx.eps
        t_z = t_input + t_residual if t_input is not None and t_residual is not None else None
        if t_z is None and (t_input is not None or t_residual is not None):
            t_z = own_tangent(t_residual if t_input is None else t_input, z.shape)
        tangent = None
        if t_z is not None:
            tangent = _custom.rms_norm_backward(t_z, z, shape, None, eps)[0]
            if weight is not None:
                tangent = tangent * weight
        if t_weight is not None:
            tangent = plus(tangent, _RmsNorm.apply(z, shape, None, eps) * t_weight)
        # torch takes no None for an output's tangent: residual_out does not depend on the weight.
        return tangent, torch.zeros_like(z) if t_z is None else t_z

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_fused_add_rms_norm(_FusedAddRmsNorm.apply)(info, in_dims, *args)


TRANSFORM = _FusedAddRmsNorm
VMAP = {"fused_add_rms_norm": _vmap_fused_add_rms_norm(_custom.fused_add_rms_norm.default),
        "fused_add_rms_norm_backward": _vmap_fused_add_rms_norm_backward}
_fused_add_rms_norm = traced(_custom.fused_add_rms_norm.default, _FusedAddRmsNorm.apply)

SIMULATOR_ARGS = {"fused_add_rms_norm": eps_value("input"),
                  "fused_add_rms_norm_backward": eps_value("residual_out")}


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_fused_add_rms_norm(input, residual, normalized_shape, weight=None, eps=None):
    return row_sharding(range(input.ndim - len(normalized_shape)), [ROW, ROW], [ROW, ROW, given(weight, WHOLE)])


def _shard_fused_add_rms_norm_backward(grad_output, grad_residual_out, residual_out, normalized_shape, weight=None,
                                       eps=None):
    # grad_input is rms_norm's input gradient of grad_output plus grad_residual_out: linear in both.
    return row_sharding(range(residual_out.ndim - len(normalized_shape)), [ROW, SUM if weight is not None else WHOLE],
                        [ROW, given(grad_residual_out, ROW), ROW, given(weight, WHOLE)], linear=(0, 1))


SHARDING = {"fused_add_rms_norm": _shard_fused_add_rms_norm,
            "fused_add_rms_norm_backward": _shard_fused_add_rms_norm_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
import torch.nn.functional as F  # noqa: E402

from op_extension.bench_spec import RMS_EPS, Bench, OpSetup, activations, randn  # noqa: E402
from op_extension.op_defs.rms_norm import composite_rms_norm  # noqa: E402


def composite_fused_add_rms_norm(x, residual, weight):
    # Decoder layer: ``hidden = residual + x`` then the next LlamaRMSNorm.
    h = x + residual
    return composite_rms_norm(h, weight), h


def _bench_setup(ops, tokens, dtype, device, hidden):
    shape, inputs = activations(tokens, dtype, device, hidden, 2)
    weight = randn((hidden,), dtype, device, 0.1).add_(1.0)

    def native(x, r, w):
        h = x + r
        return F.rms_norm(h, (hidden,), w, RMS_EPS), h

    return OpSetup(inputs + [weight], [0, 1, 2], {
        "ours": lambda x, r, w: ops.fused_add_rms_norm(x, r, (hidden,), w, RMS_EPS),
        "native": native,
        "composite": composite_fused_add_rms_norm,
    }, num_outputs=2, shape=shape, weight_numel=hidden)


def _liger():
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction  # newer releases only

    # in_place=False, as for rms_norm.
    return lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, RMS_EPS, 0.0, "llama", False)


# fwd: read x, r, w; write y, h=x+r.    bwd: read dy, dh, h, w; write dx, dr, dw.
BENCH = Bench(_bench_setup, fwd_bytes=(4, 1), bwd_bytes=(5, 2), order=40, liger=_liger)
