"""Forward-mode AD and torch.func transforms through op_extension.ops (and the
nn modules): jvp, jacfwd, forward_ad dual tensors, grad, vjp, jacrev and vmap
against the PyTorch composite each op replaces; the refusals where the ops
cannot give a right answer (a direct torch.ops.custom call with a tangent,
second derivatives); and plain eager calls staying on the C++ path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, jacfwd, jacrev, jvp, vjp, vmap
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from op_extension import ops
from op_extension.nn import CustomGELU, CustomLayerNorm, CustomRMSNorm, CustomSoftmax, CustomSwiGLUMLP, FusedAddRMSNorm
from reference import DTYPE_IDS, default_rms_norm_eps

custom = torch.ops.custom

# Results are compared with the composite evaluated in float64 on the same
# values. float64: our kernels differ by rounding (~1e-15); float32: a few ulp
# of values of order 1 per operation, jvp/vjp chaining two or three.
TOL = {torch.float64: {"atol": 1e-9, "rtol": 1e-9}, torch.float32: {"atol": 3e-5, "rtol": 3e-5}}
DTYPES = (torch.float64, torch.float32)
dtype_params = pytest.mark.parametrize("dtype", DTYPES, ids=[DTYPE_IDS[d] for d in DTYPES])


@pytest.fixture(autouse=True)
def no_per_sample_loop():
    """vmap must use our batching rules: without the fallback, an op that has
    none raises instead of being run once per sample."""
    torch._C._functorch._set_vmap_fallback_enabled(False)
    yield
    torch._C._functorch._set_vmap_fallback_enabled(True)


@dataclass(frozen=True)
class Case:
    """One op call as a function of its differentiable tensors only.

    ours(*tensors) calls op_extension.ops; theirs(*tensors) is the PyTorch
    composite. make(dtype) gives the tensors; `params` are the indices of the
    ones that are weights/biases (vmap leaves them unbatched or batches them)."""

    id: str
    op: str
    make: Callable[[torch.dtype], tuple]
    ours: Callable
    theirs: Callable
    params: tuple[int, ...] = ()


def _randn(dtype, *shape, scale=1.0, offset=0.0):
    return torch.randn(shape, dtype=torch.float64).mul(scale).add(offset).to(dtype)


def _weight(dtype, *shape):
    return _randn(dtype, *shape, scale=0.3, offset=1.0)


def _rms_eps(t):
    """F.rms_norm's eps=None, for the dtype the case was made in (the
    reference runs in float64, where the default would be float64's)."""
    return default_rms_norm_eps(t.dtype) if t.dtype != torch.float64 else torch.finfo(torch.float64).eps


