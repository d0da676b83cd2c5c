"""add and add_backward: the test data of the shared tests (see op_cases/__init__.py)."""

import math

import torch

from fuzz_kit import Expect, f64
from op_cases import (DT_ANY, DT_ROWS, HUGE, NOT_BROADCASTABLE, SAME_DTYPE, Bad, Call, Fake, H, dt_rows, grand, huge,
                      placed, rand, sample)
from op_extension import ops

custom = torch.ops.custom

SAMPLES = [
    sample("same_shape_3x769", lambda m: ((m(3, 769), m(3, 769)), {})),
    sample("row_vector", lambda m: ((m(3, 769), m(769)), {})),
    sample("row_vector_alpha2.5", lambda m: ((m(3, 769), m(769), 2.5), {})),
    sample("column_times_row", lambda m: ((m(5, 1), m(1, 7)), {})),
    sample("column_vector_alpha_neg", lambda m: ((m(5, 7), m(5, 1), -0.75), {})),
    sample("scalar_other", lambda m: ((m(3, 769), m()), {})),
    sample("scalar_input", lambda m: ((m(), m(4, 5), 0.5), {})),
    sample("both_scalar", lambda m: ((m(), m(), 3.0), {})),
    sample("leading_dims", lambda m: ((m(2, 3, 5), m(3, 5)), {})),
    sample("input_broadcast_leading", lambda m: ((m(3, 5), m(2, 3, 5), 2.0), {})),
    sample("middle_channel_1c1", lambda m: ((m(2, 3, 5), m(1, 3, 1), 1.5), {})),
    sample("alternating_dims", lambda m: ((m(2, 1, 4, 1, 3), m(5, 1, 6, 1)), {})),
    sample("transposed_plus_strided", lambda m: ((m(5, 33, layout="transposed"), m(5, 33, layout="strided"), 2.0), {})),
    sample("row_strided_plus_row", lambda m: ((m(6, 17, layout="row_strided"), m(17)), {})),
    sample("empty_rows", lambda m: ((m(0, 769), m(769)), {})),
    sample("empty_reduced", lambda m: ((m(0, 7), m(1, 7), 2.0), {})),
    sample("one_element", lambda m: ((m(1, 1), m(1)), {})),
    sample("large_5125", lambda m: ((m(4, 5125), m(5125), 0.5), {}), True),
]
# Same-shape add with alpha=1 passes the gradient through (differentiable): a
# broadcast one calls custom::add_backward.
BACKWARD_SAMPLE = "row_vector_alpha2.5"
EXPANDED_GRAD_SAMPLE = "middle_channel_1c1"
LOW_PRECISION_OPCHECK = ("same_shape_3x769",)


def backward_args(call, grad_like):
    # input_size is the shape of `other`, whose gradient add_backward reduces to.
    return grad_like(call["output"]), list(call["other"].shape), float(call["alpha"])

# LLM-like calls for the CUDA traffic model (tests/test_cuda_sim_traffic.py): a
# residual add, and a bias add whose backward reduces over the rows.
TRAFFIC = [
    sample("residual_4x2048", lambda m: ((m(4, 2048), m(4, 2048)), {})),
    sample("bias_4x2048", lambda m: ((m(4, 2048), m(2048)), {})),
]


def schema_args(x):
    return x(2, 3, 4), x(3, 4), 1.0


def backward_schema_args(x):
    return x(2, 3, 4), [1, 4], 0.5


def f_add(a, b):
    return ops.add(a, b, alpha=0.5)  # b broadcasts over the rows: grad_b needs add_backward


CALLS = [Call(f_add, lambda n: (rand(2, n, H), rand(1, 1, H)))]
INFERENCE = [Call(lambda x, y: (ops.add(x, y), ops.add(x, 2.0, alpha=3)), lambda n: (rand(n, H), rand(H)))]
FAKE = {"": Fake(lambda a, b: ops.add(a, b, 2.0),
                 lambda d: (torch.randn(2, 5, H).to(d), torch.randn(5, 1).to(d)))}
# input_size as autograd passes it: sizes of the forward input (symbolic when tracing)
BACKWARD_FAKE = {"": Fake(lambda g: custom.add_backward(g, [g.shape[1], 1], 0.5), lambda d: (torch.randn(2, 5, H).to(d),))}

BAD = {
    "not_broadcastable": Bad(lambda t: ops.add(t(3, 4), t(5)), ValueError, r"shapes \[3, 4\] and \[5\] are not broadcastable"),
    "not_broadcastable_middle": Bad(lambda t: ops.add(t(2, 3, 4), t(2, 1)), ValueError, NOT_BROADCASTABLE),
    "not_broadcastable_leading": Bad(lambda t: ops.add(t(2, 3, 4), t(5, 1, 4)), ValueError, NOT_BROADCASTABLE),
    "other_float64": Bad(lambda t: ops.add(t(3, 4), t(4, dtype=torch.float64)), TypeError, SAME_DTYPE),
    "input_float16": Bad(lambda t: ops.add(t(3, 4, dtype=torch.float16), t(3, 4)), TypeError, SAME_DTYPE),
    "other_int": Bad(lambda t: ops.add(t(3, 4), t(3, 4, dtype=torch.int64)), TypeError, "other has dtype"),
}
BACKWARD_BAD = {
    "input_size_not_broadcast": Bad(lambda t: custom.add_backward(t(3, 4), [5]), ValueError, "does not broadcast to grad_output"),
    "input_size_too_long": Bad(lambda t: custom.add_backward(t(4), [2, 4]), ValueError, "has more dims than grad_output"),
}
PYTHON_LEVEL = {
    "other_string": (lambda: ops.add(torch.randn(3), "1"), TypeError, "other must be a tensor or a real number"),
    "other_complex_number": (lambda: ops.add(torch.randn(3), 1j), TypeError, "other must be a tensor or a real number"),
}
CHECKED_FIRST = {
    "not_broadcastable": (lambda: ops.add(huge(*HUGE), torch.randn(3)), ValueError, NOT_BROADCASTABLE),
    "dtype": (lambda: ops.add(huge(*HUGE), torch.randn(1 << 16, dtype=torch.float64)), TypeError, SAME_DTYPE),
}
INTEGER_INPUT = lambda x: ops.add(x, 1)  # noqa: E731

