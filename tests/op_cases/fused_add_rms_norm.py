"""fused_add_rms_norm and fused_add_rms_norm_backward: the test data of the shared tests
(see op_cases/__init__.py)."""

import torch

from fuzz_kit import Expect, f64, norm_backward_model, norm_case_inputs, rms_eps, rms_norm_expect
from op_cases import DT_ROWS, HUGE, SAME_DTYPE, Bad, Call, Fake, H, grand, huge, placed, rand, sample
from op_extension import ops

custom = torch.ops.custom


def w(m, *shape, **kw):
    return m(*shape, scale=0.2, offset=1.0, **kw)


SAMPLES = [
    sample("3x769_weight", lambda m: ((m(3, 769), m(3, 769), [769], w(m, 769)), {})),
    sample("3x769_no_weight", lambda m: ((m(3, 769), m(3, 769), [769]), {})),
    sample("3x769_weight_eps1e-6", lambda m: ((m(3, 769), m(3, 769), [769], w(m, 769), 1e-6), {})),
    sample("3d_normalized_last", lambda m: ((m(2, 3, 5), m(2, 3, 5), [5], w(m, 5)), {})),
    sample("multi_dim_normalized_4x6", lambda m: ((m(2, 4, 6), m(2, 4, 6), [4, 6], w(m, 4, 6)), {})),
    sample("transposed_residual", lambda m: ((m(9, 33), m(9, 33, layout="transposed"), [33], w(m, 33)), {})),
    sample("strided_input", lambda m: ((m(4, 65, layout="strided"), m(4, 65), [65], w(m, 65)), {})),
    sample("one_element_rows", lambda m: ((m(5, 1), m(5, 1), [1], w(m, 1)), {})),
    sample("empty_rows", lambda m: ((m(0, 769), m(0, 769), [769], w(m, 769)), {})),
    sample("large_5125", lambda m: ((m(4, 5125), m(4, 5125), [5125], w(m, 5125)), {}), True),
    sample("many_rows_70x33", lambda m: ((m(70, 33), m(70, 33), [33], w(m, 33)), {}), True),
]

# LLM-like calls for the CUDA traffic model (tests/test_cuda_sim_traffic.py): rows of
# 2048 and 8192 (the widths of 1B- and 70B-class models).
TRAFFIC = [sample("4x2048", lambda m: ((m(4, 2048), m(4, 2048), [2048], w(m, 2048), 1e-6), {})),
           sample("4x8192", lambda m: ((m(4, 8192), m(4, 8192), [8192], w(m, 8192), 1e-6), {}))]
# Rows longer than any on-chip copy: one extra read of each row input allowed
# (test_cuda_sim_traffic.py).
TRAFFIC_LONG_ROWS = [sample("4x65536", lambda m: ((m(4, 65536), m(4, 65536), [65536], w(m, 65536), 1e-6), {}))]
# On sm_90 the forward and the backward hold such rows in a thread-block cluster
# (norm.cu, "rows held by a cluster", "backward rows held by a cluster"): they
# read them once, and are allowed no extra read there.
TRAFFIC_NO_EXTRA_READ = {("4x65536", "forward", "sm_90"), ("4x65536", "backward", "sm_90")}


def schema_args(x):
    return x(2, 3, 4), x(2, 3, 4), [4], x(4), 1e-6


def backward_schema_args(x):
    return x(2, 3, 4), x(2, 3, 4), x(2, 3, 4), [4], x(4), 1e-6


def f_fused_add_rms_norm(x, r, w):
    return ops.fused_add_rms_norm(x, r, H, w)  # eps=None: machine epsilon


def f_fused_add_rms_norm_out_only(x, r, w):
    return ops.fused_add_rms_norm(x, r, (H,), w, 1e-6)[0]  # no gradient flows into residual_out


CALLS = [
    Call(f_fused_add_rms_norm, lambda n: (rand(n, H), rand(n, H), rand(H))),
    Call(f_fused_add_rms_norm_out_only, lambda n: (rand(n, H), rand(n, H), rand(H))),
]
INFERENCE = [Call(lambda x, r, w: ops.fused_add_rms_norm(x, r, (H,), w, eps=1e-5), lambda n: (rand(n, H), rand(n, H), rand(H)))]
FAKE = {"": Fake(lambda x, y, w: ops.fused_add_rms_norm(x, y, H, w),
                 lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d), torch.randn(H).to(d)))}
BACKWARD_FAKE = {
    "": Fake(lambda g, gr, z, w: custom.fused_add_rms_norm_backward(g, gr, z, [H], w, 1e-6),
             lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d), torch.randn(5, H).to(d), torch.randn(H).to(d))),
    "no_residual_grad": Fake(lambda g, z: custom.fused_add_rms_norm_backward(g, None, z, [H]),
                             lambda d: (torch.randn(5, H).to(d), torch.randn(5, H).to(d))),
}

