"""Correctness of the custom ops: opcheck, reference comparisons per dtype and
CPU ISA (and on CUDA where there is a GPU: the `device` and `kernel_device`
fixtures), special values, gradcheck, determinism and add's broadcast backward.

Every forward op of op_protos/ and its backward op, with the data of
tests/op_cases/<op>.py: SAMPLES (opcheck, reference comparisons), GRADCHECK,
BACKWARD_SAMPLE, EXPANDED_GRAD_SAMPLE, PARTIAL_GRAD_SAMPLE, LOW_PRECISION_OPCHECK."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck
from torch.library import opcheck
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import op_cases
import op_extension
from op_extension import ops
from reference import (
    DTYPE_IDS,
    DTYPES,
    FORWARD_OPS,
    FUNCTIONS,
    SAMPLES,
    Maker,
    acc_dtype,
    backward_args,
    build,
    default_rms_norm_eps,
    float_tensor_indices,
    reference,
    sample_params,
    supported_isas,
    tolerance,
)

custom = torch.ops.custom

dtype_params = pytest.mark.parametrize("dtype", DTYPES, ids=[DTYPE_IDS[d] for d in DTYPES])


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _random_like(t: torch.Tensor) -> torch.Tensor:
    return torch.randn(t.shape, dtype=acc_dtype(t.dtype), device=t.device).to(t.dtype)


def run_forward_backward(op, args, kwargs, grad_outputs=None):
    """Calls the functional API; returns (outputs, grad_outputs, {arg index: grad})."""
    outs = _tuple(FUNCTIONS[op](*args, **kwargs))
    if grad_outputs is None:
        grad_outputs = [_random_like(o) for o in outs]
    idx = [i for i in float_tensor_indices(args) if args[i].requires_grad]
    grads = {}
    if idx:
        got = torch.autograd.grad(outs, [args[i] for i in idx], grad_outputs, allow_unused=True)
        grads = dict(zip(idx, got))
    return outs, grad_outputs, grads


# ---------------------------------------------------------------------------
# CPU kernel variants
# ---------------------------------------------------------------------------


def test_isa_switching():
    C = op_extension._C
    best = C.best_cpu_isa()
    assert best in ("default", "avx2", "avx512")
    assert supported_isas()[-1] == best
    for isa in supported_isas():
        C.set_cpu_isa(isa)
        assert C.cpu_isa() == isa
    with pytest.raises(ValueError, match="unknown CPU ISA"):
        C.set_cpu_isa("sse9")
    assert C.cpu_isa() == supported_isas()[-1]  # a failed switch changes nothing


def test_isa_variants_agree(cpu_isa):
    """Every variant computes the same function (to the float32 tolerance) as
    the best one on a row long enough to use vector bodies and tails."""
    x = torch.randn(5, 1000)
    w = torch.randn(1000)
    got = ops.rms_norm(x, [1000], w)
    op_extension._C.set_cpu_isa(op_extension._C.best_cpu_isa())
    want = ops.rms_norm(x, [1000], w)
    torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------
# opcheck
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("op,sample", sample_params(large=False, ops=FORWARD_OPS))
def test_opcheck(op, sample, requires_grad, device):
    args, kwargs = build(sample, torch.float32, requires_grad, device)
    opcheck(getattr(custom, op).default, args, kwargs)


@pytest.mark.parametrize("op,sample", sample_params(large=False, ops=FORWARD_OPS))
def test_opcheck_backward_op(op, sample, device):
    args, kwargs = build(sample, torch.float32, requires_grad=False, device=device)
    name, bw_args = backward_args(op, args, kwargs)
    opcheck(getattr(custom, name).default, bw_args)


@pytest.mark.parametrize("weight", [False, True], ids=["no_weight", "weight"])
def test_opcheck_fused_add_rms_norm_backward_without_residual_grad(weight, device):
    """grad_residual_out is None when only the normalised output is used."""
    m = Maker(device=device)
    z = m(3, 769)
    w = m(769) if weight else None
    opcheck(custom.fused_add_rms_norm_backward.default, (m(3, 769), None, z, [769], w, None))


def _low_precision_opcheck_params():
    params = []
    for p in sample_params(large=False, ops=FORWARD_OPS):
        op, sample = p.values
        if isinstance(sample, op_cases.Missing):
            params.append(p)
        elif sample.id in op_cases.get(op, "LOW_PRECISION_OPCHECK", (SAMPLES[op][0].id,)):
            params.append(p)
    return params


@pytest.mark.parametrize("op,sample", _low_precision_opcheck_params())
def test_opcheck_float16_bfloat16(op, sample, device):
    for dtype in (torch.float16, torch.bfloat16):
        args, kwargs = build(sample, dtype, requires_grad=True, device=device)
        opcheck(getattr(custom, op).default, args, kwargs)


# ---------------------------------------------------------------------------
# No double backward
# ---------------------------------------------------------------------------


def _sample(op, entry="BACKWARD_SAMPLE"):
    """The sample of `op` that its op_cases module names by `entry`:
    BACKWARD_SAMPLE (one whose backward calls custom::<op>_backward; default
    the first sample), EXPANDED_GRAD_SAMPLE or PARTIAL_GRAD_SAMPLE (default
    BACKWARD_SAMPLE)."""
    backward = op_cases.get(op, "BACKWARD_SAMPLE", SAMPLES[op][0].id)
    sample_id = backward if entry == "BACKWARD_SAMPLE" else op_cases.get(op, entry, backward)
    found = [s for s in SAMPLES[op] if s.id == sample_id]
    assert found, f"tests/op_cases/{op}.py: {entry} {sample_id!r} names none of its SAMPLES"
    return found[0]


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_double_backward_raises(op, device):
    """The backward ops have no derivative: differentiating a gradient taken
    with create_graph=True must fail loudly, naming the backward op."""
    args, kwargs = build(_sample(op), torch.float64, requires_grad=True, device=device)
    outs = _tuple(FUNCTIONS[op](*args, **kwargs))
    leaves = [args[i] for i in float_tensor_indices(args) if args[i].requires_grad]
    loss = sum((o * o).sum() for o in outs)  # grad_output depends on the inputs too
    first = torch.autograd.grad(loss, leaves, create_graph=True)
    assert any(g.requires_grad for g in first)
    second = sum(g.sum() for g in first if g.requires_grad)
    with pytest.raises(RuntimeError, match=rf"derivative for custom::{op}_backward is not implemented"):
        torch.autograd.grad(second, leaves, allow_unused=True)


# ---------------------------------------------------------------------------
# Forward and backward against the reference, per dtype and CPU ISA
# ---------------------------------------------------------------------------


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal strides on every dim longer than 1 (size-1 dims' strides carry no layout)."""
    return all(sa == sb for sa, sb, n in zip(a.stride(), b.stride(), a.shape) if n > 1)