CASES = [
    Case("add_broadcast_alpha", "add", lambda d: (_randn(d, 3, 5), _randn(d, 5)),
         lambda a, b: ops.add(a, b, alpha=2.5), lambda a, b: a + 2.5 * b, params=(1,)),
    Case("add_number", "add", lambda d: (_randn(d, 3, 5),),
         lambda a: ops.add(a, 3.0, alpha=-0.5), lambda a: a - 1.5),
    Case("gelu_none", "gelu", lambda d: (_randn(d, 3, 8, scale=2),),
         lambda x: ops.gelu(x), lambda x: F.gelu(x)),
    Case("gelu_tanh", "gelu", lambda d: (_randn(d, 3, 8, scale=2),),
         lambda x: ops.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh")),
    Case("swiglu", "swiglu", lambda d: (_randn(d, 3, 8, scale=2), _randn(d, 3, 8)),
         ops.swiglu, lambda g, u: F.silu(g) * u),
    Case("geglu_tanh", "geglu", lambda d: (_randn(d, 3, 8, scale=2), _randn(d, 3, 8)),
         lambda g, u: ops.geglu(g, u, "tanh"), lambda g, u: F.gelu(g, approximate="tanh") * u),
    Case("geglu_none", "geglu", lambda d: (_randn(d, 3, 8, scale=2), _randn(d, 3, 8)),
         ops.geglu, lambda g, u: F.gelu(g) * u),
    Case("rms_norm_2d_weight", "rms_norm", lambda d: (_randn(d, 3, 2, 4), _weight(d, 2, 4)),
         lambda x, w: ops.rms_norm(x, [2, 4], w), lambda x, w: F.rms_norm(x, [2, 4], w, _rms_eps(x)), params=(1,)),
    Case("rms_norm_no_weight", "rms_norm", lambda d: (_randn(d, 3, 8),),
         lambda x: ops.rms_norm(x, 8, eps=1e-6), lambda x: F.rms_norm(x, [8], None, 1e-6)),
    Case("fused_add_rms_norm", "fused_add_rms_norm", lambda d: (_randn(d, 3, 8), _randn(d, 3, 8), _weight(d, 8)),
         lambda x, r, w: ops.fused_add_rms_norm(x, r, [8], w),
         lambda x, r, w: (F.rms_norm(x + r, [8], w, _rms_eps(x)), x + r), params=(2,)),
    Case("fused_add_rms_norm_no_weight", "fused_add_rms_norm", lambda d: (_randn(d, 3, 8), _randn(d, 3, 8)),
         lambda x, r: ops.fused_add_rms_norm(x, r, 8, eps=1e-6), lambda x, r: (F.rms_norm(x + r, [8], None, 1e-6), x + r)),
    Case("layer_norm_weight_bias", "layer_norm", lambda d: (_randn(d, 3, 8), _weight(d, 8), _randn(d, 8)),
         lambda x, w, b: ops.layer_norm(x, [8], w, b), lambda x, w, b: F.layer_norm(x, [8], w, b, 1e-5), params=(1, 2)),
    Case("layer_norm_bias_only", "layer_norm", lambda d: (_randn(d, 3, 8), _randn(d, 8)),
         lambda x, b: ops.layer_norm(x, [8], None, b, eps=1e-3), lambda x, b: F.layer_norm(x, [8], None, b, 1e-3),
         params=(1,)),
    Case("softmax_dim1", "softmax", lambda d: (_randn(d, 2, 3, 5, scale=2),),
         lambda x: ops.softmax(x, 1), lambda x: torch.softmax(x, 1)),
]
case_params = pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
ARGNUMS = {c.id: tuple(range(len(c.make(torch.float64)))) for c in CASES}


def _f64(tree):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.double(), tree)


def assert_matches(actual, expected, dtype):
    """Same structure; each leaf in `dtype` and close to the float64 reference.
    The reference must not be ~0 everywhere: a dropped tangent would pass."""
    leaves, want = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(leaves) == len(want)
    assert max(float(w.abs().max()) for w in want) > 1e-3
    for a, w in zip(leaves, want):
        assert a.dtype == dtype and a.shape == w.shape
        torch.testing.assert_close(a, w.to(dtype), **TOL[dtype])


# ---------------------------------------------------------------------------
# Forward mode
# ---------------------------------------------------------------------------


@dtype_params
@case_params
def test_jvp_matches_reference(case, dtype):
    primals = case.make(dtype)
    tangents = tuple(torch.randn_like(p) for p in primals)
    out, tangent_out = jvp(case.ours, primals, tangents)
    want_out, want_tangent = jvp(case.theirs, _f64(primals), _f64(tangents))
    assert_matches(out, want_out, dtype)
    assert_matches(tangent_out, want_tangent, dtype)


@dtype_params
@case_params
def test_jacfwd_and_jacrev_match_reference(case, dtype):
    primals = case.make(dtype)
    argnums = ARGNUMS[case.id]
    want = jacrev(case.theirs, argnums)(*_f64(primals))
    assert_matches(jacfwd(case.ours, argnums)(*primals), want, dtype)
    assert_matches(jacrev(case.ours, argnums)(*primals), want, dtype)


@case_params
def test_forward_ad_dual_tensors(case):
    """torch.autograd.forward_ad, one tangent at a time: each input's
    contribution (a weight's alone, the residual's alone, ...) is right."""
    primals = case.make(torch.float64)
    for i in range(len(primals)):
        tangent = torch.randn_like(primals[i])
        with fwAD.dual_level():
            duals = list(primals)
            duals[i] = fwAD.make_dual(primals[i], tangent)
            outs = case.ours(*duals)
            got = pytree.tree_map_only(torch.Tensor, lambda o: fwAD.unpack_dual(o), outs)
        tangents = tuple(tangent if j == i else torch.zeros_like(p) for j, p in enumerate(primals))
        want_out, want_tangent = jvp(case.theirs, primals, tangents)
        got_primal = pytree.tree_map(lambda u: u.primal, got, is_leaf=lambda u: hasattr(u, "primal"))
        got_tangent = pytree.tree_map(lambda u: u.tangent, got, is_leaf=lambda u: hasattr(u, "primal"))
        assert_matches(got_primal, want_out, torch.float64)
        assert_matches(got_tangent, want_tangent, torch.float64)


