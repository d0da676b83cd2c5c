"""Bad inputs raise the right exception type, with a message that starts with
custom::<op>: and says what is wrong -- from the C++ checks for real tensors,
from the fake kernels (op_extension/_fake.py) for meta and fake tensors -- and
before any kernel runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

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


@dataclass(frozen=True)
class Bad:
    op: str  # the op the message must name
    call: Callable[[T], object]
    exc: type[Exception]
    phrase: str


def _cases(*items):
    return {f"{b.op}-{k}": b for k, b in items}


SAME_DTYPE = "all tensors must have the same dtype"
NOT_BROADCASTABLE = "not broadcastable"

BAD_CASES = dict(
    # --- shapes -------------------------------------------------------------
    **_cases(
        ("not_broadcastable", Bad("add", lambda t: ops.add(t(3, 4), t(5)), ValueError, r"shapes \[3, 4\] and \[5\] are not broadcastable")),
        ("not_broadcastable_middle", Bad("add", lambda t: ops.add(t(2, 3, 4), t(2, 1)), ValueError, NOT_BROADCASTABLE)),
        ("not_broadcastable_leading", Bad("add", lambda t: ops.add(t(2, 3, 4), t(5, 1, 4)), ValueError, NOT_BROADCASTABLE)),
        ("shapes_differ", Bad("swiglu", lambda t: ops.swiglu(t(3, 4), t(3, 5)), ValueError, r"up has shape \[3, 5\] but gate has shape \[3, 4\]; they must be equal")),
        ("broadcastable_shapes_differ", Bad("swiglu", lambda t: ops.swiglu(t(3, 4), t(4)), ValueError, "must be equal")),
        ("same_numel_shapes_differ", Bad("swiglu", lambda t: ops.swiglu(t(3, 4), t(12)), ValueError, "must be equal")),
        ("shapes_differ", Bad("geglu", lambda t: ops.geglu(t(3, 4), t(4, 3)), ValueError, "must be equal")),
        ("shapes_differ_ndim", Bad("geglu", lambda t: ops.geglu(t(1, 3, 4), t(3, 4), "tanh"), ValueError, "must be equal")),
        ("normalized_shape_mismatch", Bad("rms_norm", lambda t: ops.rms_norm(t(3, 4), [5]), ValueError, r"normalized_shape \[5\] does not match the trailing dims")),
        ("normalized_shape_mismatch_2d", Bad("rms_norm", lambda t: ops.rms_norm(t(2, 3, 4), [2, 4]), ValueError, "does not match the trailing dims")),
        ("normalized_shape_too_long", Bad("rms_norm", lambda t: ops.rms_norm(t(4), [1, 4]), ValueError, "has more dims than the input")),
        ("normalized_shape_empty", Bad("rms_norm", lambda t: ops.rms_norm(t(3, 4), []), ValueError, "must have at least one dim")),
        ("normalized_shape_negative", Bad("rms_norm", lambda t: ops.rms_norm(t(3, 4), [-4]), ValueError, "negative size")),
        ("weight_wrong_size", Bad("rms_norm", lambda t: ops.rms_norm(t(3, 4), [4], t(5)), ValueError, r"weight has shape \[5\] but normalized_shape is \[4\]")),
        ("weight_wrong_ndim", Bad("rms_norm", lambda t: ops.rms_norm(t(3, 4), [4], t(1, 4)), ValueError, r"weight has shape \[1, 4\]")),
        ("weight_not_multi_dim", Bad("rms_norm", lambda t: ops.rms_norm(t(2, 3, 4), [3, 4], t(12)), ValueError, "weight has shape")),
        ("residual_shape_differs", Bad("fused_add_rms_norm", lambda t: ops.fused_add_rms_norm(t(3, 4), t(2, 4), [4]), ValueError, r"residual has shape \[2, 4\] but input has shape \[3, 4\]")),
        ("residual_broadcastable", Bad("fused_add_rms_norm", lambda t: ops.fused_add_rms_norm(t(3, 4), t(4), [4]), ValueError, "must be equal")),
        ("normalized_shape_mismatch", Bad("fused_add_rms_norm", lambda t: ops.fused_add_rms_norm(t(3, 4), t(3, 4), [3]), ValueError, "does not match the trailing dims")),
        ("weight_wrong_size", Bad("fused_add_rms_norm", lambda t: ops.fused_add_rms_norm(t(3, 4), t(3, 4), [4], t(3)), ValueError, "weight has shape")),
        ("normalized_shape_mismatch", Bad("layer_norm", lambda t: ops.layer_norm(t(3, 4), [3]), ValueError, "does not match the trailing dims")),
        ("normalized_shape_empty", Bad("layer_norm", lambda t: ops.layer_norm(t(3, 4), []), ValueError, "at least one dim")),
        ("weight_wrong_size", Bad("layer_norm", lambda t: ops.layer_norm(t(3, 4), [4], t(5), t(4)), ValueError, r"weight has shape \[5\]")),
        ("bias_wrong_size", Bad("layer_norm", lambda t: ops.layer_norm(t(3, 4), [4], t(4), t(3)), ValueError, r"bias has shape \[3\] but normalized_shape is \[4\]")),
        ("bias_only_wrong_size", Bad("layer_norm", lambda t: ops.layer_norm(t(3, 4), [4], None, t(2, 2)), ValueError, "bias has shape")),
    ),
    # --- dim ----------------------------------------------------------------
    **_cases(
        ("dim_too_large", Bad("softmax", lambda t: ops.softmax(t(3, 4), 2), IndexError, r"dim 2 is out of range for a tensor with 2 dims")),
        ("dim_too_negative", Bad("softmax", lambda t: ops.softmax(t(3, 4), -3), IndexError, "out of range")),
        ("dim_of_0dim", Bad("softmax", lambda t: ops.softmax(t(), 1), IndexError, "out of range")),
        ("dim_of_1d", Bad("softmax", lambda t: ops.softmax(t(5), -2), IndexError, "out of range")),
    ),
    # --- approximate --------------------------------------------------------
    **_cases(
        ("approximate_unknown", Bad("gelu", lambda t: ops.gelu(t(3, 4), "fast"), ValueError, r"approximate must be 'none' or 'tanh', got 'fast'")),
        ("approximate_case", Bad("gelu", lambda t: ops.gelu(t(3, 4), "Tanh"), ValueError, "approximate must be")),
        ("approximate_empty", Bad("gelu", lambda t: ops.gelu(t(3, 4), ""), ValueError, "approximate must be")),
        ("approximate_unknown", Bad("geglu", lambda t: ops.geglu(t(3, 4), t(3, 4), "sigmoid"), ValueError, "approximate must be 'none' or 'tanh'")),
    ),
    # --- mixed dtypes -------------------------------------------------------
    **_cases(
        ("other_float64", Bad("add", lambda t: ops.add(t(3, 4), t(4, dtype=torch.float64)), TypeError, SAME_DTYPE)),
        ("input_float16", Bad("add", lambda t: ops.add(t(3, 4, dtype=torch.float16), t(3, 4)), TypeError, SAME_DTYPE)),
        ("other_int", Bad("add", lambda t: ops.add(t(3, 4), t(3, 4, dtype=torch.int64)), TypeError, "other has dtype")),
        ("up_bfloat16", Bad("swiglu", lambda t: ops.swiglu(t(3, 4), t(3, 4, dtype=torch.bfloat16)), TypeError, SAME_DTYPE)),
        ("up_float64", Bad("geglu", lambda t: ops.geglu(t(3, 4), t(3, 4, dtype=torch.float64)), TypeError, SAME_DTYPE)),
        # The functional API takes a weight, bias or residual of another floating dtype
        # (tests/test_mixed_dtypes.py); the dispatcher ops keep one dtype per call.
        ("weight_float16", Bad("rms_norm", lambda t: custom.rms_norm(t(3, 4), [4], t(4, dtype=torch.float16)), TypeError, "weight has dtype .* but input has dtype")),
        ("weight_int", Bad("rms_norm", lambda t: ops.rms_norm(t(3, 4), [4], t(4, dtype=torch.int32)), TypeError, "weight has dtype .* but input has dtype")),
        ("residual_float64", Bad("fused_add_rms_norm", lambda t: custom.fused_add_rms_norm(t(3, 4), t(3, 4, dtype=torch.float64), [4]), TypeError, "residual has dtype")),
        ("weight_bfloat16", Bad("fused_add_rms_norm", lambda t: custom.fused_add_rms_norm(t(3, 4), t(3, 4), [4], t(4, dtype=torch.bfloat16)), TypeError, SAME_DTYPE)),
        ("weight_float64", Bad("layer_norm", lambda t: custom.layer_norm(t(3, 4), [4], t(4, dtype=torch.float64)), TypeError, "weight has dtype")),
        ("bias_float16", Bad("layer_norm", lambda t: custom.layer_norm(t(3, 4), [4], t(4), t(4, dtype=torch.float16)), TypeError, "bias has dtype")),
        ("bias_int", Bad("layer_norm", lambda t: ops.layer_norm(t(3, 4), [4], t(4), t(4, dtype=torch.int64)), TypeError, "bias has dtype")),
    ),
    # --- backward ops, called directly ---------------------------------------
    **_cases(
        ("input_size_not_broadcast", Bad("add_backward", lambda t: custom.add_backward(t(3, 4), [5]), ValueError, "does not broadcast to grad_output")),
        ("input_size_too_long", Bad("add_backward", lambda t: custom.add_backward(t(4), [2, 4]), ValueError, "has more dims than grad_output")),
        ("grad_shape", Bad("gelu_backward", lambda t: custom.gelu_backward(t(3, 5), t(3, 4)), ValueError, "grad_output has shape")),
        ("approximate", Bad("gelu_backward", lambda t: custom.gelu_backward(t(3, 4), t(3, 4), "x"), ValueError, "approximate must be")),
        ("grad_shape", Bad("swiglu_backward", lambda t: custom.swiglu_backward(t(3, 5), t(3, 4), t(3, 4)), ValueError, "grad_output has shape")),
        ("grad_dtype", Bad("geglu_backward", lambda t: custom.geglu_backward(t(3, 4, dtype=torch.float64), t(3, 4), t(3, 4)), TypeError, SAME_DTYPE)),
        ("grad_shape", Bad("rms_norm_backward", lambda t: custom.rms_norm_backward(t(2, 4), t(3, 4), [4], None, None), ValueError, "grad_output has shape")),
        ("weight_shape", Bad("rms_norm_backward", lambda t: custom.rms_norm_backward(t(3, 4), t(3, 4), [4], t(3), None), ValueError, "weight has shape")),
        ("grad_residual_shape", Bad("fused_add_rms_norm_backward", lambda t: custom.fused_add_rms_norm_backward(t(3, 4), t(3, 5), t(3, 4), [4], None, None), ValueError, "grad_residual_out has shape")),
        ("bias_shape", Bad("layer_norm_backward", lambda t: custom.layer_norm_backward(t(3, 4), t(3, 4), [4], t(4), t(5), 1e-5), ValueError, "bias has shape")),
        ("dim", Bad("softmax_backward", lambda t: custom.softmax_backward(t(3, 4), t(3, 4), 2), IndexError, "out of range")),
        ("grad_shape", Bad("softmax_backward", lambda t: custom.softmax_backward(t(4, 3), t(3, 4), 1), ValueError, "grad_output has shape")),
    ),
)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input(case, mode):
    bad = BAD_CASES[case]
    with tensor_mode(mode) as device:
        t = T(device)
        with expect(bad.exc, bad.op, bad.phrase):
            bad.call(t)


# Every op called with all of its tensors in one dtype, through the functional API.
CALLS = {
    "add": lambda t: ops.add(t(3, 4), t(4)),
    "gelu": lambda t: ops.gelu(t(3, 4)),
    "rms_norm": lambda t: ops.rms_norm(t(3, 4), [4], t(4)),
    "fused_add_rms_norm": lambda t: ops.fused_add_rms_norm(t(3, 4), t(3, 4), [4], t(4)),
    "layer_norm": lambda t: ops.layer_norm(t(3, 4), [4], t(4), t(4)),
    "softmax": lambda t: ops.softmax(t(3, 4), -1),
    "swiglu": lambda t: ops.swiglu(t(3, 4), t(3, 4)),
    "geglu": lambda t: ops.geglu(t(3, 4), t(3, 4)),
    "add_backward": lambda t: custom.add_backward(t(3, 4), [4]),
    "gelu_backward": lambda t: custom.gelu_backward(t(3, 4), t(3, 4)),
    "rms_norm_backward": lambda t: custom.rms_norm_backward(t(3, 4), t(3, 4), [4], t(4), None),
    "fused_add_rms_norm_backward": lambda t: custom.fused_add_rms_norm_backward(t(3, 4), t(3, 4), t(3, 4), [4], t(4), None),
    "layer_norm_backward": lambda t: custom.layer_norm_backward(t(3, 4), t(3, 4), [4], t(4), t(4), 1e-5),
    "softmax_backward": lambda t: custom.softmax_backward(t(3, 4), t(3, 4), -1),
    "swiglu_backward": lambda t: custom.swiglu_backward(t(3, 4), t(3, 4), t(3, 4)),
    "geglu_backward": lambda t: custom.geglu_backward(t(3, 4), t(3, 4), t(3, 4)),
}

UNSUPPORTED_DTYPES = [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", UNSUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(CALLS))
def test_unsupported_dtype(op, dtype, mode):
    with tensor_mode(mode) as device:
        with expect(TypeError, op, r"has dtype \S+, which is not supported; supported dtypes: "):
            CALLS[op](T(device, dtype))


@pytest.mark.parametrize("op", list(CALLS))
def test_supported_dtypes_listed(op):
    """The message lists exactly the four supported dtypes."""
    with pytest.raises(TypeError) as info:
        CALLS[op](T("cpu", torch.int32))
    listed = str(info.value).split("supported dtypes: ")[1].split("\n")[0]
    assert sorted(d.strip() for d in listed.split(",")) == ["BFloat16", "Double", "Float", "Half"]


@pytest.mark.parametrize("op", ["add", "gelu", "softmax", "swiglu"])
def test_python_number_or_integer_tensor_input(op):
    """Integer tensors are rejected even where torch would promote them."""
    x = torch.arange(12).reshape(3, 4)
    call = {
        "add": lambda: ops.add(x, 1),
        "gelu": lambda: ops.gelu(x),
        "softmax": lambda: ops.softmax(x, 0),
        "swiglu": lambda: ops.swiglu(x, x),
    }[op]
    with expect(TypeError, op, "which is not supported"):
        call()


# Calls where exactly one tensor sits on another device than the rest; each
# entry gives the call for "the first tensor on `a`, the others on `b`" style
# placements through a device-per-argument function.
DEVICE_CASES = {
    "add-other": lambda d: ops.add(torch.randn(3, 4, device=d[0]), torch.randn(4, device=d[1])),
    "swiglu-up": lambda d: ops.swiglu(torch.randn(3, 4, device=d[0]), torch.randn(3, 4, device=d[1])),
    "geglu-up": lambda d: ops.geglu(torch.randn(3, 4, device=d[0]), torch.randn(3, 4, device=d[1]), "tanh"),
    "rms_norm-weight": lambda d: ops.rms_norm(torch.randn(3, 4, device=d[0]), [4], torch.randn(4, device=d[1])),
    "fused_add_rms_norm-residual": lambda d: ops.fused_add_rms_norm(
        torch.randn(3, 4, device=d[0]), torch.randn(3, 4, device=d[1]), [4]),
    "fused_add_rms_norm-weight": lambda d: ops.fused_add_rms_norm(
        torch.randn(3, 4, device=d[0]), torch.randn(3, 4, device=d[0]), [4], torch.randn(4, device=d[1])),
    "layer_norm-weight": lambda d: ops.layer_norm(torch.randn(3, 4, device=d[0]), [4], torch.randn(4, device=d[1])),
    "layer_norm-bias": lambda d: ops.layer_norm(
        torch.randn(3, 4, device=d[0]), [4], torch.randn(4, device=d[0]), torch.randn(4, device=d[1])),
    "gelu_backward-grad": lambda d: custom.gelu_backward(torch.randn(3, 4, device=d[1]), torch.randn(3, 4, device=d[0])),
    "softmax_backward-grad": lambda d: custom.softmax_backward(torch.randn(3, 4, device=d[1]), torch.randn(3, 4, device=d[0]), 1),
}


# Pairs of devices; with a GPU, CPU and CUDA tensors mixed in one call too.
MIXED_DEVICES = [("cpu", "meta"), ("meta", "cpu")] + ([("cuda:0", "cpu"), ("cpu", "cuda:0")] if "cuda" in DEVICES else [])
MIXED_IDS = ["meta_second", "meta_first"] + (["cpu_second", "cuda_second"] if "cuda" in DEVICES else [])


@pytest.mark.parametrize("devices", MIXED_DEVICES, ids=MIXED_IDS)
@pytest.mark.parametrize("case", list(DEVICE_CASES))
def test_mixed_devices(case, devices):
    op, arg = case.split("-")
    with expect(RuntimeError, op, rf"{arg}\w* is on {devices[1]} but \w+ is on {devices[0]}; all tensors must be on the same device"):
        DEVICE_CASES[case](devices)


PYTHON_LEVEL = {
    "add-other_string": (lambda: ops.add(torch.randn(3), "1"), TypeError, "other must be a tensor or a real number"),
    "add-other_complex_number": (lambda: ops.add(torch.randn(3), 1j), TypeError, "other must be a tensor or a real number"),
    "rms_norm-normalized_shape_float": (lambda: ops.rms_norm(torch.randn(3, 4), 4.0), TypeError, "normalized_shape must be an int or a sequence"),
    "fused_add_rms_norm-normalized_shape_none": (lambda: ops.fused_add_rms_norm(torch.randn(3, 4), torch.randn(3, 4), None), TypeError, "normalized_shape must be"),
    "layer_norm-normalized_shape_tensor": (lambda: ops.layer_norm(torch.randn(3, 4), torch.tensor(4.0)), TypeError, "normalized_shape must be"),
    "rms_norm-normalized_shape_float_items": (lambda: ops.rms_norm(torch.randn(3, 4), [4.0]), TypeError, "normalized_shape"),
    "gelu-approximate_none": (lambda: ops.gelu(torch.randn(3, 4), None), TypeError, "approximate"),
    "geglu-approximate_int": (lambda: ops.geglu(torch.randn(3, 4), torch.randn(3, 4), 1), TypeError, "approximate"),
    "rms_norm-weight_not_tensor": (lambda: ops.rms_norm(torch.randn(3, 4), [4], [1.0] * 4), TypeError, "weight"),
    "softmax-dim_float": (lambda: ops.softmax(torch.randn(3, 4), 1.0), TypeError, "dim must be an int"),
    "softmax-dim_none": (lambda: ops.softmax(torch.randn(3, 4), None), TypeError, "dim must be an int"),
}


@pytest.mark.parametrize("case", list(PYTHON_LEVEL))
def test_python_level_argument_errors(case):
    call, exc, phrase = PYTHON_LEVEL[case]
    with expect(exc, case.split("-")[0], phrase):
        call()


def _huge(*shape):
    """A float32 tensor of `shape` that owns one element: any kernel, dense copy
    or full-size output allocation for it would need gigabytes."""
    return torch.zeros(()).expand(shape)


HUGE = (1 << 16, 1 << 16)  # 4 Gi elements, 16 GiB as float32

CHECKED_FIRST = {
    "add-not_broadcastable": (lambda: ops.add(_huge(*HUGE), torch.randn(3)), ValueError, NOT_BROADCASTABLE),
    "add-dtype": (lambda: ops.add(_huge(*HUGE), torch.randn(1 << 16, dtype=torch.float64)), TypeError, SAME_DTYPE),
    "gelu-approximate": (lambda: ops.gelu(_huge(*HUGE), "fast"), ValueError, "approximate must be"),
    "swiglu-shape": (lambda: ops.swiglu(_huge(*HUGE), _huge(1 << 16, 1 << 15)), ValueError, "must be equal"),
    "geglu-approximate": (lambda: ops.geglu(_huge(*HUGE), _huge(*HUGE), "x"), ValueError, "approximate must be"),
    "rms_norm-weight": (lambda: ops.rms_norm(_huge(*HUGE), [1 << 16], torch.randn(5)), ValueError, "weight has shape"),
    "fused_add_rms_norm-weight": (lambda: ops.fused_add_rms_norm(_huge(*HUGE), _huge(*HUGE), [1 << 16], torch.randn(5)), ValueError, "weight has shape"),
    "layer_norm-bias": (lambda: ops.layer_norm(_huge(*HUGE), [1 << 16], _huge(1 << 16), torch.randn(5)), ValueError, "bias has shape"),
    "softmax-dim": (lambda: ops.softmax(_huge(*HUGE), 2), IndexError, "out of range"),
    "rms_norm_backward-weight": (lambda: custom.rms_norm_backward(_huge(*HUGE), _huge(*HUGE), [1 << 16], torch.randn(5), None), ValueError, "weight has shape"),
    "layer_norm_backward-bias": (lambda: custom.layer_norm_backward(_huge(*HUGE), _huge(*HUGE), [1 << 16], None, torch.randn(3), 1e-5), ValueError, "bias has shape"),
}


@pytest.mark.parametrize("case", list(CHECKED_FIRST))
def test_checks_run_before_any_kernel(case):
    """The argument checks come before any copy, allocation or kernel: with a
    16 GiB (virtual) input the right error still comes back, not an
    out-of-memory error or a crash."""
    call, exc, phrase = CHECKED_FIRST[case]
    with expect(exc, case.split("-")[0], phrase):
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