@dtype_params
@pytest.mark.parametrize("op,sample", sample_params(large=True, ops=FORWARD_OPS))
def test_matches_reference(op, sample, dtype, kernel_device):
    args, kwargs = build(sample, dtype, requires_grad=True, device=kernel_device)
    inputs_before = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    outs, grad_outputs, grads = run_forward_backward(op, args, kwargs)
    ref_outs, ref_grads = reference(op, args, kwargs, grad_outputs)

    assert len(outs) == len(ref_outs)
    for k, (out, ref) in enumerate(zip(outs, ref_outs)):
        assert out.dtype == dtype and out.shape == ref.shape, k
        # Inputs of one dense layout: torch's output layout (a transposed input gives a
        # transposed gelu). Inputs of mixed layouts: row-major (torch's choice there
        # follows its own operand-order rules, which the ops do not copy).
        tensors = [a for a in args if isinstance(a, torch.Tensor) and a.shape == out.shape]
        if all(_same_layout(t, tensors[0]) for t in tensors):
            assert _same_layout(out, ref), f"output {k}: strides {out.stride()}, torch's {ref.stride()}"
        else:
            assert out.is_contiguous(), f"output {k}: strides {out.stride()} for inputs of mixed layouts"
        torch.testing.assert_close(out, ref, **tolerance(dtype, op, "forward"), msg=lambda m: f"output {k}: {m}")
    assert set(grads) == set(ref_grads)
    for i, g in grads.items():
        ref = ref_grads[i]
        assert g is not None and ref is not None, f"no gradient for argument {i}"
        assert g.dtype == dtype and g.shape == args[i].shape, i
        torch.testing.assert_close(g, ref, **tolerance(dtype, op, "backward"), msg=lambda m: f"grad of arg {i}: {m}")
    for before, a in zip(inputs_before, args):  # inputs are not modified
        if isinstance(a, torch.Tensor):
            assert torch.equal(before, a.detach())


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_backward_with_expanded_and_transposed_grad_output(op, device):
    """Gradients arriving as an expanded (stride-0) or transposed tensor, as
    from .sum() or a transposed consumer."""
    args, kwargs = build(_sample(op, "EXPANDED_GRAD_SAMPLE"), torch.float32, requires_grad=True, device=device)
    outs = _tuple(FUNCTIONS[op](*args, **kwargs))
    expanded = [torch.ones((), device=device).expand(o.shape) for o in outs]
    transposed = [_random_like(o.mT).mT if o.dim() >= 2 else _random_like(o) for o in outs]
    for gos in (expanded, transposed):
        _, _, grads = run_forward_backward(op, args, kwargs, gos)
        _, ref_grads = reference(op, args, kwargs, gos)
        for i, g in grads.items():
            torch.testing.assert_close(g, ref_grads[i], **tolerance(torch.float32, op, "backward"))


