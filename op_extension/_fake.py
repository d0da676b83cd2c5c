"""Fake (meta) kernels: output shapes and input checks, for FakeTensor,
torch.compile(dynamic=True) and torch.export.

The checks they make are the toolkit's (op_extension/toolkit.py: the rules and
messages of the C++ checks in csrc/torch_ext/checks.cpp, on possibly symbolic
sizes), which the op modules' own checks use too.

Every op's fake kernel is derived from its prototype (derived_kernel): the
dtype check, the same device and dtype of the other tensors, attrs within their
allowed_values, outputs by each output's `shape` rule. What the prototype cannot
say -- which tensor's dtype is checked, which tensors must also share its shape,
the op's own checks, the output layout -- is the op's FakeRule, in the FAKE
table of op_extension/op_defs/<op>.py (default: FakeRule(); FakeRule and the
layouts are the toolkit's). register() is
called once by op_extension/__init__.py, for every built prototype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch._prims_common  # layout rules (keeps_layout, in_memory_format)

from . import _built, op_defs
from ._protos import OpProto
from .toolkit import (KEEP_LAYOUT, LAYOUTS, LIKE_DENSE_SOURCE, MEMORY_FORMAT, FakeRule, check_allowed, check_dtype,
                      check_same, check_same_shape)

# The prototypes the library holds as described: a fake kernel derived from any
# other would describe an op the kernels do not run (_built).
PROTOS = _built.BUILT


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
    default = protos is None
    protos = PROTOS if protos is None else protos
    for proto in protos.values():
        rule = op_defs.piece(proto, "FAKE", protos, find)
        torch.library.register_fake(f"{namespace}::{proto.name}", derived_kernel(proto, rule), lib=lib)
    if default:
        # The ops without a prototype that the op modules describe (EXTRA_FAKE).
        for mod in op_defs.MODULES.values():
            for name, kernel in getattr(mod, "EXTRA_FAKE", {}).items():
                if hasattr(torch.ops.custom, name):  # a library built before the op has none
                    torch.library.register_fake(f"{namespace}::{name}", kernel, lib=lib)
