"""What an op's fuzz entries use (tests/op_cases/<op>.py: fuzz_case, fuzz_model and
their backward_ twins; tests/test_fuzz.py runs them on every target).

  fuzz_case(fz) -> Case       draws one call of the op through `fz` (a FuzzDraw:
                              the target, the dtype already drawn, tensor specs,
                              shapes) and returns fz.case(args, ...)
  fuzz_model(case, args, grad_outputs) -> [Expect | None]
                              the float64 model of each output, from the built
                              (already rounded) inputs: its value, the magnitude
                              m >= |value| its rounding error is relative to, and
                              the number of terms a reduction adds for it (see
                              test_fuzz.py "Tolerances"); None: not compared
  FUZZ_TOLERANCE (optional)   {(target kind or "*", dtype or "*", key): changes to
                              the default tolerance}, key "forward", "backward" or
                              an Expect's own key, each with its reason
  FUZZ_SATURATES_16BIT (optional)  True: the op's Ascend kernels compute or re-read
                              16-bit intermediates, which Ascend310P saturates, so
                              past float16's range its forward results on that SoC
                              are only required to be finite

The strategies here draw in a fixed order: an op's examples depend only on its own
entries and these helpers (the suite is derandomized).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzz_strategies import DTYPE_NAMES, TSpec

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


class Expect(NamedTuple):
    """The float64 model of one output."""

    value: torch.Tensor
    magnitude: torch.Tensor  # >= |value|: what the rounding error is relative to
    n: int = 1  # terms a reduction adds for an element (1: pointwise)
    # Where the model is NaN from inf - inf (or 0 * inf) between terms whose
    # grouping the kernel chooses, the op may return NaN or +-inf, not a finite value.
    nan_means_undefined: bool = False
    # The output's tolerance key, where it is not the op's "forward"/"backward":
    # an output the op's autograd composes from ATen ops, say.
    key: str | None = None
    # An absolute error allowed beyond test_fuzz's atol, per element: an
    # intermediate the kernel may have to compute below float32's normal range
    # (row_norm_atol), whose rounding later factors magnify.
    atol: torch.Tensor | float = 0.0


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------

# Row lengths: tiny, odd, around vector widths (8/16 floats, 32-byte blocks),
# and rows longer than 4096 (the single-pass / split-row boundaries).
ROW_SIZES = [1, 2, 3, 5, 7, 8, 9, 16, 31, 32, 33, 64, 127, 128, 769, 1024, 4097, 5125]
LEAD_SIZES = [0, 1, 2, 3, 5, 7]
MAX_NUMEL = 12_288
# One example in LONG_ROW_ODDS has one or four rows longer than any on-chip copy of
# a row: the CUDA backward norms hold 8192 elements per block, a block's row
# cache 128 KB (32768 float32), an sm_90 cluster 8 blocks' worth (rms_norm up
# to 131072), an Ascend 910B core's Unified Buffer 192 KB. Past each, another
# kernel runs (a cluster, a statistics and a column launch, split rows, many
# tiles), which rows of MAX_NUMEL never reach. At least 4 rows take sm_90's
# cluster kernels (kClusterMinRows).
LONG_ROW_SIZES = [8193, 16385, 32769, 65537, 131073]
LONG_LEAD_SIZES = [1, 4]
LONG_ROW_ODDS = 16
# Backward, at most this many elements: four rows reach the backward clusters
# (rows up to 65536) at 16385 and 32769, and the CUDA harness's LayerNorm
# backward of 4 x 131073 costs seconds an example (`make test`'s budget).
LONG_BACKWARD_MAX_NUMEL = 4 * 32769
# The elementwise ops (add, GELU, the GLUs), at most one long row: their kernels see
# a flat numel, whose grid-stride loops and tiles a single long row already
# spans; four cost their float64 models seconds an example (`make test`'s budget).
LONG_ELEMENTWISE_MAX_NUMEL = max(LONG_ROW_SIZES)


def special_values(dtype: torch.dtype, backward_primal: bool = False) -> dict[str, str]:
    """Special values of `dtype`, as strings for T(specials=...).

    Constraints (the float64 reference must be exact where the kernel may be):
    * float64 "near max" is 1e150 and its "big rows" 1e140: the float64
      reference squares these, and would itself overflow near finfo(float64).max.
    * backward_primal (the x/gate/up of a backward op): near-max values are
      max/8, so that dy * u * act'(g) (|dy| < 8, act' <= 1.13) cannot overflow in
      an intermediate product whose order the kernel chooses, where float64 does
      not. (rms_norm/layer_norm's x is excluded from this: their gradient needs
      x only through xhat = x * rstd <= sqrt(n), see op_cases/rms_norm.py.)
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
        # Distinct rows: two "mul"s on one row would stack the factor (1e140 *
        # 1e140 in float64), past what the float64 model can square.
        picked = draw(st.lists(st.integers(0, nrows - 1), max_size=min(2, nrows), unique=True))
        ops = []
        for r in picked:
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