@dtype_params
def test_fused_add_rms_norm_residual_out_unused(dtype, device):
    """Only the normalised output feeds the loss: the residual_out gradient is
    undefined and must count as zero."""
    m = Maker(dtype, requires_grad=True, device=device)
    x, r, w = m(4, 129), m(4, 129), m(129, scale=0.2, offset=1.0)
    out, _ = ops.fused_add_rms_norm(x, r, [129], w)
    go = _random_like(out)
    gx, gr, gw = torch.autograd.grad(out, (x, r, w), go)
    _, ref = reference("fused_add_rms_norm", (x, r, [129], w), {}, [go, None])
    tol = tolerance(dtype, "fused_add_rms_norm", "backward")
    torch.testing.assert_close(gx, ref[0], **tol)
    torch.testing.assert_close(gr, ref[1], **tol)
    torch.testing.assert_close(gw, ref[3], **tol)


def test_fused_add_rms_norm_same_tensor_twice(device):
    """input and residual may be one tensor: its gradient is the sum of both."""
    x = torch.randn(3, 9, dtype=torch.float64, device=device, requires_grad=True)
    out, res = ops.fused_add_rms_norm(x, x, [9])
    go, gr = torch.randn_like(out), torch.randn_like(res)
    (g,) = torch.autograd.grad((out, res), x, (go, gr))
    x2 = x.detach().clone().requires_grad_()
    z = x2 + x2
    (want,) = torch.autograd.grad((F.rms_norm(z, [9], None, default_rms_norm_eps(torch.float64)), z), x2, (go, gr))
    torch.testing.assert_close(g, want)


INPLACE_AFTER_FORWARD = {
    # name: forward, then an in-place change of a tensor the backward needs
    "rms_norm-input": lambda x: (ops.rms_norm(x, [x.shape[-1]]), x),
    "layer_norm-input": lambda x: (ops.layer_norm(x, [x.shape[-1]]), x),
    "gelu-input": lambda x: (ops.gelu(x), x),
    "swiglu-up": lambda x: (ops.swiglu(x * 1, x), x),
    "softmax-output": lambda x: (lambda y: (y, y))(ops.softmax(x, -1)),
    "fused_add_rms_norm-residual_out": lambda x: (lambda o: (o[0], o[1]))(ops.fused_add_rms_norm(x, x * 1, [x.shape[-1]])),
}


@pytest.mark.parametrize("case", list(INPLACE_AFTER_FORWARD))
def test_inplace_change_of_saved_tensor_is_detected(case):
    """Changing a tensor saved for backward (an input, or the saved output:
    softmax's, fused_add_rms_norm's residual_out) makes backward fail, instead
    of silently returning wrong gradients."""
    leaf = torch.randn(3, 8, requires_grad=True)
    x = leaf * 1  # a non-leaf, so that it may be changed in place
    out, saved = INPLACE_AFTER_FORWARD[case](x)
    with torch.no_grad():
        saved.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@dtype_params
def test_fused_add_rms_norm_equals_unfused_ops(dtype, device):
    """residual_out is exactly input + residual in the input dtype, as torch's add."""
    m = Maker(dtype, device=device)
    x, r, w = m(6, 300), m(6, 300), m(300)
    out, res = ops.fused_add_rms_norm(x, r, [300], w, 1e-6)
    assert torch.equal(res, x + r)
    torch.testing.assert_close(out, ops.rms_norm(x + r, [300], w, 1e-6), atol=0, rtol=0)


@dtype_params
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm"])
def test_rms_norm_default_eps_matches_torch(op, dtype, device):
    """eps=None is F.rms_norm's default: the epsilon of the computation type
    (float32's for float16/bfloat16). With inputs this small eps dominates
    mean(x^2), so any other epsilon (e.g. finfo(float16).eps = 9.8e-4) shows."""
    x = (torch.randn(4, 64, dtype=torch.float64) * 1e-3).to(device=device, dtype=dtype)
    w = torch.ones(64, dtype=dtype, device=device)
    if op == "rms_norm":
        got = ops.rms_norm(x, [64], w)
    else:
        got, _ = ops.fused_add_rms_norm(x, torch.zeros_like(x), [64], w)
    acc = acc_dtype(dtype)
    want = F.rms_norm(x.to(acc), [64], w.to(acc), default_rms_norm_eps(dtype)).to(dtype)
    torch.testing.assert_close(got, want, **tolerance(dtype))
    # torch's own F.rms_norm in that dtype agrees, and so does torch.nn.RMSNorm
    torch.testing.assert_close(got, F.rms_norm(x, [64], w), **tolerance(dtype))
    torch.testing.assert_close(got, torch.nn.RMSNorm(64, dtype=dtype, device=device)(x), **tolerance(dtype))


