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
    OP_EXT_FUZZ_SEED=7 python -m pytest tests/test_fuzz.py         # other examples

Runs are derandomized (the same examples every run, the ones CI sees); a seed
draws another fixed set, so a campaign can explore past them and still be
rerun. A failure prints one line that reproduces it (the "Reproduce:" note):
the call, with its tensors as fuzz_strategies.T(...) specs, which does not
depend on the seed.

This file names no op: each op's cases and float64 models are its entries in
tests/op_cases/<op>.py (fuzz_case, fuzz_model and their backward_ twins), built
from the strategies and models of tests/fuzz_kit.py.
"""

from __future__ import annotations

import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers as hypothesis_providers

import op_cases
import op_extension
import fuzz_kit
from fuzz_kit import Case, Expect, FuzzDraw
from fuzz_strategies import DTYPE_NAMES, TSpec
from op_extension import ascend_sim, cuda_sim
from reference import supported_isas

custom = torch.ops.custom

MAX_EXAMPLES = int(os.environ.get("OP_EXT_FUZZ_EXAMPLES", "100"))
# Unset: derandomized, each test's examples fixed by its name. Set: Hypothesis's
# seed, another fixed set of examples (derandomize would ignore the seed).
FUZZ_SEED = os.environ.get("OP_EXT_FUZZ_SEED")
FUZZ = settings(max_examples=MAX_EXAMPLES, derandomize=FUZZ_SEED is None, deadline=None, database=None,
                print_blob=False, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                         HealthCheck.function_scoped_fixture])


def seeded(test):
    """`test` with OP_EXT_FUZZ_SEED's seed, where one is set."""
    return test if FUZZ_SEED is None else seed(int(FUZZ_SEED))(test)

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
# Changes per op, each with its reason, are its FUZZ_TOLERANCE
# (tests/op_cases/<op>.py): {(target kind or "*", dtype or "*", key): changes},
# key "forward", "backward" or an output's own key (Expect.key).
DEFAULT_TOL = {"out_ulps": 1, "pointwise": 16, "per_sqrt_n": 4}
FLOAT64_TOL = {"out_ulps": 1, "pointwise": 32, "per_sqrt_n": 8}
# (target kind or "*", dtype or "*", "<op>.<key>") -> changes to the default
TOLERANCE_OVERRIDES = {
    (kind, dtype, f"{op}.{key}"): change
    for op, table in op_cases.each("FUZZ_TOLERANCE", default={}) if not isinstance(table, op_cases.Missing)
    for (kind, dtype, key), change in table.items()}


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
# sm_80's kernels, and sm_90's, whose long rows (fuzz_kit.LONG_ROW_SIZES) take
# thread-block clusters where sm_80 takes a statistics and a column launch.
CUDA_TARGETS = ["cuda-sm_80", "cuda-sm_90"]
# Every op of op_protos/, forward and backward, on every target: the CPU
# kernels, the CUDA kernels on the harness, the Ascend kernels on the simulator
# (test_every_op_has_every_target checks that each target has every op).
FUZZED_OPS = op_cases.FORWARD_OPS


def forward_params():
    return [pytest.param(op, t, id=f"{op}-{t}") for op in FUZZED_OPS for t in CPU_TARGETS + CUDA_TARGETS + ASCEND_TARGETS]


def backward_params():
    return forward_params()


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
# Cases and models: each op's, from tests/op_cases/<op>.py
# ---------------------------------------------------------------------------


def op_entry(op: str, backward: bool, name: str, default=None):
    """Entry `name` of the op's fuzzing (tests/fuzz_kit.py lists them), its
    backward_<name> for the backward op; op_cases's error naming the file to
    write where a required one is missing."""
    if default is None:
        return op_cases.get(backward_op(op) if backward else op, name)
    return op_cases.get(backward_op(op) if backward else op, name, default)