# ---------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------


@st.composite
def row_shape(draw, max_norm_dims=1, min_ndim=0, backward=False, elementwise=False):
    """(leading dims, normalized dims) with at most MAX_NUMEL elements, or
    (one example in LONG_ROW_ODDS) a few long rows (one for `elementwise` ops)."""
    # The last value, not 0: Hypothesis shrinks a failure towards 0, the short rows.
    if draw(st.integers(0, LONG_ROW_ODDS - 1)) == LONG_ROW_ODDS - 1:
        n = draw(st.sampled_from(LONG_ROW_SIZES))
        most = min(LONG_BACKWARD_MAX_NUMEL if backward else math.inf,
                   LONG_ELEMENTWISE_MAX_NUMEL if elementwise else math.inf)
        leads = [s for s in LONG_LEAD_SIZES if s * n <= most]
        lead = [draw(st.sampled_from(leads))] if draw(st.booleans()) or min_ndim > 1 else []
        return tuple(lead), (n,)
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
def any_shape(draw, min_ndim=0, backward=False, elementwise=False):
    lead, norm = draw(row_shape(1, min_ndim, backward, elementwise))
    return lead + norm


def drop_dims(draw, shape):
    """A shape that broadcasts to `shape`: leading dims dropped, some dims 1."""
    keep = draw(st.integers(0, len(shape)))
    out = list(shape[len(shape) - keep:])
    for i in range(len(out)):
        if draw(st.integers(0, 2)) == 0:
            out[i] = 1
    return tuple(out)


# ---------------------------------------------------------------------------
# One example's drawing, as an op's fuzz_case sees it
# ---------------------------------------------------------------------------


@dataclass
class FuzzDraw:
    """Draws one call of `op` (its backward op if `backward`) for `target`
    ("cpu-<isa>", "cuda-<arch>", "ascend-<soc>"); the dtype is drawn already."""

    draw: object  # hypothesis's draw function
    op: str
    backward: bool
    target: str
    dtype: torch.dtype

    @property
    def kind(self) -> str:
        """"cpu", "cuda" or "ascend"."""
        return self.target.split("-", 1)[0]

    def spec(self, shape, **kwargs) -> TSpec:
        """A tensor of the example's dtype (tensor_spec's options)."""
        return self.draw(tensor_spec(shape, self.dtype, **kwargs))

    def grad_output(self, shape, **kwargs) -> TSpec:
        """An incoming gradient dy. Constraint: no near-max values (dy * w with
        |w| > 1, dy - <dy, y>, partial sums of near-max dy all overflow in an
        intermediate of the kernel's choosing where float64 does not) and |dy| < 8
        (scale <= 1: randn stays below ~6 for these sizes)."""
        return self.spec(shape, near_max=False, rows=False, scales=(1.0, 1e-3, 0.1), **kwargs)

    def pick(self, values):
        return self.draw(st.sampled_from(values))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def boolean(self) -> bool:
        return self.draw(st.booleans())

    def any_shape(self, min_ndim=0, elementwise=False) -> tuple:
        """A shape of any rank; `elementwise` ops (no rows) take at most one long row."""
        return self.draw(any_shape(min_ndim, self.backward, elementwise))

    def row_shape(self, max_norm_dims=1, min_ndim=0) -> tuple[tuple, tuple]:
        return self.draw(row_shape(max_norm_dims, min_ndim, self.backward))

    def broadcastable_to(self, shape) -> tuple:
        return drop_dims(self.draw, shape)

    def case(self, args: tuple, *, row_len: int = 1, kwargs: dict | None = None,
             grad_outputs: tuple | None = None) -> Case:
        return Case(self.op, self.backward, self.dtype, tuple(args), row_len, dict(kwargs or {}), grad_outputs)


