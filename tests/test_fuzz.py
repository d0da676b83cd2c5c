"""Property-based fuzzing (hypothesis) of every op and backward op, on every CPU
kernel variant, on the CUDA kernels under the CPU harness (through the ops' glue)
and on the Ascend simulator (both SoCs), against a float64 reference.

Each example draws a dtype, a shape (empty dims, one element, odd sizes, rows
longer than 4096), layouts (transposed, strided, storage offsets), broadcasts,
the op's options, and values: random normals of varied scale with special
values mixed in (NaN, +-inf, -0.0, denormals, values near the dtype's max,
rows whose squares overflow float, constant rows). The op's output must have
NaN/+inf/-inf exactly where the float64 reference (cast to the output dtype)
has them; every other element must satisfy |a - e| <= atol + rtol * m, where
m >= |e| is the magnitude of the terms the result is computed from (see
"Tolerances"). Inputs must be left unmodified. Half of rotary_embedding's
backward examples on the CPU go through torch.autograd instead, so that the
gradients of cos and sin, which its autograd composes, are checked too.

    OP_EXT_FUZZ_EXAMPLES=500 python -m pytest tests/test_fuzz.py   # more examples

Runs are derandomized (the same examples every run); a failure prints one line
that reproduces it (the "Reproduce:" note): the call, with its tensors as
fuzz_strategies.T(...) specs.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers as hypothesis_providers

import op_extension
from fuzz_strategies import DTYPE_NAMES, DTYPES, TSpec
from op_extension import ascend_sim, cuda_sim
from reference import OPS, supported_isas
from test_ascend_sim_rope import rope_ub_bytes

custom = torch.ops.custom

MAX_EXAMPLES = int(os.environ.get("OP_EXT_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

_NO_LOCAL_CONSTANTS = hypothesis_providers.Constants()


@pytest.fixture(autouse=True)
def examples_independent_of_loaded_modules(monkeypatch):
    """derandomize alone does not give the same examples every run: Hypothesis
    mixes the literals of every project module imported so far (not test files)
    into what it draws, so the examples changed with what other test files had
    imported (with op_extension.bench loaded, `make test` fuzzed other inputs than
    `pytest tests/test_fuzz.py`). An empty pool of such constants makes the
    examples depend on this file's strategies only. Both names are Hypothesis
    internals (6.155): if they go away, this fails instead of silently varying."""
    monkeypatch.setattr(hypothesis_providers, "_get_local_constants", lambda: _NO_LOCAL_CONSTANTS)
    hypothesis_providers.CONSTANTS_CACHE.cache.clear()  # may hold values drawn with the old pool
    yield
    hypothesis_providers.CONSTANTS_CACHE.cache.clear()

# ---------------------------------------------------------------------------
# Tolerances
# ---------------------------------------------------------------------------
#
# ONE table. For an output element with float64 reference value e (cast to the
# output dtype) and reference magnitude m (>= |e|: the sum of the absolute
# values of the terms e is computed from, times the condition number of any
# transcendental step, so that cancellation and argument rounding are
# accounted for by the arithmetic rather than by a loose constant):
#
#     |actual - e| <= atol + (out_ulps * eps(dtype) + (pointwise + per_sqrt_n * sqrt(n)) * eps(compute)) * m
#
# with eps(compute) the epsilon of the type the kernel computes in (float32
# for float16/bfloat16/float32, float64 for float64) and n the number of terms
# a reduction adds for that element (1 for pointwise ops).
#
# * atol = finfo(dtype).tiny + finfo(compute).tiny * 2**25: below the smallest
#   normal number a result has only absolute precision, and a kernel (or an
#   NPU) may flush subnormals to zero (FTZ/DAZ), results and intermediates
#   alike; a flushed intermediate (sigmoid(g) for g < -87 in float32) is then
#   multiplied by at most two generated factors of |v| <= 5e3 (scale 1e3
#   randn), hence 2**25 > 2.5e7.
# * out_ulps = 1: the reference rounds the float64 value to the dtype once; the
#   kernel rounds its float32 value once; the two can land on neighbouring
#   values when they straddle a rounding boundary (one ulp = eps(dtype) relative).
# * pointwise = 16: a chain of at most ~8 float operations per element (scale,
#   exp/erf/tanh polynomial, multiply, add), each within 2 ulp in the
#   vectorised implementations.
# * per_sqrt_n = 4: rounding errors of an n-term sum (a row's sum of squares,
#   mean, softmax denominator, dot product, a column of weight-gradient terms)
#   are independent, each at most eps/2 of the partial sum; their sum has a
#   standard deviation of at most sqrt(n/12) eps, and 4 sqrt(n) is > 10 sigma
#   for any summation order (sequential lanes, blocks, pairwise), with room for
#   the rsqrt/divide that propagates it (relative error factor 1/2 .. 2).
# * float64: the reference itself is computed in float64 with its own n-term
#   sums (another sqrt(n) eps64 random walk): pointwise 32, per_sqrt_n 8.
#
# Per op/target entries, each with its reason:
# * fused_add_rms_norm.forward: out_ulps 2, the residual sum is rounded to
#   the dtype before the norm reads it (as the reference does, but the two
#   roundings can differ by an ulp where float32 and float64 sums straddle a
#   tie), then the output is rounded once more.
# * ascend add.forward in float16: AddCustom computes in float16 itself, Muls
#   then Add, each rounded to float16 (test_ascend_sim.py checks that exact
#   behaviour): out_ulps 2 relative to m = |input| + |alpha * other|.
# * rotary_embedding.table_grads (the gradients of cos and sin, which the op's
#   autograd composes from ATen ops: the products and their sums in float for
#   16-bit dtypes, rounded once): the default, relative to
#   m = sum |dy * q| + sum |dy * k|.
DEFAULT_TOL = {"out_ulps": 1, "pointwise": 16, "per_sqrt_n": 4}
FLOAT64_TOL = {"out_ulps": 1, "pointwise": 32, "per_sqrt_n": 8}
TOLERANCE_OVERRIDES = {
    # (target kind or "*", dtype or "*", key) -> changes to the default
    ("*", "*", "fused_add_rms_norm.forward"): {"out_ulps": 2},
    ("ascend", torch.float16, "add.forward"): {"out_ulps": 2},
}


def tolerance(target: str, dtype: torch.dtype, key: str) -> dict:
    tol = dict(FLOAT64_TOL if dtype == torch.float64 else DEFAULT_TOL)
    kind = target.split("-")[0]
    for (k, d, name), change in TOLERANCE_OVERRIDES.items():
        if k in ("*", kind) and d in ("*", dtype) and name == key:
            tol.update(change)
    return tol


def compute_eps(dtype: torch.dtype) -> float:
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------

CPU_TARGETS = [f"cpu-{isa}" for isa in supported_isas()]
ASCEND_TARGETS = [f"ascend-{soc}" for soc in ascend_sim.SOCS]
# The CUDA kernels on the CPU harness, through the ops' shared glue (cuda_sim.run):
# one arch, since an arch changes only the launch limits checked, not the results.
CUDA_TARGETS = ["cuda-sm_80"]
# Every op: those of the sample tables (reference.OPS) and rotary_embedding, whose
# q/k/cos/sin layouts those tables do not describe. Every op has Ascend kernels.
FUZZED_OPS = OPS + ("rotary_embedding",)
ASCEND_BACKWARD_OPS = ascend_sim._OPS
assert set(ascend_sim._FORWARD_OPS) == set(FUZZED_OPS)


assert set(cuda_sim.OPS) == set(FUZZED_OPS)


def forward_params():
    return [pytest.param(op, t, id=f"{op}-{t}") for op in FUZZED_OPS for t in CPU_TARGETS + CUDA_TARGETS + ASCEND_TARGETS]


def backward_params():
    return [pytest.param(op, t, id=f"{op}-{t}") for op in FUZZED_OPS for t in CPU_TARGETS + CUDA_TARGETS] + [
        pytest.param(op, t, id=f"{op}-{t}") for op in ASCEND_BACKWARD_OPS for t in ASCEND_TARGETS]


@pytest.fixture
def target_isa(request):
    """Selects the CPU ISA for cpu-* targets; restores the best one afterwards."""
    yield
    op_extension._C.set_cpu_isa(op_extension._C.best_cpu_isa())


def target_dtypes(target: str) -> list[torch.dtype]:
    if target == "ascend-Ascend910B":  # the aclnn entries take float16/float32/bfloat16
        return [torch.float32, torch.float16, torch.bfloat16]
    if target == "ascend-Ascend310P":  # no bfloat16 on 310P
        return [torch.float32, torch.float16]
    return [torch.float32, torch.float16, torch.bfloat16, torch.float64]


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

# Row lengths: tiny, odd, around vector widths (8/16 floats, 32-byte blocks),
# and rows longer than 4096 (the single-pass / split-row boundaries).
ROW_SIZES = [1, 2, 3, 5, 7, 8, 9, 16, 31, 32, 33, 64, 127, 128, 769, 1024, 4097, 5125]
LEAD_SIZES = [0, 1, 2, 3, 5, 7]
MAX_NUMEL = 12_288


def special_values(dtype: torch.dtype, backward_primal: bool = False) -> dict[str, str]:
    """Special values of `dtype`, as strings for T(specials=...).

    Constraints (the float64 reference must be exact where the kernel may be):
    * float64 "near max" is 1e150 and its "big rows" 1e140: the float64
      reference squares these, and would itself overflow near finfo(float64).max.
    * backward_primal (the x/gate/up of a backward op): near-max values are
      max/8, so that dy * u * act'(g) (|dy| < 8, act' <= 1.13) cannot overflow in
      an intermediate product whose order the kernel chooses, where float64 does
      not. (rms_norm/layer_norm's x is excluded from this: their gradient needs
      x only through xhat = x * rstd <= sqrt(n), see NORM_X_FULL_RANGE.)
    """
    fi = torch.finfo(dtype)
    if dtype == torch.float64:
        near = "1e150"
        near2 = "-3e149"
    else:
        near = repr(float(fi.max) / (8 if backward_primal else 2))
        near2 = {torch.float32: "-3e38", torch.bfloat16: "-3e38", torch.float16: "-6e4"}[dtype]
        if backward_primal:
            near2 = repr(float(near2) / 8)
    denorm = {torch.float32: "1e-39", torch.bfloat16: "-1e-39", torch.float16: "1e-06", torch.float64: "-1e-310"}[dtype]
    return {"nan": "nan", "inf": "inf", "-inf": "-inf", "-0": "-0.0", "denorm": denorm, "near_max": near,
            "-near_max": near2, "zero": "0.0"}


def big_row_factor(dtype: torch.dtype) -> str:
    # Rows whose sum of squares overflows the compute type: 1e20 for float32
    # and bfloat16 ((1e20)^2 > 3.4e38). float16 cannot hold such values; 1e4 is
    # near its max (65504). float64: see special_values.
    return {torch.float32: "1e20", torch.bfloat16: "1e20", torch.float16: "1e4", torch.float64: "1e140"}[dtype]


@st.composite
def tensor_spec(draw, shape, dtype, *, row_len=None, specials=True, rows=True, near_max=True,
                backward_primal=False, scales=(1.0, 1e-3, 0.1, 1.0, 10.0, 1e3), max_abs_scale=None):
    shape = tuple(shape)
    numel = math.prod(shape)
    layouts = ["contiguous", "contiguous", "offset"]
    if len(shape) >= 1:
        layouts.append("step")
    if len(shape) >= 2:
        layouts.append("transposed")
    layout = draw(st.sampled_from(layouts))
    scale = draw(st.sampled_from([s for s in scales if max_abs_scale is None or s <= max_abs_scale]))
    seed = draw(st.integers(0, 2**31 - 1))
    row_ops = ()
    if rows and numel > 0 and row_len:
        nrows = numel // row_len
        k = draw(st.integers(0, min(2, nrows)))
        ops = []
        for _ in range(k):
            r = draw(st.integers(0, nrows - 1))
            how = draw(st.sampled_from(["mul", "mul", "set"]))
            value = big_row_factor(dtype) if how == "mul" else draw(st.sampled_from(["0.0", "1.0", "0.1", "3.0"]))
            ops.append((r * row_len, (r + 1) * row_len, how, value))
        row_ops = tuple(ops)
    spec_vals = {}
    if specials and numel > 0:
        values = special_values(dtype, backward_primal)
        kinds = [k for k in values if near_max or "near_max" not in k]
        count = draw(st.sampled_from([0, 0, 1, 2, 4]))
        for _ in range(count):
            i = draw(st.integers(0, numel - 1))
            spec_vals[i] = values[draw(st.sampled_from(kinds))]
    return TSpec(shape, DTYPE_NAMES[dtype], seed, scale, layout, row_ops, spec_vals)


@st.composite
def row_shape(draw, max_norm_dims=1, min_ndim=0):
    """(leading dims, normalized dims) with at most MAX_NUMEL elements."""
    k = draw(st.integers(1, max_norm_dims))
    if k == 1:
        norm = (draw(st.sampled_from(ROW_SIZES + [0])),)
    else:
        norm = (draw(st.sampled_from([1, 2, 3, 4, 5, 7])), draw(st.sampled_from([1, 3, 8, 9, 33, 64])))
    n = max(1, math.prod(norm))
    nlead = draw(st.integers(max(0, min_ndim - k), 2))
    lead = []
    for _ in range(nlead):
        budget = MAX_NUMEL // (n * max(1, math.prod(lead)))
        lead.append(draw(st.sampled_from([s for s in LEAD_SIZES if s <= max(1, budget)])))
    return tuple(lead), norm


@st.composite
def any_shape(draw, min_ndim=0):
    lead, norm = draw(row_shape(1, min_ndim))
    return lead + norm


def drop_dims(draw, shape):
    """A shape that broadcasts to `shape`: leading dims dropped, some dims 1."""
    keep = draw(st.integers(0, len(shape)))
    out = list(shape[len(shape) - keep:])
    for i in range(len(out)):
        if draw(st.integers(0, 2)) == 0:
            out[i] = 1
    return tuple(out)


# rotary_embedding. Head dims: tiny; halves of odd length or not a multiple of
# the 8/16 vector lanes nor of a 32-byte block (8 float32 / 16 16-bit elements:
# 2, 34, 80, 130, 514); the usual 64/128/256; rows longer than a CUDA block's
# threads. Sequence lengths: decode (S = 1) first.
ROPE_HEAD_DIMS = [2, 4, 8, 6, 16, 20, 34, 64, 80, 128, 130, 256, 514, 2400]
ROPE_SEQ = [1, 2, 1, 3, 5, 7, 9, 17]
ROPE_BATCH = [1, 2, 3]
ROPE_HEADS = [1, 2, 4, 3, 5, 8]


@st.composite
def rope_shapes(draw, target):
    """(q shape, k shape, cos shape, unsqueeze_dim) of Hugging Face's two layouts,
    with at most MAX_NUMEL elements in q and in k:
      [B, H, S, D], cos [B or 1, S, D] and unsqueeze_dim 1 (or -3), or cos [S, D]
      and 0 (or -3);
      [B, S, H, D], cos [B or 1, S, D] and 2 (or -2), or cos [S, D] and 1 (or -2).
    q and k have their own head counts (GQA). One example in eight has one size
    0: k's heads (q is rotated, k is empty), q's, the batch, the sequence or the
    head dim. The Ascend kernels take 3-D cos only."""
    bhsd = draw(st.booleans())
    cos_2d = not target.startswith("ascend") and draw(st.integers(0, 3)) == 0
    d = draw(st.sampled_from(ROPE_HEAD_DIMS))

    def size(sizes, *others):
        budget = MAX_NUMEL // (d * math.prod(others))
        return draw(st.sampled_from([n for n in sizes if n <= max(1, budget)]))

    seq = size(ROPE_SEQ)
    batch = size(ROPE_BATCH, seq)
    hq, hk = size(ROPE_HEADS, seq, batch), size(ROPE_HEADS, seq, batch)
    if draw(st.integers(0, 7)) == 0:
        empty = draw(st.sampled_from(["hk", "batch", "seq", "hq", "d"]))
        seq, batch, hq, hk, d = (0 if empty == name else v for name, v in
                                 (("seq", seq), ("batch", batch), ("hq", hq), ("hk", hk), ("d", d)))
    shape = (lambda h: (batch, h, seq, d)) if bhsd else (lambda h: (batch, seq, h, d))
    if cos_2d:
        cos = (seq, d)
        dims = [0, -3] if bhsd else [1, -2]
    else:
        cos = (draw(st.sampled_from([batch, 1])), seq, d)
        dims = [1, -3] if bhsd else [2, -2]
    return shape(hq), shape(hk), cos, draw(st.sampled_from(dims))


@st.composite
def rope_soc_options(draw, target, dtype, d):
    """ascend_sim's test-only options, for half the Ascend examples: a few cores
    and a UB that holds 1 to 3 rows per tile, so that the rows are split
    unevenly over cores and walked in several tiles, with runs of rows that share
    a cos row (or take consecutive ones) across tile boundaries."""
    if not target.startswith("ascend") or not draw(st.booleans()):
        return {}
    options = {"_core_num": draw(st.sampled_from([1, 2, 3, 5]))}
    if d:
        block = 32 // dtype.itemsize
        half_stride = -(-(d // 2) // block) * block
        rows = draw(st.integers(1, 3))
        options["_ub_size"] = max(1024, rope_ub_bytes(dtype, rows, half_stride, d // 2))
    return options


# ---------------------------------------------------------------------------
# Cases: one call of an op or backward op, with its reproducer
# ---------------------------------------------------------------------------


@dataclass
class Case:
    op: str
    backward: bool
    dtype: torch.dtype
    args: tuple  # TSpec for tensors, plain values otherwise
    row_len: int = 1  # reduction length (norms, softmax), for the tolerance
    # Passed by name: ops.rotary_embedding has position_ids before unsqueeze_dim,
    # the schema (and so ascend_sim.run) does not.
    kwargs: dict = field(default_factory=dict)
    # Set (backward, CPU targets): the case is torch.autograd.grad of the forward
    # op ops.<op>(*args, **kwargs) with these output gradients, with respect to
    # every tensor in args (gradients the op's autograd composes around its
    # backward op are checked too).
    grad_outputs: tuple | None = None

    def build(self):
        return tuple(a.build() if hasattr(a, "build") else a for a in self.args)

    def build_grad_outputs(self):
        return tuple(g.build() for g in self.grad_outputs)

    def call_text(self, target: str) -> str:
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
        kind, name = target.split("-", 1)
        if self.grad_outputs is not None:
            assert kind == "cpu" and all(isinstance(a, TSpec) for a in self.args)
            xs = ", ".join(f"x{i}" for i in range(len(self.args)))
            call = ", ".join([xs] + [f"{k}={v!r}" for k, v in self.kwargs.items()])
            return (f"op_extension._C.set_cpu_isa({name!r}); "
                    f"{xs}, = (t.requires_grad_() for t in ({', '.join(repr(a) for a in self.args)},)); "
                    f"print(torch.autograd.grad(ops.{self.op}({call}), ({xs},), "
                    f"({', '.join(repr(g) for g in self.grad_outputs)},)))")
        if kind == "cpu":
            fn = f"torch.ops.custom.{self.op}_backward" if self.backward else f"ops.{self.op}"
            return f"op_extension._C.set_cpu_isa({name!r}); print({fn}({args}))"
        if kind == "cuda":
            fn = "cuda_sim.run_backward" if self.backward else "cuda_sim.run"
            return f"print({fn}({self.op!r}, {args}, arch={name!r}))"
        fn = "ascend_sim.run_backward" if self.backward else "ascend_sim.run"
        return f"print({fn}({self.op!r}, {args}, soc={name!r}))"

    def repro(self, target: str) -> str:
        return ("import sys, torch, op_extension; sys.path.insert(0, 'tests'); "
                "from op_extension import ops, ascend_sim, cuda_sim; "
                "from fuzz_strategies import T; " + self.call_text(target))


@st.composite
def forward_case(draw, op, target):
    dtype = draw(st.sampled_from(target_dtypes(target)))
    spec = lambda shape, **kw: draw(tensor_spec(shape, dtype, **kw))  # noqa: E731
    if op == "add":
        out = draw(any_shape())
        xs, os_ = drop_dims(draw, out), drop_dims(draw, out)
        alpha = draw(st.sampled_from([1.0, -1.0, 0.5, 2.5, -0.75, 0.0]))
        # Constraint: other's near-max values are divided by |alpha| > 1, so that
        # alpha * other is representable (an overflow there is intermediate: the
        # sum with input may be finite, and Ascend's float16 Muls rounds it alone).
        x = spec(xs, row_len=xs[-1] if xs else None)
        if draw(st.integers(0, 5)) == 0:
            other = draw(st.sampled_from([1.5, -3.0, 0.0, math.inf, math.nan, 1e-3]))
        else:
            other = spec(os_, near_max=abs(alpha) <= 1)
        return Case(op, False, dtype, (x, other, alpha))
    if op in ("gelu", "softmax"):
        shape = draw(any_shape())
        x = spec(shape, row_len=shape[-1] if shape else None, scales=(3.0, 1.0, 10.0, 3.0, 1e-3, 0.1, 1e3))
        if op == "gelu":
            return Case(op, False, dtype, (x, draw(st.sampled_from(["none", "tanh"]))))
        ndim = len(shape)
        dim = draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1))
        return Case(op, False, dtype, (x, dim), row_len=max(1, shape[dim] if ndim else 1))
    if op in ("swiglu", "geglu"):
        shape = draw(any_shape())
        g = spec(shape, scales=(3.0, 1.0, 10.0, 3.0, 1e-3, 0.1, 1e3))
        u = spec(shape)
        extra = (draw(st.sampled_from(["none", "tanh"])),) if op == "geglu" else ()
        return Case(op, False, dtype, (g, u) + extra)
    if op == "rotary_embedding":
        qs, ks, cs, dim = draw(rope_shapes(target))
        # Constraint: q and k's near-max values are max/8 (backward_primal), and
        # cos/sin have none (|cos|, |sin| < 6: randn of scale <= 1): q * cos does
        # not overflow in float where the float64 q * cos - q' * sin is finite (or
        # +-inf where a NaN would come out: -4e38 + inf). No big rows either (a row
        # scaled twice holds values up to 3e38); the op reduces nothing.
        q = spec(qs, rows=False, backward_primal=True)
        k = spec(ks, rows=False, backward_primal=True)
        cos, sin = (spec(cs, rows=False, near_max=False, scales=(1.0, 0.5, 0.1)) for _ in range(2))
        return Case(op, False, dtype, (q, k, cos, sin),
                    kwargs={"unsqueeze_dim": dim, **draw(rope_soc_options(target, dtype, qs[-1]))})
    lead, norm = draw(row_shape(2))
    n = math.prod(norm)
    x = spec(lead + norm, row_len=max(n, 1))
    w = spec(norm, rows=False, scales=(0.5, 1.0, 2.0)) if draw(st.booleans()) else None
    if op == "rms_norm":
        eps = draw(st.sampled_from([None, None, 1e-6, 1e-5, 0.0]))
        return Case(op, False, dtype, (x, list(norm), w, eps), row_len=n)
    if op == "fused_add_rms_norm":
        r = spec(lead + norm, row_len=max(n, 1))
        eps = draw(st.sampled_from([None, 1e-6, 0.0]))
        return Case(op, False, dtype, (x, r, list(norm), w, eps), row_len=n)
    assert op == "layer_norm"
    b = spec(norm, rows=False) if draw(st.booleans()) else None
    eps = draw(st.sampled_from([1e-5, 1e-5, 1e-6, 1e-2, 0.0]))
    return Case(op, False, dtype, (x, list(norm), w, b, eps), row_len=n)


@st.composite
def backward_case(draw, op, target):
    dtype = draw(st.sampled_from(target_dtypes(target)))
    spec = lambda shape, **kw: draw(tensor_spec(shape, dtype, **kw))  # noqa: E731
    # Constraint: incoming gradients dy have no near-max values (dy * w with
    # |w| > 1, dy - <dy, y>, partial sums of near-max dy all overflow in an
    # intermediate of the kernel's choosing where float64 does not) and
    # |dy| < 8 (scale <= 1: randn stays below ~6 for these sizes).
    dy = lambda shape, **kw: spec(shape, near_max=False, rows=False, scales=(1.0, 1e-3, 0.1), **kw)  # noqa: E731
    if op == "add":
        out = draw(any_shape())
        size = drop_dims(draw, out)
        alpha = draw(st.sampled_from([1.0, -1.0, 0.5, 2.5, -0.75]))
        n = max(1, math.prod(out)) // max(1, math.prod(size)) if math.prod(size) else 1
        return Case(op, True, dtype, (dy(out), list(size), alpha), row_len=max(1, n))
    if op in ("gelu", "swiglu", "geglu"):
        shape = draw(any_shape())
        g = spec(shape, backward_primal=True, scales=(3.0, 1.0, 10.0, 3.0, 1e-3, 0.1, 1e3))
        if op == "gelu":
            return Case(op, True, dtype, (dy(shape), g, draw(st.sampled_from(["none", "tanh"]))))
        u = spec(shape, backward_primal=True)
        extra = (draw(st.sampled_from(["none", "tanh"])),) if op == "geglu" else ()
        return Case(op, True, dtype, (dy(shape), g, u) + extra)
    if op == "softmax":
        shape = draw(any_shape())
        ndim = len(shape)
        dim = draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1))
        # output: a softmax of random logits (in the dtype), built by the reproducer too
        y = SoftmaxOf(spec(shape, row_len=shape[-1] if shape else None, scales=(3.0, 0.1, 1.0, 10.0)), dim)
        return Case(op, True, dtype, (dy(shape), y, dim), row_len=max(1, shape[dim] if ndim else 1))
    if op == "rotary_embedding":
        qs, ks, cs, dim = draw(rope_shapes(target))
        cos, sin = (spec(cs, rows=False, near_max=False, scales=(1.0, 0.5, 0.1)) for _ in range(2))
        if target.startswith("cpu") and draw(st.booleans()):
            # Through autograd: the backward op for q and k, and the gradients of
            # cos and sin that the op's autograd composes (sums of dy * q over
            # what cos broadcasts along). Constraint: q and k have no near-max
            # values and no big rows: those sums are formed as two partial sums
            # (q's, k's) in the dtype, which may overflow where their sum does not.
            q = spec(qs, rows=False, near_max=False)
            k = spec(ks, rows=False, near_max=False)
            n = (math.prod(qs) + math.prod(ks)) // max(1, math.prod(cs))
            return Case(op, True, dtype, (q, k, cos, sin), row_len=max(1, n), kwargs={"unsqueeze_dim": dim},
                        grad_outputs=(dy(qs), dy(ks)))
        return Case(op, True, dtype, (dy(qs), dy(ks), cos, sin, dim),
                    kwargs=draw(rope_soc_options(target, dtype, qs[-1])))
    lead, norm = draw(row_shape(2))
    n = math.prod(norm)
    rows_n = math.prod(lead)
    # NORM_X_FULL_RANGE: x of the norms keeps its full range (near max, big
    # rows): the gradients need x only through xhat = x * rstd.
    x = spec(lead + norm, row_len=max(n, 1))
    # Constraint: no near-max weights here: w * dy overflows the compute type
    # in the kernel's first product where the float64 gradient may not.
    w = spec(norm, rows=False, near_max=False, scales=(0.5, 1.0, 2.0)) if draw(st.booleans()) else None
    eff = max(n, rows_n, 1)
    if op == "rms_norm":
        eps = draw(st.sampled_from([None, None, 1e-6, 0.0]))
        return Case(op, True, dtype, (dy(lead + norm), x, list(norm), w, eps), row_len=eff)
    if op == "fused_add_rms_norm":
        dres = dy(lead + norm) if draw(st.booleans()) else None
        eps = draw(st.sampled_from([None, 1e-6]))
        return Case(op, True, dtype, (dy(lead + norm), dres, x, list(norm), w, eps), row_len=eff)
    if op == "layer_norm":
        b = spec(norm, rows=False) if draw(st.booleans()) else None
        eps = draw(st.sampled_from([1e-5, 1e-6, 0.0]))
        return Case(op, True, dtype, (dy(lead + norm), x, list(norm), w, b, eps), row_len=eff)
    raise KeyError(op)


@dataclass(frozen=True)
class SoftmaxOf:
    """softmax(x, dim) rounded to x's dtype, as softmax_backward's `output`."""

    x: TSpec
    dim: int

    def build(self):
        x = self.x.build()
        return torch.softmax(x.double(), self.dim).to(x.dtype)

    def __repr__(self):
        return f"torch.softmax({self.x!r}.double(), {self.dim}).to(torch.{self.x.dtype})"


# ---------------------------------------------------------------------------
# Reference: float64, from the (already rounded) inputs
# ---------------------------------------------------------------------------
#
# Each reference returns [(expected float64, magnitude m float64, n), ...],
# one per output. Values come from torch's float64 ops, except for GELU,
# whose float64 torch formula 0.5 * x * (1 + erf(x / sqrt 2)) loses accuracy
# through cancellation for x < -5 (and tanh's 1 + tanh(u) likewise): there
# Phi(x) = erfc(-x / sqrt 2) / 2 and 1 + tanh(u) = 2 sigmoid(2u). Both forms
# give the same NaN/inf as torch's formula at +-inf.

SQRT2 = math.sqrt(2.0)
K0 = math.sqrt(2.0 / math.pi)
K1 = 0.044715


def _gelu_parts(x, approximate):
    """(f, f', |f| + |x f'| bound, |f'| bound with its condition) for GELU at x (float64)."""
    if approximate == "none":
        cdf = 0.5 * torch.special.erfc(-x / SQRT2)
        pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        f = x * cdf
        fp = cdf + x * pdf
        cond = 1 + x * x  # relative sensitivity of erfc(-x/sqrt2), exp(-x^2/2) to rounding of x
        fmag = x.abs() * (cdf + (x * pdf).abs()) * cond
        fpmag = (cdf + (x * pdf).abs()) * cond
        return f, fp, fmag, fpmag
    u = K0 * (x + K1 * x * x * x)
    du = K0 * (1 + 3 * K1 * x * x)
    s = torch.sigmoid(2 * u)  # (1 + tanh u) / 2
    f = x * s
    ds = _mul0(s * (1 - s), 2 * du)  # d s / dx (0, not inf * 0, where sigmoid saturates)
    fp = s + x * ds
    k = (2 * x * du).abs()
    cond = 1 + _mul0(1 - s, k)  # sensitivity of sigmoid(2u) to rounding of x
    fmag = _mul0(x.abs() * (s + (x * ds).abs()), cond)
    fpmag = _mul0(s, cond) + _mul0((x * ds).abs(), 4 + k)
    return f, fp, fmag, fpmag


def _mul0(a, b):
    """a * b with 0 * inf = 0 (a factor that is exactly 0 in float64 bounds nothing)."""
    return torch.where(a == 0, torch.zeros_like(a), a * b)


def _silu_parts(g):
    s = torch.sigmoid(g)
    f = g * s
    fp = s * (1 + g * (1 - s))
    cond = 1 + g.abs() * (1 - s)
    return f, fp, g.abs() * s * cond * 2, s * (1 + g.abs() * (1 - s)) * cond


def _act(op, g, approximate):
    return _silu_parts(g) if op == "swiglu" else _gelu_parts(g, approximate)


def _nan_to_inf(m):
    return torch.where(torch.isnan(m), torch.full_like(m, math.inf), m)


def _row_dims(x, norm):
    return tuple(range(x.dim() - len(norm), x.dim()))


def _rms_eps(eps, dtype):
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps if eps is None else eps


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rope(x, cos_u, sin_u):
    """Hugging Face's x cos + rotate_half(x) sin, with its magnitude."""
    a, b = x * cos_u, _rotate_half(x) * sin_u
    return a + b, a.abs() + b.abs()


def _rope_grad(g, cos_u, sin_u):
    """Its transpose g cos - rotate_half(g sin), with its magnitude."""
    a, b = g * cos_u, _rotate_half(g * sin_u)
    return a - b, a.abs() + b.abs()


def reference(case: Case, args: tuple, grad_outputs: tuple = ()):
    """[(expected, magnitude, n)] per output, in float64; None for outputs not compared."""
    d = lambda t: None if t is None else t.detach().double()  # noqa: E731
    dtype, n = case.dtype, case.row_len
    op = case.op
    if op == "rotary_embedding":
        # cos and sin as Hugging Face unsqueezes them: the op's own dim wrapping is
        # what is tested, so the reference leaves it to torch. NaN/inf classes are
        # exact here (no nan_means_undefined): an output is x c -+ x' s, whose
        # NaN/inf do not depend on how it is grouped, and a table gradient is a
        # sum of products, NaN where it mixes +inf and -inf in any order.
        dim = args[4] if case.backward and case.grad_outputs is None else case.kwargs["unsqueeze_dim"]
        cos, sin = d(args[2]), d(args[3])
        cos_u, sin_u = cos.unsqueeze(dim), sin.unsqueeze(dim)
        if not case.backward:
            return [_rope(d(x), cos_u, sin_u) + (1,) for x in args[:2]]
        if case.grad_outputs is None:
            return [_rope_grad(d(g), cos_u, sin_u) + (1,) for g in args[:2]]
        # autograd: q, k as the backward op gives them; cos and sin: the sums of
        # dy * q (dy * rotate_half(q)) and of k's over the dims cos broadcasts along.
        (q, k), (gq, gk) = (d(t) for t in args[:2]), (d(g) for g in grad_outputs)

        def table_grad(f):
            terms = [g * f(x) for g, x in ((gq, q), (gk, k))]
            total = sum(t.sum_to_size(cos_u.shape) for t in terms).reshape(cos.shape)
            mag = sum(t.abs().sum_to_size(cos_u.shape) for t in terms).reshape(cos.shape)
            return total, mag, n

        return [_rope_grad(gq, cos_u, sin_u) + (1,), _rope_grad(gk, cos_u, sin_u) + (1,),
                table_grad(lambda x: x), table_grad(_rotate_half)]
    if not case.backward:
        if op == "add":
            x, o, alpha = args
            o = torch.full((), o, dtype=torch.float64) if not isinstance(o, torch.Tensor) else d(o)
            e = d(x) + alpha * o
            return [(e, d(x).abs() + (alpha * o).abs(), 1)]
        if op == "gelu":
            f, _, fm, _ = _gelu_parts(d(args[0]), args[1])
            return [(f, fm, 1)]
        if op in ("swiglu", "geglu"):
            g, u = d(args[0]), d(args[1])
            f, _, fm, _ = _act(op, g, args[2] if op == "geglu" else None)
            # An activation below float32's normal range may be flushed (see
            # atol): with up = +-inf that is 0 * inf = NaN, so flush it here and
            # let compare() accept NaN or the inf (nan_means_undefined).
            f = torch.where(f.abs() < torch.finfo(torch.float32).tiny, torch.zeros_like(f), f) \
                if dtype != torch.float64 else f
            return [(f * u, _mul0(fm, u.abs()), 1)]
        if op == "softmax":
            x, dim = d(args[0]), args[1]
            e = torch.softmax(x, dim)
            if x.dim() == 0 or x.numel() == 0:
                return [(e, e.abs(), n)]
            diff = x - x.amax(dim, keepdim=True)
            diff = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
            return [(e, e.abs() * (1 + diff.abs()), n)]
        if op == "rms_norm":
            x, norm, w, eps = d(args[0]), args[1], d(args[2]), _rms_eps(args[3], dtype)
            e = F.rms_norm(x, norm, w, eps)
            return [(e, e.abs(), n)]
        if op == "fused_add_rms_norm":
            x, r, norm, w = d(args[0]), d(args[1]), args[2], d(args[3])
            z = (x + r).to(dtype).double()  # residual_out is stored in the dtype, the norm reads it
            e = F.rms_norm(z, norm, w, _rms_eps(args[4], dtype))
            return [(e, e.abs(), n), (z, x.abs() + r.abs(), 1)]
        if op == "layer_norm":
            x, norm, w, b, eps = d(args[0]), args[1], d(args[2]), d(args[3]), args[4]
            e = F.layer_norm(x, norm, w, b, eps)
            dims = _row_dims(x, norm)
            if x.numel() == 0:
                return [(e, e.abs(), n)]
            mean = x.mean(dims, keepdim=True)
            rstd = torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + eps)
            # x - mean: the mean's rounding error is relative to mean(|x|), not |mean|
            m = (x.abs() + x.abs().mean(dims, keepdim=True)) * rstd * (w.abs() if w is not None else 1)
            m = m + (b.abs() if b is not None else 0)
            return [(e, _nan_to_inf(m), n)]
        raise KeyError(op)

    if op == "add":
        g, size, alpha = d(args[0]), args[1], args[2]
        e = (alpha * g).sum_to_size(size) if size else (alpha * g).sum()
        m = (abs(alpha) * g.abs()).sum_to_size(size) if size else (abs(alpha) * g.abs()).sum()
        return [(e.reshape(size), m.reshape(size), n)]
    if op == "gelu":
        g, x = d(args[0]), d(args[1])
        _, fp, _, fpm = _gelu_parts(x, args[2])
        return [(g * fp, g.abs() * fpm, 1)]
    if op in ("swiglu", "geglu"):
        g, gate, up = d(args[0]), d(args[1]), d(args[2])
        f, fp, fm, fpm = _act(op, gate, args[3] if op == "geglu" else None)
        return [(g * up * fp, (g * up).abs() * fpm, 1), (g * f, g.abs() * fm, 1)]
    if op == "softmax":
        g, y, dim = d(args[0]), d(args[1]), args[2]
        e = torch._softmax_backward_data(g, y, dim, torch.float64)
        m = y.abs() * (g.abs() + (g * y).abs().sum(dim, keepdim=True)) if y.dim() else y.abs() * g.abs() * 2
        return [(e, _nan_to_inf(m), n)]
    # norms
    if op == "fused_add_rms_norm":
        g, gres, x, norm, w, eps = d(args[0]), d(args[1]), d(args[2]), args[3], d(args[4]), _rms_eps(args[5], dtype)
    elif op == "rms_norm":
        g, x, norm, w, eps = d(args[0]), d(args[1]), args[2], d(args[3]), _rms_eps(args[4], dtype)
    else:
        g, x, norm, w, b, eps = d(args[0]), d(args[1]), args[2], d(args[3]), d(args[4]), args[5]
    # Written out from xhat rather than by autograd through rsqrt: torch's
    # float64 autograd forms rstd**3, which underflows for rows of ~1e137
    # (the float64 "big rows") and leaves dy * rstd where the gradient is ~0.
    dims = _row_dims(x, norm)
    lead_dims = tuple(range(x.dim() - len(norm)))
    wa = w.abs() if w is not None else torch.ones((), dtype=torch.float64)
    wg = g * (w if w is not None else 1.0)
    if x.numel() == 0:
        gx, xhat, xm, rstd, mean_wg = torch.zeros_like(x), x, x, torch.zeros(()), 0
    elif op == "layer_norm":
        mean = x.mean(dims, keepdim=True)
        rstd = torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + eps)
        xhat = (x - mean) * rstd
        gx = rstd * (wg - wg.mean(dims, keepdim=True) - xhat * (wg * xhat).mean(dims, keepdim=True))
        xm = (x.abs() + x.abs().mean(dims, keepdim=True)) * rstd  # see the forward
        mean_wg = (wa * g.abs()).mean(dims, keepdim=True)
    else:
        rstd = torch.rsqrt((x * x).mean(dims, keepdim=True) + eps)
        xhat = x * rstd
        gx = rstd * (wg - xhat * (wg * xhat).mean(dims, keepdim=True))
        xm = xhat.abs()
        mean_wg = 0
    gw = (g * xhat).sum(lead_dims) if lead_dims else g * xhat
    gb = g.sum(lead_dims) if lead_dims else g
    awg = wa * g.abs()
    mgx = rstd * (awg + mean_wg + xm * (awg * xm).mean(dims, keepdim=True)) if x.numel() else g.abs()
    out = []
    if op == "fused_add_rms_norm" and gres is not None:
        gx = gx + gres
        mgx = mgx + gres.abs()
    out.append((gx, _nan_to_inf(mgx), n))
    if w is not None:
        mgw = (g.abs() * xm).sum(lead_dims) if lead_dims else g.abs() * xm
        out.append((gw, _nan_to_inf(mgw), n))
    else:
        out.append(None)
    if op == "layer_norm":
        if b is not None:
            out.append((gb, g.abs().sum(lead_dims) if lead_dims else g.abs(), n))
        else:
            out.append(None)
    return out


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------


