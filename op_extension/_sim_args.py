"""The arguments of a simulator call (cuda_sim.run, ascend_sim.run and their
run_backward), shared by the two simulators: bound by name from the op's
registered schema, defaults filled in, then converted by the op module's
SIMULATOR_ARGS entry where it has one (op_extension/op_defs/<op>.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import op_defs
from ._protos import load_protos


def bind(who: str, op_name: str, args: tuple, kwargs: dict) -> dict:
    """Arguments by name, defaults filled in, from the registered schema of custom::<op_name>."""
    schema = getattr(torch.ops.custom, op_name).default._schema
    names = [a.name for a in schema.arguments]
    if len(args) > len(names):
        raise TypeError(f"{who}: {op_name} takes at most {len(names)} arguments, got {len(args)}")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{who}: {op_name} has no argument {key!r} (arguments: {', '.join(names)})")
        if key in bound:
            raise TypeError(f"{who}: {op_name} got argument {key!r} twice")
        bound[key] = value
    for a in schema.arguments:
        if a.name not in bound:
            if not a.has_default_value():
                raise TypeError(f"{who}: {op_name} is missing argument {a.name!r}")
            bound[a.name] = a.default_value
        elif not _fits(a.type, bound[a.name]):
            # Checked here, before an op module's SIMULATOR_ARGS conversion reads
            # the value (a list where a tensor belongs would fail there, unnamed).
            raise TypeError(f"{who}: {op_name}'s argument {a.name!r} must be {a.type}, "
                            f"got {type(bound[a.name]).__name__}")
    return bound


def _fits(schema_type, value) -> bool:
    """Whether value can be passed for an argument of schema_type, as the
    dispatcher's binding takes it (the types the custom ops' schemas use)."""
    if isinstance(schema_type, torch.OptionalType):
        return value is None or _fits(schema_type.getElementType(), value)
    if isinstance(schema_type, torch.TensorType):
        # A number too: an op module's conversion may wrap it (add's `other`, as
        # ops.add takes it); where none does, the kernel's binding refuses it.
        return isinstance(value, (torch.Tensor, int, float)) and not isinstance(value, bool)
    if isinstance(schema_type, torch.ListType):
        return isinstance(value, (list, tuple, torch.Size)) and all(_fits(schema_type.getElementType(), v) for v in value)
    if isinstance(schema_type, torch.BoolType):
        return isinstance(value, bool)
    if isinstance(schema_type, (torch.IntType, torch.SymIntType)):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(schema_type, torch.FloatType):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(schema_type, torch.StringType):
        return isinstance(value, str)
    return True  # a type no custom op uses yet: the kernel's binding checks it


def converter(op_name: str) -> Callable[[dict], dict] | None:
    """The SIMULATOR_ARGS entry of op_name's module, None where it has none."""
    protos = load_protos()
    return op_defs.piece(protos[op_name], "SIMULATOR_ARGS", protos)


def simulator_args(who: str, op_name: str, args: tuple, kwargs: dict) -> dict:
    """bind(), then the op module's SIMULATOR_ARGS conversion."""
    bound = bind(who, op_name, args, kwargs)
    convert = converter(op_name)
    return bound if convert is None else convert(bound)


def forward_ops(has_kernel: Callable[[str], bool], backward: bool = False) -> tuple[str, ...]:
    """The forward ops of op_protos/ for which `has_kernel` holds (of the op's
    backward op's name, with `backward`), in the prototypes' order."""
    return tuple(p.name for p in load_protos().values()
                 if not p.backward_of and (p.backward is not None and has_kernel(p.backward) if backward
                                           else has_kernel(p.name)))