# ---------------------------------------------------------------------------
# float64 models: helpers several ops' fuzz_model share
# ---------------------------------------------------------------------------
#
# Values come from torch's float64 ops, except for GELU, whose float64 torch
# formula 0.5 * x * (1 + erf(x / sqrt 2)) loses accuracy through cancellation
# for x < -5 (and tanh's 1 + tanh(u) likewise): there Phi(x) = erfc(-x / sqrt 2)
# / 2 and 1 + tanh(u) = 2 sigmoid(2u). Both forms give the same NaN/inf as
# torch's formula at +-inf.


def f64(t):
    """A built input as float64 (None stays None)."""
    return None if t is None else t.detach().double()


SQRT2 = math.sqrt(2.0)
K0 = math.sqrt(2.0 / math.pi)
K1 = 0.044715


def gelu_parts(x, approximate):
    """(f, f', |f| + |x f'| bound, |f'| bound with its condition) for GELU at x (float64)."""
    if approximate == "none":
        cdf = 0.5 * torch.special.erfc(-x / SQRT2)
        pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        f = x * cdf
        fp = cdf + x * pdf
        cond = 1 + x * x  # relative sensitivity of erfc(-x/sqrt2), exp(-x^2/2) to rounding of x
        fmag = mul0(x.abs() * (cdf + (x * pdf).abs()), cond)
        fpmag = mul0(cdf + (x * pdf).abs(), cond)
        return flush_parts(f, fp, fmag, fpmag)
    u = K0 * (x + K1 * x * x * x)
    du = K0 * (1 + 3 * K1 * x * x)
    s = torch.sigmoid(2 * u)  # (1 + tanh u) / 2
    f = x * s
    ds = mul0(s * (1 - s), 2 * du)  # d s / dx (0, not inf * 0, where sigmoid saturates)
    fp = s + x * ds
    k = (2 * x * du).abs()
    cond = 1 + mul0(1 - s, k)  # sensitivity of sigmoid(2u) to rounding of x
    fmag = mul0(x.abs() * (s + (x * ds).abs()), cond)
    fpmag = mul0(s, cond) + mul0((x * ds).abs(), 4 + k)
    return flush_parts(f, fp, fmag, fpmag)


def silu_parts(g):
    """The same four for SiLU."""
    s = torch.sigmoid(g)
    f = g * s
    fp = s * (1 + g * (1 - s))
    cond = 1 + mul0(1 - s, g.abs())
    return flush_parts(f, fp, mul0(g.abs() * s, cond) * 2, mul0(s * cond, cond))


# ---- subnormals flushed to zero ----
# A kernel may flush subnormals to zero: read a subnormal input as 0 (DAZ) and
# give 0 for a subnormal result or intermediate (FTZ). The Ascend vector units
# do; the CPU kernels and CUDA code built without -ftz do not. Where that
# changes an output -- an activation of 5e-40 times an up of 1e38, an inf dy
# times a derivative that underflows, a row of one subnormal with eps 0 -- the
# two are different answers, each right for its hardware. So for inputs of
# less than float64 each model is evaluated twice, as written and flushed
# (test_fuzz.check_case: the inputs flushed by flush_subnormals, the
# activations' values and derivatives by flush_parts while FLUSHED is set),
# and an output element may match either.
FLUSHED = False