def test_forward_ad_on_a_tensor_that_also_requires_grad():
    """A dual tensor that requires grad takes the Python path; the tangent is
    right, and reverse mode through the same call still works."""
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    t = torch.randn(3, 8, dtype=torch.float64)
    with fwAD.dual_level():
        y = ops.gelu(fwAD.make_dual(x, t))
        primal, tangent = fwAD.unpack_dual(y)
    torch.testing.assert_close(tangent, jvp(F.gelu, (x.detach(),), (t,))[1])
    (g,) = torch.autograd.grad(primal.sum(), x)
    torch.testing.assert_close(g, grad(lambda a: F.gelu(a).sum())(x.detach()))


def test_passed_on_tangents_are_not_tied_to_the_input():
    """Where an output's tangent is an input's (residual_out's, add's with one
    tangent), modifying the output in place must leave the input's alone."""
    x, c, t = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, t.clone())
        for out in (ops.add(dual, c), ops.fused_add_rms_norm(dual, c, [4])[1], ops.add(c, dual, alpha=1.0)):
            out.mul_(2)
            assert torch.equal(fwAD.unpack_dual(dual).tangent, t)
        bias = fwAD.make_dual(torch.zeros(4), t[0].clone())
        ops.layer_norm(x, [4], None, bias).mul_(2)
        assert torch.equal(fwAD.unpack_dual(bias).tangent, t[0])


# ---------------------------------------------------------------------------
# Reverse mode
# ---------------------------------------------------------------------------


@case_params
def test_grad_and_vjp_match_reference(case):
    primals = case.make(torch.float64)
    argnums = ARGNUMS[case.id]
    out = case.theirs(*primals)
    cotangents = pytree.tree_map(torch.randn_like, out)

    def loss(fn):
        return lambda *a: sum((o * c).sum() for o, c in zip(pytree.tree_leaves(fn(*a)), pytree.tree_leaves(cotangents)))

    want = grad(loss(case.theirs), argnums)(*primals)
    assert_matches(grad(loss(case.ours), argnums)(*primals), want, torch.float64)
    got_out, pullback = vjp(case.ours, *primals)
    assert_matches(got_out, out, torch.float64)
    assert_matches(pullback(cotangents), want, torch.float64)


# ---------------------------------------------------------------------------
# vmap
# ---------------------------------------------------------------------------

B = 4


def _batch(t, dim):
    """B different copies of t, stacked along `dim`."""
    return torch.stack([torch.randn_like(t) + 0.5 * i for i in range(B)], dim=dim)


def _loop(fn, batched, in_dims):
    """fn applied to each sample in a Python loop, outputs stacked at dim 0."""
    outs = []
    for i in range(B):
        args = [t if d is None else t.select(d, i) for t, d in zip(batched, in_dims)]
        outs.append(fn(*args))
    return pytree.tree_map(lambda *o: torch.stack(o), *outs)


@pytest.mark.parametrize("layout", ["rows_dim0_params_unbatched", "rows_dim1_params_unbatched", "all_batched_dim_last"])
@case_params
def test_vmap_matches_a_loop(case, layout):
    tensors = case.make(torch.float64)
    in_dims = []
    for i, t in enumerate(tensors):
        if i in case.params and layout != "all_batched_dim_last":
            in_dims.append(None)
        elif layout == "rows_dim0_params_unbatched":
            in_dims.append(0)
        elif layout == "rows_dim1_params_unbatched":
            in_dims.append(min(1, t.dim()))
        else:
            in_dims.append(t.dim())
    batched = [t if d is None else _batch(t, d) for t, d in zip(tensors, in_dims)]
    got = vmap(case.ours, in_dims=tuple(in_dims))(*batched)
    assert_matches(got, _loop(case.theirs, batched, in_dims), torch.float64)