def _fmt(i, shape):
    return tuple(int(v) for v in torch.unravel_index(torch.tensor(i), shape)) if shape else ()


def compare(what: str, got: torch.Tensor, expected64: torch.Tensor, mag: torch.Tensor, n: int, dtype: torch.dtype,
            tol: dict, repro: str, nan_means_undefined: bool = False, saturated: bool = False) -> None:
    """NaN/+inf/-inf exactly where the reference has them, the rest within the bound.

    nan_means_undefined (gradients of the row reductions): where the reference
    is NaN because of inf - inf between a row's terms (an inf dy, a row
    holding inf), the value depends on how the formula is grouped -- the limit
    is often +-inf -- so there the op may return NaN or +-inf, but not a
    finite number; likewise for the GLUs' 0 * inf where the 0 is a flushed
    activation. +-inf and finite reference values are still exact classes.

    saturated (16-bit results on Ascend310P, whose only overflow mode is
    saturation: docs/ascend.md): an inf result is +-max, a NaN result 0 -- or
    NaN where the kernel writes NaN bits itself (softmax rows)."""
    where = f"{what} [{DTYPE_NAMES[dtype]}]\nReproduce: {repro}"
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}; {where}"
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}; {where}"
    assert tuple(got.shape) == tuple(expected64.shape), f"{what}: shape {tuple(got.shape)}, expected {tuple(expected64.shape)}; {where}"
    exp = expected64.to(dtype).double()  # the float64 value rounded to the output dtype
    a = got.detach().double()
    if saturated:
        big = torch.finfo(dtype).max
        undefined_limit = torch.isnan(exp) & (a.abs() == big) if nan_means_undefined else torch.zeros_like(a, dtype=torch.bool)
        a = torch.where(torch.isnan(exp) & ((a == 0) | undefined_limit), torch.full_like(a, math.nan), a)
        saturated_inf = torch.isinf(exp)
        exp = torch.where(saturated_inf, exp.sign() * big, exp)
    if nan_means_undefined:
        undefined = torch.isnan(exp) & torch.isinf(a)
        a = torch.where(undefined, torch.full_like(a, math.nan), a)
    for name, test in (("NaN", torch.isnan), ("+inf", lambda t: torch.isposinf(t)), ("-inf", torch.isneginf)):
        mism = test(a) != test(exp)
        if mism.any():
            idx = mism.reshape(-1).nonzero()[0, 0].item()
            pos = _fmt(idx, got.shape)
            raise AssertionError(
                f"{what}: {int(mism.sum())} element(s) differ in being {name}; first at {pos}: "
                f"got {a.reshape(-1)[idx].item()!r}, expected {exp.reshape(-1)[idx].item()!r} "
                f"(float64 {expected64.reshape(-1)[idx].item()!r}); {where}")
    finite = torch.isfinite(exp)
    eps_c = compute_eps(dtype)
    rtol = tol["out_ulps"] * torch.finfo(dtype).eps + (tol["pointwise"] + tol["per_sqrt_n"] * math.sqrt(max(n, 1))) * eps_c
    atol = torch.finfo(dtype).tiny + torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).tiny * 2**25
    bound = atol + rtol * mag.expand_as(exp)
    if saturated:
        bound = torch.where(saturated_inf, torch.zeros_like(bound), bound)  # exactly +-max
    err = (a - exp).abs()
    bad = finite & ~(err <= bound)
    if bad.any():
        ratio = torch.where(bad, err / bound, torch.zeros_like(err))
        idx = int(ratio.reshape(-1).argmax())
        pos = _fmt(idx, got.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {int(finite.sum())} finite element(s) out of tolerance; worst at {pos}: "
            f"got {a.reshape(-1)[idx].item()!r}, expected {exp.reshape(-1)[idx].item()!r} "
            f"(float64 {expected64.reshape(-1)[idx].item()!r}), |diff| {err.reshape(-1)[idx].item():.3g} > bound "
            f"{bound.reshape(-1)[idx].item():.3g} (atol {atol:.3g}, rtol {rtol:.3g} x magnitude "
            f"{mag.expand_as(exp).reshape(-1)[idx].item():.3g}, n={n}); {where}")


