"""Bad inputs raise the right exception type, with a message that starts with
custom::<op>: and says what is wrong -- from the C++ checks for real tensors,
from the fake kernels (op_extension/_fake.py) for meta and fake tensors -- and
before any kernel runs.

Every op of op_protos/ and its backward op. Written per op in
tests/op_cases/<op>.py: BAD and BACKWARD_BAD (required), PYTHON_LEVEL,
CHECKED_FIRST, BACKWARD_CHECKED_FIRST and INTEGER_INPUT (where they apply).
Derived from each op's schema_args (a valid call) and its prototype: every
dtype the prototype does not list is refused, every tensor input of another
dtype or on another device than the others is refused, naming it."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import op_cases
from op_cases import ALL_OPS, NOT_BROADCASTABLE, SAME_DEVICE, SAME_DTYPE
from op_extension import ops
from reference import DEVICES

custom = torch.ops.custom

# "cpu" (and "cuda" where there is a GPU): real tensors (C++ checks of that
# device's glue); "meta": meta tensors; "fake": FakeTensorMode (both through
# the fake kernels).
MODES = DEVICES + ["meta", "fake"]


@contextlib.contextmanager
def tensor_mode(mode: str):
    if mode == "fake":
        with FakeTensorMode():
            yield "cpu"
    else:
        yield mode


class T:
    """Tensor factory for one device (and, inside FakeTensorMode, fake tensors)."""

    def __init__(self, device: str, dtype: torch.dtype = torch.float32):
        self.device = device
        self.dtype = dtype

    def __call__(self, *shape, dtype: torch.dtype | None = None, device: str | None = None) -> torch.Tensor:
        dtype = dtype or self.dtype
        device = device or self.device
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(shape, dtype=dtype, device=device)
        return torch.zeros(shape, dtype=dtype, device=device)


def expect(exc: type[Exception], op: str, phrase: str):
    """pytest.raises for a message that starts with `custom::<op>:` and contains `phrase` (a regex)."""
    return pytest.raises(exc, match=rf"(?s)^custom::{op}: .*{phrase}")


# ---- written per op: BAD, BACKWARD_BAD ------------------------------------------------

# case id "<op>-<key>" -> (op, Bad)
BAD_CASES = {op_cases.case_id(op, key): (op, bad) for op, key, bad in op_cases.items("BAD", ALL_OPS)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input(case, mode):
    op, bad = BAD_CASES[case]
    with tensor_mode(mode) as device:
        t = T(device)
        with expect(bad.exc, op, bad.phrase):
            bad.call(t)


# ---- derived from each op's schema_args and prototype -----------------------------------


def _args(op: str, t: T) -> dict:
    """op's schema_args (tests/op_cases/<op>.py), tensors made by t, by argument name."""
    args = op_cases.get(op, "schema_args")(lambda *shape, positive=False: t(*shape))
    return dict(zip(op_cases.PROTOS[op].arg_order, args))


def _call(op: str, args: dict, functional: bool = True):
    """A forward op through the functional API (what models call), a backward op
    (and a forward op with functional=False) through torch.ops.custom."""
    if functional and not op_cases.PROTOS[op].backward_of:
        return getattr(ops, op)(**args)
    return getattr(custom, op)(**args)


PROBED_DTYPES = [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128]
C10_NAMES = {"float16": "Half", "float32": "Float", "bfloat16": "BFloat16", "float64": "Double"}


def _unsupported(op: str) -> list:
    listed = {getattr(torch, d) for d in op_cases.PROTOS[op].dtypes}
    return [d for d in PROBED_DTYPES if d not in listed]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op,dtype", [(op, d) for op in ALL_OPS for d in _unsupported(op)],
                         ids=[f"{op}-{d}" for op in ALL_OPS for d in _unsupported(op)])
def test_unsupported_dtype(op, dtype, mode):
    """Every tensor in a dtype the prototype does not list: a TypeError naming the op."""
    with tensor_mode(mode) as device:
        with expect(TypeError, op, r"has dtype \S+, which is not supported; supported dtypes: "):
            _call(op, _args(op, T(device, dtype)))


@pytest.mark.parametrize("op", ALL_OPS)
def test_supported_dtypes_listed(op):
    """The message lists exactly the prototype's dtypes."""
    with pytest.raises(TypeError) as info:
        _call(op, _args(op, T("cpu", torch.int32)))
    listed = str(info.value).split("supported dtypes: ")[1].split("\n")[0]
    assert sorted(d.strip() for d in listed.split(",")) == sorted(C10_NAMES[d] for d in op_cases.PROTOS[op].dtypes)


def _tensor_inputs(op: str) -> list[str]:
    return [t.name for t in op_cases.PROTOS[op].inputs]


# "<op>-<input>" for every tensor input of every op of two or more tensor inputs:
# that input alone on another device (test_mixed_devices) or in another dtype
# (test_mixed_dtypes_refused). schema_args passes every tensor input.
ONE_INPUT_APART = {f"{op}-{name}": (op, name) for op in ALL_OPS if len(_tensor_inputs(op)) > 1
                   for name in _tensor_inputs(op)}


