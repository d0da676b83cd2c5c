"""The functional API, mirroring torch.nn.functional: one function per op of
op_protos/ (op_extension.ops.<name>).

Each function is a thin call into the dispatcher op torch.ops.custom.<name>, so
eager mode, autograd, torch.compile and torch.export all see one custom op.
The function is the op module's own where op_extension/op_defs/<name>.py defines
one (argument conversions, mixed dtypes), else derived from the prototype
(derived_function). Outside tracing, plain tensors take a C++ fast path into the
same dispatcher op (_C.<name>, generated from the prototype for every forward
op, see csrc/torch_ext/python_module.cpp): it saves the ~2 us that parsing
arguments through torch.ops costs. It returns NotImplemented for tensors of
mixed dtypes (of two or more tensor arguments, one not of the first's dtype):
the function then converts them (the norms) or calls torch.ops.custom.<name>,
whose check refuses them. Argument checks happen in the op itself (C++ for real
tensors, the fake kernel under tracing), before any kernel runs.

op_extension.debug needs nothing here: its switches hook in at the dispatcher
(a BackendSelect kernel registered only while one is on), below this path and
every other way an op is reached.

This module also holds the argument conversions the op modules' functions share.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch._C import _has_torch_function

from . import _built, _transforms, op_defs
from ._built import C as _C
from ._protos import OpProto

# Filled by _collect() (op_extension/__init__.py), from the prototypes the
# library holds as described (_built.BUILT).
__all__: list[str] = []

# The forward ops of the other prototypes: asked for, they raise (__getattr__).
_UNBUILT_FORWARD = frozenset(name for name, u in _built.UNBUILT.items() if not u.proto.backward_of)


def __getattr__(name: str):
    if name in _UNBUILT_FORWARD:
        raise AttributeError(f"op_extension.ops.{_built.message(name)}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _eager(*tensors) -> bool:
    """Whether the C++ fast path may run the op: not while Dynamo traces this
    function (it must see torch.ops.custom.*), and only for tensors without
    __torch_function__ overrides or an active torch function mode."""
    return not torch.compiler.is_compiling() and not _has_torch_function(tensors)


def _shape_list(op: str, normalized_shape) -> list[int]:
    if isinstance(normalized_shape, (int, torch.SymInt)):
        return [normalized_shape]
    if isinstance(normalized_shape, (Sequence, torch.Size)):
        return list(normalized_shape)
    raise TypeError(f"custom::{op}: normalized_shape must be an int or a sequence of ints, got {type(normalized_shape).__name__}")


# Argument conversions for the traced path (the C++ fast path does the same in
# python_module.cpp): a value the schema cannot hold is refused by name, rather
# than by torch's argument parser or by Python's float().

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int64(op: str, name: str, value):
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"custom::{op}: {name}={value!r} does not fit in an int64")
    return value


def _int64_list(op: str, name: str, values: list) -> list:
    for v in values:
        if isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError(f"custom::{op}: {name} {values} holds {v}, which does not fit in an int64")
    return values


def _float(op: str, name: str, value):
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


def _optional_float(op: str, value):
    return None if value is None else _float(op, "eps", value)


# ---------------------------------------------------------------------------
# Parameters (or a residual) of another floating dtype than the input's, as
# F.rms_norm / F.layer_norm take them: under torch.autocast a bfloat16
# activation meets a float32 weight. The dispatcher ops keep one dtype per call
# (their checks say so); here the call is made in the wider dtype of the two and
# the result rounded once to the input's dtype, as torch returns it. Non-floating
# dtypes go to the op as they are, whose dtype check names them.
# ---------------------------------------------------------------------------


def _other_dtype(input, t) -> bool:
    """t is a tensor of another dtype than the tensor input (anything else: the
    op's own argument checks speak)."""
    return isinstance(t, torch.Tensor) and isinstance(input, torch.Tensor) and t.dtype != input.dtype


def _common_float(input: torch.Tensor, *others: torch.Tensor | None) -> torch.dtype | None:
    dtype = input.dtype
    if not dtype.is_floating_point:
        return None
    for t in others:
        if t is not None:
            if not t.dtype.is_floating_point:
                return None
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _default_eps(eps, input: torch.Tensor):
    # eps=None means the epsilon of the input's computation dtype (float32 for
    # 16-bit inputs), not of the wider dtype the call is made in.
    if eps is not None:
        return eps
    return torch.finfo(torch.float64 if input.dtype == torch.float64 else torch.float32).eps


# ---------------------------------------------------------------------------
# The derived function of an op whose module defines none
# ---------------------------------------------------------------------------


def _defaults(proto: OpProto) -> tuple:
    """The Python defaults of the prototype's trailing arguments that have one
    (an optional tensor before a required argument has none, as in the schema)."""
    tensors = {t.name: t for t in proto.inputs}
    attrs = {a.name: a for a in proto.attrs}
    values = []
    for name in reversed(proto.arg_order):
        if name in tensors and tensors[name].optional:
            values.append(None)
        elif name in attrs and attrs[name].has_default:
            values.append(attrs[name].default)
        else:
            break
    return tuple(reversed(values))


def derived_function(proto: OpProto, namespace: str = "custom", transform=None, fast=None):
    """op_extension.ops.<name> as the prototype gives it: its arguments in
    torch.arg_order with their defaults, calling <namespace>::<name> (through
    `transform`, the op's autograd.Function, under torch.func transforms and
    forward-mode AD), with the prototype's torch.doc as docstring.

    `fast`, the op's C++ fast path (_C.<name>, function_of passes it), is taken
    by eager calls on plain tensors, as the op modules' own functions do; a call
    it leaves (NotImplemented: tensors of mixed dtypes) goes to the op, whose
    check refuses it. Under torch.func the fast path calls the handler
    _transforms.register gave it (the op module's TRANSFORM), not `transform`."""
    overload = getattr(getattr(torch.ops, namespace), proto.name).default
    call = overload if transform is None else _transforms.traced(overload, transform.apply)
    params = ", ".join(proto.arg_order)  # identifiers, checked by _protos; the schema's order
    body = f"    return _call_op_({params})\n"
    if fast is not None:
        tensors = ", ".join(t.name for t in proto.inputs)
        body = (f"    if _eager_({tensors}):\n"
                f"        out_ = _fast_({params})\n"
                "        if out_ is not NotImplemented:\n"
                "            return out_\n") + body
    namespace_ = {"_call_op_": call, "_fast_": fast, "_eager_": _eager}
    exec(f"def {proto.name}({params}):\n{body}", namespace_)  # noqa: S102
    function = namespace_[proto.name]
    function.__defaults__ = _defaults(proto) or None
    function.__module__ = __name__
    summary = proto.doc or f"The {proto.op_type} op (torch.ops.{namespace}.{proto.name})."
    function.__doc__ = (f"{summary}\n\nCalls {namespace}::{proto.schema()}; derived from "
                        f"op_protos/{proto.path.name}.")
    return function


def function_of(proto: OpProto, protos: dict[str, OpProto] | None = None, namespace: str = "custom", find=None):
    """The op module's function for `proto`, else the derived one."""
    module = op_defs.module(proto, protos, find)
    function = getattr(module, proto.name, None) if module is not None else None
    if function is not None:
        return function
    # The fast path of every built op; its torch.func handler is the TRANSFORM
    # of the package's own op module (_transforms.register), so not with `find`'s.
    fast = getattr(_C, proto.name, None) if namespace == "custom" and find is None else None
    return derived_function(proto, namespace, getattr(module, "TRANSFORM", None), fast)


def _collect() -> None:
    """One function per forward op of op_protos/ that the library holds as
    described (called once, by op_extension/__init__.py)."""
    protos = _built.BUILT
    names = [p.name for p in protos.values() if not p.backward_of]
    for name in names:
        globals()[name] = function_of(protos[name], protos)
    __all__[:] = sorted(names)
