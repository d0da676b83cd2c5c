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
softmax's dim shifts by one). What they share (active, traced, the vmap and
jvp helpers) is in op_extension/toolkit.py; this module registers them
(register()).

Who comes here: the C++ fast path of ops.py tests for a transform or a tangent
(a few ns) and calls the TRANSFORM.apply registered for the op
(python_module.cpp; an op without a TRANSFORM gets the op itself, which
refuses); the functions' traced path (toolkit.traced) asks toolkit.active().
Plain eager calls never come here. Calling torch.ops.custom.<op> directly with a
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

from . import _built, op_defs
from ._protos import OpProto

__all__ = ["register"]


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