def _one_apart(args: dict, name: str, change) -> dict:
    assert isinstance(args[name], torch.Tensor), f"schema_args must pass every tensor input; {name} is {args[name]!r}"
    return args | {name: change(args[name])}


def _names_it(name: str, what: str, first: str, second: str) -> str:
    """The message names `name` as the odd one out, or as the one the odd one is compared with."""
    return rf"({name} {what} {first} but \w+ {what} {second}|\w+ {what} {second} but {name} {what} {first})"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(ONE_INPUT_APART))
def test_mixed_dtypes_refused(case, mode):
    """The dispatcher ops keep one dtype per call (the functional API widens some
    parameters: tests/test_mixed_dtypes.py): one tensor in float64 among float32
    ones is a TypeError naming it."""
    op, name = ONE_INPUT_APART[case]
    with tensor_mode(mode) as device:
        args = _one_apart(_args(op, T(device)), name, lambda t: t.to(torch.float64))
        with expect(TypeError, op, _names_it(name, "has dtype", r"\w+", r"\w+") + "; " + SAME_DTYPE):
            _call(op, args, functional=False)


# Pairs of devices; with a GPU, CPU and CUDA tensors mixed in one call too.
MIXED_DEVICES = [("cpu", "meta"), ("meta", "cpu")] + ([("cuda:0", "cpu"), ("cpu", "cuda:0")] if "cuda" in DEVICES else [])
MIXED_IDS = ["meta_second", "meta_first"] + (["cpu_second", "cuda_second"] if "cuda" in DEVICES else [])


@pytest.mark.parametrize("devices", MIXED_DEVICES, ids=MIXED_IDS)
@pytest.mark.parametrize("case", list(ONE_INPUT_APART))
def test_mixed_devices(case, devices):
    """One tensor on devices[1], the others on devices[0]: a RuntimeError naming it."""
    op, name = ONE_INPUT_APART[case]
    args = _one_apart(_args(op, T("cpu")), name, lambda t: t.to(devices[1]))
    args = {k: v.to(devices[0]) if k != name and isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with expect(RuntimeError, op, _names_it(name, "is on", devices[1], devices[0]) + "; " + SAME_DEVICE):
        _call(op, args)


# ---- written per op where it applies -------------------------------------------------------


INTEGER_INPUT = dict(op_cases.each("INTEGER_INPUT", default=None))


@pytest.mark.parametrize("op", list(INTEGER_INPUT))
def test_python_number_or_integer_tensor_input(op):
    """Integer tensors are rejected even where torch would promote them."""
    x = torch.arange(12).reshape(3, 4)
    with expect(TypeError, op, "which is not supported"):
        INTEGER_INPUT[op](x)


PYTHON_LEVEL = {op_cases.case_id(op, key): (op, case) for op, key, case in op_cases.items("PYTHON_LEVEL", default=None)}


@pytest.mark.parametrize("case", list(PYTHON_LEVEL))
def test_python_level_argument_errors(case):
    op, (call, exc, phrase) = PYTHON_LEVEL[case]
    with expect(exc, op, phrase):
        call()


CHECKED_FIRST = {op_cases.case_id(op, key): (op, case)
                 for op, key, case in op_cases.items("CHECKED_FIRST", ALL_OPS, default=None)}


def _checked_first_params():
    """An entry (call, exc, phrase, known_bug) is a known bug: expected to fail, and
    not run (the copy it would make needs tens of GiB)."""
    return [pytest.param(case, marks=pytest.mark.xfail(run=False, reason=entry[3]))
            if not isinstance(entry, op_cases.Missing) and len(entry) > 3 else case
            for case, (_, entry) in CHECKED_FIRST.items()]


@pytest.mark.parametrize("case", _checked_first_params())
def test_checks_run_before_any_kernel(case):
    """The argument checks come before any copy, allocation or kernel: with a
    16 GiB (virtual) input (op_cases.huge) the right error still comes back, not
    an out-of-memory error or a crash."""
    op, (call, exc, phrase, *_) = CHECKED_FIRST[case]
    with expect(exc, op, phrase):
        call()


@pytest.mark.parametrize("mode", DEVICES + ["meta"])
def test_autograd_inputs_checked_too(mode):
    """Inputs that require grad go through the autograd kernel first; the
    checks still apply there, with the same messages."""
    x = torch.randn(3, 4, device=mode, requires_grad=True)
    w = torch.randn(5, device=mode, requires_grad=True)
    with expect(ValueError, "rms_norm", "weight has shape"):
        ops.rms_norm(x, [4], w)
    with expect(ValueError, "layer_norm", "weight has shape"):
        ops.layer_norm(x, [4], w)
    with expect(IndexError, "softmax", "out of range"):
        ops.softmax(x, 5)
    with expect(ValueError, "add", NOT_BROADCASTABLE):
        ops.add(x, w)