def _bits(t):
    return t.detach().clone().view(torch.int16 if t.element_size() == 2 else
                                   (torch.int32 if t.element_size() == 4 else torch.int64))


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


ROW_OPS = ("rms_norm", "fused_add_rms_norm", "layer_norm", "softmax")
# Ops whose Ascend kernels compute (add) or re-read (fused_add_rms_norm's stored
# residualOut) 16-bit intermediates, which Ascend310P saturates.
SATURATED_16BIT_OPS = ("add", "fused_add_rms_norm")


def run_target(case: Case, target: str, args: tuple, grad_outputs: tuple = ()):
    kind, name = target.split("-", 1)
    if kind == "cpu":
        op_extension._C.set_cpu_isa(name)
        assert op_extension._C.cpu_isa() == name
        if case.grad_outputs is not None:
            inputs = tuple(a.detach().requires_grad_() for a in args)
            outs = getattr(op_extension.ops, case.op)(*inputs, **case.kwargs)
            return torch.autograd.grad(outs, inputs, grad_outputs)
        if case.backward:
            return getattr(custom, f"{case.op}_backward")(*args, **case.kwargs)
        return getattr(op_extension.ops, case.op)(*args, **case.kwargs)
    if kind == "cuda":
        if case.backward:
            return cuda_sim.run_backward(case.op, *args, arch=name, **case.kwargs)
        return cuda_sim.run(case.op, *args, arch=name, **case.kwargs)
    if case.backward:
        return ascend_sim.run_backward(case.op, *args, soc=name, **case.kwargs)
    return ascend_sim.run(case.op, *args, soc=name, **case.kwargs)


