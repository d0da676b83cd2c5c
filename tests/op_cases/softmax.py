"""softmax and softmax_backward: the test data of the shared tests (see op_cases/__init__.py)."""

import torch

from op_cases import HUGE, Bad, Call, Fake, H, huge, rand, sample
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

# An LLM-like call for the CUDA traffic model (tests/test_cuda_sim_traffic.py).
TRAFFIC = [sample("4x2048", lambda m: ((m(4, 2048, scale=3), -1), {}))]


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
