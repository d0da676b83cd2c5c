"""What an op module (op_extension/op_defs/<op>.py) may use of the package.

An op module imports torch, the standard library, this module, and at most the
module of another op it builds on (fused_add_rms_norm's on rms_norm's and
add's) -- nothing else of op_extension. The shared modules that collect its
pieces (ops, _fake, _reference, _transforms, debug, the simulators) import
op_defs, and op_defs imports the op modules; this module sits below all of
them: it imports torch, the standard library and _built (which loads the
library _C) only, so no import runs back up (tests/test_import_graph.py).

What it holds, by the piece of an op module that uses it (op_defs/__init__.py
lists the pieces):

- the functional function ``<op>(...)``: ``fast_path`` (the built library
  _C: ``fast_path.<op>(...)`` is the op's C++ fast path), ``eager`` (whether a
  call may take it), the argument conversions of the traced path
  (``shape_list``, ``int64_arg``, ``int64_list_arg``, ``float_arg``,
  ``optional_eps``) and those for parameters of another dtype (``other_dtype``,
  ``common_float``, ``default_eps``);
- ``FAKE``: ``FakeRule``, the output layouts (``ROW_MAJOR``, ``KEEP_LAYOUT``,
  ``MEMORY_FORMAT``, ``LIKE_DENSE_SOURCE``) and the checks a rule's ``check``
  makes (``check_*``, ``wrap_dim``), with the messages of the C++ checks;
- ``REFERENCES``: ``acc_dtype``, ``default_rms_norm_eps``, ``round_through``,
  ``absent_grad``;
- ``TRANSFORM`` and ``VMAP``: ``active`` and ``traced`` (the traced path's
  call of the op), the jvp helpers (``first_order_jvp``, ``own_tangent``,
  ``plus``) and the vmap helpers (``batch_first``, ``pad_after_batch``,
  ``leading_dims``, ``batched_param``, ``per_sample_sum``,
  ``vmap_same_shape``);
- ``SHARDING``: ``placements`` (DTensor's Replicate, Shard, Partial, loaded
  when a rule first runs) and ``row_sharding`` (the rule of an op whose
  tensors share their leading dims: the activations, the norms, softmax), with
  its kinds of tensor ``ROW``, ``SUM``, ``WHOLE`` and ``given`` (the kind
  of an optional one).

A new op's module takes these as they are: this file, shared by every op,
names none (tests/test_scaffold.py).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.autograd.forward_ad as _forward_ad
from torch._C import _has_torch_function
from torch._C._functorch import TransformType as _TransformType
from torch._C._functorch import get_interpreter_stack as _get_interpreter_stack
from torch._C._functorch import peek_interpreter_stack as _peek_interpreter_stack

from ._built import C as fast_path

__all__ = [
    # the functional function
    "fast_path", "eager", "shape_list", "int64_arg", "int64_list_arg", "float_arg", "optional_eps",
    "other_dtype", "common_float", "default_eps",
    # FAKE
    "FakeRule", "ROW_MAJOR", "KEEP_LAYOUT", "MEMORY_FORMAT", "LIKE_DENSE_SOURCE", "LAYOUTS",
    "check_dtype", "check_same", "check_same_shape", "check_normalized_shape", "check_affine", "check_allowed",
    "wrap_dim",
    # REFERENCES
    "acc_dtype", "default_rms_norm_eps", "round_through", "absent_grad",
    # TRANSFORM, VMAP
    "active", "traced", "first_order_jvp", "own_tangent", "plus",
    "batch_first", "pad_after_batch", "leading_dims", "batched_param", "per_sample_sum", "vmap_same_shape",
    # SHARDING
    "placements", "row_sharding", "given", "ROW", "SUM", "WHOLE",
]


# ---------------------------------------------------------------------------
# The functional function: fast path and argument conversions
# ---------------------------------------------------------------------------


def eager(*tensors) -> bool:
    """Whether the C++ fast path may run the op: not while Dynamo traces this
    function (it must see torch.ops.custom.*), and only for tensors without
    __torch_function__ overrides or an active torch function mode."""
    return not torch.compiler.is_compiling() and not _has_torch_function(tensors)


def shape_list(op: str, normalized_shape) -> list[int]:
    if isinstance(normalized_shape, (int, torch.SymInt)):
        return [normalized_shape]
    if isinstance(normalized_shape, (Sequence, torch.Size)):
        return list(normalized_shape)
    raise TypeError(f"custom::{op}: normalized_shape must be an int or a sequence of ints, got {type(normalized_shape).__name__}")


# Argument conversions for the traced path (the C++ fast path does the same in
# python_module.cpp): a value the schema cannot hold is refused by name, rather
# than by torch's argument parser or by Python's float().

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def int64_arg(op: str, name: str, value):
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"custom::{op}: {name}={value!r} does not fit in an int64")
    return value


def int64_list_arg(op: str, name: str, values: list) -> list:
    for v in values:
        if isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError(f"custom::{op}: {name} {values} holds {v}, which does not fit in an int64")
    return values


def float_arg(op: str, name: str, value):
    """A real number as a float (symbolic values pass through), or an error naming op and argument."""
    if type(value) is float:  # the common case, without the ABC checks below
        return value
    if isinstance(value, (torch.SymFloat, torch.SymInt)):
        return value
    if not isinstance(value, numbers.Real):
        raise TypeError(f"custom::{op}: {name} must be a float, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"custom::{op}: {name}={value!r} does not fit in a float64") from None


def optional_eps(op: str, eps):
    """An `eps` that may be None (the norms' default), else as float_arg."""
    return None if eps is None else float_arg(op, "eps", eps)


# Parameters (or a residual) of another floating dtype than the input's, as
# F.rms_norm / F.layer_norm take them: under torch.autocast a bfloat16
# activation meets a float32 weight. The dispatcher ops keep one dtype per call
# (their checks say so); an op's function makes the call in the wider dtype of
# the two and rounds the result once to the input's dtype, as torch returns it.
# Non-floating dtypes go to the op as they are, whose dtype check names them.


def other_dtype(input, t) -> bool:
    """t is a tensor of another dtype than the tensor input (anything else: the
    op's own argument checks speak)."""
    return isinstance(t, torch.Tensor) and isinstance(input, torch.Tensor) and t.dtype != input.dtype


def common_float(input: torch.Tensor, *others: torch.Tensor | None) -> torch.dtype | None:
    """The promoted dtype of input and the present others, None where one is not floating."""
    dtype = input.dtype
    if not dtype.is_floating_point:
        return None
    for t in others:
        if t is not None:
            if not t.dtype.is_floating_point:
                return None
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def default_eps(eps, input: torch.Tensor):
    # eps=None means the epsilon of the input's computation dtype (float32 for
    # 16-bit inputs), not of the wider dtype the call is made in.
    if eps is not None:
        return eps
    return torch.finfo(torch.float64 if input.dtype == torch.float64 else torch.float32).eps


# ---------------------------------------------------------------------------
# FAKE: the rule of an op's fake kernel and the checks it makes. They apply the
# same rules, with the same messages, as the C++ checks in
# csrc/torch_ext/checks.cpp, but on possibly symbolic sizes: every comparison
# of a size goes through torch._check_* so that it becomes a runtime assertion
# instead of a guard or a specialisation.
# ---------------------------------------------------------------------------

ROW_MAJOR = "row_major"  # outputs row-major (contiguous)
KEEP_LAYOUT = "keep"  # keeps_layout: the layout the checked tensor shares with the `same` ones, if any
MEMORY_FORMAT = "memory_format"  # in_memory_format: the checked tensor's channels_last format, if any
# Each output in the layout of the input its shape rule names (empty_like), where
# that input is dense with a unit-stride last dim (a transposed view too), else
# row-major: for glue that reads such an input in place (the op module that uses
# this layout names its glue).
LIKE_DENSE_SOURCE = "like_dense_source"
LAYOUTS = (ROW_MAJOR, KEEP_LAYOUT, MEMORY_FORMAT, LIKE_DENSE_SOURCE)


@dataclass(frozen=True)
class FakeRule:
    """What an op's fake kernel checks beyond its prototype. The derived kernel
    (_fake.derived_kernel) applies, in this order (the one of the op's C++
    checks, whose messages these are):

    1. `dtype_of` (default: the prototype's first input) has one of the
       prototype's dtypes;
    2. each tensor of `same` (default: every other input, in prototype order;
       absent optional ones skipped) has its device and dtype, and, if listed
       in `same_shape` too, its shape;
    3. every attr with allowed_values has one of them;
    4. `check(op, **arguments)`, the op's own checks (arguments by name, defaults
       filled in);
    5. outputs by the prototype's shape rules, in `layout` (ROW_MAJOR,
       KEEP_LAYOUT like `dtype_of` with operands dtype_of and `same`,
       MEMORY_FORMAT of `dtype_of`, or LIKE_DENSE_SOURCE)."""

    dtype_of: str | None = None
    same: tuple[str, ...] | None = None
    same_shape: tuple[str, ...] = ()
    check: Callable[..., None] | None = None
    layout: str = ROW_MAJOR


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_dtype(op: str, t: torch.Tensor, name: str, allowed: tuple[torch.dtype, ...]) -> None:
    """t's dtype is one of `allowed`."""
    torch._check_type(
        t.dtype in allowed,
        lambda: f"custom::{op}: {name} has dtype {_dtype_name(t.dtype)}, which is not supported; "
        f"supported dtypes: {', '.join(_dtype_name(d) for d in allowed)}",
    )


def check_same(op: str, ref: torch.Tensor, ref_name: str, t: torch.Tensor, name: str) -> None:
    torch._check(
        t.device == ref.device,
        lambda: f"custom::{op}: {name} is on {t.device} but {ref_name} is on {ref.device}; "
        "all tensors must be on the same device",
    )
    torch._check_type(
        t.dtype == ref.dtype,
        lambda: f"custom::{op}: {name} has dtype {_dtype_name(t.dtype)} but {ref_name} has dtype "
        f"{_dtype_name(ref.dtype)}; all tensors must have the same dtype",
    )


def check_same_shape(op: str, ref: torch.Tensor, ref_name: str, t: torch.Tensor, name: str) -> None:
    def message():
        return f"custom::{op}: {name} has shape {list(t.shape)} but {ref_name} has shape {list(ref.shape)}; they must be equal"

    torch._check_value(t.dim() == ref.dim(), message)
    for a, b in zip(t.shape, ref.shape):
        torch._check_value(a == b, message)


def check_normalized_shape(op: str, input: torch.Tensor, normalized_shape: Sequence) -> None:
    shape = list(normalized_shape)
    torch._check_value(
        len(shape) >= 1, lambda: f"custom::{op}: normalized_shape must have at least one dim, got {shape}"
    )
    torch._check_value(
        input.dim() >= len(shape),
        lambda: f"custom::{op}: normalized_shape {shape} has more dims than the input of shape {list(input.shape)}",
    )
    lead = input.dim() - len(shape)
    for i, size in enumerate(shape):
        torch._check_value(size >= 0, lambda: f"custom::{op}: normalized_shape {shape} has a negative size")
        torch._check_value(
            input.shape[lead + i] == size,
            lambda: f"custom::{op}: normalized_shape {shape} does not match the trailing dims of the "
            f"input of shape {list(input.shape)}",
        )


def check_affine(op: str, param, name: str, input: torch.Tensor, normalized_shape: Sequence) -> None:
    if param is None:
        return
    check_same(op, input, "input", param, name)
    shape = list(normalized_shape)

    def message():
        return f"custom::{op}: {name} has shape {list(param.shape)} but normalized_shape is {shape}"

    torch._check_value(param.dim() == len(shape), message)
    for a, b in zip(param.shape, shape):
        torch._check_value(a == b, message)


def wrap_dim(op: str, dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    torch._check_index(
        -n <= dim < n,
        lambda: f"custom::{op}: dim {dim} is out of range for a tensor with {ndim} dims "
        f"(expected a dim in [{-n}, {n - 1}])",
    )
    return dim % n


def _literal(value) -> str:
    return f"'{value}'" if isinstance(value, str) else repr(value)


def check_allowed(op: str, name: str, value, allowed: Sequence) -> None:
    """An attr's value is one of its prototype's allowed_values ("approximate
    must be 'none' or 'tanh', got 'x'", as parse_gelu_approximate in checks.cpp)."""

    def message():
        choices = [_literal(v) for v in allowed]
        listed = choices[0] if len(choices) == 1 else ", ".join(choices[:-1]) + " or " + choices[-1]
        return f"custom::{op}: {name} must be {listed}, got {_literal(value)}"

    torch._check_value(value in allowed, message)


# ---------------------------------------------------------------------------
# REFERENCES: they run on float32 / float64 copies of the inputs; `dtype` is
# the dtype of the op's inputs (what intermediates are stored in).
# ---------------------------------------------------------------------------


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a reference computes in for inputs of `dtype`."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def default_rms_norm_eps(dtype: torch.dtype) -> float:
    """F.rms_norm's eps=None: the machine epsilon of the computation (opmath)
    type -- float32's for float16/bfloat16/float32 inputs, float64's for
    float64 (torch.nn.RMSNorm docs, torch 2.13; not finfo(float16).eps)."""
    return torch.finfo(acc_dtype(dtype)).eps


def round_through(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t rounded to `dtype` and back, with an identity gradient (the rounding
    of a stored intermediate is not part of the math being differentiated)."""
    if dtype == t.dtype:
        return t
    return t + (t.detach().to(dtype).to(t.dtype) - t.detach())


def absent_grad(like: torch.Tensor) -> torch.Tensor:
    """The gradient a backward op (and its reference, and its vmap rule) returns
    for a parameter the call was made without: an empty tensor of shape [0]."""
    return like.new_empty((0,))


# ---------------------------------------------------------------------------
# TRANSFORM and VMAP (_transforms registers them; its docstring says who calls
# them and why).
# ---------------------------------------------------------------------------


def active() -> bool:
    """Whether a call of op_extension.ops outside the C++ fast path (a tensor
    subclass or torch function mode is involved) must go to the op's
    TRANSFORM: a torch.func transform is active, or a forward-mode dual level
    is open. Never while Dynamo or export trace: they must see
    torch.ops.custom.<op>."""
    if torch.compiler.is_compiling():
        return False
    return _peek_interpreter_stack() is not None or _forward_ad._current_level >= 0


def traced(op, transformed):
    """An op function's call of `op` outside the C++ fast path: `transformed`
    (the op's TRANSFORM.apply) when active()."""

    def call(*args):
        if active():
            return transformed(*args)
        return op(*args)

    return call


# jvp: the forward-mode derivative J t. Where J is symmetric (elementwise ops,
# softmax, the normalisation x -> x * rstd of the norms), J t = J^T t is the
# backward op applied to the tangent; a weight, which multiplies after the
# normalisation, multiplies the result.


def first_order_jvp(op):
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


def own_tangent(tangent, shape):
    """An input's tangent passed on to an output (broadcast to its shape) as
    a tensor of the output's own: a view would tie the two, and forward AD
    updates an output's tangent in place when the output is modified in place."""
    return tangent.expand(shape).clone(memory_format=torch.contiguous_format)


def plus(a, b):
    """a + b where either may be None (no tangent)."""
    if a is None:
        return b
    return a if b is None else a + b


# vmap: a rule gets the unbatched ("physical") tensors and each one's batch dim
# (None: not batched) and returns outputs with the batch dim first.


def batch_first(t, bdim, batch_size):
    """t with its batch dim first; an unbatched t expanded to the batch (a
    view: the kernels read stride-0 tensors)."""
    if t is None:
        return None
    if bdim is None:
        return t.expand(batch_size, *t.shape)
    return t.movedim(bdim, 0)


def pad_after_batch(t, n):
    """t ([B, *s]) viewed as [B, 1 (n times), *s], to broadcast against a
    batched tensor with n more leading dims."""
    return t[(slice(None),) + (None,) * n]


def leading_dims(op, x, batched, normalized_shape):
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


def batched_param(op, name, param, bdim, input, normalized_shape, lead):
    """A weight or bias batched under vmap, as [B, 1 (lead times), *normalized_shape].

    The op cannot take it (one weight for all rows), so the rule applies it
    with aten ops; the checks the op would make come first, with its messages,
    since broadcasting or type promotion would otherwise hide a mismatch."""
    param = param.movedim(bdim, 0)
    check_same(op, input, "input", param, name)
    shape = list(normalized_shape)
    if list(param.shape[1:]) != shape:
        raise ValueError(f"custom::{op}: {name} has shape {list(param.shape[1:])} but normalized_shape is {shape}")
    return pad_after_batch(param, lead)


def _sum_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def per_sample_sum(t, lead, times=None):
    """Sum of t (* times) ([B, *leading, *normalized]) over its `lead` leading
    dims, per sample: a parameter's gradient under vmap, which the backward
    ops cannot give (they sum over every row, the batch included). Computed in
    float for 16-bit types, as the kernels do."""
    acc = _sum_dtype(t.dtype)
    product = t.to(acc) if times is None else t.to(acc) * times.to(acc)
    if lead > 0:  # (sum over dim=() would sum over every dim)
        product = product.sum(dim=tuple(range(1, 1 + lead)))
    return product.to(t.dtype)


def vmap_same_shape(call):
    """Rule for ops whose tensor arguments all have one shape (the GLUs, gelu
    and their backward ops): everything batched first, output batched first."""

    def rule(info, in_dims, *args):
        args = [batch_first(a, d, info.batch_size) if isinstance(a, torch.Tensor) else a for a, d in zip(args, in_dims)]
        out = call(*args)
        return out, tuple(0 for _ in out) if isinstance(out, tuple) else 0

    return rule


# ---------------------------------------------------------------------------
# SHARDING: DTensor sharding rules (op_extension.distributed registers them;
# docs/distributed.md). A rule takes the op's arguments, each tensor as DTensor's
# spec of it (.ndim, .shape, .placements) or None where absent, and returns the
# acceptable strategies on one mesh dim, as
# torch.distributed.tensor.experimental.register_sharding takes them: pairs
# (the placement of each output, the placement of each tensor argument in the
# schema's order, None for an absent one). DTensor moves the inputs to the
# cheapest strategy, so a rule lists only what the op computes right on the
# local shards.
# ---------------------------------------------------------------------------


def placements():
    """(Replicate(), Shard, Partial()) of torch.distributed.tensor, Partial a sum.
    Imported when a rule runs, never at `import op_extension`: loading DTensor
    costs half a second, and a rule runs only once a DTensor has loaded it."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    return Replicate(), Shard, Partial()


# The kinds of tensor of row_sharding.
ROW = "row"  # shaped as the rows (an activation, its gradient): sharded as they are
SUM = "sum"  # a sum over the rows (a weight's gradient): Partial where the rows are sharded
WHOLE = "whole"  # the same on every row (a weight, a bias, an absent gradient): replicated


def given(tensor, kind):
    """`kind` for an optional tensor argument, None where the call has none."""
    return None if tensor is None else kind


def row_sharding(dims, outputs, inputs, linear=()):
    """The strategies of an op whose ROW tensors share their leading dims and
    that computes each row apart: everything replicated; for each dim of
    `dims` (those of the ROW tensors it may split: not a normalized or softmax
    dim), the ROW tensors sharded on it, the SUM outputs Partial and the WHOLE
    ones replicated; and, where the op is linear in the inputs at the indices
    `linear` taken together (the others fixed), those and every output but a
    WHOLE one Partial, the other inputs replicated.

    `outputs` and `inputs` are a kind per output and per tensor argument, None
    for an absent argument (its placement is None)."""
    R, S, P = placements()

    def strategy(out_place, in_place):
        return ([out_place(kind) for kind in outputs],
                [None if kind is None else in_place(i, kind) for i, kind in enumerate(inputs)])

    found = [strategy(lambda kind: R, lambda i, kind: R)]
    for d in dims:
        found.append(strategy(lambda kind: {ROW: S(d), SUM: P, WHOLE: R}[kind],
                              lambda i, kind: S(d) if kind == ROW else R))
    if linear and any(inputs[i] is not None for i in linear):
        found.append(strategy(lambda kind: R if kind == WHOLE else P,
                              lambda i, kind: P if i in linear else R))
    return found