# Outputs of autograd cases that the op's autograd composes from ATen ops in the
# dtype (not the backward op): their tolerance key.
COMPOSED_GRADS = {("rotary_embedding", 2): "rotary_embedding.table_grads",
                  ("rotary_embedding", 3): "rotary_embedding.table_grads"}


def check_case(case: Case, target: str) -> None:
    repro = case.repro(target)
    note(f"Reproduce: {repro}")
    args = case.build()
    grad_outputs = case.build_grad_outputs() if case.grad_outputs is not None else ()
    before = [_bits(a) if isinstance(a, torch.Tensor) else None for a in args + grad_outputs]
    outs = run_target(case, target, args, grad_outputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    refs = reference(case, args, grad_outputs)
    assert len(outs) == len(refs), f"{len(outs)} outputs, expected {len(refs)}; Reproduce: {repro}"
    key = f"{case.op}.{'backward' if case.backward else 'forward'}"
    tol = tolerance(target, case.dtype, key)
    saturated = target == "ascend-Ascend310P" and case.dtype in (torch.float16, torch.bfloat16)
    if saturated and case.op in SATURATED_16BIT_OPS and not case.backward and any(
            r is not None and not torch.isfinite(r[0]).all() for r in refs):
        # Past float16's range these ops' results are those of saturated float16
        # arithmetic, not torch's (docs/ascend.md); all the hardware can promise is
        # finite outputs (no inf or NaN exists in its float16 results).
        for k, out in enumerate(outs):
            assert torch.isfinite(out).all(), f"{key} output {k}: inf/NaN under saturation; Reproduce: {repro}"
        return
    for k, (out, ref) in enumerate(zip(outs, refs)):
        if ref is None:
            continue
        e, m, n = ref
        composed = COMPOSED_GRADS.get((case.op, k)) if case.grad_outputs is not None else None
        compare(f"{composed or key} output {k}", out, e, m, n, case.dtype,
                tolerance(target, case.dtype, composed) if composed else tol, repro,
                nan_means_undefined=(case.backward and case.op in ROW_OPS) or case.op in ("swiglu", "geglu"),
                saturated=saturated)
    for k, (b, a) in enumerate(zip(before, args + grad_outputs)):
        if b is not None:
            assert torch.equal(b, _bits(a)), f"input {k} was modified; Reproduce: {repro}"


@pytest.mark.parametrize("op,target", forward_params())
def test_forward(op, target, target_isa):
    @FUZZ
    @given(case=forward_case(op, target))
    def run(case):
        check_case(case, target)

    run()


@pytest.mark.parametrize("op,target", backward_params())
def test_backward(op, target, target_isa):
    @FUZZ
    @given(case=backward_case(op, target))
    def run(case):
        check_case(case, target)

    run()


def test_examples_do_not_depend_on_other_loaded_modules(tmp_path, monkeypatch):
    def examples():
        drawn = []

        @settings(FUZZ, max_examples=30)
        @given(case=backward_case("geglu", CPU_TARGETS[0]))
        def run(case):
            drawn.append(repr(case))

        run()
        return drawn

    before = examples()
    # A project module full of literals, imported as another test file's import
    # of op_extension.bench did.
    (tmp_path / "many_constants.py").write_text(
        "\n".join(f"C{i} = {v}" for i, v in enumerate([7, 11, 4096, 11008, 1e-39, 3.4e38, -0.0, 2**31 - 2]
                                                        + list(range(100, 140)))) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("many_constants")
    try:
        assert examples() == before
    finally:
        del sys.modules["many_constants"]


def test_reproducer_rebuilds_the_tensors():
    """The printed spec rebuilds exactly the tensor the test used (NaN canary
    outside the view included), and T() places specials in logical order."""
    from fuzz_strategies import T

    spec = TSpec((3, 5), "float16", 42, 2.0, "transposed", ((5, 10, "mul", "1e4"),), {0: "nan", 14: "-0.0"})
    t = spec.build()
    again = eval(repr(spec), {"T": T})
    assert torch.equal(_bits(t), _bits(again)) and t.stride() == again.stride() == (1, 3)
    assert math.isnan(t[0, 0].item()) and str(t[2, 4].item()) == "-0.0"
    assert not torch.isnan(t[1:2]).any() and t[1].abs().max() > 100
    s = T((2, 3), "float32", seed=1, layout="step")
    assert s.storage_offset() == 1 and s.stride() == (7, 2)
    assert torch.isnan(s.as_strided((1,), (1,), 0)).all()  # the canary before the view
