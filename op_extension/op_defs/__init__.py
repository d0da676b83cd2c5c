"""What an op's prototype cannot say: one module per forward op.

op_protos/<name>.json describes an op; everything it determines is derived by
the shared modules. op_extension/op_defs/<name>.py holds what only the op itself
knows, for the forward op <name> and its backward op (the prototype's
``"torch": {"backward": ...}``), and only where the derived default does not
suffice. A prototype without such a module gets every default. The pieces,
each optional, and who collects them:

=========================  ==================================  =============================================
piece (module attribute)   collected by                        default (absent module or piece)
=========================  ==================================  =============================================
``<name>(...)``            ``op_extension.ops.<name>``, the    ``ops.derived_function``: the prototype's
                           package's exports                   arguments and defaults, calls the C++
                                                               fast path ``_C.<name>`` eagerly, else
                                                               ``torch.ops.custom.<name>`` (through
                                                               ``TRANSFORM`` under torch.func), the
                                                               prototype's ``torch.doc`` as docstring
``FAKE = {op: FakeRule}``  ``_fake``: the fake kernel          ``FakeRule()``: the dtype of the first
                                                               input, same device and dtype for the other
                                                               inputs, attrs within their allowed_values,
                                                               outputs by the shape rules, row-major
``REFERENCES = {op: f}``   ``_reference.REFERENCES`` (debug's  raises NotImplementedError naming this file
                           fallback and autocompare, tests)
``TOLERANCES``             ``_reference.TOLERANCES``           the shared per-dtype defaults
``TRANSFORM``              ``_transforms`` (the C++ fast       none: calls under torch.func or with a
                           path's handler), ``ops``            forward-mode tangent are refused by the op
``VMAP = {op: rule}``      ``_transforms`` (on the dispatcher) functorch's fallback
``SIMULATOR_ARGS``         ``cuda_sim.run``/``ascend_sim.run`` the arguments as bound from the schema
``NPU_GLUE_ARGS``          ``ascend_sim.run`` (after           the arguments as they are: each tensor made
                           ``SIMULATOR_ARGS``)                 contiguous, outputs by the shape rules
``SHARDING = {op: rule}``  ``distributed``: the DTensor        none: a DTensor reaching the op fails in
                           sharding rule, registered when      DTensor's "no sharding strategy" (every op
                           DTensor is loaded                   of op_protos/ has one: tests/test_distributed.py)
``BENCH``                  ``op_extension.bench`` (its rows:   none: the benchmark skips the op with a note
                           setup, composite, bytes moved)
``NATIVE = {op: f}``       ``op_extension.tune`` (torch's own  none: the tuner times the op's kernels and
                           op, one of the implementations)     its composite only
``EXTRA_FAKE = {op: f}``   ``_fake``: the fake kernel of an    none
                           op of the family that has no
                           prototype (its schema and kernels
                           registered by the op's own C++
                           files), keyed by its name
=========================  ==================================  =============================================

``op`` keys are the op's own name and its backward op's (and, in ``SHARDING``, an
``EXTRA_FAKE`` op's). ``TOLERANCES`` is
``{dtype: {"<name>.forward" | "<name>.backward": (atol, rtol)}}``, each entry
with its reason in a comment. A name close to a piece's (``REFERENCE``) or a key
that is not one of the module's ops is refused when the module is collected. ``TRANSFORM`` is the op's torch.autograd.Function
(forward ``custom::<name>``, backward ``custom::<name>_backward``, a jvp and a
vmap rule); its ``apply`` takes the arguments of the prototype's order. A
``SIMULATOR_ARGS`` entry maps the arguments of a simulator call, bound by name
with defaults, to what the simulated kernel takes (e.g. a default that the
binding cannot express). ``NPU_GLUE_ARGS`` does to the arguments, for
``ascend_sim.run``, what the op's npu glue (csrc/torch_ext/npu/ops/<name>.cpp) does
before its aclnn call beyond what the prototype says (add materialises a
broadcast, softmax passes a 0-dim tensor as [1]): the simulator's binding itself
is derived from the prototype. A ``SHARDING`` rule takes the op's arguments (a
tensor as DTensor's spec of it) and lists the placements, on one mesh dim, of
the outputs and the tensor arguments that the op computes right on local shards
(op_extension.toolkit's SHARDING section, docs/distributed.md). ``BENCH`` is an ``op_extension.bench_spec.Bench``:
the op's benchmark rows (a setup factory of inputs and implementations, the eager
composite models contain, the minimum bytes moved), in a section of its own at
the end of the module.

An op module imports op_extension.toolkit (FakeRule, the shared checks, the
argument conversions, the vmap and jvp helpers, the C++ fast path), torch, the
standard library, and the module of another op it builds on -- nothing else of
the package. Imports run one way: the shared modules that collect the pieces
(ops, _fake, _reference, _transforms, the simulators) import this package, it
imports the op modules, and they import the toolkit, which imports none of
them (tests/test_import_graph.py).

This package imports, when it is imported, the module of every forward op
that the built library holds as described (_built.BUILT) and that has a file
here (MODULES): by name, since the names come from op_protos/ -- a list written
here would have to be edited for each new op. The module of a prototype the
library lacks is never imported (its torch.ops.custom.<op> does not exist).
Adding an op touches no file here but its own.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType

from .. import _built
from .._protos import OpProto, load_protos

__all__ = ["MODULES", "PIECES", "OpDefError", "extra_ops", "forward_name", "module", "piece", "validate"]

# The module attributes an op module may define; an UPPER_CASE name close to one
# (REFERENCE, TOLERANCE, ...) is refused, so that a misspelt piece is not
# silently ignored.
PIECES = ("FAKE", "REFERENCES", "TOLERANCES", "TRANSFORM", "VMAP", "SIMULATOR_ARGS", "NPU_GLUE_ARGS", "SHARDING",
          "BENCH", "NATIVE", "EXTRA_FAKE")
_KEYED = ("FAKE", "REFERENCES", "VMAP", "SIMULATOR_ARGS", "NPU_GLUE_ARGS", "SHARDING", "NATIVE")


class OpDefError(RuntimeError):
    pass


def forward_name(proto: OpProto) -> str:
    """The forward op whose module describes `proto`: itself, or the op it is the backward of."""
    return proto.backward_of or proto.name


def module(proto: OpProto, protos: dict[str, OpProto] | None = None,
           find: Callable[[str], ModuleType | None] | None = None) -> ModuleType | None:
    """The op module of `proto` (op_extension.op_defs.<forward op>), None where
    there is none. `find` (a test's, with the `protos` it describes) replaces
    the lookup in MODULES."""
    name = forward_name(proto)
    if find is None:
        return MODULES.get(name)
    found = find(name)
    if found is not None:
        validate(found, name, protos)
    return found


def piece(proto: OpProto, attr: str, protos: dict[str, OpProto] | None = None,
          find: Callable[[str], ModuleType | None] | None = None):
    """`proto`'s entry of the keyed piece `attr` (FAKE, REFERENCES, VMAP,
    SIMULATOR_ARGS) of its op module; None where absent."""
    mod = module(proto, protos, find)
    return None if mod is None else getattr(mod, attr, {}).get(proto.name)


def validate(mod: ModuleType, name: str, protos: dict[str, OpProto] | None = None) -> None:
    """An op module defines only known pieces, keyed by its own ops."""
    protos = load_protos() if protos is None else protos
    where = getattr(mod, "__file__", None) or mod.__name__
    if name not in protos:
        raise OpDefError(f"{where}: no prototype op_protos/{name}.json describes op {name!r}")
    extra = getattr(mod, "EXTRA_FAKE", {})
    if not isinstance(extra, dict) or set(extra) & set(protos):
        raise OpDefError(f"{where}: EXTRA_FAKE must be a dict of ops without a prototype, got "
                         f"{sorted(set(extra) & set(protos)) if isinstance(extra, dict) else type(extra).__name__}")
    # An op without a prototype is the module's own too (its SHARDING rule, say).
    own = {name} | ({protos[name].backward} if protos[name].backward else set()) | set(extra)
    for attr in vars(mod):
        if attr.isupper() and attr not in PIECES:
            close = difflib.get_close_matches(attr, PIECES, n=1, cutoff=0.75)
            if close:
                raise OpDefError(f"{where}: {attr} is not a piece of an op module; did you mean {close[0]}? "
                                 f"(pieces: {', '.join(PIECES)})")
    for attr in _KEYED:
        table = getattr(mod, attr, None)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise OpDefError(f"{where}: {attr} must be a dict keyed by op name, got {type(table).__name__}")
        stray = sorted(set(table) - own)
        if stray:
            raise OpDefError(f"{where}: {attr} has entries for {stray}, which are not ops of this module "
                             f"(its ops: {', '.join(sorted(own))})")
    for dtype, entries in getattr(mod, "TOLERANCES", {}).items():
        for key in entries:
            if key not in (f"{name}.forward", f"{name}.backward"):
                raise OpDefError(f"{where}: TOLERANCES[{dtype}] key {key!r} must be '{name}.forward' or "
                                 f"'{name}.backward'")
    function = getattr(mod, name, None)
    if function is not None and not callable(function):
        raise OpDefError(f"{where}: {name} must be the functional API function, got {type(function).__name__}")


def _import_op_modules(protos: dict[str, OpProto]) -> dict[str, ModuleType]:
    """The module of every forward op of `protos` that has a file in this
    package, imported and validated, by op name."""
    present = {info.name for info in pkgutil.iter_modules(__path__)}
    modules = {}
    for name, proto in protos.items():
        if proto.backward_of is None and name in present:
            modules[name] = importlib.import_module(f"{__name__}.{name}")
            validate(modules[name], name, protos)
    return modules


# The built ops' only: an unbuilt prototype's module would reach for a
# torch.ops.custom.<op> that is not there, or has another schema.
MODULES: dict[str, ModuleType] = _import_op_modules(_built.BUILT)


def extra_ops() -> set[str]:
    """The ops without a prototype that the built op modules declare (EXTRA_FAKE):
    registered by their op's own C++ files, outside what the prototypes derive
    (no functional API, reference or debug hooks)."""
    return {name for mod in MODULES.values() for name in getattr(mod, "EXTRA_FAKE", {})}