def flush_subnormals(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t with its subnormal values of `dtype` read as zero (DAZ), signs kept."""
    tiny = torch.finfo(dtype).tiny
    return torch.where(t.abs() < tiny, t * 0, t)


def flush_parts(f, fp, fmag, fpmag):
    """An activation's (f, f', magnitudes), f and f' 0 near float32's smallest
    normal in the flushed model (the kernels compute 16-bit types in float32).
    Near: below tiny * 2^10, because f' is s + x s'(u) with a sigmoid (or
    exp(-x^2/2)) that underflows first, times |x| * 2 du/dx < 2^8 where it does
    (x ~ -10 for the tanh form, ~13 for erf): a kernel loses f' = -4e-36 there."""
    if not FLUSHED:
        return f, fp, fmag, fpmag
    tiny = torch.finfo(torch.float32).tiny * 2**10
    return (torch.where(f.abs() < tiny, f * 0, f), torch.where(fp.abs() < tiny, fp * 0, fp), fmag, fpmag)


def mul0(a, b):
    """a * b with 0 * inf = 0, either way round (a factor that is exactly 0 in
    float64 bounds nothing)."""
    product = a * b
    return torch.where((a == 0) | (b == 0), torch.zeros_like(product), product)


def nan_to_inf(m):
    """A magnitude that came out NaN bounds nothing: inf."""
    return torch.where(torch.isnan(m), torch.full_like(m, math.inf), m)


def row_norm_atol(x, dims, rstd, w, dtype):
    """The absolute error of a row norm's output (RMSNorm's xhat = x * rstd,
    LayerNorm's (x - mean) * rstd, then times the weight) that its magnitude
    does not bound: an xhat below float32's normal range, rounded there.

    * Every kernel (and torch) rounds xhat to float32 before the weight
      multiplies it. A subnormal xhat (a subnormal x in a row of larger ones)
      is rounded to 2^-150 absolute, which a near-max weight makes visible:
      2^-150 * |w|.
    * The overflow rescue (docs/ascend.md, rms_norm_custom; the CPU kernels'
      overflow_scale): a row whose sum of squares overflows float32 is
      normalized as x * s, s = 2^-e with max|x| s <= 1 and s >= 2^-126. An
      element far below the row's max is then subnormal in float32, rounded to
      2^-150 absolute, an error that rstd and the weight carry into the output:
      2^-150 / s * rstd * |w|, counted twice.

    0 for float64, which has no such rounding at these magnitudes."""
    if dtype == torch.float64 or x.numel() == 0 or not dims:
        return 0.0
    w_abs = w.abs() if w is not None else torch.ones((), dtype=x.dtype)
    subnormal_xhat = torch.where(torch.isfinite(w_abs), 2.0**-150 * w_abs, torch.zeros_like(w_abs))
    amax = x.abs().amax(dims, keepdim=True)
    overflows = torch.isfinite(amax) & ((x * x).sum(dims, keepdim=True) > torch.finfo(torch.float32).max)
    if not overflows.any():
        return subnormal_xhat
    s = torch.exp2(-torch.ceil(torch.log2(torch.where(overflows, amax, torch.ones_like(amax))))).clamp(min=2.0**-126)
    err = 2 * 2.0**-150 / s * rstd * w_abs
    return subnormal_xhat + torch.where(overflows & torch.isfinite(err), err, torch.zeros_like(err))


def rms_norm_atol(x, norm, w, eps, dtype):
    """row_norm_atol for an RMSNorm row (rms_norm's, fused_add_rms_norm's)."""
    dims = row_dims(x, norm)
    if x.numel() == 0 or not dims:
        return 0.0
    return row_norm_atol(x, dims, torch.rsqrt((x * x).mean(dims, keepdim=True) + eps), w, dtype)


