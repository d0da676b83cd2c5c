"""rms_norm and rms_norm_backward: the test data of the shared tests (see op_cases/__init__.py)."""

import torch
import torch.nn.functional as F

from fuzz_kit import f64, norm_backward_model, norm_case_inputs, rms_eps, rms_norm_expect
from op_cases import HUGE, Bad, Call, Fake, H, dt_norm, huge, placed, rand, sample
from op_extension import ops

custom = torch.ops.custom


def w(m, *shape, **kw):
    """Weights near 1 (offset 1, scale 0.2), as trained norm weights are, so that
    no output is a near-cancellation."""
    return m(*shape, scale=0.2, offset=1.0, **kw)


SAMPLES = [
    sample("3x769_weight", lambda m: ((m(3, 769), [769], w(m, 769)), {})),
    sample("3x769_no_weight", lambda m: ((m(3, 769), [769]), {})),
    sample("3x769_weight_eps1e-6", lambda m: ((m(3, 769), [769], w(m, 769), 1e-6), {})),
    sample("3d_normalized_last", lambda m: ((m(2, 3, 5), [5], w(m, 5)), {})),
    sample("multi_dim_normalized_4x6", lambda m: ((m(2, 4, 6), [4, 6], w(m, 4, 6), 1e-5), {})),
    sample("normalized_all_dims", lambda m: ((m(4, 6), [4, 6]), {})),
    sample("1d_input", lambda m: ((m(769), [769], w(m, 769)), {})),
    sample("transposed_input", lambda m: ((m(9, 33, layout="transposed"), [33], w(m, 33)), {})),
    sample("strided_input_and_weight", lambda m: ((m(4, 65, layout="strided"), [65], w(m, 65, layout="strided")), {})),
    sample("row_strided_input", lambda m: ((m(5, 40, layout="row_strided"), [40], w(m, 40)), {})),
    sample("one_element_rows", lambda m: ((m(5, 1), [1], w(m, 1)), {})),
    sample("one_element_rows_no_weight", lambda m: ((m(5, 1), [1]), {})),
    sample("empty_rows", lambda m: ((m(0, 769), [769], w(m, 769)), {})),
    sample("empty_normalized_dim", lambda m: ((m(3, 0), [0], w(m, 0)), {})),
    sample("large_5125", lambda m: ((m(4, 5125), [5125], w(m, 5125)), {}), True),
    sample("many_rows_70x33", lambda m: ((m(70, 33), [33], w(m, 33)), {}), True),
]

# An LLM-like call for the CUDA traffic model (tests/test_cuda_sim_traffic.py).
TRAFFIC = [
    sample("4x2048", lambda m: ((m(4, 2048), [2048], w(m, 2048), 1e-6), {})),
    # More rows than the backward's 256 groups: a few rows per block, which reads
    # its slice of the weight once and writes its weight-gradient sums once.
    sample("1024x256", lambda m: ((m(1024, 256), [256], w(m, 256), 1e-6), {})),
    # A Llama-70B-wide row: float32 steps of 4 rows (128 KiB) and the backward's
    # two cached arrays need the row cache past the 48 KiB default.
    sample("4x8192", lambda m: ((m(4, 8192), [8192], w(m, 8192), 1e-6), {})),
]
# Rows longer than any on-chip copy (65536 elements: 256 KiB in float32): the
# traffic test allows them one extra read of each row input (a statistics pass,
# then the output pass), and these rows only.
TRAFFIC_LONG_ROWS = [sample("4x65536", lambda m: ((m(4, 65536), [65536], w(m, 65536), 1e-6), {}))]
# On sm_90 the forward and the backward hold such rows in a thread-block cluster
# (norm.cu, "rows held by a cluster", "backward rows held by a cluster"): they
# read them once, and are allowed no extra read there.
TRAFFIC_NO_EXTRA_READ = {("4x65536", "forward", "sm_90"), ("4x65536", "backward", "sm_90")}


def schema_args(x):
    return x(2, 3, 4), [4], x(4), None


