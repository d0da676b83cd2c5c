"""Fake (meta) kernels: output shapes and input checks, for FakeTensor,
torch.compile(dynamic=True) and torch.export.

They apply the same rules, with the same messages, as the C++ checks in
csrc/torch_ext/checks.cpp, but on possibly symbolic sizes: every comparison of a
size goes through torch._check_* so that it becomes a runtime assertion instead
of a guard or a specialisation.

Every op's fake kernel is derived from its prototype (derived_kernel): the
dtype check, the same device and dtype of the other tensors, attrs within their
allowed_values, outputs by each output's `shape` rule. What the prototype cannot
say -- which tensor's dtype is checked, which tensors must also share its shape,
the op's own checks, the output layout -- is the op's FakeRule, in the FAKE
table of op_extension/op_defs/<op>.py (default: FakeRule()). register() is
called once by op_extension/__init__.py, for every built prototype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch._prims_common  # layout rules (keeps_layout, in_memory_format)

from . import _built, op_defs
from ._protos import OpProto

# The prototypes the library holds as described: a fake kernel derived from any
# other would describe an op the kernels do not run (_built).
PROTOS = _built.BUILT
DTYPES = {name: tuple(getattr(torch, d) for d in proto.dtypes) for name, proto in PROTOS.items()}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_dtype(op: str, t: torch.Tensor, name: str, allowed: tuple[torch.dtype, ...] | None = None) -> None:
    """t's dtype is one of `allowed` (default: the dtypes of op's prototype)."""
    allowed = DTYPES[op] if allowed is None else allowed
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


def broadcast_shape(op: str, a: Sequence, b: Sequence) -> torch.Size:
    try:
        return torch.broadcast_shapes(tuple(a), tuple(b))
    except RuntimeError:
        raise ValueError(f"custom::{op}: shapes {list(a)} and {list(b)} are not broadcastable") from None


def keeps_layout(*operands: torch.Tensor) -> bool:
    """The output layout rule of csrc/torch_ext/glue_util.h (keeps_layout): the
    operands' layout when they all share one dense, non-overlapping layout other
    than row-major (channels_last, a transpose, ...), as torch's elementwise ops."""
    first = operands[0]
    if first.is_contiguous() or not torch._prims_common.is_non_overlapping_and_dense_or_false(first):
        return False
    return all(t.shape == first.shape and t.stride() == first.stride() for t in operands[1:])


def in_layout(result, like: torch.Tensor, keep: bool):
    """`result` (an output or a tuple of them) in like's layout when keep."""
    if not keep:
        return result
    if isinstance(result, tuple):
        return tuple(torch.empty_like(like) for _ in result)
    return torch.empty_like(like)


def in_memory_format(result, like: torch.Tensor):
    """glue_util.h's in_memory_format_of: like's channels_last (3d) format, else row-major
    (`result`: an output or a tuple of them)."""
    if isinstance(result, tuple):
        return tuple(in_memory_format(r, like) for r in result)
    fmt = torch._prims_common.suggest_memory_format(like)
    if fmt == torch.contiguous_format or like.is_contiguous():
        return result
    return torch.empty_like(result, memory_format=fmt)


def outputs(op: str, **args):
    """Empty outputs shaped by each output's `shape` rule in the op's prototype:
    the name of an argument (its shape; an absent parameter gives an empty
    placeholder), or broadcast(a, b). Like the first tensor of `args`."""
    return _outputs(PROTOS[op], args)


def _outputs(proto: OpProto, args: dict):
    op = proto.name
    like = next(v for v in args.values() if isinstance(v, torch.Tensor))
    results = []
    for desc in proto.outputs:
        rule = desc.shape
        if rule.startswith("broadcast(") and rule.endswith(")"):
            a, b = (args[name.strip()] for name in rule[len("broadcast(") : -1].split(","))
            shape = broadcast_shape(op, a.shape, b.shape)
        else:
            source = args[rule]
            if source is None:
                shape = (0,)
            elif isinstance(source, torch.Tensor):
                shape = source.shape
            else:
                shape = list(source)
        results.append(like.new_empty(shape))
    return results[0] if len(results) == 1 else tuple(results)