def backward_op(op: str) -> str:
    return op_cases.PROTOS[op].backward


@st.composite
def op_case(draw, op, target, backward):
    dtype = draw(st.sampled_from(target_dtypes(target)))
    return op_entry(op, backward, "fuzz_case")(FuzzDraw(draw, op, backward, target, dtype))


def forward_case(op, target):
    return op_case(op, target, False)


def backward_case(op, target):
    return op_case(op, target, True)


def reference(case: Case, args: tuple, grad_outputs: tuple = ()) -> list[Expect | None]:
    """The op's float64 model: an Expect per output, None for outputs not compared."""
    return [e if e is None or isinstance(e, Expect) else Expect(*e)
            for e in op_entry(case.op, case.backward, "fuzz_model")(case, args, grad_outputs)]


def flushed_reference(case: Case, args: tuple, grad_outputs: tuple = ()) -> list[Expect | None]:
    """reference() with subnormals flushed to zero: in the inputs (as their
    dtype has them) and in the activations (fuzz_kit.FLUSHED)."""
    def flush(t):
        return fuzz_kit.flush_subnormals(t, case.dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    fuzz_kit.FLUSHED = True
    try:
        return reference(case, tuple(flush(a) for a in args), tuple(flush(g) for g in grad_outputs))
    finally:
        fuzz_kit.FLUSHED = False


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------


def _fmt(i, shape):
    return tuple(int(v) for v in torch.unravel_index(torch.tensor(i), shape)) if shape else ()


def compare(what: str, got: torch.Tensor, expected64: torch.Tensor, mag: torch.Tensor, n: int, dtype: torch.dtype,
            tol: dict, repro: str, nan_means_undefined: bool = False, saturated: bool = False,
            flushed: Expect | None = None, extra_atol: torch.Tensor | float = 0.0) -> None:
    """NaN/+inf/-inf exactly where the reference has them, the rest within the bound.

    nan_means_undefined (gradients of the row reductions): where the reference
    is NaN because of inf - inf between a row's terms (an inf dy, a row
    holding inf), the value depends on how the formula is grouped -- the limit
    is often +-inf -- so there the op may return NaN or +-inf, but not a
    finite number; likewise for the GLUs' 0 * inf where the 0 is a flushed
    activation. +-inf and finite reference values are still exact classes.

    saturated (16-bit results on Ascend310P, whose only overflow mode is
    saturation: docs/ascend.md): an inf result is +-max, a NaN result 0 -- or
    NaN where the kernel writes NaN bits itself (softmax rows).

    flushed: the same output's model with subnormals flushed to zero
    (fuzz_kit.FLUSHED); an element that matches it passes too.

    extra_atol: the model's own absolute allowance (Expect.atol)."""
    where = f"{what} [{DTYPE_NAMES[dtype]}]\nReproduce: {repro}"
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}; {where}"
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}; {where}"
    assert tuple(got.shape) == tuple(expected64.shape), f"{what}: shape {tuple(got.shape)}, expected {tuple(expected64.shape)}; {where}"
    bad, explain = judge(got, expected64, mag, n, dtype, tol, nan_means_undefined, saturated, extra_atol)
    if flushed is not None and bad.any():
        flushed_bad, _ = judge(got, flushed.value, flushed.magnitude, flushed.n, dtype, tol,
                               flushed.nan_means_undefined, saturated, flushed.atol)
        bad = bad & flushed_bad
    if bad.any():
        extra = " (nor as with subnormals flushed to zero)" if flushed is not None else ""
        raise AssertionError(f"{what}: {explain(bad)}{extra}; {where}")