def backward_schema_args(x):
    return x(2, 3, 4), x(2, 3, 4), [4], x(4), None


def f_rms_norm(x, w):
    return ops.rms_norm(x, (H,), w, 1e-6)


CALLS = [Call(f_rms_norm, lambda n: (rand(n, H), rand(H)))]
INFERENCE = [Call(lambda x, w: (ops.rms_norm(x, H, w), ops.rms_norm(x, x.shape[-1:])), lambda n: (rand(n, H), rand(H)))]
FAKE = {"": Fake(lambda x, w: ops.rms_norm(x, H, w), lambda d: (torch.randn(2, 5, H).to(d), torch.randn(H).to(d)))}
BACKWARD_FAKE = {
    "": Fake(lambda g, x, w: custom.rms_norm_backward(g, x, [H], w, None),
             lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d), torch.randn(H).to(d))),
    "no_weight": Fake(lambda g, x: custom.rms_norm_backward(g, x, [H]),
                      lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d))),
}

BAD = {
    "normalized_shape_mismatch": Bad(lambda t: ops.rms_norm(t(3, 4), [5]), ValueError, r"normalized_shape \[5\] does not match the trailing dims"),
    "normalized_shape_mismatch_2d": Bad(lambda t: ops.rms_norm(t(2, 3, 4), [2, 4]), ValueError, "does not match the trailing dims"),
    "normalized_shape_too_long": Bad(lambda t: ops.rms_norm(t(4), [1, 4]), ValueError, "has more dims than the input"),
    "normalized_shape_empty": Bad(lambda t: ops.rms_norm(t(3, 4), []), ValueError, "must have at least one dim"),
    "normalized_shape_negative": Bad(lambda t: ops.rms_norm(t(3, 4), [-4]), ValueError, "negative size"),
    "weight_wrong_size": Bad(lambda t: ops.rms_norm(t(3, 4), [4], t(5)), ValueError, r"weight has shape \[5\] but normalized_shape is \[4\]"),
    "weight_wrong_ndim": Bad(lambda t: ops.rms_norm(t(3, 4), [4], t(1, 4)), ValueError, r"weight has shape \[1, 4\]"),
    "weight_not_multi_dim": Bad(lambda t: ops.rms_norm(t(2, 3, 4), [3, 4], t(12)), ValueError, "weight has shape"),
    # The functional API takes a weight of another floating dtype (tests/test_mixed_dtypes.py);
    # the dispatcher op keeps one dtype per call.
    "weight_float16": Bad(lambda t: custom.rms_norm(t(3, 4), [4], t(4, dtype=torch.float16)), TypeError, "weight has dtype .* but input has dtype"),
    "weight_int": Bad(lambda t: ops.rms_norm(t(3, 4), [4], t(4, dtype=torch.int32)), TypeError, "weight has dtype .* but input has dtype"),
}
BACKWARD_BAD = {
    "grad_shape": Bad(lambda t: custom.rms_norm_backward(t(2, 4), t(3, 4), [4], None, None), ValueError, "grad_output has shape"),
    "weight_shape": Bad(lambda t: custom.rms_norm_backward(t(3, 4), t(3, 4), [4], t(3), None), ValueError, "weight has shape"),
    # Two bad arguments: every device and the fake kernel name the same one first.
    "grad_shape_and_normalized_shape": Bad(lambda t: custom.rms_norm_backward(t(2, 4), t(3, 4), [5], None, None),
                                           ValueError, "grad_output has shape"),
}
PYTHON_LEVEL = {
    "normalized_shape_float": (lambda: ops.rms_norm(torch.randn(3, 4), 4.0), TypeError, "normalized_shape must be an int or a sequence"),
    "normalized_shape_float_items": (lambda: ops.rms_norm(torch.randn(3, 4), [4.0]), TypeError, "normalized_shape"),
    "weight_not_tensor": (lambda: ops.rms_norm(torch.randn(3, 4), [4], [1.0] * 4), TypeError, "weight"),
}
CHECKED_FIRST = {
    "weight": (lambda: ops.rms_norm(huge(*HUGE), [1 << 16], torch.randn(5)), ValueError, "weight has shape"),
}
BACKWARD_CHECKED_FIRST = {
    "weight": (lambda: custom.rms_norm_backward(huge(*HUGE), huge(*HUGE), [1 << 16], torch.randn(5), None), ValueError, "weight has shape"),
}

