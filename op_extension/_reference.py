"""Reference implementations of every custom op and backward op, and the
tolerances a kernel is held to against them.

The forward references are the ATen composite forms the tests check the
kernels with (tests/reference.py imports them from here); the backward
references are ATen's own backward ops where it has one (gelu, softmax,
layer_norm) and the closed-form gradient otherwise, written without autograd so
that they can run below the Autograd dispatch key (op_extension.debug calls
them from inside the dispatcher, where autograd is switched off).

Every reference computes in float32 (float64 for float64 inputs) and rounds the
result once to the input dtype: what an ideal float16/bfloat16 kernel that
accumulates in float returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# Tolerances
# ---------------------------------------------------------------------------
#
# ONE table: TOLERANCES[dtype][key] = (atol, rtol), key "default" or
# "<op>.forward" / "<op>.backward" where an op needs something else. The
# comparison is torch.testing.assert_close's |actual - expected| <= atol + rtol * |expected|.
#
# Defaults, per dtype:
# * float32: atol 1e-5, rtol 1.3e-6 (torch.testing's defaults). The kernels
#   accumulate in float with a vector-lane summation order and use FMA, the
#   reference uses ATen's order: a few ulp apart.
# * float16: atol 1e-3, rtol 1e-3. The kernel and the reference both compute in
#   float and round once, so they differ by at most one float16 rounding step
#   (relative 2^-11 ~ 4.9e-4) where float rounding flips a tie; atol covers the
#   results near zero whose relative error is meaningless.
# * bfloat16: atol 1.6e-2, rtol 1.6e-2 (bfloat16 keeps 8 bits: one rounding step
#   is relative 2^-8 ~ 3.9e-3; 1.6e-2 is torch.testing's bfloat16 rtol).
# * float64: atol 1e-7, rtol 1e-7. Everything is computed in double; the real
#   error is ~1e-15, the bound only guards against a float32 code path.
#
# Per-op entries, each with its reason:
# * layer_norm in float32: rows whose mean is large next to their spread (the
#   "shifted_mean" samples, mean 100, std 1). The mean itself is only known to
#   ~eps * |mean| ~ 1.2e-5 in float32 -- in the float32 reference as much as in
#   the kernel (both are ~1e-5 away from a float64 evaluation, in different
#   directions) -- and rstd ~ 1 carries that into every output and gradient.
#   atol 5e-5; the kernel's accuracy itself is checked against float64 in
#   test_layer_norm_large_mean_is_stable.
# * add backward in float32: the gradient of a broadcast operand is a sum over
#   up to a few hundred rows, accumulated in float32 in row order (so that it is
#   deterministic), where ATen sums pairwise: for 300 terms of |g| ~ 1 scaled by
#   alpha the two differ by ~sqrt(300) * eps * |partial sum| ~ 3e-5. atol 1e-4,
#   rtol 1e-5 (still ~100x below the error of a missing or duplicated term).
#   "row_sum.backward" is the same bound for the norms' weight/bias gradients
#   over hundreds of rows, compared with a float64 sum.
TOLERANCES: dict[torch.dtype, dict[str, tuple[float, float]]] = {
    torch.float32: {
        "default": (1e-5, 1.3e-6),
        "layer_norm.forward": (5e-5, 1.3e-6),
        "layer_norm.backward": (5e-5, 1.3e-6),
        "add.backward": (1e-4, 1e-5),
        "row_sum.backward": (1e-4, 1e-5),
    },
    torch.float16: {
        "default": (1e-3, 1e-3),
    },
    torch.bfloat16: {
        "default": (1.6e-2, 1.6e-2),
    },
    torch.float64: {
        "default": (1e-7, 1e-7),
    },
}


def tolerance(dtype: torch.dtype, op: str | None = None, kind: str = "forward") -> dict[str, float]:
    """assert_close kwargs for `op`'s `kind` ("forward" or "backward") in `dtype`."""
    table = TOLERANCES[dtype]
    atol, rtol = table.get(f"{op}.{kind}", table["default"])
    return {"atol": atol, "rtol": rtol}


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def default_rms_norm_eps(dtype: torch.dtype) -> float:
    """F.rms_norm's eps=None: the machine epsilon of the computation (opmath)
    type -- float32's for float16/bfloat16/float32 inputs, float64's for
    float64 (torch.nn.RMSNorm docs, torch 2.13; not finfo(float16).eps)."""
    return torch.finfo(acc_dtype(dtype)).eps