def judge(got, expected64, mag, n, dtype, tol, nan_means_undefined, saturated, extra_atol=0.0):
    """(the elements of `got` that break compare's rules, a function that says
    why for a mask of them)."""
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
    classes = (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf))
    mismatched = [(name, test(a) != test(exp)) for name, test in classes]
    finite = torch.isfinite(exp)
    eps_c = compute_eps(dtype)
    rtol = tol["out_ulps"] * torch.finfo(dtype).eps + (tol["pointwise"] + tol["per_sqrt_n"] * math.sqrt(max(n, 1))) * eps_c
    atol = torch.finfo(dtype).tiny + torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).tiny * 2**25
    bound = atol + extra_atol + rtol * mag.expand_as(exp)
    if saturated:
        bound = torch.where(saturated_inf, torch.zeros_like(bound), bound)  # exactly +-max
    err = (a - exp).abs()
    out_of_tolerance = finite & ~(err <= bound)
    bad = out_of_tolerance
    for _, m in mismatched:
        bad = bad | m

    def explain(mask):
        for name, m in mismatched:
            m = m & mask
            if m.any():
                idx = m.reshape(-1).nonzero()[0, 0].item()
                return (f"{int(m.sum())} element(s) differ in being {name}; first at {_fmt(idx, got.shape)}: "
                        f"got {a.reshape(-1)[idx].item()!r}, expected {exp.reshape(-1)[idx].item()!r} "
                        f"(float64 {expected64.reshape(-1)[idx].item()!r})")
        m = out_of_tolerance & mask
        ratio = torch.where(m, err / bound, torch.zeros_like(err))
        idx = int(ratio.reshape(-1).argmax())
        return (f"{int(m.sum())} of {int(finite.sum())} finite element(s) out of tolerance; worst at "
                f"{_fmt(idx, got.shape)}: got {a.reshape(-1)[idx].item()!r}, expected {exp.reshape(-1)[idx].item()!r} "
                f"(float64 {expected64.reshape(-1)[idx].item()!r}), |diff| {err.reshape(-1)[idx].item():.3g} > bound "
                f"{bound.reshape(-1)[idx].item():.3g} (atol {atol:.3g}, rtol {rtol:.3g} x magnitude "
                f"{mag.expand_as(exp).reshape(-1)[idx].item():.3g}, n={n})")

    return bad, explain


def _bits(t):
    return t.detach().clone().view(torch.int16 if t.element_size() == 2 else
                                   (torch.int32 if t.element_size() == 4 else torch.int64))


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


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
    flushed = flushed_reference(case, args, grad_outputs) if case.dtype != torch.float64 else [None] * len(refs)
    key = f"{case.op}.{'backward' if case.backward else 'forward'}"
    saturated = target == "ascend-Ascend310P" and case.dtype in (torch.float16, torch.bfloat16)
    if saturated and op_entry(case.op, False, "FUZZ_SATURATES_16BIT", False) and not case.backward and any(
            r is not None and not torch.isfinite(r.value).all() for r in refs):
        # Past float16's range these ops' results are those of saturated float16
        # arithmetic, not torch's (docs/ascend.md); all the hardware can promise is
        # finite outputs (no inf or NaN exists in its float16 results).
        for k, out in enumerate(outs):
            assert torch.isfinite(out).all(), f"{key} output {k}: inf/NaN under saturation; Reproduce: {repro}"
        return
    for k, (out, ref) in enumerate(zip(outs, refs)):
        if ref is None:
            continue
        out_key = f"{case.op}.{ref.key}" if ref.key else key
        compare(f"{out_key} output {k}", out, ref.value, ref.magnitude, ref.n, case.dtype,
                tolerance(target, case.dtype, out_key), repro, nan_means_undefined=ref.nan_means_undefined,
                saturated=saturated, flushed=flushed[k], extra_atol=ref.atol)
    for k, (b, a) in enumerate(zip(before, args + grad_outputs)):
        if b is not None:
            assert torch.equal(b, _bits(a)), f"input {k} was modified; Reproduce: {repro}"


@pytest.mark.parametrize("op,target", forward_params())
def test_forward(op, target, target_isa):
    @seeded
    @FUZZ
    @given(case=forward_case(op, target))
    def run(case):
        check_case(case, target)

    run()


