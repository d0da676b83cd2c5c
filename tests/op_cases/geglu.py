"""geglu and geglu_backward: the test data of the shared tests (see op_cases/__init__.py)."""

import torch
import torch.nn.functional as F

from fuzz_kit import gelu_parts, glu_case, glu_model
from op_cases import HUGE, SAME_DTYPE, Bad, Call, Fake, H, dt_rows, huge, placed, rand, sample
from op_cases.swiglu import glu_samples
from op_extension import ops

custom = torch.ops.custom

SAMPLES = glu_samples(["none", "tanh"])
EXPANDED_GRAD_SAMPLE = "tanh-3d"
PARTIAL_GRAD_SAMPLE = "tanh-3x769"
LOW_PRECISION_OPCHECK = ("none-3x769", "tanh-3x769")

# An LLM-like call for the CUDA traffic model (tests/test_cuda_sim_traffic.py).
TRAFFIC = [sample("tanh_4x2048", lambda m: ((m(4, 2048), m(4, 2048), "tanh"), {}))]


def schema_args(x):
    return x(2, 3, 4), x(2, 3, 4), "none"


def backward_schema_args(x):
    return x(2, 3, 4), x(2, 3, 4), x(2, 3, 4), "none"


def f_geglu(g, u):
    return ops.geglu(g, u, "tanh")


CALLS = [Call(f_geglu, lambda n: (rand(n, H), rand(n, H)))]
INFERENCE = [Call(lambda g, u: ops.geglu(g, u), lambda n: (rand(n, 2 * H), rand(n, 2 * H)))]
FAKE = {"": Fake(lambda g, u: ops.geglu(g, u, "none"), lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d)))}
BACKWARD_FAKE = {"": Fake(lambda g, a, b: custom.geglu_backward(g, a, b, "tanh"),
                          lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d), torch.randn(5, H).to(d)))}

BAD = {
    "shapes_differ": Bad(lambda t: ops.geglu(t(3, 4), t(4, 3)), ValueError, "must be equal"),
    "shapes_differ_ndim": Bad(lambda t: ops.geglu(t(1, 3, 4), t(3, 4), "tanh"), ValueError, "must be equal"),
    "approximate_unknown": Bad(lambda t: ops.geglu(t(3, 4), t(3, 4), "sigmoid"), ValueError, "approximate must be 'none' or 'tanh'"),
    "up_float64": Bad(lambda t: ops.geglu(t(3, 4), t(3, 4, dtype=torch.float64)), TypeError, SAME_DTYPE),
}
BACKWARD_BAD = {
    "grad_dtype": Bad(lambda t: custom.geglu_backward(t(3, 4, dtype=torch.float64), t(3, 4), t(3, 4)), TypeError, SAME_DTYPE),
}
PYTHON_LEVEL = {
    "approximate_int": (lambda: ops.geglu(torch.randn(3, 4), torch.randn(3, 4), 1), TypeError, "approximate"),
}
CHECKED_FIRST = {
    "approximate": (lambda: ops.geglu(huge(*HUGE), huge(*HUGE), "x"), ValueError, "approximate must be"),
}

GRADCHECK = {
    "none": lambda m: ((m(3, 7, scale=2), m(3, 7), "none"), {}),
    "tanh": lambda m: ((m(3, 7, scale=2), m(3, 7), "tanh"), {}),
}

LAYOUT = (lambda x, y: ops.geglu(x, y, "none"), lambda x, y: F.gelu(x) * y)
BACKWARD_LAYOUT = lambda dy, x, y: custom.geglu_backward(dy, x, y, "tanh")  # noqa: E731


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----

DISTRIBUTED = [placed(p, dt_rows(2), [p, p], [p], approximate="tanh") for p in ("R", "S0", "S1", "S2")] + [
    placed("up-P", dt_rows(2), ["R", "P"], ["P"]),
]
BACKWARD_DISTRIBUTED = [placed(p, dt_rows(3), [p, p, p], [p, p]) for p in ("R", "S0", "S1", "S2")] + [
    placed("P", dt_rows(3), ["P", "R", "R"], ["P", "P"]),
]


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----


def fuzz_case(fz):
    return glu_case(fz, approximate=True)


def fuzz_model(case, args, grad_outputs):
    return glu_model(case, args, gelu_parts)


backward_fuzz_case = fuzz_case
backward_fuzz_model = fuzz_model