def rms_norm_f64(x, norm, w, eps):
    """F.rms_norm of the float64 `x`, also for rows whose squares leave float64's
    range, where F.rms_norm itself gives inf (|x| ~1e-310 and eps 0: the mean
    square underflows to 0) or 0 (|x| ~1e200: it overflows). Such a row is first
    scaled by a power of two near its largest |x|, which is exact, and eps with
    it: x * rsqrt(mean(x^2) + eps) = (x/s) * rsqrt(mean((x/s)^2) + eps/s^2). The
    kernels rescale such rows too (kernel/cpu/norm.cpp), and a float64 input can
    hold them (the fuzz suite found -1e-310 with eps 0)."""
    dims = row_dims(x, norm)
    if x.numel() == 0 or not dims:
        return F.rms_norm(x, norm, w, eps)
    xs, s, rstd_s = rms_rows_scaled(x, dims, eps)
    y = xs * rstd_s
    return y * w if w is not None else y


def row_scale(x, dims, eps):
    """1, but on the rows whose squares leave float64's range (|x| ~1e-310 with
    eps 0, whose mean square or variance underflows to 0; |x| ~1e200), where it
    is a power of two near the row's largest |x|: dividing by it is exact, and a
    row norm of x with eps is that of x / s with eps / s^2. The kernels rescue
    such rows too (kernel/cpu/norm.cpp, rescue_scale)."""
    amax = x.abs().amax(dims, keepdim=True)
    finite = torch.isfinite(amax) & (amax > 0)
    # eps > 0 keeps a tiny row's mean square away from 0: only huge rows need it then.
    extreme = finite & ((amax > 2.0**500) | ((amax < 2.0**-500) & (eps == 0)))
    return torch.where(extreme, torch.exp2(torch.floor(torch.log2(torch.where(finite, amax, 1.0)))), 1.0)


def scaled_eps(eps, s):
    # s > 1 where eps > 0 scales it: eps / s^2, which may underflow to 0 harmlessly.
    return eps / (s * s) if eps else 0.0


def rms_rows_scaled(x, dims, eps):
    """(x / s, s, rsqrt(mean((x/s)^2) + eps/s^2)), s = row_scale: x * rstd =
    (x/s) * rstd_s, and rstd = rstd_s / s."""
    s = row_scale(x, dims, eps)
    xs = x / s
    return xs, s, torch.rsqrt((xs * xs).mean(dims, keepdim=True) + scaled_eps(eps, s))


def layer_rows_scaled(x, dims, eps):
    """(x/s - mean(x/s), s, rsqrt(var(x/s) + eps/s^2)), s = row_scale, the mean
    refined once: float64's sum of a constant float64 row is rounded (0.1 three
    times: 0.30000000000000004), which leaves its centred values +-1e-17 and,
    with eps 0, a finite gradient of 1e17 where the variance is 0 and torch and
    the kernels give NaN (0 / 0)."""
    s = row_scale(x, dims, eps)
    xs = x / s
    mean = xs.mean(dims, keepdim=True)
    mean = mean + (xs - mean).mean(dims, keepdim=True)
    xc = xs - mean
    return xc, s, torch.rsqrt((xc * xc).mean(dims, keepdim=True) + scaled_eps(eps, s))


def rms_norm_expect(x, norm, w, eps, dtype, n) -> Expect:
    """The Expect of an RMSNorm output (rms_norm's, fused_add_rms_norm's) of
    `x` in float64, with rms_norm_atol. A row whose squares underflow float32
    (eps 0, |x| below ~1e-19) is defined like any other: the kernels rescue it
    (kernel/cpu/norm.cpp, "rows whose squares underflow"); so is one whose
    squares leave float64's range (rms_norm_f64)."""
    e = rms_norm_f64(x, norm, w, eps)
    return Expect(e, e.abs(), n, atol=rms_norm_atol(x, norm, w, eps, dtype))


def row_dims(x, norm):
    return tuple(range(x.dim() - len(norm), x.dim()))