@pytest.mark.parametrize("op,target", backward_params())
def test_backward(op, target, target_isa):
    @seeded
    @FUZZ
    @given(case=backward_case(op, target))
    def run(case):
        check_case(case, target)

    run()


def test_every_op_has_every_target():
    """A new op is fuzzed everywhere: the CUDA harness and the Ascend simulator
    (forward and backward) run every op of op_protos/."""
    assert set(cuda_sim.OPS) == set(FUZZED_OPS)
    assert set(ascend_sim._FORWARD_OPS) == set(FUZZED_OPS)
    assert set(ascend_sim._OPS) == set(FUZZED_OPS)


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


def _swiglu_case(gate: str, up: str) -> Case:
    return Case("swiglu", False, torch.float32,
                (TSpec((1,), "float32", 0, 1.0, "contiguous", (), {0: gate}),
                 TSpec((1,), "float32", 0, 1.0, "contiguous", (), {0: up})))


def _judge_swiglu(case: Case, value: float) -> None:
    args = case.build()
    ref, = reference(case, args)
    flushed, = flushed_reference(case, args)
    compare("swiglu output 0", torch.tensor([value]), ref.value, ref.magnitude, ref.n, torch.float32,
            tolerance("cpu-default", torch.float32, "swiglu.forward"), "-",
            nan_means_undefined=ref.nan_means_undefined, flushed=flushed, extra_atol=ref.atol)


def test_a_subnormal_activation_may_be_kept_or_flushed_and_nothing_else():
    """silu(1e-39) = 5e-40 is subnormal in float32: times an up of 1.7e38 it is
    0.085 where the kernel keeps subnormals (CPU, CUDA without -ftz) and 0 where
    it flushes them (Ascend); the comparison takes either, and no third value.
    With an inf up it is inf or, flushed, 0 * inf = NaN; never a finite number."""
    case = _swiglu_case("1e-39", "1.7014117331926443e+38")
    exact = float(torch.nn.functional.silu(torch.tensor([1e-39])) * 1.7014117331926443e38)
    assert 0.08 < exact < 0.09
    _judge_swiglu(case, exact)
    _judge_swiglu(case, 0.0)
    with pytest.raises(AssertionError, match=r"out of tolerance.*nor as with subnormals flushed to zero"):
        _judge_swiglu(case, exact / 2)
    infinite = _swiglu_case("1e-39", "inf")
    _judge_swiglu(infinite, math.inf)
    _judge_swiglu(infinite, math.nan)
    with pytest.raises(AssertionError, match=r"differ in being \+inf.*nor as with subnormals flushed to zero"):
        _judge_swiglu(infinite, 0.0)
    # A normal activation is not flushed: the exact product only.
    normal = _swiglu_case("1.0", "3.0")
    _judge_swiglu(normal, float(torch.nn.functional.silu(torch.tensor(1.0)) * 3))
    with pytest.raises(AssertionError, match="out of tolerance"):
        _judge_swiglu(normal, 0.0)


def test_rows_scaled_by_the_generator_are_distinct():
    """Two "mul" row operations on one row would stack their factor (1e140 *
    1e140 in float64), past the float64 model's range: the generator picks
    distinct rows."""
    from hypothesis import given as given_, settings as settings_
    from fuzz_kit import tensor_spec

    seen = []

    @settings_(max_examples=300, derandomize=True, database=None, deadline=None)
    @given_(tensor_spec((3, 4), torch.float64, row_len=4))
    def draw(spec):
        rows = [start for start, _, _, _ in spec.rows]
        assert len(rows) == len(set(rows)), spec.rows
        seen.append(len(rows))

    draw()
    assert max(seen) == 2  # two rows are still scaled together


