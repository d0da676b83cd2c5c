"""What a run times: the ops, read from their prototypes and their op modules,
and the dtypes, token counts, directions and implementations of a row.

Every forward op of op_protos/ that the built library holds (op_extension._built)
and whose op module op_extension/op_defs/<op>.py defines ``BENCH`` (an
op_extension.bench_spec.Bench: its setup, byte formula and eager composite) has
rows; the others are skipped, each with the reason (PLAN.skipped), so that a
scaffolded op without ``BENCH`` yet, or an unbuilt prototype, leaves the
benchmark of the others as it was. Nothing here names an op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import torch

from .. import _built, op_defs
from .._protos import OpProto, load_protos
from ..bench_spec import HIDDEN, Bench, OpSetup

DEFAULT_TOKENS = (1, 16, 128, 512, 2048)
QUICK_TOKENS = (16, 512)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
DTYPE_SHORT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
IMPLS = ("ours", "native", "composite", "compiled")
BASELINES = ("native", "composite", "compiled")
DIRECTIONS = ("fwd", "fwd+bwd")


@dataclass(frozen=True)
class Plan:
    benches: dict[str, Bench]  # op -> its BENCH, in table order
    skipped: dict[str, str]    # op -> why it has no rows


def load_plan(protos: dict[str, OpProto] | None = None, built: dict[str, OpProto] | None = None,
              find: Callable[[str], ModuleType | None] | None = None) -> Plan:
    """The ops of `protos` (default op_protos/) with rows: those in `built`
    (default _built.BUILT) whose op module defines BENCH. `find` (a test's)
    replaces the op module lookup, as in op_defs.module."""
    protos = load_protos() if protos is None else protos
    built = _built.BUILT if built is None else built
    benches, skipped = {}, {}
    for name, proto in protos.items():
        if proto.backward_of:  # timed through its forward's fwd+bwd rows
            continue
        if name not in built:
            unbuilt = _built.UNBUILT.get(name)
            skipped[name] = f"not built ({unbuilt.reason if unbuilt else 'not in the built library'})"
            continue
        module = op_defs.module(proto, protos, find)
        bench = getattr(module, "BENCH", None) if module is not None else None
        if bench is None:
            skipped[name] = f"no BENCH in op_extension/op_defs/{name}.py (op_extension/bench_spec.py says what it holds)"
        elif not isinstance(bench, Bench):
            raise TypeError(f"op_extension/op_defs/{name}.py: BENCH must be an op_extension.bench_spec.Bench, "
                            f"got {type(bench).__name__}")
        else:
            benches[name] = bench
    return Plan({name: benches[name] for name in sorted(benches, key=lambda n: (benches[n].order, n))}, skipped)


PLAN = load_plan()
ALL_OPS = tuple(PLAN.benches)
# Per op, the coefficients (of N*s, of H*s) of its minimum bytes moved (Bench).
BYTE_FORMULAS = {name: {"fwd": b.fwd_bytes, "bwd": b.bwd_bytes} for name, b in PLAN.benches.items()}


def reference_impl(setup: OpSetup) -> str:
    """What ours is checked against, and timed against in the dispatch section:
    the native op, or the composite where torch has no such op."""
    return "native" if "native" in setup.impls else "composite"


def row_hidden(name, hidden):
    """--hidden for op `name`'s rows: the ops whose last dim is HIDDEN (add, gelu,
    the norms, softmax) take it; the others keep their own shapes (None)."""
    bench = PLAN.benches[name]
    return hidden if hidden and bench.hidden == HIDDEN and not bench.shapes else None


def make_setup(ops, name, tokens, dtype, device, hidden=None):
    """The OpSetup of op `name`'s row; `hidden` replaces the op's last dim."""
    bench = PLAN.benches[name]
    s = bench.setup(ops, tokens, dtype, device, bench.hidden if hidden is None else hidden)
    s.numel = s.numel or math.prod(s.shape)
    return s


def _coefficients(name, direction):
    f = BYTE_FORMULAS[name]
    parts = [f["fwd"]] if direction == "fwd" else [f["fwd"], f["bwd"]]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def bytes_moved(name, direction, numel, weight_numel, elem_size):
    n_coef, h_coef = _coefficients(name, direction)
    return (n_coef * numel + h_coef * weight_numel) * elem_size


def formula_text(name, direction):
    n_coef, h_coef = _coefficients(name, direction)
    return f"({n_coef}*N + {h_coef}*H) * s" if h_coef else f"{n_coef}*N*s"


def byte_legend(benches: dict[str, Bench]) -> str:
    """What N, H and s stand for, with each op's own meaning of N or H."""
    def counted(default, attr):
        own = [f"{name}: {getattr(b, attr)}" for name, b in benches.items() if getattr(b, attr)]
        return default + (f" ({'; '.join(own)})" if own else "")

    return (f"N = {counted('elements of one activation tensor', 'n_is')}, "
            f"H = {counted('elements of one weight/bias vector', 'h_is')}, s = bytes per element; "
            "fwd+bwd = fwd + bwd")


def shapes_text(benches: dict[str, Bench]) -> str:
    """The rows' shapes for --help: the hidden sizes, then each op's own shapes."""
    others: dict[int, list[str]] = {}
    for name, b in benches.items():
        if not b.shapes and b.hidden != HIDDEN:
            others.setdefault(b.hidden, []).append(name)
    parts = [f"hidden is {HIDDEN}" + "".join(f", {h} for {'/'.join(names)}" for h, names in others.items())]
    return "; ".join(parts + [f"{name}: {b.shapes}" for name, b in benches.items() if b.shapes])