def test_layer_norm_default_eps_matches_functional(device):
    x = torch.randn(4, 64, device=device) * 1e-3
    torch.testing.assert_close(ops.layer_norm(x, [64]), F.layer_norm(x, [64]))
    torch.testing.assert_close(ops.layer_norm(x, (64,), eps=1e-2), F.layer_norm(x, [64], eps=1e-2))


@pytest.mark.parametrize("offset", [1e3, 1e4])
def test_layer_norm_large_mean_is_stable(offset, kernel_device):
    """Rows with a large mean and unit spread: a one-pass E[x^2] - E[x]^2 would
    lose every significant bit in float32; the result must stay within float32
    noise of the float64 truth (relative error ~ eps * offset)."""
    x = (torch.randn(8, 513, dtype=torch.float64) + offset).float().to(kernel_device)
    w = (torch.randn(513) * 0.2 + 1).to(kernel_device)
    b = torch.randn(513).to(kernel_device)
    truth = F.layer_norm(x.double(), [513], w.double(), b.double())
    got = ops.layer_norm(x, [513], w, b)
    err = (got.double() - truth).abs().max().item()
    assert err < 16 * torch.finfo(torch.float32).eps * offset, err


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["f32", "f64", "bf16"])
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_large_inputs_do_not_overflow(dtype, dim, kernel_device):
    """softmax(x + c) == softmax(x): the kernel subtracts the max before exp."""
    x = torch.randn(6, 300, dtype=torch.float64) * 3
    shifted = (x + 1e4).to(device=kernel_device, dtype=dtype)
    got = ops.softmax(shifted, dim)
    assert torch.isfinite(got).all()
    want = torch.softmax(shifted.to(acc_dtype(dtype)), dim).to(dtype)
    torch.testing.assert_close(got, want, **tolerance(dtype, "softmax"))


def test_functional_argument_forms(device):
    x = torch.randn(3, 8, device=device)
    w = torch.randn(8, device=device)
    want = F.rms_norm(x, [8], w, torch.finfo(torch.float32).eps)
    for shape in (8, (8,), [8], torch.Size([8])):
        torch.testing.assert_close(ops.rms_norm(x, shape, w), want)
        torch.testing.assert_close(ops.fused_add_rms_norm(x, torch.zeros_like(x), shape, w)[0], want)
        torch.testing.assert_close(ops.layer_norm(x, shape, w), F.layer_norm(x, [8], w))
    # add: a Python number as `other`, an int alpha
    torch.testing.assert_close(ops.add(x, 2), x + 2)
    torch.testing.assert_close(ops.add(x, 0.5, alpha=3), x + 1.5)
    torch.testing.assert_close(ops.add(x, w, alpha=2), torch.add(x, w, alpha=2))
    # defaults
    torch.testing.assert_close(ops.gelu(x), F.gelu(x))
    torch.testing.assert_close(ops.geglu(x, w.expand_as(x)), F.gelu(x) * w)
    # top-level re-exports
    assert op_extension.rms_norm is ops.rms_norm and op_extension.swiglu is ops.swiglu


# ---------------------------------------------------------------------------
# NaN / Inf
# ---------------------------------------------------------------------------

NAN, INF = math.nan, math.inf


def _half_weight(x):
    return torch.full(x.shape[-1:], 0.5, dtype=x.dtype, device=x.device)


ROW_OPS = {
    # case: (op call on x, reference on x upcast (and the input dtype, for eps),
    #        what a bad x[r, c] may taint: its "row", or its "column" for softmax over dim 0)
    "rms_norm": (lambda x: ops.rms_norm(x, [x.shape[-1]]),
                 lambda x, dt: F.rms_norm(x, [x.shape[-1]], None, default_rms_norm_eps(dt)), "row"),
    "rms_norm_weight": (lambda x: ops.rms_norm(x, [x.shape[-1]], _half_weight(x)),
                        lambda x, dt: F.rms_norm(x, [x.shape[-1]], _half_weight(x), default_rms_norm_eps(dt)), "row"),
    "fused_add_rms_norm": (lambda x: ops.fused_add_rms_norm(x, torch.ones_like(x), [x.shape[-1]])[0],
                           lambda x, dt: F.rms_norm((x + 1).to(dt).to(x.dtype), [x.shape[-1]], None, default_rms_norm_eps(dt)),
                           "row"),
    "layer_norm": (lambda x: ops.layer_norm(x, [x.shape[-1]], _half_weight(x), _half_weight(x)),
                   lambda x, dt: F.layer_norm(x, [x.shape[-1]], _half_weight(x), _half_weight(x)), "row"),
    "softmax_dim-1": (lambda x: ops.softmax(x, -1), lambda x, dt: torch.softmax(x, -1), "row"),
    "softmax_dim0": (lambda x: ops.softmax(x, 0), lambda x, dt: torch.softmax(x, 0), "column"),
}


