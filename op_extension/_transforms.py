"""Forward-mode AD and torch.func transforms for the custom ops.

The dispatcher ops' Autograd kernels are C++ torch::autograd::Functions
(csrc/torch_ext/autograd.cpp): cheap for eager calls, but with no forward
derivative, and functorch refuses them. So calls made under a torch.func
transform (grad, vjp, jacrev, jacfwd, jvp, vmap, functional_call + grad, ...)
or with an input that carries a forward-mode tangent come here instead, to one
Python torch.autograd.Function per op. Each runs the same dispatcher ops: the
forward is custom::<op>, the backward custom::<op>_backward, the jvp is built
from those two (no other kernels), and a vmap rule moves the batch dim to the
front, where every op batches for free (elementwise ops and norms over trailing
dims; softmax's dim shifts by one).

Who comes here: the C++ fast path of ops.py tests for a transform or a tangent
(a few ns) and calls the function of this module registered for the op
(python_module.cpp); ops.py's traced path asks active(). Plain eager calls
never come here. Calling torch.ops.custom.<op> directly with a tangent is
refused by its Autograd kernel, naming op_extension.ops.<op>.

The backward ops also get vmap rules (registered on the dispatcher, so they
serve any caller): the backward and the jvp run under vmap in jacrev, jacfwd
and per-sample gradients (vmap of grad), and without a rule functorch would
run them once per sample. The forward ops get the same rules as their
autograd.Functions, so vmap of a direct torch.ops.custom call is batched too.

Second derivatives are not supported, as in the C++ path: the backward ops have
no derivative, and differentiating them raises "derivative for
custom::<op>_backward is not implemented" (forward-mode: "Trying to use forward
AD with custom::<op>_backward that does not support it").
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as _forward_ad
from torch._C._functorch import TransformType as _TransformType
from torch._C._functorch import get_interpreter_stack as _get_interpreter_stack
from torch._C._functorch import peek_interpreter_stack as _peek_interpreter_stack

from . import _C, _fake

__all__ = ["active", "add", "fused_add_rms_norm", "geglu", "gelu", "layer_norm", "rms_norm", "softmax", "swiglu"]

_custom = torch.ops.custom


def active() -> bool:
    """Whether a call of op_extension.ops outside the C++ fast path (a tensor
    subclass or torch function mode is involved) must come here: a torch.func
    transform is active, or a forward-mode dual level is open. Never while
    Dynamo or export trace: they must see torch.ops.custom.<op>."""
    if torch.compiler.is_compiling():
        return False
    return _peek_interpreter_stack() is not None or _forward_ad._current_level >= 0


def traced(op, transformed):
    """ops.py's call of `op` outside the C++ fast path: `transformed` (the
    autograd.Function's entry point below) when active()."""

    def call(*args):
        if active():
            return transformed(*args)
        return op(*args)

    return call


# ---------------------------------------------------------------------------
# vmap helpers. A rule gets the unbatched ("physical") tensors and each one's
# batch dim (None: not batched) and returns outputs with the batch dim first.
# ---------------------------------------------------------------------------


def _front(t, bdim, batch_size):
    """t with its batch dim first; an unbatched t expanded to the batch (a
    view: the kernels read stride-0 tensors)."""
    if t is None:
        return None
    if bdim is None:
        return t.expand(batch_size, *t.shape)
    return t.movedim(bdim, 0)


def _pad_after_batch(t, n):
    """t ([B, *s]) viewed as [B, 1 (n times), *s], to broadcast against a
    batched tensor with n more leading dims."""
    return t[(slice(None),) + (None,) * n]


def _leading_dims(op, x, batched, normalized_shape):
    """The number of logical dims of x before the normalised ones, checked as
    the op checks it (the batch dim must not pass for a normalised dim)."""
    ndim = x.dim() - (1 if batched else 0)
    shape = list(normalized_shape)
    if ndim < len(shape):
        raise ValueError(
            f"custom::{op}: normalized_shape {shape} has more dims than the input of shape "
            f"{list(x.shape[1:] if batched else x.shape)}"
        )
    return ndim - len(shape)


