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
"""

from __future__ import annotations

import torch

# (Modules, not names: this namespace is the ops' own, filled by _collect.)
from . import _built, op_defs, toolkit
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
    call = overload if transform is None else toolkit.traced(overload, transform.apply)
    params = ", ".join(proto.arg_order)  # identifiers, checked by _protos; the schema's order
    body = f"    return _call_op_({params})\n"
    if fast is not None:
        tensors = ", ".join(t.name for t in proto.inputs)
        body = (f"    if _eager_({tensors}):\n"
                f"        out_ = _fast_({params})\n"
                "        if out_ is not NotImplemented:\n"
                "            return out_\n") + body
    namespace_ = {"_call_op_": call, "_fast_": fast, "_eager_": toolkit.eager}
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