@pytest.mark.parametrize("cols", [5, 769])
@pytest.mark.parametrize("bad", [NAN, INF, -INF], ids=["nan", "inf", "-inf"])
@dtype_params
@pytest.mark.parametrize("case", list(ROW_OPS))
def test_nonfinite_stays_in_its_row(case, dtype, bad, cols, kernel_device):
    """A NaN/Inf at x[1, c] taints only row 1 (column c for softmax over dim 0),
    and the values equal what torch computes, NaN where torch has NaN."""
    call, ref, taint = ROW_OPS[case]
    x = torch.randn(4, cols, dtype=acc_dtype(dtype)).to(device=kernel_device, dtype=dtype)
    c = cols // 2
    x[1, c] = bad
    got = call(x)
    # The reference runs on the CPU (see test_rms_norm_inf_in_row_matches_torch).
    want = ref(x.cpu().to(acc_dtype(dtype)), dtype).to(dtype)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tolerance(dtype, case.split("_dim")[0]))
    clean = torch.ones_like(x, dtype=torch.bool)
    if taint == "row":
        clean[1] = False
    else:
        clean[:, c] = False
    assert torch.isfinite(got[clean]).all(), "a non-finite input leaked out of its row"
    if math.isnan(bad):  # NaN: the whole tainted row/column is NaN, as in torch
        assert torch.isnan(got[~clean]).all()


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
def test_nan_row_gradient_stays_in_its_row(op, kernel_device):
    """A NaN in row 2 makes row 2 of the input gradient NaN and leaves the
    other rows exactly as without it."""
    x = torch.randn(4, 37, device=kernel_device)
    x[2, 5] = NAN
    extra = (-1,) if op == "softmax" else ([37],)
    x.requires_grad_(True)
    y = FUNCTIONS[op](x, *extra)
    go = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, go)
    assert torch.isnan(gx[2]).all()
    rows = [0, 1, 3]
    _, ref = reference(op, (x.detach()[rows].requires_grad_(),) + extra, {}, [go[rows]])
    torch.testing.assert_close(gx[rows], ref[0], **tolerance(torch.float32, op, "backward"))


SPECIAL = [-INF, INF, NAN, 0.0, -0.0, 1.0, -1.0, 30.0, -30.0, 100.0, -100.0, 1e-30]


def special_gate_and_up():
    """float64 (gate, up) of 77 elements, 64 in full vector steps for every ISA
    and dtype, then a tail of 13: SPECIAL at the start and at the end of gate,
    random values between; up 2 but for +-inf, NaN and 0 in the body."""
    n = 77
    vals = torch.tensor(SPECIAL, dtype=torch.float64)
    gate = torch.randn(n, dtype=torch.float64) * 3
    gate[: len(vals)] = vals
    gate[n - len(vals) :] = vals
    up = torch.full((n,), 2.0, dtype=torch.float64)
    up[20:24] = torch.tensor([INF, -INF, NAN, 0.0], dtype=torch.float64)
    return gate, up


@dtype_params
@pytest.mark.parametrize("case", ["gelu-none", "gelu-tanh", "swiglu", "geglu-none", "geglu-tanh"])
def test_activation_special_values(case, dtype, kernel_device):
    """±inf, NaN, ±0 and large values, in the vectorised body and in the tail,
    give what torch computes in float64 (the exact function) cast to dtype.

    float64 rather than the float32 reference: torch's own float32 erf-GELU
    returns NaN for +inf (ATen's vectorised erf), where float64 torch and the
    tanh form give +inf."""
    gate, up = special_gate_and_up()
    up[-3] = INF  # times gelu(30)
    name, *rest = case.split("-")
    approx = rest[0] if rest else None
    g, u = gate.to(dtype), up.to(dtype)  # the reference: torch on the CPU in float64
    dg, du = g.to(kernel_device), u.to(kernel_device)
    if name == "gelu":
        got = ops.gelu(dg, approx)
        want = F.gelu(g.double(), approximate=approx)
    elif name == "swiglu":
        got = ops.swiglu(dg, du)
        want = F.silu(g.double()) * u.double()
    else:
        got = ops.geglu(dg, du, approx)
        want = F.gelu(g.double(), approximate=approx) * u.double()
    torch.testing.assert_close(got.cpu(), want.to(dtype), equal_nan=True, **tolerance(dtype, name))


