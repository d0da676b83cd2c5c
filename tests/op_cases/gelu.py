"""gelu and gelu_backward: the test data of the shared tests (see op_cases/__init__.py)."""

import torch
import torch.nn.functional as F

from fuzz_kit import ACTIVATION_SCALES, Expect, f64, gelu_parts
from op_cases import DT_ANY, HUGE, Bad, Call, Fake, H, dt_rows, huge, placed, rand, sample
from op_extension import ops

custom = torch.ops.custom


def _samples():
    out = []
    for approx in ("none", "tanh"):
        out += [
            sample(f"{approx}-3x769", lambda m, a=approx: ((m(3, 769, scale=3), a), {})),
            sample(f"{approx}-transposed", lambda m, a=approx: ((m(7, 33, layout="transposed", scale=3), a), {})),
            sample(f"{approx}-strided_3d", lambda m, a=approx: ((m(2, 3, 5, layout="strided", scale=3), a), {})),
            sample(f"{approx}-empty", lambda m, a=approx: ((m(0, 5), a), {})),
            sample(f"{approx}-one_element", lambda m, a=approx: ((m(1), a), {})),
            sample(f"{approx}-0dim", lambda m, a=approx: ((m(scale=2), a), {})),
            sample(f"{approx}-large_5125", lambda m, a=approx: ((m(4, 5125, scale=4), a), {}), True),
        ]
    out.append(sample("default_approximate", lambda m: ((m(3, 769, scale=3),), {})))
    return out


SAMPLES = _samples()
EXPANDED_GRAD_SAMPLE = "none-strided_3d"
LOW_PRECISION_OPCHECK = ("none-3x769", "tanh-3x769")

# An LLM-like call for the CUDA traffic model (tests/test_cuda_sim_traffic.py).
TRAFFIC = [sample("tanh_4x2048", lambda m: ((m(4, 2048), "tanh"), {}))]


def schema_args(x):
    return x(2, 3, 4), "tanh"


def backward_schema_args(x):
    return x(2, 3, 4), x(2, 3, 4), "tanh"


def f_gelu(x):
    return ops.gelu(x, "tanh")


CALLS = [Call(f_gelu, lambda n: (rand(n, H) * 3,))]
INFERENCE = [Call(lambda x: ops.gelu(x), lambda n: (rand(n, H),))]
FAKE = {"": Fake(lambda x: ops.gelu(x, "tanh"), lambda d: (torch.randn(5, H).to(d),))}
BACKWARD_FAKE = {"": Fake(lambda g, x: custom.gelu_backward(g, x, "tanh"),
                          lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d)))}

BAD = {
    "approximate_unknown": Bad(lambda t: ops.gelu(t(3, 4), "fast"), ValueError, r"approximate must be 'none' or 'tanh', got 'fast'"),
    "approximate_case": Bad(lambda t: ops.gelu(t(3, 4), "Tanh"), ValueError, "approximate must be"),
    "approximate_empty": Bad(lambda t: ops.gelu(t(3, 4), ""), ValueError, "approximate must be"),
}
BACKWARD_BAD = {
    "grad_shape": Bad(lambda t: custom.gelu_backward(t(3, 5), t(3, 4)), ValueError, "grad_output has shape"),
    "approximate": Bad(lambda t: custom.gelu_backward(t(3, 4), t(3, 4), "x"), ValueError, "approximate must be"),
}
PYTHON_LEVEL = {
    "approximate_none": (lambda: ops.gelu(torch.randn(3, 4), None), TypeError, "approximate"),
}
CHECKED_FIRST = {
    "approximate": (lambda: ops.gelu(huge(*HUGE), "fast"), ValueError, "approximate must be"),
}
INTEGER_INPUT = lambda x: ops.gelu(x)  # noqa: E731

GRADCHECK = {
    "none": lambda m: ((m(3, 7, scale=2), "none"), {}),
    "tanh": lambda m: ((m(3, 7, scale=2), "tanh"), {}),
}

LAYOUT = (lambda x, y: ops.gelu(x, "tanh"), lambda x, y: F.gelu(x, approximate="tanh"))
BACKWARD_LAYOUT = lambda dy, x, y: custom.gelu_backward(dy, x, "none")  # noqa: E731


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----

DISTRIBUTED = [placed(p, dt_rows(1), [p], [p]) for p in ("R", "S0", "S1", "S2")] + [
    # gelu is not linear: a Partial input is summed first.
    placed("P-redistributed", dt_rows(1), ["P"], [DT_ANY]),
]
BACKWARD_DISTRIBUTED = [placed(p, dt_rows(2), [p, p], [p]) for p in ("R", "S0", "S1", "S2")] + [
    placed("P", dt_rows(2), ["P", "R"], ["P"]),
    placed("S0-S1-redistributed", dt_rows(2), ["S0", "S1"], [DT_ANY]),
]


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----


def fuzz_case(fz):
    shape = fz.any_shape(elementwise=True)
    x = fz.spec(shape, row_len=shape[-1] if shape else None, scales=ACTIVATION_SCALES)
    return fz.case((x, fz.pick(["none", "tanh"])))


def fuzz_model(case, args, grad_outputs):
    f, _, fm, _ = gelu_parts(f64(args[0]), args[1])
    return [Expect(f, fm)]


def backward_fuzz_case(fz):
    shape = fz.any_shape(elementwise=True)
    x = fz.spec(shape, backward_primal=True, scales=ACTIVATION_SCALES)
    return fz.case((fz.grad_output(shape), x, fz.pick(["none", "tanh"])))


def backward_fuzz_model(case, args, grad_outputs):
    g, x = f64(args[0]), f64(args[1])
    _, fp, _, fpm = gelu_parts(x, args[2])
    return [Expect(g * fp, g.abs() * fpm)]