def _judge_case(case: Case, outputs) -> None:
    """compare() of `outputs` against the case's models, as check_case does on cpu-default."""
    args = case.build()
    refs = reference(case, args)
    flushed = flushed_reference(case, args) if case.dtype != torch.float64 else [None] * len(refs)
    key = f"{case.op}.{'backward' if case.backward else 'forward'}"
    for k, (out, ref) in enumerate(zip(outputs, refs)):
        if ref is not None:
            compare(f"{key} output {k}", out, ref.value, ref.magnitude, ref.n, case.dtype,
                    tolerance("cpu-default", case.dtype, key), "-", nan_means_undefined=ref.nan_means_undefined,
                    flushed=flushed[k], extra_atol=ref.atol)


def test_a_subnormal_xhat_is_rounded_before_the_weight_multiplies_it():
    """rms_norm of [1e-39, -293] with a weight of 1.7e38 on the first element:
    xhat = 4.8e-42 is subnormal in float32, rounded to 2^-150 absolute, and
    the weight makes that 1.1e-4 relative (every target, torch too: 8.1992e-4
    where float64 says 8.2001e-4). The model allows 2^-150 * |w| there and
    not ten times it."""
    case = Case("rms_norm", False, torch.float32,
                (TSpec((2,), "float32", 0, 1000.0, "contiguous", (), {0: "1e-39"}), [2],
                 TSpec((2,), "float32", 0, 0.5, "contiguous", (), {0: "1.7014117331926443e+38"}), None), row_len=2)
    x, _, w, _ = case.build()
    got = torch.nn.functional.rms_norm(x, [2], w)
    exact = torch.nn.functional.rms_norm(x.double(), [2], w.double(), torch.finfo(torch.float32).eps)
    assert 5e-8 < (got[0] - exact[0]).abs() < 2.0**-150 * w[0].item()
    _judge_case(case, [got])
    off = got.clone()
    off[0] = exact[0] - 10 * 2.0**-150 * w[0].item()
    with pytest.raises(AssertionError, match="out of tolerance"):
        _judge_case(case, [off])


def test_a_constant_float64_row_with_eps_0_has_a_nan_layer_norm_gradient():
    """A constant row has variance 0: with eps 0 its LayerNorm gradient is 0 / 0,
    NaN in torch and in the kernels. float64's rounded sum of the row (0.1 three
    times) once left the model's centred values at +-1e-17 and a gradient of
    1.6e17; its mean is refined, and a finite gradient there fails."""
    case = Case("layer_norm", True, torch.float64,
                (TSpec((1, 3), "float64", 0, 1.0, "contiguous", (), {}),
                 TSpec((1, 3), "float64", 0, 1.0, "contiguous", ((0, 3, "set", "0.1"),), {}),
                 [1, 3], None, None, 0.0), row_len=3)
    g, x, *_ = case.build()
    xr = x.detach().requires_grad_()
    torch.nn.functional.layer_norm(xr, [1, 3], None, None, 0.0).backward(g)
    assert torch.isnan(xr.grad).all()
    _judge_case(case, [xr.grad, None, None])
    with pytest.raises(AssertionError, match="differ in being NaN"):
        _judge_case(case, [torch.full_like(x, 1.5e17), None, None])