def _batched_param(op, name, param, bdim, input, normalized_shape, lead):
    """A weight or bias batched under vmap, as [B, 1 (lead times), *normalized_shape].

    The op cannot take it (one weight for all rows), so the rule applies it
    with aten ops; the checks the op would make come first, with its messages,
    since broadcasting or type promotion would otherwise hide a mismatch."""
    param = param.movedim(bdim, 0)
    _fake.check_same(op, input, "input", param, name)
    shape = list(normalized_shape)
    if list(param.shape[1:]) != shape:
        raise ValueError(f"custom::{op}: {name} has shape {list(param.shape[1:])} but normalized_shape is {shape}")
    return _pad_after_batch(param, lead)


def _acc_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _per_sample_sum(t, lead, times=None):
    """Sum of t (* times) ([B, *leading, *normalized]) over its `lead` leading
    dims, per sample: a parameter's gradient under vmap, which the backward
    ops cannot give (they sum over every row, the batch included). Computed in
    float for 16-bit types, as the kernels do."""
    acc = _acc_dtype(t.dtype)
    product = t.to(acc) if times is None else t.to(acc) * times.to(acc)
    if lead > 0:  # (sum over dim=() would sum over every dim)
        product = product.sum(dim=tuple(range(1, 1 + lead)))
    return product.to(t.dtype)


def _placeholder(like):
    """The empty tensor a backward op returns for an absent parameter."""
    return like.new_empty((0,))


def _vmap_same_shape(call):
    """Rule for ops whose tensor arguments all have one shape (the GLUs, gelu
    and their backward ops): everything batched first, output batched first."""

    def rule(info, in_dims, *args):
        args = [_front(a, d, info.batch_size) if isinstance(a, torch.Tensor) else a for a, d in zip(args, in_dims)]
        out = call(*args)
        return out, tuple(0 for _ in out) if isinstance(out, tuple) else 0

    return rule


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
                t = _pad_after_batch(t, ndim - (t.dim() - 1))
            moved.append(t)
        return call(moved[0], moved[1], alpha), 0

    return rule


def _vmap_add_backward(info, in_dims, grad_output, input_size, alpha):
    # grad_output has the output's logical dims after the batch dim; the
    # operand's size, padded to that rank, keeps the batch dim out of the sum.
    g = _front(grad_output, in_dims[0], info.batch_size)
    size = list(input_size)
    padded = [info.batch_size] + [1] * (g.dim() - 1 - len(size)) + size
    out = _custom.add_backward(g, padded, alpha)
    return out.reshape([info.batch_size] + size), 0


def _vmap_softmax(op, call):
    """Rule for softmax(input, dim) and softmax_backward(grad_output, output, dim)."""

    def rule(info, in_dims, *args):
        *tensors, dim = args
        tensors = [_front(t, d, info.batch_size) for t, d in zip(tensors, in_dims)]
        ndim = tensors[0].dim() - 1
        dim = _fake.wrap_dim(op, dim, ndim)  # the op's own check and message
        if ndim == 0:  # a 0-dim softmax is over the one element
            return call(*(t.unsqueeze(1) for t in tensors), 1).squeeze(1), 0
        return call(*tensors, dim + 1), 0

    return rule


def _vmap_rms_norm(call):
    def rule(info, in_dims, input, normalized_shape, weight=None, eps=None):
        x_bdim, w_bdim = in_dims[0], in_dims[2]
        x = input if x_bdim is None else input.movedim(x_bdim, 0)
        lead = _leading_dims("rms_norm", x, x_bdim is not None, normalized_shape)
        if w_bdim is None:
            return call(x, normalized_shape, weight, eps), 0
        w = _batched_param("rms_norm", "weight", weight, w_bdim, x, normalized_shape, lead)
        return call(x, normalized_shape, None, eps) * w, 0

    return rule


def _vmap_fused_add_rms_norm(call):
    def rule(info, in_dims, input, residual, normalized_shape, weight=None, eps=None):
        op = "fused_add_rms_norm"
        rows_batched = in_dims[0] is not None or in_dims[1] is not None
        if rows_batched:
            x, r = _front(input, in_dims[0], info.batch_size), _front(residual, in_dims[1], info.batch_size)
        else:
            x, r = input, residual
        lead = _leading_dims(op, x, rows_batched, normalized_shape)
        residual_dim = 0 if rows_batched else None
        if in_dims[3] is None:
            return call(x, r, normalized_shape, weight, eps), (0, residual_dim)
        w = _batched_param(op, "weight", weight, in_dims[3], x, normalized_shape, lead)
        out, residual_out = call(x, r, normalized_shape, None, eps)
        return (out * w, residual_out), (0, residual_dim)

    return rule


