"""Reference implementations of every custom op and backward op, and the
tolerances a kernel is held to against them.

Each op's references (REFERENCES) and its own tolerances (TOLERANCES) are in
its module, op_extension/op_defs/<op>.py; collect() gathers them here, for
every prototype (called once, by op_extension/__init__.py). The forward
references are the ATen composite forms the tests check the kernels with
(tests/reference.py takes them from here); the backward references are ATen's
own backward ops where it has one (gelu, softmax, layer_norm) and the
closed-form gradient otherwise, written without autograd so that they can run
below the Autograd dispatch key (op_extension.debug calls them from inside the
dispatcher, where autograd is switched off).

A reference is called as reference(*schema-ordered args, dtype=<the inputs'
dtype>) on float32 (float64 for float64 inputs) copies of the inputs, and its
result rounded once to the input dtype: what an ideal float16/bfloat16 kernel
that accumulates in float returns. The helpers the references share
(acc_dtype, round_through, absent_grad, ...) are in op_extension/toolkit.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from . import _built, op_defs
from ._protos import OpProto
from .toolkit import acc_dtype

# ---------------------------------------------------------------------------
# Tolerances
# ---------------------------------------------------------------------------
#
# ONE table: TOLERANCES[dtype][key] = (atol, rtol), key "default" or
# "<op>.forward" / "<op>.backward" where an op needs something else (those come
# from the op's module, with their reasons). The comparison is
# torch.testing.assert_close's |actual - expected| <= atol + rtol * |expected|.
#
# Defaults, per dtype:
# * float32: atol 1e-5, rtol 1.3e-6 (torch.testing's defaults). The kernels
#   accumulate in float with a vector-lane summation order and use FMA, the
#   reference uses ATen's order: a few ulp apart.
# * float16: atol 1e-3, rtol 1e-3. The kernel and the reference both compute in
#   float and round once, so they differ by at most one float16 rounding step
#   (relative 2^-11 ~ 4.9e-4) where float rounding flips a tie; atol covers the
#   results near zero whose relative error is meaningless.
# * bfloat16: atol 1.6e-2, rtol 1.6e-2 (bfloat16 keeps 8 bits: one rounding step
#   is relative 2^-8 ~ 3.9e-3; 1.6e-2 is torch.testing's bfloat16 rtol).
# * float64: atol 1e-7, rtol 1e-7. Everything is computed in double; the real
#   error is ~1e-15, the bound only guards against a float32 code path.
#
# Shared entry: "row_sum.backward", for the norms' weight/bias gradients (sums
# over hundreds of rows, compared with a float64 sum; debug's autocompare uses it
# for every output named grad_weight or grad_bias): in float32 the kernel sums
# in row order where ATen sums pairwise, ~sqrt(rows) * eps * |partial sum| apart:
# atol 1e-4, rtol 1e-5.
TOLERANCES: dict[torch.dtype, dict[str, tuple[float, float]]] = {
    torch.float32: {
        "default": (1e-5, 1.3e-6),
        "row_sum.backward": (1e-4, 1e-5),
    },
    torch.float16: {
        "default": (1e-3, 1e-3),
    },
    torch.bfloat16: {
        "default": (1.6e-2, 1.6e-2),
    },
    torch.float64: {
        "default": (1e-7, 1e-7),
    },
}


def tolerance(dtype: torch.dtype, op: str | None = None, kind: str = "forward") -> dict[str, float]:
    """assert_close kwargs for `op`'s `kind` ("forward" or "backward") in `dtype`."""
    table = TOLERANCES[dtype]
    atol, rtol = table.get(f"{op}.{kind}", table["default"])
    return {"atol": atol, "rtol": rtol}


# ---------------------------------------------------------------------------
# The references of every op, from the op modules
# ---------------------------------------------------------------------------

# Every op and backward op of torch.ops.custom, filled by collect()
# (tests/test_debug.py checks that none is missing).
REFERENCES: dict[str, Callable] = {}


def _missing(proto: OpProto) -> Callable:
    where = f"op_extension/op_defs/{op_defs.forward_name(proto)}.py"

    def reference(*args, dtype):
        raise NotImplementedError(f"custom::{proto.name}: the reference is not implemented yet: "
                                  f"fill in REFERENCES[{proto.name!r}] in {where}")

    return reference


def references(protos: dict[str, OpProto], find=None) -> dict[str, Callable]:
    """The reference of every op of `protos`, from its op module (a default that
    raises NotImplementedError, naming the file, where it has none)."""
    return {name: op_defs.piece(proto, "REFERENCES", protos, find) or _missing(proto)
            for name, proto in protos.items()}


def tolerances(protos: dict[str, OpProto], find=None) -> dict[torch.dtype, dict[str, tuple[float, float]]]:
    """The op modules' TOLERANCES entries, by dtype."""
    extra: dict[torch.dtype, dict[str, tuple[float, float]]] = {}
    for proto in protos.values():
        module = op_defs.module(proto, protos, find)
        if module is None or proto.backward_of:
            continue
        for dtype, entries in getattr(module, "TOLERANCES", {}).items():
            if dtype not in TOLERANCES:
                raise op_defs.OpDefError(f"{module.__file__}: TOLERANCES has {dtype}, for which there is no default "
                                         f"(dtypes: {', '.join(map(str, TOLERANCES))})")
            extra.setdefault(dtype, {}).update(entries)
    return extra


def collect() -> None:
    """REFERENCES and TOLERANCES of every built prototype (called once, by op_extension/__init__.py)."""
    protos = _built.BUILT
    REFERENCES.update(references(protos))
    for dtype, entries in tolerances(protos).items():
        TOLERANCES[dtype].update(entries)


def _tensor_dtype(args: Sequence) -> torch.dtype:
    return next(a.dtype for a in args if isinstance(a, torch.Tensor))


def run_reference(op: str, args: Sequence) -> tuple[torch.Tensor, ...]:
    """The reference of custom::<op> on the schema-ordered `args`: outputs as a
    tuple in the inputs' dtype, on the inputs' device, without autograd history."""
    dtype = _tensor_dtype(args)
    acc = acc_dtype(dtype)
    wide = [a.detach().to(acc) if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        outs = REFERENCES[op](*wide, dtype=dtype)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return tuple(o.to(dtype) for o in outs)