def test_a_subnormal_activation_derivative_is_allowed_its_rounding_and_no_more():
    """GELU'(-14.2) = -8.6e-44 is subnormal in float32, made of subnormal pieces
    (the pdf, times the gate): the CPU kernels give 7.85e-6 and the Ascend ones
    8.54e-6 for dy * up * GELU' = 8.49e-6 with an up of 4.25e37. The model allows
    2^-149 (2 + |gate|) |dy * up| there; three times that fails."""
    case = Case("geglu", True, torch.float32,
                (TSpec((2, 5, 2), "float32", 0, 1.0, "contiguous", (), {}),
                 TSpec((2, 5, 2), "float32", 1377862487, 10.0, "contiguous", (), {}),
                 TSpec((2, 5, 2), "float32", 0, 1.0, "contiguous", (), {0: "4.2535293329816107e+37"}), "none"))
    dy, gate, up, _ = case.build()
    cpu = torch.ops.custom.geglu_backward(dy, gate, up, "none")
    _judge_case(case, list(cpu))
    _judge_case(case, list(ascend_sim.run_backward("geglu", dy, gate, up, "none", soc="Ascend310P")))
    g0, d0, u0 = gate.flatten()[0].item(), dy.flatten()[0].item(), up.flatten()[0].item()
    assert g0 < -14 and 7.8e-6 < cpu[0].flatten()[0].item() < 7.9e-6
    exact = d0 * u0 * (0.5 * math.erfc(-g0 / math.sqrt(2)) + g0 * math.exp(-0.5 * g0 * g0) / math.sqrt(2 * math.pi))
    floor = 2.0**-149 * (2 + abs(g0)) * abs(d0 * u0)
    off = cpu[0].clone()
    off.view(-1)[0] = exact + 3 * floor
    with pytest.raises(AssertionError, match="out of tolerance"):
        _judge_case(case, [off, cpu[1]])


def test_a_row_whose_squares_underflow_with_eps_0_is_normalised_as_any_other():
    """rms_norm with eps 0 of a row of zeros and one subnormal (1e-39): every
    square is 0 in float32, and the kernels gave rstd = 1 / sqrt(0) = inf and
    the row inf and NaN (torch still does) where float64 gives sqrt(24) for the
    subnormal. They now rescue such a row (x * 2^k), on every target; the model
    holds the row to float64 beside a row whose squares overflow, and the old
    answer fails (a flushing device's NaN, 0 / 0 of the flushed row, would not)."""
    case = Case("rms_norm", False, torch.float32,
                (TSpec((2, 2, 3, 8), "float32", 0, 1.0, "contiguous", ((0, 24, "mul", "1e20"), (72, 96, "set", "0.0")),
                       {72: "1e-39"}), [3, 8], None, 0.0), row_len=24)
    x, norm, _, _ = case.build()
    got = torch.ops.custom.rms_norm(x, norm, None, 0.0)
    assert got[1, 1, 0, 0].item() == pytest.approx(math.sqrt(24), rel=1e-6) and torch.isfinite(got).all()
    _judge_case(case, [got])
    for target in CUDA_TARGETS + ASCEND_TARGETS:
        kind, name = target.split("-", 1)
        if kind == "cuda":
            _judge_case(case, [cuda_sim.run("rms_norm", x, norm, None, 0.0, arch=name)])
        else:
            _judge_case(case, [ascend_sim.run("rms_norm", x, norm, None, 0.0, soc=name)])
    old = got.clone()
    old[1, 1] = torch.where(x[1, 1] == 0, math.nan, math.inf)  # 0 * inf and 1e-39 * inf
    with pytest.raises(AssertionError, match="differ in being"):
        _judge_case(case, [old])
    wrong = got.clone()
    wrong[0, 0, 0, 0] *= 1.001  # in the overflowing row
    with pytest.raises(AssertionError, match="out of tolerance"):
        _judge_case(case, [wrong])