def _vmap_layer_norm(call):
    def rule(info, in_dims, input, normalized_shape, weight=None, bias=None, eps=1e-5):
        op = "layer_norm"
        x_bdim, w_bdim, b_bdim = in_dims[0], in_dims[2], in_dims[3]
        x = input if x_bdim is None else input.movedim(x_bdim, 0)
        lead = _leading_dims(op, x, x_bdim is not None, normalized_shape)
        # The op applies the parameters that are not batched, unless a batched
        # weight must multiply before the bias is added.
        op_weight = weight if w_bdim is None else None
        op_bias = bias if b_bdim is None and w_bdim is None else None
        y = call(x, normalized_shape, op_weight, op_bias, eps)
        if w_bdim is not None:
            y = y * _batched_param(op, "weight", weight, w_bdim, x, normalized_shape, lead)
        if bias is not None and op_bias is None:
            y = y + (bias if b_bdim is None else _batched_param(op, "bias", bias, b_bdim, x, normalized_shape, lead))
        return y, 0

    return rule


# Backward rules for the norms: the input gradient comes from the backward op
# (a batched weight folded into grad_output, where it multiplies), the
# parameter gradients are per-sample sums, which the backward op cannot give.


def _vmap_rms_norm_backward(info, in_dims, grad_output, input, normalized_shape, weight=None, eps=None):
    B = info.batch_size
    g, x = _front(grad_output, in_dims[0], B), _front(input, in_dims[1], B)
    lead = _leading_dims("rms_norm_backward", x, True, normalized_shape)
    if weight is None:
        grad_input, placeholder = _custom.rms_norm_backward(g, x, normalized_shape, None, eps)
        return (grad_input, placeholder), (0, None)
    if in_dims[3] is None:
        grad_input, _ = _custom.rms_norm_backward(g, x, normalized_shape, weight, eps)
    else:
        w = _batched_param("rms_norm_backward", "weight", weight, in_dims[3], x, normalized_shape, lead)
        grad_input, _ = _custom.rms_norm_backward(g * w, x, normalized_shape, None, eps)
    grad_weight = _per_sample_sum(g, lead, _custom.rms_norm(x, normalized_shape, None, eps))
    return (grad_input, grad_weight), (0, 0)


def _vmap_fused_add_rms_norm_backward(
    info, in_dims, grad_output, grad_residual_out, residual_out, normalized_shape, weight=None, eps=None
):
    op = "fused_add_rms_norm_backward"
    B = info.batch_size
    g = _front(grad_output, in_dims[0], B)
    g_res = _front(grad_residual_out, in_dims[1], B)
    z = _front(residual_out, in_dims[2], B)
    lead = _leading_dims(op, z, True, normalized_shape)
    if weight is None:
        grad_sum, placeholder = _custom.fused_add_rms_norm_backward(g, g_res, z, normalized_shape, None, eps)
        return (grad_sum, placeholder), (0, None)
    if in_dims[4] is None:
        grad_sum, _ = _custom.fused_add_rms_norm_backward(g, g_res, z, normalized_shape, weight, eps)
    else:
        w = _batched_param(op, "weight", weight, in_dims[4], z, normalized_shape, lead)
        grad_sum, _ = _custom.fused_add_rms_norm_backward(g * w, g_res, z, normalized_shape, None, eps)
    grad_weight = _per_sample_sum(g, lead, _custom.rms_norm(z, normalized_shape, None, eps))
    return (grad_sum, grad_weight), (0, 0)