def rms_eps(eps, dtype):
    """The eps rms_norm uses for eps=None: the compute type's epsilon."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps if eps is None else eps


def norm_backward_model(centered: bool, g, x, norm, w, b, eps, n, *, bias: bool, dtype: torch.dtype,
                        grad_residual=None) -> list:
    """[grad_input, grad_weight, (grad_bias if `bias`)] of layer_norm (`centered`)
    or rms_norm, fused_add_rms_norm's with `grad_residual` added to its input's.

    Written out from xhat rather than by autograd through rsqrt: torch's float64
    autograd forms rstd**3, which underflows for rows of ~1e137 (the float64 "big
    rows") and leaves dy * rstd where the gradient is ~0."""
    dims = row_dims(x, norm)
    lead_dims = tuple(range(x.dim() - len(norm)))
    wa = w.abs() if w is not None else torch.ones((), dtype=torch.float64)
    wg = g * (w if w is not None else 1.0)
    if x.numel() == 0:
        gx, xhat, xm, rstd, mean_wg = torch.zeros_like(x), x, x, torch.zeros(()), 0
    elif centered:
        # xhat from the scaled rows (row_scale), as the forward models: with
        # eps 0, a row of ~1e-310 has variance 0 in float64, and (x - mean) *
        # rstd would be inf where it is at most sqrt(n).
        xc, s, rstd_s = layer_rows_scaled(x, dims, eps)
        rstd = rstd_s / s
        xhat = xc * rstd_s
        bracket = wg - wg.mean(dims, keepdim=True) - xhat * (wg * xhat).mean(dims, keepdim=True)
        xm = (x.abs() / s + (x.abs() / s).mean(dims, keepdim=True)) * rstd_s  # as layer_norm's forward model
        mean_wg = (wa * g.abs()).mean(dims, keepdim=True)
    else:
        # The same for RMSNorm (rms_norm_f64).
        xs, s, rstd_s = rms_rows_scaled(x, dims, eps)
        rstd = rstd_s / s
        xhat = xs * rstd_s
        bracket = wg - xhat * (wg * xhat).mean(dims, keepdim=True)
        xm = xhat.abs()
        mean_wg = 0
    if x.numel():
        # A bracket of 0 exactly is a zero gradient however large rstd is (an
        # RMSNorm row of one element: xhat = +-1, y = sign(x)); inf * 0 would say
        # NaN. The fuzz suite found it: x = -1e-310, eps 0, where the kernels give 0.
        gx = torch.where(bracket == 0, torch.zeros_like(bracket), rstd * bracket)
    gw = (g * xhat).sum(lead_dims) if lead_dims else g * xhat
    gb = g.sum(lead_dims) if lead_dims else g
    awg = wa * g.abs()
    mgx = rstd * (awg + mean_wg + xm * (awg * xm).mean(dims, keepdim=True)) if x.numel() else g.abs()
    if grad_residual is not None:
        gx = gx + grad_residual
        mgx = mgx + grad_residual.abs()
    if x.numel() and dims:
        # An inf in a row's g makes mean(g) and mean(g * xhat) inf: every
        # element of the row's gradient is then an inf - inf or an inf whose
        # grouping (g - mean(g) - xhat m, or g - (mean(g) + xhat m)) the kernel
        # chooses, and a centred value that is 0 exactly (a constant row) is
        # +-tiny after the kernel's rounded mean. NaN or inf, never finite.
        inf_g = torch.isinf(wg).any(dim=dims, keepdim=True)
        gx = torch.where(inf_g & ~torch.isnan(gx), torch.full_like(gx, math.nan), gx)
    out = [Expect(gx, nan_to_inf(mgx), n, nan_means_undefined=True)]
    if w is not None:
        mgw = (g.abs() * xm).sum(lead_dims) if lead_dims else g.abs() * xm
        out.append(Expect(gw, nan_to_inf(mgw), n, nan_means_undefined=True))
    else:
        out.append(None)
    if bias:
        out.append(Expect(gb, g.abs().sum(lead_dims) if lead_dims else g.abs(), n, nan_means_undefined=True)
                   if b is not None else None)
    return out


# ---------------------------------------------------------------------------
# Op families: what the GLUs (swiglu, geglu) and the row norms (rms_norm,
# fused_add_rms_norm, layer_norm) draw and model alike
# ---------------------------------------------------------------------------

# Activation inputs reach where the activations saturate and flush.
ACTIVATION_SCALES = (3.0, 1.0, 10.0, 3.0, 1e-3, 0.1, 1e3)


def glu_case(fz: FuzzDraw, approximate: bool) -> Case:
    """(gate, up[, approximate]) forward, (dy, gate, up[, approximate]) backward."""
    shape = fz.any_shape(elementwise=True)
    if not fz.backward:
        g = fz.spec(shape, scales=ACTIVATION_SCALES)
        u = fz.spec(shape)
        extra = (fz.pick(["none", "tanh"]),) if approximate else ()
        return fz.case((g, u) + extra)
    g = fz.spec(shape, backward_primal=True, scales=ACTIVATION_SCALES)
    u = fz.spec(shape, backward_primal=True)
    extra = (fz.pick(["none", "tanh"]),) if approximate else ()
    return fz.case((fz.grad_output(shape), g, u) + extra)


def glu_model(case: Case, args: tuple, activation) -> list[Expect]:
    """activation(gate, approximate) is gelu_parts or silu_parts (approximate:
    the call's last argument, None for swiglu). In the flushed model an
    activation below float32's normal range is 0, and 0 * inf with an inf up
    is NaN: the op may return it or the inf (nan_means_undefined)."""
    approximate = args[-1] if isinstance(args[-1], str) else None
    if not case.backward:
        g, u = f64(args[0]), f64(args[1])
        f, _, fm, _ = activation(g, approximate)
        return [Expect(f * u, mul0(fm, u.abs()), 1, nan_means_undefined=True,
                       atol=subnormal_activation_atol(g, f, u, case.dtype))]
    g, gate, up = f64(args[0]), f64(args[1]), f64(args[2])
    f, fp, fm, fpm = activation(gate, approximate)
    return [Expect(g * up * fp, mul0((g * up).abs(), fpm), 1, nan_means_undefined=True,
                   atol=subnormal_activation_atol(gate, fp, g * up, case.dtype)),
            Expect(g * f, mul0(g.abs(), fm), 1, nan_means_undefined=True)]


def subnormal_activation_atol(gate, value, factor, dtype):
    """The absolute error of an activation value or derivative (`value`, at
    `gate`) that a kernel computes below float32's normal range, times the
    `factor` that multiplies it (an up of 4e37 makes it visible). Its pieces
    (Phi, the pdf, sigmoid) are subnormal there, each rounded to 2^-150, and the
    pdf is multiplied by the gate: up to 2^-149 (2 + |gate|), several ulp of a
    value of 8e-44 (GELU' at -14.2; the CPU kernels were 8% off there, the
    Ascend ones 0.6%). Only where the value is below 2^-110, and 0 for float64."""
    if dtype == torch.float64:
        return 0.0
    err = mul0(factor.abs(), 2.0**-149 * (2 + gate.abs()))
    return torch.where((value.abs() < 2.0**-110) & torch.isfinite(err), err, torch.zeros_like(err))


def norm_case_inputs(fz: FuzzDraw):
    """(lead dims, normalized dims, x, weight or None, n) of a row norm's call: n
    is the row length forward, the longest reduction (a row, or a weight-gradient
    column) backward.

    NORM_X_FULL_RANGE: x keeps its full range (near max, big rows) backward too:
    the gradients need x only through xhat = x * rstd <= sqrt(n). Backward
    constraint: no near-max weights: w * dy overflows the compute type in the
    kernel's first product where the float64 gradient may not."""
    lead, norm = fz.row_shape(2)
    n = math.prod(norm)
    x = fz.spec(lead + norm, row_len=max(n, 1))
    if not fz.backward:
        w = fz.spec(norm, rows=False, scales=(0.5, 1.0, 2.0)) if fz.boolean() else None
        return lead, norm, x, w, n
    w = fz.spec(norm, rows=False, near_max=False, scales=(0.5, 1.0, 2.0)) if fz.boolean() else None
    return lead, norm, x, w, max(n, math.prod(lead), 1)