GRADCHECK = {
    "weight": lambda m: ((m(3, 7), [7], m(7), 1e-5), {}),
    "no_weight": lambda m: ((m(3, 7), [7]), {}),
    "multi_dim": lambda m: ((m(2, 3, 4), [3, 4], m(3, 4)), {}),
    "one_element_rows": lambda m: ((m(4, 1), [1], m(1), 0.1), {}),
}

LAYOUT = (lambda x, y: ops.rms_norm(x, [x.shape[-1]], None, 1e-6), lambda x, y: F.rms_norm(x, [x.shape[-1]], None, 1e-6))


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----

_ROWS_ONLY = ("R", "S0", "S1")  # a redistributed row op's output: split on a row dim or whole

DISTRIBUTED = [placed(p, dt_norm(1), [p, "R"], [p]) for p in ("R", "S0", "S1")] + [
    # The same input and placements, normalized over [16] then [8, 16]: the second
    # must not reuse the first's cached strategy.
    placed("S1-before-the-cache-case", dt_norm(0), ["S1"], ["S1"], grad=False),
    placed("S1-cache-key-redistributed", dt_norm(0, (8, 16)), ["S1"], [("R", "S0")], grad=False),
    placed("no-weight-S0", dt_norm(0), ["S0"], ["S0"]),
    # Split on the normalized dim, or a weight split: redistributed, never computed on the slice.
    placed("S2-redistributed", dt_norm(1), ["S2", "R"], [_ROWS_ONLY]),
    placed("weight-S0-redistributed", dt_norm(1), ["S0", "S0"], [("S0", "R")]),
    placed("P-redistributed", dt_norm(1), ["P", "R"], [_ROWS_ONLY]),
    placed("S0,S1", dt_norm(1), ["S0,S1", "R,R"], ["S0,S1"], mesh=2),
]
BACKWARD_DISTRIBUTED = [placed(p, dt_norm(1, grads=1), [p, p, "R"], [p, "R" if p == "R" else "P"])
                        for p in ("R", "S0", "S1")] + [
    placed("no-weight-S0", dt_norm(0, grads=1), ["S0", "S0"], ["S0", "R"]),
    placed("P", dt_norm(1, grads=1), ["P", "R", "R"], ["P", "P"]),
    placed("S2-redistributed", dt_norm(1, grads=1), ["S2", "S2", "R"], [_ROWS_ONLY, ("R", "P")]),
    placed("S0,S1", dt_norm(1, grads=1), ["S0,S1", "S0,S1", "R,R"], ["S0,S1", "P,P"], mesh=2),
]


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----


def fuzz_case(fz):
    lead, norm, x, w, n = norm_case_inputs(fz)
    return fz.case((x, list(norm), w, fz.pick([None, None, 1e-6, 1e-5, 0.0])), row_len=n)


def fuzz_model(case, args, grad_outputs):
    x, norm, w, eps = f64(args[0]), args[1], f64(args[2]), rms_eps(args[3], case.dtype)
    return [rms_norm_expect(x, norm, w, eps, case.dtype, case.row_len)]


def backward_fuzz_case(fz):
    lead, norm, x, w, n = norm_case_inputs(fz)
    eps = fz.pick([None, None, 1e-6, 0.0])
    return fz.case((fz.grad_output(lead + norm), x, list(norm), w, eps), row_len=n)


def backward_fuzz_model(case, args, grad_outputs):
    g, x, norm, w, eps = f64(args[0]), f64(args[1]), args[2], f64(args[3]), rms_eps(args[4], case.dtype)
    return norm_backward_model(False, g, x, norm, w, None, eps, case.row_len, bias=False, dtype=case.dtype)
