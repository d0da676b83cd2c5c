"""The ops on DTensors (issue 29): every op's sharding rule, registered with DTensor.

Each op module's ``SHARDING`` piece (op_extension/op_defs/<op>.py) gives the rule
of the op and of its backward op: the placements, on one mesh dim, of the
outputs and the tensor arguments that the op computes right on the local
shards (docs/distributed.md has them in a table). This module registers them
through torch.distributed.tensor.experimental.register_sharding, which expands
a rule to every mesh dim and leaves DTensor to move the inputs to the cheapest
strategy it lists -- everything replicated is always one, so a placement the op
cannot run on is redistributed, never computed on.

When: `import op_extension` calls register(). Loading DTensor costs half a
second, which the import must not pay, and DTensor is the only way a DTensor
reaches an op: so if torch.distributed.tensor is loaded, the rules are
registered at once, else just after it is first imported (a finder on
sys.meta_path runs them once the package has executed, then leaves). Nothing
here starts a process group or touches a device.
"""

from __future__ import annotations

import sys

import torch

from . import _built
from .op_defs import MODULES, piece

__all__ = ["LOCAL_SHAPES", "REGISTERED", "register", "rules"]

_DTENSOR = "torch.distributed.tensor"

REGISTERED: list[str] = []
"""The ops whose rule DTensor holds, once it is loaded (tests, docs)."""

LOCAL_SHAPES: bool | None = None
"""Once registered: whether this torch's DTensor gives an op whose output shape
is an argument (add_backward) the local shape of a split output; if not, such
an output is never split."""


def rules() -> dict:
    """op name -> its SHARDING rule, for every built op (forward and backward) that has one."""
    found = {name: piece(proto, "SHARDING") for name, proto in _built.BUILT.items()}
    # The ops without a prototype, in their op module's SHARDING beside its own.
    for module in MODULES.values():
        for name in getattr(module, "EXTRA_FAKE", {}):
            if hasattr(torch.ops.custom, name):  # a library built before the op has none
                found[name] = getattr(module, "SHARDING", {}).get(name)
    return {name: rule for name, rule in found.items() if rule is not None}


def _cache_key_from(schema: torch._C.FunctionSchema) -> int:
    """The index of the first argument that is not a required tensor.

    DTensor caches a strategy by the specs of the tensor arguments and the
    arguments from this index on. register_sharding's own guess (the first
    `int` argument) leaves out a `SymInt[]` normalized_shape or input_size
    and an absent optional tensor: a call with the same input and another
    normalized_shape would reuse a strategy that splits its normalized dims."""
    for i, arg in enumerate(schema.arguments):
        if not isinstance(arg.type, torch.TensorType):
            return i
    return len(schema.arguments)


def _shape_arguments(proto) -> dict[int, int]:
    """output index -> the index of the argument that is its shape (add_backward's
    input_size), from the prototype's shape rules: a global shape, which the
    kernel on a split output must get as the local one."""
    lists = {a.name for a in proto.attrs if a.schema_type == "SymInt[]"}
    return {i: proto.arg_order.index(o.shape) for i, o in enumerate(proto.outputs) if o.shape in lists}


def _unsplit(rule, outputs):
    """`rule` less its strategies that split one of `outputs` (those DTensor cannot give a local shape)."""

    def kept(*args, **kwargs):
        from torch.distributed.tensor import Shard

        return [(outs, ins) for outs, ins in rule(*args, **kwargs)
                if not any(isinstance(outs[i], Shard) for i in outputs)]

    return kept


def _register_now() -> None:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor.experimental import register_sharding

    propagator = DTensor._op_dispatcher.sharding_propagator
    # DTensor's table of the ops whose shape argument it rewrites to the local
    # shape of their split output (aten's view and factory ops); a torch without
    # it leaves such an output whole.
    global LOCAL_SHAPES
    local_shapes = getattr(propagator, "op_to_shape_and_stride_idx", None)
    LOCAL_SHAPES = local_shapes is not None
    for name, rule in rules().items():
        op = getattr(torch.ops.custom, name).default
        shaped = _shape_arguments(_built.BUILT[name]) if name in _built.BUILT else {}
        if len(shaped) == 1 and local_shapes is not None:
            local_shapes[op] = next(iter(shaped.values()))
        elif shaped:
            rule = _unsplit(rule, shaped)
        register_sharding(op)(rule)
        # The same strategy function, under a cache key that holds every argument the rule reads.
        propagator.register_op_strategy(op, propagator.op_strategy_funcs[op],
                                        RuntimeSchemaInfo(static_argnum=_cache_key_from(op._schema), needs_pytree=True))
        REGISTERED.append(name)


class _AfterLoading:
    """Loads a module with its own loader, then runs `then` once it has executed."""

    def __init__(self, loader, then):
        self._loader, self._then = loader, then

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._then()

    def __getattr__(self, name):  # is_package, get_code, get_resource_reader ...
        return getattr(self._loader, name)


class _WhenImported:
    """A sys.meta_path finder that wraps the loading of one module; it leaves
    sys.meta_path at the first lookup of that module."""

    def __init__(self, name, then):
        self._name, self._then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self._name:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _AfterLoading(spec.loader, self._then)
                return spec
        return None


def register() -> None:
    """Registers every rule with DTensor, now if it is loaded, else when it is."""
    if not torch.distributed.is_available() or REGISTERED:
        return
    if _DTENSOR in sys.modules:
        _register_now()
    elif not any(isinstance(finder, _WhenImported) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WhenImported(_DTENSOR, _register_now))
