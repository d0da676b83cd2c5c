"""The test data of every op, one module per forward op: tests/op_cases/<name>.py.

The shared tests (test_ops, test_compile, test_protos, test_bad_input, test_debug,
test_npu_glue, test_layouts; test_cuda_sim and test_fuzz through reference.py)
hold no per-op table: they iterate the ops of op_protos/
(op_extension._protos.load_protos) and take each op's data from its module here,
the backward op's from its forward op's module. A new op is its prototype, its
own files, and tests/op_cases/<name>.py (``python -m op_extension.scaffold
op_protos/<name>.json`` writes one whose every entry fails, naming the file,
until it is filled in). An op without the module, or without a required entry,
fails the shared tests (``Missing`` entries) and tests/test_op_cases.py, with a
message naming the file to write.

Entries of tests/op_cases/<name>.py (each test file's docstring says how it uses them):

Required
  SAMPLES          list[Sample]: calls of the op, built by a Maker (opcheck, the
                   reference comparisons of test_ops.py, test_cuda_sim.py)
  schema_args(x)   one small valid call: the schema's positional arguments, tensors
                   made by x(*shape, positive=False) in one dtype and device
                   (test_protos.py; test_bad_input.py derives from it the
                   unsupported-dtype, mixed-dtype and mixed-device cases)
  backward_schema_args(x)  the same for the backward op
  CALLS            list[Call]: the op as a model calls it (op_extension.ops), so
                   that autograd reaches the backward op: compiled forward and
                   backward (test_compile.py), run eagerly (test_debug.py,
                   test_npu_glue.py), and by default the op's part of the
                   all-ops inference graph and export (INFERENCE)
  BACKWARD_FAKE    dict[str, Fake]: direct calls of the backward op for the
                   FakeTensor tests and opcheck (test_compile.py)
  BAD, BACKWARD_BAD  dict[str, Bad]: bad inputs and the error they must raise
                   (test_bad_input.py)
  GRADCHECK        dict[str, builder]: float64 gradcheck calls,
                   builder(Maker) -> (args, kwargs) (test_ops.py)
  TRAFFIC          list[Sample]: LLM-like calls for the CUDA traffic model
                   (test_cuda_sim_traffic.py; TRAFFIC_CEILING, optional, holds a
                   kernel that misses its targets to its present figures, keyed
                   (sample id, direction) or (sample id, direction, arch);
                   TRAFFIC_LONG_ROWS, optional, row ops' calls with rows too long
                   for one block's on-chip copy, allowed one extra read of their
                   inputs, except where TRAFFIC_NO_EXTRA_READ names the call as
                   (sample id, direction, arch): rows a cluster holds)
  fuzz_case(fz), fuzz_model(case, args, grad_outputs)  the op's fuzzing: the
                   calls hypothesis draws and their float64 model
                   (test_fuzz.py; tests/fuzz_kit.py says what they return, and
                   holds the strategies and models they share)
  backward_fuzz_case(fz), backward_fuzz_model(...)  the same for the backward op
  DISTRIBUTED, BACKWARD_DISTRIBUTED  list[Placed]: the op on DTensors, each
                   placement its SHARDING rule accepts and one it must
                   redistribute (test_distributed.py)

Optional, derived when absent
  FAKE             dict[str, Fake]; default: each Call at rows=5
  INFERENCE        list[Call] in the all-ops inference graph and exported module
                   (test_compile.py); default: CALLS
  backward_args(call, grad_like)  the backward op's arguments for a forward call
                   (`call`: its arguments by name, defaults filled in, and its
                   outputs by name); default: from the backward prototype (grad_<x>
                   for each output x, then outputs and arguments by name)
  BACKWARD_SAMPLE  id of the SAMPLES entry whose backward calls the backward op;
                   default: the first. EXPANDED_GRAD_SAMPLE, PARTIAL_GRAD_SAMPLE:
                   default BACKWARD_SAMPLE
  LOW_PRECISION_OPCHECK  ids of SAMPLES opchecked in float16/bfloat16 too;
                   default: the first

Optional, for behaviour only some ops have (absent: not tested for the op)
  LAYOUT, BACKWARD_LAYOUT (test_layouts.py); PYTHON_LEVEL, CHECKED_FIRST,
  BACKWARD_CHECKED_FIRST, INTEGER_INPUT (test_bad_input.py); FUZZ_TOLERANCE,
  FUZZ_SATURATES_16BIT (test_fuzz.py).
  A CHECKED_FIRST entry with a fourth item (the reason) is a known bug: xfail, not run.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from op_extension._protos import OpProto, load_protos

from ._kinds import (  # noqa: F401
    DT_ANY, DT_ROWS, H, HUGE, NOT_BROADCASTABLE, SAME_DEVICE, SAME_DTYPE, Bad, Call, Fake, Maker, NotWritten, Placed,
    Sample, dt_norm, dt_rows, grand, huge, not_written, placed,
    rand, sample)

HERE = Path(__file__).resolve().parent

REQUIRED_FORWARD = ("SAMPLES", "schema_args", "CALLS", "BAD", "GRADCHECK", "TRAFFIC", "fuzz_case", "fuzz_model",
                    "DISTRIBUTED")
# in the forward op's module: backward_schema_args, BACKWARD_FAKE, BACKWARD_BAD, backward_fuzz_case, ...
REQUIRED_BACKWARD = ("schema_args", "FAKE", "BAD", "fuzz_case", "fuzz_model", "DISTRIBUTED")

PROTOS: dict[str, OpProto] = load_protos()
FORWARD_OPS: tuple[str, ...] = tuple(n for n, p in PROTOS.items() if not p.backward_of)
BACKWARD_OPS: tuple[str, ...] = tuple(n for n, p in PROTOS.items() if p.backward_of)
ALL_OPS: tuple[str, ...] = tuple(PROTOS)

_REQUIRED = object()


class OpCasesError(AssertionError):
    """An op of op_protos/ lacks (some of) its test data."""


class Missing:
    """Stands in a table for an op's missing data: using it in any way fails the
    test with the message that names the file to write."""

    def __init__(self, error: OpCasesError):
        self._error = error

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._error

    def __call__(self, *args, **kwargs):
        raise self._error

    def __iter__(self):
        raise self._error

    def __getitem__(self, key):
        raise self._error

    def __len__(self):
        raise self._error

    def __repr__(self) -> str:
        return f"<missing: {self._error}>"


def forward_of(op: str) -> str:
    return PROTOS[op].backward_of or op


def path_of(op: str) -> Path:
    return HERE / f"{forward_of(op)}.py"


def _rel(op: str) -> str:
    return f"tests/op_cases/{forward_of(op)}.py"


def module(op: str) -> ModuleType:
    """tests/op_cases/<forward op>.py; OpCasesError if there is none."""
    fwd = forward_of(op)
    if not path_of(op).is_file():
        raise OpCasesError(
            f"custom::{op} (op_protos/{fwd}.json) has no test data: write {_rel(op)} "
            f"(`python -m op_extension.scaffold op_protos/{fwd}.json` writes one to fill in; "
            f"tests/op_cases/__init__.py lists its entries)")
    return importlib.import_module(f"op_cases.{fwd}")


def attribute(op: str, name: str) -> str:
    """The module attribute holding entry `name` for `op`: a backward op's entries
    are its forward op's BACKWARD_<NAME> / backward_<name>."""
    if not PROTOS[op].backward_of:
        return name
    return ("BACKWARD_" if name.isupper() else "backward_") + name