GRADCHECK = {
    "same_shape": lambda m: ((m(3, 7), m(3, 7)), {}),
    "row_alpha": lambda m: ((m(3, 7), m(7), 2.5), {}),
    "column_row": lambda m: ((m(4, 1), m(1, 5), -0.5), {}),
    "1c1": lambda m: ((m(2, 3, 4), m(1, 3, 1)), {}),
    "scalar": lambda m: ((m(3, 4), m(), 3.0), {}),
    "input_broadcast": lambda m: ((m(4), m(2, 3, 4)), {}),
}

LAYOUT = (lambda x, y: ops.add(x, y, 0.5), lambda x, y: torch.add(x, y, alpha=0.5))


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----


def _bias(g):
    return [grand(g, *DT_ROWS), grand(g, 16)]


DISTRIBUTED = [placed(p, dt_rows(2), [p, p], [p], alpha=0.5) for p in ("R", "S0", "S1", "S2")] + [
    placed("P+P", dt_rows(2), ["P", "P"], ["P"], alpha=0.5),
    # broadcasting: the bias split on its own dim, or replicated
    placed("bias-S0", _bias, ["S0", "R"], ["S0"], alpha=0.5),
    placed("bias-S2", _bias, ["S2", "S0"], ["S2"], alpha=0.5),
    placed("bias-R", _bias, ["R", "R"], ["R"], alpha=0.5),
    placed("bias-P+P", _bias, ["P", "P"], ["P"], alpha=0.5),
    placed("P+R-redistributed", dt_rows(2), ["P", "R"], [DT_ANY + ("P",)], alpha=0.5),
    placed("bias-S1,S2", _bias, ["S1,S2", "R,S0"], ["S1,S2"], mesh=2, alpha=0.5),
]
# A sum over the broadcast dims: Partial where one of them is split. One
# grad_output placement and several input_size in a row: the strategy cached for
# one input_size must not serve another.
BACKWARD_DISTRIBUTED = [
    placed(f"{place}-to-{size}", lambda g, size=size: [grand(g, *DT_ROWS), size], [place], [out], alpha=0.5)
    for place, size, out in (("S0", [16], "P"), ("S2", [16], "S0"), ("S1", [4, 8, 16], "S1"),
                             ("S0", [1, 8, 16], "P"), ("S1", [1, 8, 16], "S1"), ("R", [16], "R"),
                             ("P", [8, 16], "P"))]


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----


def fuzz_case(fz):
    out = fz.any_shape(elementwise=True)
    xs, os_ = fz.broadcastable_to(out), fz.broadcastable_to(out)
    alpha = fz.pick([1.0, -1.0, 0.5, 2.5, -0.75, 0.0])
    # Constraint: other's near-max values are divided by |alpha| > 1, so that
    # alpha * other is representable (an overflow there is intermediate: the
    # sum with input may be finite, and Ascend's float16 Muls rounds it alone).
    x = fz.spec(xs, row_len=xs[-1] if xs else None)
    if fz.integer(0, 5) == 0:
        other = fz.pick([1.5, -3.0, 0.0, math.inf, math.nan, 1e-3])
    else:
        other = fz.spec(os_, near_max=abs(alpha) <= 1)
    return fz.case((x, other, alpha))


def fuzz_model(case, args, grad_outputs):
    x, o, alpha = f64(args[0]), args[1], args[2]
    o = f64(o) if isinstance(o, torch.Tensor) else torch.full((), o, dtype=torch.float64)
    return [Expect(x + alpha * o, x.abs() + (alpha * o).abs())]


def backward_fuzz_case(fz):
    out = fz.any_shape(elementwise=True)
    size = fz.broadcastable_to(out)
    alpha = fz.pick([1.0, -1.0, 0.5, 2.5, -0.75])
    n = max(1, math.prod(out)) // max(1, math.prod(size)) if math.prod(size) else 1
    return fz.case((fz.grad_output(out), list(size), alpha), row_len=max(1, n))


def backward_fuzz_model(case, args, grad_outputs):
    g, size, alpha = f64(args[0]), args[1], args[2]
    e = (alpha * g).sum_to_size(size) if size else (alpha * g).sum()
    m = (abs(alpha) * g.abs()).sum_to_size(size) if size else (abs(alpha) * g.abs()).sum()
    return [Expect(e.reshape(size), m.reshape(size), case.row_len)]


FUZZ_TOLERANCE = {
    # AddCustom computes in float16 itself, Muls then Add, each rounded to float16
    # (test_ascend_sim.py checks that exact behaviour): 2 ulps relative to
    # m = |input| + |alpha * other|.
    ("ascend", torch.float16, "forward"): {"out_ulps": 2},
}
# Its Ascend kernel computes in 16 bits, which Ascend310P saturates.
FUZZ_SATURATES_16BIT = True