def test_the_models_scale_float64_rows_whose_statistics_underflow_in_backward_and_in_layer_norm():
    """Seed 2031 (1500 examples, streaming stores forced) found two more rows of
    ~1e-310 with eps 0 in float64, where every CPU variant was right and the
    model wrong: rms_norm's backward of one element (y = sign(x), so the
    gradient is 0; the model's rstd = 1/sqrt(0) = inf gave -inf), and
    layer_norm of [-1e-310, 0] ([-1, 1]; F.layer_norm gave [-inf, inf]). The
    models now scale such rows by a power of two first (fuzz_kit.row_scale),
    as the kernels do; the kernels' answers pass and the old models' fail."""
    back = Case("rms_norm", True, torch.float64,
                (TSpec((1,), "float64", 0), TSpec((1,), "float64", 0, specials={0: "-1e-310"}), [1], None, 0.0),
                row_len=1)
    g, x, norm, w, eps = back.build()
    grads = list(torch.ops.custom.rms_norm_backward(g, x, norm, w, eps))
    assert grads[0].item() == 0.0
    _judge_case(back, grads)
    for arch in ("sm_80", "sm_90"):
        _judge_case(back, list(cuda_sim.run_backward("rms_norm", g, x, norm, w, eps, arch=arch)))
    with pytest.raises(AssertionError, match="differ in being"):
        _judge_case(back, [torch.full_like(x, -math.inf), grads[1]])  # what the model said before

    fwd = Case("layer_norm", False, torch.float64,
               (TSpec((2,), "float64", 0, rows=((0, 2, "set", "0.0"),), specials={0: "-1e-310"}), [2], None, None,
                0.0), row_len=2)
    x, norm, w, b, eps = fwd.build()
    got = torch.ops.custom.layer_norm(x, norm, w, b, eps)
    assert got.tolist() == [-1.0, 1.0]
    _judge_case(fwd, [got])
    for arch in ("sm_80", "sm_90"):
        _judge_case(fwd, [cuda_sim.run("layer_norm", x, norm, w, b, eps, arch=arch)])
    assert F.layer_norm(x, norm, w, b, eps).isinf().all()  # what the model took before
    with pytest.raises(AssertionError, match="differ in being"):
        _judge_case(fwd, [F.layer_norm(x, norm, w, b, eps)])


def test_a_float64_row_whose_squares_leave_float64s_range_is_normalised_as_any_other():
    """Seed 1717 found fused_add_rms_norm(-0.0, -1e-310, eps=0.0) in float64
    "wrong" on the CPU and the CUDA harness: their -1 is x / rms(x), but the
    model took F.rms_norm in float64, whose mean square underflows to 0 and
    gives -inf (and, for a row of 1e200, overflows and gives 0). The model now
    scales such a row first (fuzz_kit.rms_norm_f64); the kernels' answers pass
    and F.rms_norm's fail."""
    case = Case("fused_add_rms_norm", False, torch.float64,
                (TSpec((1,), "float64", 0, specials={0: "-0.0"}), TSpec((1,), "float64", 0, specials={0: "-1e-310"}),
                 [1], None, 0.0), row_len=1)
    x, r, norm, w, eps = case.build()
    got = list(torch.ops.custom.fused_add_rms_norm(x, r, norm, w, eps))
    assert got[0].item() == -1.0
    _judge_case(case, got)
    for arch in ("sm_80", "sm_90"):
        _judge_case(case, list(cuda_sim.run("fused_add_rms_norm", x, r, norm, w, eps, arch=arch)))
    with pytest.raises(AssertionError, match="differ in being"):
        _judge_case(case, [F.rms_norm(x + r, norm, w, eps), got[1]])

    big = torch.tensor([[1e200, -3e199, 7e198]], dtype=torch.float64)
    for eps in (0.0, 1e-6):
        expect = fuzz_kit.rms_norm_f64(big, [3], None, eps)
        torch.testing.assert_close(expect, fuzz_kit.rms_norm_f64(big * 2.0**-600, [3], None, 0.0), rtol=1e-15, atol=0)
        torch.testing.assert_close(torch.ops.custom.rms_norm(big, [3], None, eps), expect, rtol=1e-14, atol=0)
        assert (F.rms_norm(big, [3], None, eps) == 0).all()  # what the model took before
    # Rows within range keep F.rms_norm's float64 result, bit for bit.
    ordinary = torch.randn(4, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for eps in (0.0, 1e-6):
        assert torch.equal(fuzz_kit.rms_norm_f64(ordinary, [7], None, eps), F.rms_norm(ordinary, [7], None, eps))
