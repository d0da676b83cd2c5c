"""softmax and softmax_backward: the test data of the shared tests (see op_cases/__init__.py)."""

from dataclasses import dataclass

import torch

from fuzz_kit import ACTIVATION_SCALES, Expect, f64, nan_to_inf
from fuzz_strategies import TSpec
from op_cases import DT_ROWS, HUGE, Bad, Call, Fake, H, grand, huge, placed, rand, sample
from op_extension import ops

custom = torch.ops.custom

SAMPLES = [
    sample("3x769_dim-1", lambda m: ((m(3, 769, scale=3), -1), {})),
    sample("3x769_dim0", lambda m: ((m(3, 769, scale=3), 0), {})),
    sample("3d_dim0", lambda m: ((m(2, 3, 5, scale=3), 0), {})),
    sample("3d_dim1", lambda m: ((m(2, 3, 5, scale=3), 1), {})),
    sample("3d_dim-1", lambda m: ((m(2, 3, 5, scale=3), -1), {})),
    sample("3d_dim-2_wide_inner", lambda m: ((m(2, 7, 37, scale=3), -2), {})),
    sample("transposed_dim-1", lambda m: ((m(9, 33, layout="transposed", scale=3), -1), {})),
    sample("strided_dim1", lambda m: ((m(3, 4, 10, layout="strided", scale=3), 1), {})),
    sample("one_element_rows", lambda m: ((m(4, 1), -1), {})),
    sample("0dim", lambda m: ((m(), 0), {})),
    sample("empty_rows", lambda m: ((m(0, 7), -1), {})),
    sample("empty_softmax_dim", lambda m: ((m(3, 0), 1), {})),
    sample("large_5125", lambda m: ((m(4, 5125, scale=3), -1), {}), True),
    sample("large_5125_dim0", lambda m: ((m(4, 5125, scale=3), 0), {}), True),
]
EXPANDED_GRAD_SAMPLE = "3d_dim1"

# LLM-like calls for the CUDA traffic model (tests/test_cuda_sim_traffic.py): rows of
# 2048 and 8192 (the widths of 1B- and 70B-class models).
TRAFFIC = [sample("4x2048", lambda m: ((m(4, 2048, scale=3), -1), {})),
           sample("4x8192", lambda m: ((m(4, 8192, scale=3), -1), {}))]
# Rows longer than any on-chip copy: one extra read of each row input allowed
# (test_cuda_sim_traffic.py); the forward takes the max and the sum in one pass.
TRAFFIC_LONG_ROWS = [sample("4x65536", lambda m: ((m(4, 65536, scale=3), -1), {}))]
# On sm_90 a thread-block cluster holds such rows where one block cannot cache
# them (softmax.cu: float32 forward, both dtypes backward, which caches dy and
# y): read once, no extra read allowed there. bfloat16's forward row (128 KiB)
# fits one block's row cache, and also reads it once.
TRAFFIC_NO_EXTRA_READ = {("4x65536", "forward", "sm_90"), ("4x65536", "backward", "sm_90")}


def schema_args(x):
    return x(2, 3, 4), -1


def backward_schema_args(x):
    return x(2, 3, 4), x(2, 3, 4, positive=True), -1


def f_softmax(x):
    return ops.softmax(x, -1)


CALLS = [Call(f_softmax, lambda n: (rand(n, H) * 2,))]
INFERENCE = [Call(lambda x: ops.softmax(x, 0), lambda n: (rand(n, H),))]
FAKE = {"": Fake(lambda x: ops.softmax(x, 1), lambda d: (torch.randn(2, 5, H).to(d),))}
BACKWARD_FAKE = {"": Fake(lambda g, y: custom.softmax_backward(g, y, 0),
                          lambda d: (torch.randn(5, H).to(d), (torch.rand(5, H) + 0.5).to(d)))}

BAD = {
    "dim_too_large": Bad(lambda t: ops.softmax(t(3, 4), 2), IndexError, r"dim 2 is out of range for a tensor with 2 dims"),
    "dim_too_negative": Bad(lambda t: ops.softmax(t(3, 4), -3), IndexError, "out of range"),
    "dim_of_0dim": Bad(lambda t: ops.softmax(t(), 1), IndexError, "out of range"),
    "dim_of_1d": Bad(lambda t: ops.softmax(t(5), -2), IndexError, "out of range"),
}
BACKWARD_BAD = {
    "dim": Bad(lambda t: custom.softmax_backward(t(3, 4), t(3, 4), 2), IndexError, "out of range"),
    "grad_shape": Bad(lambda t: custom.softmax_backward(t(4, 3), t(3, 4), 1), ValueError, "grad_output has shape"),
}
PYTHON_LEVEL = {
    "dim_float": (lambda: ops.softmax(torch.randn(3, 4), 1.0), TypeError, "dim must be an int"),
    "dim_none": (lambda: ops.softmax(torch.randn(3, 4), None), TypeError, "dim must be an int"),
}
CHECKED_FIRST = {
    "dim": (lambda: ops.softmax(huge(*HUGE), 2), IndexError, "out of range"),
}
INTEGER_INPUT = lambda x: ops.softmax(x, 0)  # noqa: E731