def get(op: str, name: str, default=_REQUIRED):
    """Entry `name` of `op` (see the module docstring); `default` if the module
    lacks it, OpCasesError if there is no default."""
    mod = module(op)
    attr = attribute(op, name)
    if hasattr(mod, attr):
        return getattr(mod, attr)
    if default is _REQUIRED:
        raise OpCasesError(f"{_rel(op)} has no {attr} (the test data of custom::{op}): write it "
                           f"(tests/op_cases/__init__.py says what each entry holds)")
    return default


def each(name: str, ops=None, default=_REQUIRED) -> list[tuple[str, object]]:
    """[(op, entry)] for every op of `ops` (default: FORWARD_OPS); a Missing entry
    where the op has none. Ops whose entry is None (an optional one, absent) are left out."""
    out = []
    for op in FORWARD_OPS if ops is None else ops:
        try:
            value = get(op, name, default)
        except OpCasesError as e:
            value = Missing(e)
        if value is not None:
            out.append((op, value))
    return out


def items(name: str, ops=None, default=_REQUIRED) -> list[tuple[str, str, object]]:
    """[(op, key, value)] of a dict entry, for every op; (op, "MISSING", Missing)
    where the op has none."""
    out = []
    for op, table in each(name, ops, default):
        if isinstance(table, Missing):
            out.append((op, "MISSING", table))
        else:
            out += [(op, key, value) for key, value in table.items()]
    return out


def case_id(op: str, key: str, sep: str = "-") -> str:
    """The test id of entry `key` of op's table: "<op><sep><key>", or "<op>" for key ""."""
    return f"{op}{sep}{key}" if key else op


def problems(op: str) -> list[str]:
    """Every required entry `op` lacks (for tests/test_op_cases.py)."""
    try:
        module(op)
    except OpCasesError as e:
        return [str(e)]
    required = REQUIRED_BACKWARD if PROTOS[op].backward_of else REQUIRED_FORWARD
    found = []
    for name in required:
        try:
            get(op, name)
        except OpCasesError as e:
            found.append(str(e))
    return found
