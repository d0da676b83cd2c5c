"""Which prototypes of op_protos/ the built library holds, as they describe it.

op_protos/ is read at import; the library _C was built from it at some earlier
time. Between a new or edited prototype and the next build the two differ, and
a new op's author is in exactly that state while running the scaffold and
filling in its files. So the prototypes are sorted here, once, into

- BUILT: the op is registered in torch.ops.custom with the schema its
  prototype derives (_protos.OpProto.schema), and so is its forward or
  backward partner;
- UNBUILT: everything else, each with the reason (not in the library, another
  schema, a partner in either state, or _C not loadable at all).

Every collector (fake kernels, transforms, references, the functional API,
debug's op list) takes BUILT only, so an op is either wholly there or wholly
absent: a fake kernel or autograd rule derived from a prototype the kernels
were not built from would be wrong in ways no check reports. UNBUILT ops are
named once, in a warning at import, and again by op_extension.ops.<op> and
op_extension.<op>, which raise.

An op and its backward are one unit: the forward's autograd (C++) calls the
built backward, and the backward is reached only through the forward.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from ._protos import OpProto, load_protos

REBUILD = "rebuild the package (make build, or pip install --no-build-isolation -e .)"

# _C is what the build produces; the package still imports without it (every op
# then UNBUILT), so that what needs only the prototypes -- the scaffold, run
# before a new op's first build -- never depends on the build's state.
try:
    from . import _C as C  # loading it runs TORCH_LIBRARY(custom, ...)

    LOAD_ERROR: str | None = None
except ImportError as error:
    C = None
    LOAD_ERROR = f"op_extension._C could not be loaded ({error})"


@dataclass(frozen=True)
class Unbuilt:
    proto: OpProto
    reason: str


def _own_reason(proto: OpProto, namespace: str) -> str | None:
    """Why the library lacks `proto`'s op as described, None where it has it."""
    qualified = f"{namespace}::{proto.name}"
    try:
        built = torch._C._get_schema(qualified, "")
    except RuntimeError:
        return f"{qualified} is not in the built library"
    # Parsed, so that only a difference in meaning counts, not in spelling
    # (quotes of a default, spaces).
    expected = torch._C.parse_schema(f"{namespace}::{proto.schema()}")
    if built != expected:
        return f"the built {qualified} has the schema {built}, the prototype derives {expected}"
    return None


def split(protos: dict[str, OpProto], namespace: str = "custom") -> tuple[dict[str, OpProto], dict[str, Unbuilt]]:
    """(BUILT, UNBUILT) of `protos` against what is registered under `namespace`."""
    if LOAD_ERROR is not None and namespace == "custom":
        return {}, {name: Unbuilt(p, LOAD_ERROR) for name, p in protos.items()}
    reasons = {name: _own_reason(p, namespace) for name, p in protos.items()}
    for name, proto in protos.items():
        partner = proto.backward or proto.backward_of
        if reasons[name] is None and partner in protos and reasons[partner] is not None:
            role = "backward" if proto.backward else "forward"
            reasons[name] = (f"its {role} {partner} (op_protos/{protos[partner].path.name}) is not built as "
                             f"described: {reasons[partner]}")
    built = {name: p for name, p in protos.items() if reasons[name] is None}
    unbuilt = {name: Unbuilt(p, reasons[name]) for name, p in protos.items() if reasons[name] is not None}
    return built, unbuilt


BUILT, UNBUILT = split(load_protos())


def message(name: str) -> str:
    """What op_extension says where the unbuilt op `name` is asked for."""
    entry = UNBUILT[name]
    return f"{name} (op_protos/{entry.proto.path.name}) is not available: {entry.reason}; {REBUILD} to use it"


def warn() -> None:
    """One warning naming every UNBUILT prototype (op_extension/__init__.py calls it once)."""
    if not UNBUILT:
        return
    if LOAD_ERROR is not None:
        text = f"op_extension: {LOAD_ERROR}, so no op of op_protos/ is available; {REBUILD}"
    else:
        lines = "".join(f"\n  op_protos/{u.proto.path.name}: {u.reason}" for u in UNBUILT.values())
        text = (f"op_extension: {len(UNBUILT)} prototype(s) of op_protos/ are not in the built library as "
                f"described, so their ops are left out; {REBUILD} to add them:{lines}")
    warnings.warn(text, stacklevel=2)