@pytest.mark.parametrize(
    "in_dims,shapes",
    [((0, None), [(B, 3, 5), (5,)]), ((None, 0), [(3, 5), (B, 5)]), ((0, 1), [(B, 5), (3, B, 5)]),
     ((1, 0), [(1, B), (B, 3, 1)])],
    ids=["batched_input", "batched_other", "lower_rank_batched_input", "both_broadcast"],
)
def test_vmap_add_broadcasts_logical_shapes(in_dims, shapes):
    a, b = (torch.randn(s, dtype=torch.float64) for s in shapes)
    got = vmap(lambda x, y: ops.add(x, y, alpha=1.5), in_dims=in_dims)(a, b)
    assert_matches(got, _loop(lambda x, y: x + 1.5 * y, (a, b), in_dims), torch.float64)


def test_vmap_softmax_of_0_dim_samples():
    x = torch.randn(B, dtype=torch.float64)
    torch.testing.assert_close(vmap(lambda s: ops.softmax(s, 0))(x), torch.ones(B, dtype=torch.float64))
    torch.testing.assert_close(vmap(lambda s: ops.softmax(s, -1))(x), torch.ones(B, dtype=torch.float64))


def test_vmap_checks_arguments_like_the_op():
    """The batch dim must not pass for a logical dim, nor a batched weight's
    shape or dtype go unchecked (broadcasting or promotion would hide them)."""
    x = torch.randn(B, 8)
    with pytest.raises(IndexError, match=r"custom::softmax: dim 1 is out of range for a tensor with 1 dims"):
        vmap(lambda s: ops.softmax(s, 1))(x)
    with pytest.raises(ValueError, match=r"custom::rms_norm: normalized_shape \[4, 8\] has more dims than the input "
                                         r"of shape \[8\]"):
        vmap(lambda s: ops.rms_norm(s, [4, 8]))(x)
    with pytest.raises(ValueError, match=r"custom::rms_norm: weight has shape \[1\] but normalized_shape is \[8\]"):
        vmap(lambda s, w: ops.rms_norm(s, [8], w))(x, torch.randn(B, 1))
    # (through the dispatcher op: op_extension.ops may promote mixed dtypes before a rule sees them)
    bias = torch.randn(B, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"custom::layer_norm: bias has dtype float64 but input has dtype float32"):
        vmap(lambda s, b: custom.layer_norm(s, [8], None, b, 1e-5), in_dims=(None, 0))(x[0], bias)


def test_per_sample_gradients_of_a_shared_weight():
    """vmap of grad (per-sample gradients): the weight's gradient per sample,
    which the backward op (it sums over every row) cannot give by itself."""
    x = torch.randn(B, 3, 8, dtype=torch.float64)
    w, b = _weight(torch.float64, 8), torch.randn(8, dtype=torch.float64)

    def per_sample(norm):
        return vmap(grad(lambda w, b, s: norm(s, w, b).pow(3).sum(), argnums=(0, 1)), in_dims=(None, None, 0))(w, b, x)

    want = per_sample(lambda s, w, b: F.layer_norm(s, [8], w, b))
    assert_matches(per_sample(lambda s, w, b: ops.layer_norm(s, [8], w, b)), want, torch.float64)
    want = per_sample(lambda s, w, b: F.rms_norm(s, [8], w, 1e-6) + b)
    assert_matches(per_sample(lambda s, w, b: ops.rms_norm(s, [8], w, 1e-6) + b), want, torch.float64)
    want = per_sample(lambda s, w, b: F.rms_norm(s + b, [8], w, 1e-6))
    assert_matches(per_sample(lambda s, w, b: ops.fused_add_rms_norm(s, b.expand_as(s), [8], w, 1e-6)[0]), want,
                   torch.float64)


def test_vmap_of_a_direct_dispatcher_call_is_batched():
    """The forward ops' batching rules serve torch.ops.custom callers too."""
    x, w = torch.randn(B, 3, 8), _weight(torch.float32, 8)
    got = vmap(lambda s: custom.rms_norm(s, [8], w, 1e-6), in_dims=1)(x.transpose(0, 1))
    torch.testing.assert_close(got, F.rms_norm(x, [8], w, 1e-6))