@dtype_params
@pytest.mark.parametrize("case", ["gelu-none", "gelu-tanh", "swiglu", "geglu-none", "geglu-tanh"])
def test_activation_backward_special_values(case, dtype, kernel_device):
    """The gradients at ±inf, NaN, ±0 and large values, in the vectorised body
    and in the tail, are what torch's autograd gives in float64 cast to dtype:
    NaN where its formula meets 0 * inf (silu'(-inf), gelu'(-inf)), 0 or 1
    where it saturates. The exp the kernels take for sigmoid and the 16-bit
    GELUs (exp_fast) is not NaN-preserving; NaN must still come out through x."""
    gate, up = special_gate_and_up()
    dy = torch.full_like(gate, 0.5)
    name, *rest = case.split("-")
    approx = rest[0] if rest else "none"
    g, u, d = gate.to(dtype), up.to(dtype), dy.to(dtype)
    g64, u64 = g.double().requires_grad_(), u.double().requires_grad_()
    if name == "gelu":
        want = torch.autograd.grad(F.gelu(g64, approximate=approx), g64, d.double())
        got = torch.ops.custom.gelu_backward(d.to(kernel_device), g.to(kernel_device), approx)
        got = (got,)
    else:
        act = F.silu(g64) if name == "swiglu" else F.gelu(g64, approximate=approx)
        want = torch.autograd.grad(act * u64, (g64, u64), d.double())
        dev = [t.to(kernel_device) for t in (d, g, u)]
        got = (torch.ops.custom.swiglu_backward(*dev) if name == "swiglu"
               else torch.ops.custom.geglu_backward(*dev, approx))
    for which, a, b in zip(("gate", "up"), got, want):
        torch.testing.assert_close(a.cpu(), b.to(dtype), equal_nan=True,
                                   msg=lambda m: f"{case} grad {which}: {m}", **tolerance(dtype, name, "backward"))


@dtype_params
def test_softmax_masked_rows(dtype, kernel_device):
    """-inf entries (attention masks) get probability 0; a fully masked row is
    NaN as in torch; +inf gives NaN as in torch."""
    x = torch.randn(5, 70, dtype=torch.float64).to(device=kernel_device, dtype=dtype)
    x[0, ::3] = -INF
    x[1, :] = -INF
    x[2, 7] = INF
    x[3, 69] = -INF  # in the tail
    for dim in (-1, 0):
        got = ops.softmax(x, dim)
        want = torch.softmax(x.to(acc_dtype(dtype)), dim).to(dtype)
        torch.testing.assert_close(got, want, equal_nan=True, **tolerance(dtype, "softmax"))
    got = ops.softmax(x, -1)
    assert (got[0, ::3] == 0).all()
    assert torch.isnan(got[1]).all()
    assert torch.isfinite(got[4]).all()


@dtype_params
def test_rms_norm_inf_in_row_matches_torch(dtype, device):
    x = torch.randn(3, 40, dtype=torch.float64).to(device=device, dtype=dtype)
    x[0, 3] = INF
    got = ops.rms_norm(x, [40])
    # The reference runs on the CPU: y = x * rsqrt(mean(x^2) + eps) = x * 0 beside the
    # inf, NaN at it. On the H200 run (torch 2.11.0+cu130) torch's CUDA F.rms_norm and
    # ours disagreed on the finite elements of such a row (equal elsewhere).
    want = F.rms_norm(x.cpu().to(acc_dtype(dtype)), [40], None, default_rms_norm_eps(dtype)).to(dtype)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tolerance(dtype))
    assert torch.isnan(got[0, 3]) and (got[0, :3] == 0).all() and (got[0, 4:] == 0).all()


# ---------------------------------------------------------------------------
# gradcheck (float64)
# ---------------------------------------------------------------------------


GRADCHECK_CASES = {op_cases.case_id(op, key, "_"): (op, make) for op, key, make in op_cases.items("GRADCHECK")}


@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck(case, device):
    op, build_args = GRADCHECK_CASES[case]
    args, kwargs = build_args(Maker(torch.float64, requires_grad=True, device=device))
    idx = float_tensor_indices(args)
    assert all(args[i].requires_grad for i in idx)

    def fn(*tensors):
        call = list(args)
        for i, t in zip(idx, tensors):
            call[i] = t
        return FUNCTIONS[op](*call, **kwargs)

    assert gradcheck(fn, tuple(args[i] for i in idx))


# ---------------------------------------------------------------------------
# Determinism of the reductions over rows
# ---------------------------------------------------------------------------