def _vmap_layer_norm_backward(info, in_dims, grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    op = "layer_norm_backward"
    B = info.batch_size
    g, x = _front(grad_output, in_dims[0], B), _front(input, in_dims[1], B)
    lead = _leading_dims(op, x, True, normalized_shape)
    if weight is not None and in_dims[3] is not None:
        w = _batched_param(op, "weight", weight, in_dims[3], x, normalized_shape, lead)
        grad_input = _custom.layer_norm_backward(g * w, x, normalized_shape, None, None, eps)[0]
    else:
        grad_input = _custom.layer_norm_backward(g, x, normalized_shape, weight, None, eps)[0]
    grad_weight = grad_bias = _placeholder(grad_input)
    weight_dim = bias_dim = None
    if weight is not None:
        grad_weight, weight_dim = _per_sample_sum(g, lead, _custom.layer_norm(x, normalized_shape, None, None, eps)), 0
    if bias is not None:
        grad_bias, bias_dim = _per_sample_sum(g, lead), 0
    return (grad_input, grad_weight, grad_bias), (0, weight_dim, bias_dim)


# ---------------------------------------------------------------------------
# The autograd.Functions: forward = custom::<op>, backward = custom::<op>_backward.
# jvp: the forward-mode derivative J t. Where J is symmetric (elementwise ops,
# softmax, the normalisation x -> x * rstd of the norms), J t = J^T t is the
# backward op applied to the tangent; a weight, which multiplies after the
# normalisation, multiplies the result.
# ---------------------------------------------------------------------------


def _first_order_jvp(op):
    """Refuses a jvp taken under another forward-mode transform (jvp of jvp,
    jacfwd of jacfwd): torch runs a jvp staticmethod with forward grad mode
    off, so the outer transform would see these tangents as constants and
    give a silent zero, and the backward ops have no forward derivative
    anyway. (The reverse-mode cases raise by themselves: the backward ops
    refuse to be differentiated.)"""
    stack = _get_interpreter_stack()
    if stack is not None and sum(i.key() == _TransformType.Jvp for i in stack) > 1:
        raise NotImplementedError(
            f"custom::{op}: forward-mode AD of a forward-mode derivative (torch.func.jvp of jvp, "
            "jacfwd of jacfwd) is not supported; the op has first derivatives only"
        )


def _own(tangent, shape):
    """An input's tangent passed on to an output (broadcast to its shape) as
    a tensor of the output's own: a view would tie the two, and forward AD
    updates an output's tangent in place when the output is modified in place."""
    return tangent.expand(shape).clone(memory_format=torch.contiguous_format)


def _plus(a, b):
    """a + b where either may be None (no tangent)."""
    if a is None:
        return b
    return a if b is None else a + b


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
        _first_order_jvp("add")
        if t_input is not None and t_other is not None:
            return _custom.add(t_input, t_other, ctx.alpha)
        return _own(t_input if t_other is None else ctx.alpha * t_other, ctx.output_shape)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_add(_Add.apply)(info, in_dims, *args)


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
        _first_order_jvp("gelu")
        (input,) = ctx.saved_tensors
        return _custom.gelu_backward(t_input, input, ctx.approximate)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_same_shape(_Gelu.apply)(info, in_dims, *args)


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
        _first_order_jvp("swiglu")
        gate, up = ctx.saved_tensors
        from_gate = None if t_gate is None else _custom.swiglu_backward(t_gate, gate, up)[0]
        from_up = None if t_up is None else _custom.swiglu_backward(t_up, gate, up)[1]
        return _plus(from_gate, from_up)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_same_shape(_Swiglu.apply)(info, in_dims, *args)


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
        _first_order_jvp("geglu")
        gate, up = ctx.saved_tensors
        from_gate = None if t_gate is None else _custom.geglu_backward(t_gate, gate, up, ctx.approximate)[0]
        from_up = None if t_up is None else _custom.geglu_backward(t_up, gate, up, ctx.approximate)[1]
        return _plus(from_gate, from_up)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_same_shape(_Geglu.apply)(info, in_dims, *args)


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
        _first_order_jvp("rms_norm")
        input, weight = ctx.saved_tensors
        shape, eps = ctx.normalized_shape, ctx.eps
        tangent = None
        if t_input is not None:
            tangent = _custom.rms_norm_backward(t_input, input, shape, None, eps)[0]
            if weight is not None:
                tangent = tangent * weight
        if t_weight is not None:
            tangent = _plus(tangent, rms_norm(input, shape, None, eps) * t_weight)
        return tangent

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_rms_norm(_RmsNorm.apply)(info, in_dims, *args)


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
        _first_order_jvp("fused_add_rms_norm")
        z, weight = ctx.saved_tensors
        shape, eps = ctx.normalized_shape, ctx.eps
        t_z = t_input + t_residual if t_input is not None and t_residual is not None else None
        if t_z is None and (t_input is not None or t_residual is not None):
            t_z = _own(t_residual if t_input is None else t_input, z.shape)
        tangent = None
        if t_z is not None:
            tangent = _custom.rms_norm_backward(t_z, z, shape, None, eps)[0]
            if weight is not None:
                tangent = tangent * weight
        if t_weight is not None:
            tangent = _plus(tangent, rms_norm(z, shape, None, eps) * t_weight)
        # torch takes no None for an output's tangent: residual_out does not depend on the weight.
        return tangent, torch.zeros_like(z) if t_z is None else t_z

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_fused_add_rms_norm(_FusedAddRmsNorm.apply)(info, in_dims, *args)


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
        _first_order_jvp("layer_norm")
        input, weight = ctx.saved_tensors
        shape, eps = ctx.normalized_shape, ctx.eps
        tangent = None
        if t_input is not None:
            tangent = _custom.layer_norm_backward(t_input, input, shape, None, None, eps)[0]
            if weight is not None:
                tangent = tangent * weight
        if t_weight is not None:
            tangent = _plus(tangent, layer_norm(input, shape, None, None, eps) * t_weight)
        if t_bias is not None:
            tangent = _own(t_bias, ctx.output_shape) if tangent is None else tangent + t_bias
        return tangent

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_layer_norm(_LayerNorm.apply)(info, in_dims, *args)


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
        _first_order_jvp("softmax")
        (output,) = ctx.saved_tensors
        return _custom.softmax_backward(t_input, output, ctx.dim)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_softmax("softmax", _Softmax.apply)(info, in_dims, *args)


# ---------------------------------------------------------------------------
# Entry points, with the signatures of the C++ fast path's functions (ops.py
# has already converted and checked the arguments).
# ---------------------------------------------------------------------------


def add(input, other, alpha=1.0):
    return _Add.apply(input, other, alpha)


def gelu(input, approximate="none"):
    return _Gelu.apply(input, approximate)


def swiglu(gate, up):
    return _Swiglu.apply(gate, up)


def geglu(gate, up, approximate="none"):
    return _Geglu.apply(gate, up, approximate)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    return _RmsNorm.apply(input, normalized_shape, weight, eps)


def fused_add_rms_norm(input, residual, normalized_shape, weight=None, eps=None):
    return _FusedAddRmsNorm.apply(input, residual, normalized_shape, weight, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _LayerNorm.apply(input, normalized_shape, weight, bias, eps)


def softmax(input, dim):
    return _Softmax.apply(input, dim)


_ENTRY_POINTS = {
    "add": add,
    "gelu": gelu,
    "swiglu": swiglu,
    "geglu": geglu,
    "rms_norm": rms_norm,
    "fused_add_rms_norm": fused_add_rms_norm,
    "layer_norm": layer_norm,
    "softmax": softmax,
}
_C._set_transform_handlers(_ENTRY_POINTS)

# Batching rules on the dispatcher: for the backward ops (which the backward
# and jvp above call under vmap in jacrev, jacfwd, vmap of grad) and for direct
# torch.ops.custom callers of the forward ops.
_VMAP_RULES = {
    "add": _vmap_add(_custom.add.default),
    "gelu": _vmap_same_shape(_custom.gelu.default),
    "swiglu": _vmap_same_shape(_custom.swiglu.default),
    "geglu": _vmap_same_shape(_custom.geglu.default),
    "rms_norm": _vmap_rms_norm(_custom.rms_norm.default),
    "fused_add_rms_norm": _vmap_fused_add_rms_norm(_custom.fused_add_rms_norm.default),
    "layer_norm": _vmap_layer_norm(_custom.layer_norm.default),
    "softmax": _vmap_softmax("softmax", _custom.softmax.default),
    "add_backward": _vmap_add_backward,
    "gelu_backward": _vmap_same_shape(_custom.gelu_backward.default),
    "swiglu_backward": _vmap_same_shape(_custom.swiglu_backward.default),
    "geglu_backward": _vmap_same_shape(_custom.geglu_backward.default),
    "rms_norm_backward": _vmap_rms_norm_backward,
    "fused_add_rms_norm_backward": _vmap_fused_add_rms_norm_backward,
    "layer_norm_backward": _vmap_layer_norm_backward,
    "softmax_backward": _vmap_softmax("softmax_backward", _custom.softmax_backward.default),
}
for _name, _rule in _VMAP_RULES.items():
    torch.library.register_vmap(f"custom::{_name}", _rule)