# ---------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------


MODULE_PAIRS = {
    "rms_norm": (lambda: CustomRMSNorm(8, eps=1e-6), lambda: nn.RMSNorm(8, eps=1e-6), 1),
    "layer_norm": (lambda: CustomLayerNorm(8), lambda: nn.LayerNorm(8), 1),
    "fused_add_rms_norm": (lambda: FusedAddRMSNorm(8, eps=1e-6), lambda: _FusedAddRMSNormRef(8, eps=1e-6), 2),
    "swiglu_mlp": (lambda: CustomSwiGLUMLP(8, 12), lambda: _LlamaMLPRef(8, 12), 1),
    "gelu": (lambda: CustomGELU("tanh"), lambda: nn.GELU("tanh"), 1),
    "softmax": (lambda: CustomSoftmax(-1), lambda: nn.Softmax(-1), 1),
}


class _FusedAddRMSNormRef(nn.RMSNorm):
    def forward(self, x, r):
        return super().forward(x + r), x + r


class _LlamaMLPRef(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("name", list(MODULE_PAIRS))
def test_module_functional_call_grad_and_jvp(name):
    """torch.func over a module's parameters: functional_call + grad, and
    jvp in the direction of a parameter change."""
    make_ours, make_theirs, n_inputs = MODULE_PAIRS[name]
    ours, theirs = make_ours().double(), make_theirs().double()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(p + 0.3 * torch.randn_like(p))
    ours.load_state_dict(theirs.state_dict())
    params = {k: v.detach() for k, v in theirs.named_parameters()}
    inputs = tuple(torch.randn(3, 8, dtype=torch.float64) for _ in range(n_inputs))

    def loss(module):
        def f(params, *inputs):
            outs = functional_call(module, params, inputs)
            return sum(o.pow(2).sum() for o in pytree.tree_leaves(outs))
        return f

    argnums = (0, 1) if params else 1
    assert_matches(grad(loss(ours), argnums)(params, *inputs), grad(loss(theirs), argnums)(params, *inputs),
                   torch.float64)
    if params:
        direction = {k: torch.randn_like(v) for k, v in params.items()}
        got = jvp(lambda p: functional_call(ours, p, inputs), (params,), (direction,))
        want = jvp(lambda p: functional_call(theirs, p, inputs), (params,), (direction,))
        assert_matches(got, want, torch.float64)


# ---------------------------------------------------------------------------
# Refusals: a right answer or a clear error, never a silent zero
# ---------------------------------------------------------------------------


DIRECT_CALLS = {
    "add": lambda x, w: custom.add(x, w, 2.0),
    "gelu": lambda x, w: custom.gelu(x, "tanh"),
    "swiglu": lambda x, w: custom.swiglu(x, x * 2),
    "geglu": lambda x, w: custom.geglu(x, x * 2, "none"),
    "rms_norm": lambda x, w: custom.rms_norm(x, [8], w, None),
    "fused_add_rms_norm": lambda x, w: custom.fused_add_rms_norm(x, x * 2, [8], w, None),
    "layer_norm": lambda x, w: custom.layer_norm(x, [8], w, None, 1e-5),
    "softmax": lambda x, w: custom.softmax(x, -1),
}


WITH_WEIGHT = ("add", "rms_norm", "fused_add_rms_norm", "layer_norm")  # a second tensor `w` to carry a tangent


@pytest.mark.parametrize(
    "op,tangent_on", [(op, "input") for op in DIRECT_CALLS] + [(op, "weight") for op in WITH_WEIGHT]
)
def test_direct_dispatcher_call_with_a_tangent_raises(op, tangent_on):
    """torch.ops.custom.<op> has no forward derivative: a tangent on any input
    is refused by name, pointing at op_extension.ops.<op>."""
    x, w = torch.randn(3, 8), torch.randn(8)
    message = rf"custom::{op}: an input carries a forward-mode AD tangent .* call op_extension\.ops\.{op} "
    with fwAD.dual_level():
        dx = fwAD.make_dual(x, torch.randn_like(x)) if tangent_on == "input" else x
        dw = fwAD.make_dual(w, torch.randn_like(w)) if tangent_on == "weight" else w
        with pytest.raises(RuntimeError, match=message):
            DIRECT_CALLS[op](dx, dw)
    # torch.func.jvp reaches the kernel with the same kind of tangent
    with pytest.raises(RuntimeError, match=message):
        if tangent_on == "input":
            jvp(lambda a: DIRECT_CALLS[op](a, w), (x,), (x,))
        else:
            jvp(lambda b: DIRECT_CALLS[op](x, b), (w,), (w,))


@pytest.mark.parametrize("op", list(DIRECT_CALLS))
def test_direct_dispatcher_call_under_grad_transform_names_the_op(op):
    x, w = torch.randn(3, 8), torch.randn(8)
    with pytest.raises(RuntimeError, match=rf"custom::{op}: torch.func transforms .* call op_extension\.ops\.{op} "):
        grad(lambda a: pytree.tree_leaves(DIRECT_CALLS[op](a, w))[0].sum())(x)


def test_second_derivatives_raise():
    """The backward ops have no derivatives, in either mode: every way of
    asking for a second derivative fails with a message naming the op."""
    x = torch.randn(5, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="derivative for custom::gelu_backward is not implemented"):
        grad(grad(lambda a: ops.gelu(a).sum()))(x[0])
    with pytest.raises(RuntimeError, match="derivative for custom::gelu_backward is not implemented"):
        jacrev(jacfwd(ops.gelu))(x)
    with pytest.raises(NotImplementedError, match="forward AD with custom::rms_norm_backward"):
        jacfwd(jacrev(lambda a: ops.rms_norm(a, [5]).sum()))(x)
    # torch runs a jvp with forward grad mode off: an outer jvp would see a constant
    for op in (lambda a: ops.gelu(a), lambda a: ops.add(a, a, 2.0), lambda a: ops.softmax(a, 0)):
        with pytest.raises(NotImplementedError, match=r"custom::\w+: forward-mode AD of a forward-mode derivative"):
            jacfwd(jacfwd(op))(x)
    with pytest.raises(NotImplementedError, match=r"custom::layer_norm: forward-mode AD of a forward-mode derivative"):
        jvp(lambda y: jvp(lambda a: ops.layer_norm(a, [5]), (x,), (y,))[1], (x,), (x,))


# ---------------------------------------------------------------------------
# Routing: plain eager calls stay on the C++ path
# ---------------------------------------------------------------------------


def test_only_tangents_or_transforms_take_the_python_path():
    """A C++ autograd node for plain tensors (also inside a dual level, when
    no input carries a tangent); the Python autograd.Function when one does."""
    x = torch.randn(3, 8, requires_grad=True)
    assert "_RmsNorm" not in ops.rms_norm(x, [8]).grad_fn.name()
    with fwAD.dual_level():
        assert "_RmsNorm" not in ops.rms_norm(x, [8]).grad_fn.name()
        w = fwAD.make_dual(torch.ones(8), torch.randn(8))
        assert ops.rms_norm(x, [8], w).grad_fn.name() == "_RmsNormBackward"


class _PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_transforms_under_a_torch_function_mode():
    """With a torch function mode active (torch.device(...) is one) ops.py
    leaves the C++ fast path for torch.ops.custom.<op>, whose kernel would
    refuse the tangent: transforms still get the autograd.Functions."""
    x, t = torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64)
    with _PassThrough():
        got = jvp(lambda a: ops.gelu(a, "tanh"), (x,), (t,))
    assert_matches(got, jvp(lambda a: F.gelu(a, approximate="tanh"), (x,), (t,)), torch.float64)
    with torch.device("cpu"):
        got = vmap(grad(lambda a: ops.softmax(a, 0).pow(2).sum()))(x)
    assert_matches(got, vmap(grad(lambda a: torch.softmax(a, 0).pow(2).sum()))(x), torch.float64)
    with torch.device("cpu"), fwAD.dual_level():
        y = ops.rms_norm(fwAD.make_dual(x, t), [8], None, 1e-6)
        got = fwAD.unpack_dual(y).tangent
    assert_matches(got, jvp(lambda a: F.rms_norm(a, [8], None, 1e-6), (x,), (t,))[1], torch.float64)
