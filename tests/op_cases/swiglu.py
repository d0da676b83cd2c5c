"""swiglu and swiglu_backward: the test data of the shared tests (see op_cases/__init__.py)."""

import torch
import torch.nn.functional as F

from fuzz_kit import glu_case, glu_model, silu_parts
from op_cases import DT_ANY, HUGE, SAME_DTYPE, Bad, Call, Fake, H, dt_rows, huge, placed, rand, sample
from op_extension import ops

custom = torch.ops.custom



def glu_samples(approximations):
    """The samples of the gated units (geglu's too), for each `approximate` (None: none passed)."""
    out = []
    for approx in approximations:
        extra = () if approx is None else (approx,)
        tag = "" if approx is None else f"{approx}-"
        out += [
            sample(f"{tag}3x769", lambda m, e=extra: ((m(3, 769, scale=3), m(3, 769)) + e, {})),
            sample(f"{tag}3d", lambda m, e=extra: ((m(2, 3, 5, scale=3), m(2, 3, 5)) + e, {})),
            sample(f"{tag}transposed_gate", lambda m, e=extra: ((m(7, 33, layout="transposed", scale=3), m(7, 33)) + e, {})),
            sample(f"{tag}strided_both", lambda m, e=extra: ((m(4, 65, layout="strided", scale=3), m(4, 65, layout="row_strided")) + e, {})),
            sample(f"{tag}empty", lambda m, e=extra: ((m(0, 9), m(0, 9)) + e, {})),
            sample(f"{tag}one_element", lambda m, e=extra: ((m(1), m(1)) + e, {})),
            sample(f"{tag}large_5125", lambda m, e=extra: ((m(4, 5125, scale=3), m(4, 5125)) + e, {}), True),
        ]
    return out


SAMPLES = glu_samples([None])
EXPANDED_GRAD_SAMPLE = "3d"

# An LLM-like call for the CUDA traffic model (tests/test_cuda_sim_traffic.py).
TRAFFIC = [sample("4x2048", lambda m: ((m(4, 2048), m(4, 2048)), {}))]


def schema_args(x):
    return x(2, 3, 4), x(2, 3, 4)


def backward_schema_args(x):
    return x(2, 3, 4), x(2, 3, 4), x(2, 3, 4)


def f_swiglu(g, u):
    return ops.swiglu(g, u)


CALLS = [Call(f_swiglu, lambda n: (rand(n, H), rand(n, H)))]
INFERENCE = [Call(lambda g, u: ops.swiglu(g, u), lambda n: (rand(n, 2 * H), rand(n, 2 * H)))]
FAKE = {"": Fake(lambda g, u: ops.swiglu(g, u), lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d)))}
BACKWARD_FAKE = {"": Fake(lambda g, a, b: custom.swiglu_backward(g, a, b),
                          lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d), torch.randn(5, H).to(d)))}

BAD = {
    "shapes_differ": Bad(lambda t: ops.swiglu(t(3, 4), t(3, 5)), ValueError, r"up has shape \[3, 5\] but gate has shape \[3, 4\]; they must be equal"),
    "broadcastable_shapes_differ": Bad(lambda t: ops.swiglu(t(3, 4), t(4)), ValueError, "must be equal"),
    "same_numel_shapes_differ": Bad(lambda t: ops.swiglu(t(3, 4), t(12)), ValueError, "must be equal"),
    "up_bfloat16": Bad(lambda t: ops.swiglu(t(3, 4), t(3, 4, dtype=torch.bfloat16)), TypeError, SAME_DTYPE),
}
BACKWARD_BAD = {
    "grad_shape": Bad(lambda t: custom.swiglu_backward(t(3, 5), t(3, 4), t(3, 4)), ValueError, "grad_output has shape"),
}
CHECKED_FIRST = {
    "shape": (lambda: ops.swiglu(huge(*HUGE), huge(1 << 16, 1 << 15)), ValueError, "must be equal"),
}
INTEGER_INPUT = lambda x: ops.swiglu(x, x)  # noqa: E731

GRADCHECK = {
    "": lambda m: ((m(3, 7, scale=2), m(3, 7)), {}),
}

LAYOUT = (lambda x, y: ops.swiglu(x, y), lambda x, y: F.silu(x) * y)
BACKWARD_LAYOUT = lambda dy, x, y: custom.swiglu_backward(dy, x, y)  # noqa: E731


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----

DISTRIBUTED = [placed(p, dt_rows(2), [p, p], [p]) for p in ("R", "S0", "S1", "S2")] + [
    placed("up-P", dt_rows(2), ["R", "P"], ["P"]),
    placed("gate-P-redistributed", dt_rows(2), ["P", "R"], [DT_ANY]),
]
BACKWARD_DISTRIBUTED = [placed(p, dt_rows(3), [p, p, p], [p, p]) for p in ("R", "S0", "S1", "S2")] + [
    placed("P", dt_rows(3), ["P", "R", "R"], ["P", "P"]),
]


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----


def fuzz_case(fz):
    return glu_case(fz, approximate=False)


def fuzz_model(case, args, grad_outputs):
    return glu_model(case, args, lambda gate, _: silu_parts(gate))


backward_fuzz_case = fuzz_case
backward_fuzz_model = fuzz_model
