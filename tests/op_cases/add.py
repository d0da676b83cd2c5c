"""add and add_backward: the test data of the shared tests (see op_cases/__init__.py)."""

import torch

from op_cases import HUGE, NOT_BROADCASTABLE, SAME_DTYPE, Bad, Call, Fake, H, huge, rand, sample
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