ROW_REDUCTIONS = {
    "rms_norm": lambda m: ((m(300, 1000), [1000], m(1000)), {}),
    "fused_add_rms_norm": lambda m: ((m(300, 1000), m(300, 1000), [1000], m(1000)), {}),
    "layer_norm": lambda m: ((m(300, 1000), [1000], m(1000), m(1000)), {}),
    "add": lambda m: ((m(300, 1000), m(1000)), {}),
    "add_column": lambda m: ((m(300, 1000), m(300, 1)), {}),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", list(ROW_REDUCTIONS))
def test_backward_is_deterministic(case, dtype, num_threads):
    """Weight/bias (and broadcast-operand) gradients sum over 300 rows, i.e.
    ten 32-row blocks: bit-identical run after run and for 1 or 2 threads."""
    op = case.split("_column")[0]
    args, kwargs = ROW_REDUCTIONS[case](Maker(dtype, requires_grad=True))
    go = [_random_like(o) for o in _tuple(FUNCTIONS[op](*args, **kwargs))]

    def grads():
        _, _, g = run_forward_backward(op, args, kwargs, go)
        return [g[i] for i in sorted(g)]

    num_threads(2)
    first = grads()
    for _ in range(3):
        again = grads()
        assert all(torch.equal(a, b) for a, b in zip(first, again)), "differs between runs"
    num_threads(1)
    single = grads()
    for k, (a, b) in enumerate(zip(first, single)):
        assert torch.equal(a, b), f"grad {k} differs between 2 threads and 1"


@pytest.mark.parametrize("rows", [31, 32, 33, 300])
@pytest.mark.parametrize("case", ["rms_norm", "fused_add_rms_norm", "layer_norm"])
def test_param_grads_over_many_row_blocks(case, rows, kernel_device):
    """Weight/bias gradients summed over one, one-and-a-bit and ten 32-row
    blocks equal the float64 sum (to float32 summation accuracy)."""
    args, kwargs = ROW_REDUCTIONS[case](Maker(torch.float32, requires_grad=True, device=kernel_device))
    # the same call on `rows` rows
    args = tuple(a[:rows].detach().requires_grad_() if isinstance(a, torch.Tensor) and a.dim() == 2 else a
                 for a in args)
    _, gos, grads = run_forward_backward(case, args, kwargs)
    args64 = tuple(a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    _, ref = reference(case, args64, kwargs, [g.double() for g in gos])
    for i in grads:
        if args[i].dim() == 1:  # weight / bias
            torch.testing.assert_close(grads[i], ref[i].float(), **tolerance(torch.float32, "row_sum", "backward"))


# ---------------------------------------------------------------------------
# add: the backward sums over broadcast dims
# ---------------------------------------------------------------------------

BROADCASTS = {
    "same_shape": ((4, 6), (4, 6)),
    "row_vector": ((5, 6), (6,)),
    "column_vector": ((5, 6), (5, 1)),
    "scalar": ((5, 6), ()),
    "one_element_1x1": ((5, 6), (1, 1)),
    "column_times_row": ((5, 1), (1, 6)),
    "1c1_in_3d": ((2, 3, 4), (1, 3, 1)),
    "c11_in_3d": ((3, 2, 4), (3, 1, 1)),
    "leading_dims": ((2, 3, 4), (3, 4)),
    "leading_and_inner": ((2, 3, 4, 5), (3, 1, 5)),
    "input_broadcast": ((4,), (2, 3, 4)),
    "alternating_5d": ((2, 1, 4, 1, 3), (5, 1, 6, 1)),
    "large_rows": ((300, 129), (129,)),
    "large_cols": ((129, 300), (129, 1)),
    "empty_rows": ((0, 6), (6,)),
}


@pytest.mark.parametrize("alpha", [1.0, 2.5, -1.0, 0.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["f32", "f64", "bf16"])
@pytest.mark.parametrize("case", list(BROADCASTS))
def test_add_backward_reduces_broadcast_dims(case, dtype, alpha, kernel_device):
    a_shape, b_shape = BROADCASTS[case]
    m = Maker(dtype, requires_grad=True, device=kernel_device)
    a, b = m(*a_shape), m(*b_shape)
    out = ops.add(a, b, alpha=alpha)
    shape = torch.broadcast_shapes(a_shape, b_shape)
    assert out.shape == shape
    go = _random_like(out)
    ga, gb = torch.autograd.grad(out, (a, b), go)
    assert ga.shape == a.shape and gb.shape == b.shape

    def reduce(g, target):
        g = g.double()
        lead = g.dim() - len(target)
        dims = list(range(lead)) + [lead + i for i, s in enumerate(target) if s == 1 and g.shape[lead + i] != 1]
        return g.sum(dims, keepdim=True).reshape(target) if dims else g.reshape(target)

    want_a = reduce(go, a_shape).to(dtype)
    want_b = (alpha * reduce(go, b_shape)).to(dtype)
    torch.testing.assert_close(ga, want_a, **tolerance(dtype, "add", "backward"))
    torch.testing.assert_close(gb, want_b, **tolerance(dtype, "add", "backward"))
    torch.testing.assert_close(out, reference("add", (a, b, alpha))[0][0], **tolerance(dtype, "add"))


def test_add_backward_many_alternating_broadcast_dims(device):
    """17 dims alternating between kept and broadcast: the forward handles any
    number of dims, and so must the backward (torch allows up to 64)."""
    a_shape = (2,) * 17
    b_shape = tuple(2 if i % 2 == 0 else 1 for i in range(17))
    m = Maker(torch.float64, requires_grad=True, device=device)
    a, b = m(*a_shape), m(*b_shape)
    out = ops.add(a, b, alpha=2.0)
    torch.testing.assert_close(out, a + 2 * b)
    go = torch.randn_like(out)
    ga, gb = torch.autograd.grad(out, (a, b), go)
    torch.testing.assert_close(ga, go)
    torch.testing.assert_close(gb, 2 * go.sum_to_size(b_shape))


# ---------------------------------------------------------------------------
# Dispatcher visibility, grad modes, threads (the eager fast path in ops.py
# must behave as torch.ops.custom.* does)
# ---------------------------------------------------------------------------


class _RecordDispatch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


class _RecordFunction(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_dispatch_mode_sees_forward_and_backward_ops(op):
    args, kwargs = build(_sample(op), torch.float32, requires_grad=True)
    with _RecordDispatch() as mode:
        outs, _, _ = run_forward_backward(op, args, kwargs)
    assert f"custom.{op}.default" in mode.calls
    assert f"custom.{op}_backward.default" in mode.calls


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_torch_function_mode_sees_the_op(op):
    args, kwargs = build(_sample(op), torch.float32)
    with _RecordFunction() as mode:
        FUNCTIONS[op](*args, **kwargs)
    assert f"custom.{op}.default" in mode.calls


def test_tensor_subclass_keeps_its_torch_function():
    class Tagged(torch.Tensor):
        seen: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.seen.append(str(func))
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(3, 4).as_subclass(Tagged)
    out = ops.softmax(x, -1)
    assert "custom.softmax.default" in Tagged.seen
    assert type(out) is Tagged
    torch.testing.assert_close(out.as_subclass(torch.Tensor), torch.softmax(x.as_subclass(torch.Tensor), -1))


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_no_grad_and_inference_mode(op):
    args, kwargs = build(_sample(op), torch.float32, requires_grad=True)
    want = _tuple(FUNCTIONS[op](*args, **kwargs))
    with torch.no_grad():
        outs = _tuple(FUNCTIONS[op](*args, **kwargs))
    assert not any(o.requires_grad for o in outs)
    for a, b in zip(outs, want):
        assert torch.equal(a, b.detach())
    with torch.inference_mode():
        plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        outs = _tuple(FUNCTIONS[op](*plain, **kwargs))
    assert all(o.is_inference() and not o.requires_grad for o in outs)
    for a, b in zip(outs, want):
        assert torch.equal(a, b.detach())


# Ops of two or more tensor inputs, and how many (PARTIAL_GRAD_SAMPLE passes them all).
TENSOR_INPUTS = {op: len(op_cases.PROTOS[op].inputs) for op in FORWARD_OPS if len(op_cases.PROTOS[op].inputs) > 1}


@pytest.mark.parametrize("op,which", [(op, k) for op, n in TENSOR_INPUTS.items() for k in range(n)])
def test_only_some_inputs_require_grad(op, which, device):
    """Autograd records the op when any one tensor requires grad (e.g. only the
    weight of a norm whose input is a constant), and that tensor's gradient is right."""
    args, kwargs = build(_sample(op, "PARTIAL_GRAD_SAMPLE"), torch.float32, device=device)
    idx = float_tensor_indices(args)
    assert len(idx) == TENSOR_INPUTS[op], f"{op}: PARTIAL_GRAD_SAMPLE must pass every tensor input"
    args = list(args)
    args[idx[which]] = args[idx[which]].clone().requires_grad_(True)
    outs, gos, grads = run_forward_backward(op, args, kwargs)
    assert all(o.requires_grad for o in outs)
    assert set(grads) == {idx[which]}
    _, ref = reference(op, args, kwargs, gos)
    torch.testing.assert_close(grads[idx[which]], ref[idx[which]], **tolerance(torch.float32, op, "backward"))


def test_concurrent_calls_from_threads():
    """The fast path releases the GIL while the op runs: calls from several
    Python threads at once give the same results as one after another."""
    xs = [torch.randn(64, 513) for _ in range(8)]
    w = torch.randn(513)
    want = [ops.rms_norm(x, [513], w) for x in xs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda x: ops.rms_norm(x, [513], w), xs))
            assert all(torch.equal(a, b) for a, b in zip(got, want))
