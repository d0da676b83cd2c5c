"""Forward-mode AD and torch.func transforms for the custom ops.

The dispatcher ops' Autograd kernels are C++ torch::autograd::Functions
(generated from the prototypes, or csrc/torch_ext/autograd/<op>.cpp): cheap for eager calls, but with no forward
derivative, and functorch refuses them. So calls made under a torch.func
transform (grad, vjp, jacrev, jacfwd, jvp, vmap, functional_call + grad, ...)
or with an input that carries a forward-mode tangent come here instead, to one
Python torch.autograd.Function per op: the TRANSFORM of its module,
op_extension/op_defs/<op>.py. Each runs the same dispatcher ops: the forward is
custom::<op>, the backward custom::<op>_backward, the jvp is built from those
two (no other kernels), and a vmap rule moves the batch dim to the front, where
every op batches for free (elementwise ops and norms over trailing dims;
softmax's dim shifts by one). This module holds what they share (active,
traced, the vmap and jvp helpers) and registers them (register()).

Who comes here: the C++ fast path of ops.py tests for a transform or a tangent
(a few ns) and calls the TRANSFORM.apply registered for the op
(python_module.cpp; an op without a TRANSFORM gets the op itself, which
refuses); the functions' traced path (traced()) asks active(). Plain
eager calls never come here. Calling torch.ops.custom.<op> directly with a
tangent is refused by its Autograd kernel, naming op_extension.ops.<op>.

The backward ops also get vmap rules (VMAP in the op's module, registered on
the dispatcher, so they serve any caller): the backward and the jvp run under
vmap in jacrev, jacfwd and per-sample gradients (vmap of grad), and without a
rule functorch would run them once per sample. The forward ops get the same
rules as their autograd.Functions, so vmap of a direct torch.ops.custom call is
batched too.

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

from . import _built, _fake, op_defs
from ._protos import OpProto

__all__ = ["active", "register", "traced"]


def active() -> bool:
    """Whether a call of op_extension.ops outside the C++ fast path (a tensor
    subclass or torch function mode is involved) must come here: a torch.func
    transform is active, or a forward-mode dual level is open. Never while
    Dynamo or export trace: they must see torch.ops.custom.<op>."""
    if torch.compiler.is_compiling():
        return False
    return _peek_interpreter_stack() is not None or _forward_ad._current_level >= 0


def traced(op, transformed):
    """An ops function's call of `op` outside the C++ fast path: `transformed`
    (the op's TRANSFORM.apply) when active()."""

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


# ---------------------------------------------------------------------------
# Helpers of the autograd.Functions (TRANSFORM in op_extension/op_defs/<op>.py):
# forward = custom::<op>, backward = custom::<op>_backward.
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


# ---------------------------------------------------------------------------
# Registration, for every prototype whose op module has the pieces.
# ---------------------------------------------------------------------------


def register(protos: dict[str, OpProto] | None = None) -> None:
    """Hands the C++ fast path a handler for every forward op: its
    TRANSFORM.apply (called with the fast path's own arguments, which ops.py has
    already converted and checked), or, for an op without one, the op
    torch.ops.custom.<name> itself, whose Autograd kernel refuses the call
    naming op_extension.ops.<name>, as the derived function's traced path does.
    And registers every VMAP rule on the dispatcher: for the backward ops (which
    the backward and jvp call under vmap in jacrev, jacfwd, vmap of grad) and
    for direct torch.ops.custom callers of the forward ops. Called once, by
    op_extension/__init__.py, for the built prototypes (_built.BUILT)."""
    protos = _built.BUILT if protos is None else protos
    if _built.C is None:  # no library: no fast path to hand anything
        return
    # _C wants a handler for each forward op it was built with, which includes
    # one whose prototype now derives another schema: its handler refuses, as
    # ops.<name> does (its fast path is not used, but _C.<name> may be called).
    entry_points = {name: _refuse(name) for name, u in _built.UNBUILT.items() if not u.proto.backward_of}
    for proto in protos.values():
        module = op_defs.module(proto, protos)
        if not proto.backward_of:
            transform = getattr(module, "TRANSFORM", None)
            entry_points[proto.name] = (getattr(torch.ops.custom, proto.name).default if transform is None
                                        else transform.apply)
        rule = getattr(module, "VMAP", {}).get(proto.name)
        if rule is not None:
            torch.library.register_vmap(f"custom::{proto.name}", rule)
    _built.C._set_transform_handlers(entry_points)


def _refuse(name: str):
    def unbuilt(*args, **kwargs):
        raise RuntimeError(f"op_extension._C.{_built.message(name)}")

    unbuilt.__name__ = f"{name}_unbuilt"
    return unbuilt