GRADCHECK = {
    "dim-1": lambda m: ((m(3, 7), -1), {}),
    "dim0": lambda m: ((m(3, 7), 0), {}),
    "dim1_of_3d": lambda m: ((m(2, 3, 4), 1), {}),
    "transposed": lambda m: ((m(5, 6, layout="transposed"), -1), {}),
}

LAYOUT = (lambda x, y: ops.softmax(x, -1), lambda x, y: torch.softmax(x, -1))


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----

_ROWS_ONLY = ("R", "S0", "S1")  # a redistributed row op's output: split on a row dim or whole


def _dt_args(g):
    return [grand(g, *DT_ROWS), -1]


def _dt_backward_args(g):
    return [grand(g, *DT_ROWS), torch.softmax(grand(g, *DT_ROWS), -1), -1]


DISTRIBUTED = [placed(p, _dt_args, [p], [p]) for p in ("R", "S0", "S1")] + [
    placed("S2-redistributed", _dt_args, ["S2"], [_ROWS_ONLY]),
    placed("P-redistributed", lambda g: [grand(g, *DT_ROWS), 1], ["P"], [("R", "S0", "S2")]),
    placed("S0,S2-redistributed", _dt_args, ["S0,S2"], [("S0,R", "S0,S0", "S0,S1", "R,R", "R,S0", "R,S1")],
           mesh=2),
]
BACKWARD_DISTRIBUTED = [placed(p, _dt_backward_args, [p, p], [p]) for p in ("R", "S0", "S1")] + [
    placed("P", _dt_backward_args, ["P", "R"], ["P"]),
    placed("S2-redistributed", _dt_backward_args, ["S2", "S2"], [_ROWS_ONLY + ("P",)]),
]


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----


def _dim(fz, shape):
    ndim = len(shape)
    return fz.integer(-max(ndim, 1), max(ndim, 1) - 1)


def _row_len(shape, dim):
    return max(1, shape[dim] if shape else 1)


def fuzz_case(fz):
    shape = fz.any_shape()
    x = fz.spec(shape, row_len=shape[-1] if shape else None, scales=ACTIVATION_SCALES)
    dim = _dim(fz, shape)
    return fz.case((x, dim), row_len=_row_len(shape, dim))


def fuzz_model(case, args, grad_outputs):
    x, dim, n = f64(args[0]), args[1], case.row_len
    e = torch.softmax(x, dim)
    if x.dim() == 0 or x.numel() == 0:
        return [Expect(e, e.abs(), n)]
    # exp(x - max) is as exact as x - max: the magnitude carries that difference
    diff = x - x.amax(dim, keepdim=True)
    diff = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
    return [Expect(e, e.abs() * (1 + diff.abs()), n)]


@dataclass(frozen=True)
class SoftmaxOf:
    """softmax(x, dim) rounded to x's dtype, as softmax_backward's `output`."""

    x: TSpec
    dim: int

    def build(self):
        x = self.x.build()
        return torch.softmax(x.double(), self.dim).to(x.dtype)

    def __repr__(self):
        return f"torch.softmax({self.x!r}.double(), {self.dim}).to(torch.{self.x.dtype})"


def backward_fuzz_case(fz):
    shape = fz.any_shape()
    dim = _dim(fz, shape)
    # output: a softmax of random logits (in the dtype), built by the reproducer too
    y = SoftmaxOf(fz.spec(shape, row_len=shape[-1] if shape else None, scales=(3.0, 0.1, 1.0, 10.0)), dim)
    return fz.case((fz.grad_output(shape), y, dim), row_len=_row_len(shape, dim))


def backward_fuzz_model(case, args, grad_outputs):
    g, y, dim = f64(args[0]), f64(args[1]), args[2]
    e = torch._softmax_backward_data(g, y, dim, torch.float64)
    m = y.abs() * (g.abs() + (g * y).abs().sum(dim, keepdim=True)) if y.dim() else y.abs() * g.abs() * 2
    return [Expect(e, nan_to_inf(m), case.row_len, nan_means_undefined=True)]