BAD = {
    "residual_shape_differs": Bad(lambda t: ops.fused_add_rms_norm(t(3, 4), t(2, 4), [4]), ValueError, r"residual has shape \[2, 4\] but input has shape \[3, 4\]"),
    "residual_broadcastable": Bad(lambda t: ops.fused_add_rms_norm(t(3, 4), t(4), [4]), ValueError, "must be equal"),
    "normalized_shape_mismatch": Bad(lambda t: ops.fused_add_rms_norm(t(3, 4), t(3, 4), [3]), ValueError, "does not match the trailing dims"),
    "weight_wrong_size": Bad(lambda t: ops.fused_add_rms_norm(t(3, 4), t(3, 4), [4], t(3)), ValueError, "weight has shape"),
    "residual_float64": Bad(lambda t: custom.fused_add_rms_norm(t(3, 4), t(3, 4, dtype=torch.float64), [4]), TypeError, "residual has dtype"),
    "weight_bfloat16": Bad(lambda t: custom.fused_add_rms_norm(t(3, 4), t(3, 4), [4], t(4, dtype=torch.bfloat16)), TypeError, SAME_DTYPE),
}
BACKWARD_BAD = {
    "grad_residual_shape": Bad(lambda t: custom.fused_add_rms_norm_backward(t(3, 4), t(3, 5), t(3, 4), [4], None, None), ValueError, "grad_residual_out has shape"),
}
PYTHON_LEVEL = {
    "normalized_shape_none": (lambda: ops.fused_add_rms_norm(torch.randn(3, 4), torch.randn(3, 4), None), TypeError, "normalized_shape must be"),
}
CHECKED_FIRST = {
    "weight": (lambda: ops.fused_add_rms_norm(huge(*HUGE), huge(*HUGE), [1 << 16], torch.randn(5)), ValueError, "weight has shape"),
}

GRADCHECK = {
    "weight": lambda m: ((m(3, 7), m(3, 7), [7], m(7), 1e-5), {}),
    "no_weight": lambda m: ((m(2, 3, 5), m(2, 3, 5), [5]), {}),
}


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----

_ROWS_ONLY = ("R", "S0", "S1")  # a redistributed row op's output: split on a row dim or whole


def _dt_args(g):
    return [grand(g, *DT_ROWS), grand(g, *DT_ROWS), [16], grand(g, 16)]


def _dt_backward_args(g):
    return [grand(g, *DT_ROWS), grand(g, *DT_ROWS), grand(g, *DT_ROWS), [16], grand(g, 16)]


DISTRIBUTED = [placed(p, _dt_args, [p, p, "R"], [p, p]) for p in ("R", "S0", "S1")] + [
    placed("S2-redistributed", _dt_args, ["S2", "S2", "R"], [_ROWS_ONLY, _ROWS_ONLY]),
]
BACKWARD_DISTRIBUTED = [placed(p, _dt_backward_args, [p, p, p, "R"], [p, "R" if p == "R" else "P"])
                        for p in ("R", "S0", "S1")] + [
    placed("P", _dt_backward_args, ["P", "P", "R", "R"], ["P", "P"]),
    placed("no-grad-residual-S0", lambda g: [grand(g, *DT_ROWS), None, grand(g, *DT_ROWS), [16], grand(g, 16)],
           ["S0", "S0", "R"], ["S0", "P"]),
    placed("S2-redistributed", _dt_backward_args, ["S2", "S2", "S2", "R"], [_ROWS_ONLY, ("R", "P")]),
]


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----


def fuzz_case(fz):
    lead, norm, x, w, n = norm_case_inputs(fz)
    r = fz.spec(lead + norm, row_len=max(n, 1))
    return fz.case((x, r, list(norm), w, fz.pick([None, 1e-6, 0.0])), row_len=n)


def fuzz_model(case, args, grad_outputs):
    x, r, norm, w = f64(args[0]), f64(args[1]), args[2], f64(args[3])
    z = (x + r).to(case.dtype).double()  # residual_out is stored in the dtype, the norm reads it
    eps = rms_eps(args[4], case.dtype)
    return [rms_norm_expect(z, norm, w, eps, case.dtype, case.row_len), Expect(z, x.abs() + r.abs())]


def backward_fuzz_case(fz):
    lead, norm, x, w, n = norm_case_inputs(fz)
    dres = fz.grad_output(lead + norm) if fz.boolean() else None
    eps = fz.pick([None, 1e-6])
    return fz.case((fz.grad_output(lead + norm), dres, x, list(norm), w, eps), row_len=n)


def backward_fuzz_model(case, args, grad_outputs):
    g, gres, x, norm, w = f64(args[0]), f64(args[1]), f64(args[2]), args[3], f64(args[4])
    return norm_backward_model(False, g, x, norm, w, None, rms_eps(args[5], case.dtype), case.row_len,
                               bias=False, dtype=case.dtype, grad_residual=gres)


FUZZ_TOLERANCE = {
    # The residual sum is rounded to the dtype before the norm reads it (as the
    # model does, but the two roundings can differ by an ulp where float32 and
    # float64 sums straddle a tie), then the output is rounded once more.
    ("*", "*", "forward"): {"out_ulps": 2},
}
# Its Ascend kernel re-reads the stored 16-bit residual, which Ascend310P saturates.
FUZZ_SATURATES_16BIT = True