# ---------------------------------------------------------------------------
# The derived fake kernel of every prototype
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
    applies, in this order (the one of the op's C++ checks, whose messages these are):

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


def _resolve(proto: OpProto, rule: FakeRule) -> tuple[str, tuple[str, ...]]:
    """(the checked tensor, the `same` tensors), after defaults and checks of the rule against the prototype."""
    inputs = [t.name for t in proto.inputs]
    anchor = rule.dtype_of or inputs[0]
    same = tuple(n for n in inputs if n != anchor) if rule.same is None else tuple(rule.same)
    where = f"op_extension/op_defs/{op_defs.forward_name(proto)}.py: FAKE[{proto.name!r}]"
    unknown = sorted({anchor, *same, *rule.same_shape} - set(inputs))
    if unknown:
        raise op_defs.OpDefError(f"{where} names {unknown}, which are not inputs of {proto.name} ({inputs})")
    if next(t for t in proto.inputs if t.name == anchor).optional:
        raise op_defs.OpDefError(f"{where}: dtype_of {anchor!r} is an optional input; name a required one")
    if not set(rule.same_shape) <= set(same):
        raise op_defs.OpDefError(f"{where}: same_shape {list(rule.same_shape)} must be among same {list(same)}")
    if rule.layout not in LAYOUTS:
        raise op_defs.OpDefError(f"{where}: layout {rule.layout!r} is not one of {LAYOUTS}")
    return anchor, same


def derived_kernel(proto: OpProto, rule: FakeRule | None = None) -> Callable:
    """The fake kernel of `proto` under `rule` (see FakeRule)."""
    rule = FakeRule() if rule is None else rule
    op = proto.name
    anchor, same = _resolve(proto, rule)
    same_shape = frozenset(rule.same_shape)
    names = proto.arg_order
    defaults = {t.name: None for t in proto.inputs if t.optional}
    defaults.update({a.name: a.default for a in proto.attrs if a.has_default})
    allowed = tuple((a.name, a.allowed_values) for a in proto.attrs if a.allowed_values)
    dtypes = tuple(getattr(torch, d) for d in proto.dtypes)
    check, layout = rule.check, rule.layout

    def kernel(*args, **kwargs):
        # By name in the prototype's order (the dispatcher leaves out trailing defaults).
        bound = {}
        for i, name in enumerate(names):
            bound[name] = args[i] if i < len(args) else kwargs[name] if name in kwargs else defaults[name]
        ref = bound[anchor]
        check_dtype(op, ref, anchor, dtypes)
        for name in same:
            t = bound[name]
            if t is None:
                continue
            check_same(op, ref, anchor, t, name)
            if name in same_shape:
                check_same_shape(op, ref, anchor, t, name)
        for name, values in allowed:
            check_allowed(op, name, bound[name], values)
        if check is not None:
            check(op, **bound)
        result = _outputs(proto, bound)
        if layout == KEEP_LAYOUT:
            operands = [ref] + [bound[n] for n in same if bound[n] is not None]
            return in_layout(result, ref, keeps_layout(*operands))
        if layout == MEMORY_FORMAT:
            return in_memory_format(result, ref)
        if layout == LIKE_DENSE_SOURCE:
            return _like_dense_sources(proto, bound, result)
        return result

    kernel.__name__ = kernel.__qualname__ = f"{op}_fake"
    return kernel


def _like_dense_sources(proto: OpProto, bound: dict, result):
    outs = result if isinstance(result, tuple) else (result,)
    shaped = []
    for desc, out in zip(proto.outputs, outs):
        source = bound.get(desc.shape)
        if (isinstance(source, torch.Tensor) and source.dim() >= 1 and source.stride(-1) == 1
                and torch._prims_common.is_non_overlapping_and_dense_or_false(source)):
            out = torch.empty_like(source)
        shaped.append(out)
    return tuple(shaped) if isinstance(result, tuple) else shaped[0]


def register(protos: dict[str, OpProto] | None = None, namespace: str = "custom", find=None, lib=None) -> None:
    """Registers the derived fake kernel of every prototype (default: the built ones of op_protos/)
    as <namespace>::<op>'s, with its op module's FakeRule; `find` and `lib` as
    op_defs.module and torch.library.register_fake take them (tests)."""
    protos = PROTOS if protos is None else protos
    for proto in protos.values():
        rule = op_defs.piece(proto, "FAKE", protos, find)
        torch.library.register_fake(f"{namespace}::{proto.name}", derived_kernel(proto, rule), lib=lib)