# ---------------------------------------------------------------------------
# Forward references, on float32 / float64 copies of the inputs. `dtype` is the
# dtype of the op's inputs (what intermediates are stored in).
# ---------------------------------------------------------------------------


def round_through(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t rounded to `dtype` and back, with an identity gradient (the rounding
    of a stored intermediate is not part of the math being differentiated)."""
    if dtype == t.dtype:
        return t
    return t + (t.detach().to(dtype).to(t.dtype) - t.detach())


def ref_add(input, other, alpha=1.0, *, dtype):
    return input + alpha * other


def ref_gelu(input, approximate="none", *, dtype):
    return F.gelu(input, approximate=approximate)


def ref_rms_norm(input, normalized_shape, weight=None, eps=None, *, dtype):
    eps = default_rms_norm_eps(dtype) if eps is None else eps
    return F.rms_norm(input, list(normalized_shape), weight, eps)


def ref_fused_add_rms_norm(input, residual, normalized_shape, weight=None, eps=None, *, dtype):
    # residual_out is stored in the input dtype and the norm reads the stored
    # values, exactly as `z = x + r; rms_norm(z)` would in that dtype.
    z = round_through(input + residual, dtype)
    return ref_rms_norm(z, normalized_shape, weight, eps, dtype=dtype), z


def ref_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, *, dtype):
    return F.layer_norm(input, list(normalized_shape), weight, bias, eps)


def ref_softmax(input, dim, *, dtype):
    return torch.softmax(input, dim)


def ref_swiglu(gate, up, *, dtype):
    return F.silu(gate) * up


def ref_geglu(gate, up, approximate="none", *, dtype):
    return F.gelu(gate, approximate=approximate) * up


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def ref_rotary_embedding(q, k, cos, sin, unsqueeze_dim=1, *, dtype):
    # Hugging Face's apply_rotary_pos_emb.
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


# ---------------------------------------------------------------------------
# Backward references. A parameter gradient of a call without that parameter is
# an empty tensor of shape [0], as the kernels return it.
# ---------------------------------------------------------------------------


def _no_param_grad(like: torch.Tensor) -> torch.Tensor:
    return like.new_empty((0,))


def ref_add_backward(grad_output, input_size, alpha=1.0, *, dtype):
    # The gradient of a broadcast operand sums over the dims it was broadcast along.
    return (grad_output * alpha).sum_to_size(list(input_size))


def ref_gelu_backward(grad_output, input, approximate="none", *, dtype):
    return torch.ops.aten.gelu_backward(grad_output, input, approximate=approximate)


def ref_swiglu_backward(grad_output, gate, up, *, dtype):
    sig = torch.sigmoid(gate)
    silu = gate * sig
    return grad_output * up * sig * (1 + gate * (1 - sig)), grad_output * silu


def ref_geglu_backward(grad_output, gate, up, approximate="none", *, dtype):
    grad_gate = torch.ops.aten.gelu_backward(grad_output * up, gate, approximate=approximate)
    return grad_gate, grad_output * F.gelu(gate, approximate=approximate)


def _rms_norm_grads(grad_output, input, normalized_shape, weight, eps, dtype):
    eps = default_rms_norm_eps(dtype) if eps is None else eps
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    rstd = torch.rsqrt(input.pow(2).mean(dims, keepdim=True) + eps)
    normed = input * rstd
    weighted = grad_output if weight is None else grad_output * weight
    grad_input = rstd * (weighted - normed * (weighted * normed).mean(dims, keepdim=True))
    if weight is None:
        return grad_input, _no_param_grad(input)
    row_dims = tuple(range(input.dim() - len(normalized_shape)))
    return grad_input, (grad_output * normed).sum(row_dims) if row_dims else grad_output * normed


def ref_rms_norm_backward(grad_output, input, normalized_shape, weight=None, eps=None, *, dtype):
    return _rms_norm_grads(grad_output, input, normalized_shape, weight, eps, dtype)


def ref_fused_add_rms_norm_backward(grad_output, grad_residual_out, residual_out, normalized_shape,
                                    weight=None, eps=None, *, dtype):
    # input and residual both reach the output only through their sum: one gradient for both.
    grad_sum, grad_weight = _rms_norm_grads(grad_output, residual_out, normalized_shape, weight, eps, dtype)
    if grad_residual_out is not None:
        grad_sum = grad_sum + grad_residual_out
    return grad_sum, grad_weight


def ref_layer_norm_backward(grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5, *, dtype):
    shape = list(normalized_shape)
    _, mean, rstd = torch.ops.aten.native_layer_norm(input, shape, weight, bias, eps)
    grad_input, grad_weight, grad_bias = torch.ops.aten.native_layer_norm_backward(
        grad_output, input, shape, mean, rstd, weight, bias, [True, weight is not None, bias is not None])
    return (grad_input,
            _no_param_grad(input) if grad_weight is None else grad_weight,
            _no_param_grad(input) if grad_bias is None else grad_bias)


def ref_rotary_embedding_backward(grad_q_embed, grad_k_embed, cos, sin, unsqueeze_dim=1, *, dtype):
    # The transpose of x -> x cos + rotate_half(x) sin: g cos - rotate_half(g sin).
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return tuple(g * cos - _rotate_half(g * sin) for g in (grad_q_embed, grad_k_embed))


def ref_softmax_backward(grad_output, output, dim, *, dtype):
    return torch.ops.aten._softmax_backward_data(grad_output, output, dim, output.dtype)


# Every op and backward op of torch.ops.custom (tests/test_debug.py checks that none is missing).
REFERENCES: dict[str, Callable] = {
    "add": ref_add,
    "add_backward": ref_add_backward,
    "gelu": ref_gelu,
    "gelu_backward": ref_gelu_backward,
    "rms_norm": ref_rms_norm,
    "rms_norm_backward": ref_rms_norm_backward,
    "fused_add_rms_norm": ref_fused_add_rms_norm,
    "fused_add_rms_norm_backward": ref_fused_add_rms_norm_backward,
    "layer_norm": ref_layer_norm,
    "layer_norm_backward": ref_layer_norm_backward,
    "softmax": ref_softmax,
    "softmax_backward": ref_softmax_backward,
    "swiglu": ref_swiglu,
    "swiglu_backward": ref_swiglu_backward,
    "geglu": ref_geglu,
    "geglu_backward": ref_geglu_backward,
    "rotary_embedding": ref_rotary_embedding,
    "rotary_embedding_backward": ref_rotary_embedding_backward,
}


def _tensor_dtype(args: Sequence) -> torch.dtype:
    return next(a.dtype for a in args if isinstance(a, torch.Tensor))


def run_reference(op: str, args: Sequence) -> tuple[torch.Tensor, ...]:
    """The reference of custom::<op> on the schema-ordered `args`: outputs as a
    tuple in the inputs' dtype, on the inputs' device, without autograd history."""
    dtype = _tensor_dtype(args)
    acc = acc_dtype(dtype)
    wide = [a.detach().to(acc) if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        outs = REFERENCES[op](*wide, dtype=dtype)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return tuple(o.to(dtype) for o in outs)
