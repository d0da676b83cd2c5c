"""The CUDA path of every op (glue -> launcher -> kernels of kernel/cuda/*.cu) on
the CPU harness (op_extension.cuda_sim), against the references of
tests/reference.py, and the harness's own checks on planted mistakes.

Forward results are compared with the reference at reference.TOLERANCES.
Backward results are compared with the CPU kernels' backward op
(torch.ops.custom.<op>_backward, itself held to the reference by test_ops.py)
at twice the backward tolerance: each is within one tolerance of the exact
gradient, so within two of each other.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from op_extension import ascend_sim, cuda_sim
from reference import DTYPE_IDS, DTYPES, backward_args, bits, build, reference, sample_params, tolerance

CUDA_KERNELS = Path(__file__).resolve().parent.parent / "op_extension" / "csrc" / "kernel" / "cuda"

dtype_params = pytest.mark.parametrize("dtype", DTYPES, ids=[DTYPE_IDS[d] for d in DTYPES])


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _twice(tol: dict) -> dict:
    return {k: 2 * v for k, v in tol.items()}


def _assert_close_all(actual, expected, tol, what):
    actual, expected = _tuple(actual), _tuple(expected)
    assert len(actual) == len(expected), what
    for k, (a, e) in enumerate(zip(actual, expected)):
        if e is None or (isinstance(e, torch.Tensor) and e.numel() == 0 and a is None):
            continue
        assert a.dtype == e.dtype and a.shape == e.shape, f"{what} output {k}"
        torch.testing.assert_close(a, e, **tol, msg=lambda m: f"{what} output {k}: {m}")


# ---------------------------------------------------------------------------
# Every op sample of the reference suite, every dtype
# ---------------------------------------------------------------------------


@dtype_params
@pytest.mark.parametrize("op,sample", sample_params(large=False))
def test_forward_matches_reference(op, sample, dtype):
    torch.manual_seed(0)
    args, kwargs = build(sample, dtype)
    outs = cuda_sim.run(op, *args, **kwargs)
    expected, _ = reference(op, args, kwargs)
    _assert_close_all(outs, expected, tolerance(dtype, op, "forward"), op)


@dtype_params
@pytest.mark.parametrize("op,sample", sample_params(large=False))
def test_backward_matches_cpu_kernels(op, sample, dtype):
    torch.manual_seed(0)
    args, kwargs = build(sample, dtype)
    name, bw_args = backward_args(op, args, kwargs)
    got = cuda_sim.run_backward(op, *bw_args)
    expected = getattr(torch.ops.custom, name)(*bw_args)
    _assert_close_all(got, expected, _twice(tolerance(dtype, op, "backward")), name)


# ---------------------------------------------------------------------------
# Elementwise kernels: odd sizes, one element, and base pointers off the 16-byte
# grid (a view at storage offset 1), which take the one-element-per-access path
# ---------------------------------------------------------------------------

SIZES = (1, 7, 8, 9, 255, 257, 1025, 4099)


def _tensor(n: int, dtype: torch.dtype, misaligned: bool) -> torch.Tensor:
    t = torch.randn(n + 1, dtype=torch.float64).to(dtype)
    return t[1:] if misaligned else t[:n].clone()


alignment_params = pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "offset1"])
size_params = pytest.mark.parametrize("n", SIZES)


@dtype_params
@alignment_params
@size_params
def test_elementwise_sizes_and_alignment(n, misaligned, dtype):
    torch.manual_seed(n)
    x, y, dy = (_tensor(n, dtype, misaligned) for _ in range(3))
    assert not misaligned or x.data_ptr() % 16 != 0
    tol, tol_bw = tolerance(dtype), _twice(tolerance(dtype, None, "backward"))
    custom = torch.ops.custom

    (ref,), _ = reference("add", (x, y, 0.5))
    torch.testing.assert_close(cuda_sim.run("add", x, y, 0.5), ref, **tol)
    for approximate in ("none", "tanh"):
        (ref,), _ = reference("gelu", (x, approximate))
        torch.testing.assert_close(cuda_sim.run("gelu", x, approximate), ref, **tolerance(dtype, "gelu"))
        torch.testing.assert_close(cuda_sim.run_backward("gelu", dy, x, approximate),
                                   custom.gelu_backward(dy, x, approximate), **tol_bw)
        (ref,), _ = reference("geglu", (x, y, approximate))
        torch.testing.assert_close(cuda_sim.run("geglu", x, y, approximate), ref, **tolerance(dtype, "geglu"))
        _assert_close_all(cuda_sim.run_backward("geglu", dy, x, y, approximate),
                          custom.geglu_backward(dy, x, y, approximate), tol_bw, "geglu_backward")
    (ref,), _ = reference("swiglu", (x, y))
    torch.testing.assert_close(cuda_sim.run("swiglu", x, y), ref, **tolerance(dtype, "swiglu"))
    _assert_close_all(cuda_sim.run_backward("swiglu", dy, x, y), custom.swiglu_backward(dy, x, y), tol_bw,
                      "swiglu_backward")


@dtype_params
@alignment_params
@pytest.mark.parametrize("cols", [1, 8, 33, 1000])
def test_row_kernels_misaligned_rows(cols, misaligned, dtype):
    """Norms and softmax with rows that start off the 16-byte grid."""
    torch.manual_seed(cols)
    rows = 3
    x = _tensor(rows * cols, dtype, misaligned).view(rows, cols)
    w = _tensor(cols, dtype, misaligned)
    (ref,), _ = reference("rms_norm", (x, [cols], w, 1e-6))
    torch.testing.assert_close(cuda_sim.run("rms_norm", x, [cols], w, 1e-6), ref, **tolerance(dtype, "rms_norm"))
    (ref,), _ = reference("layer_norm", (x, [cols], w, w, 1e-5))
    torch.testing.assert_close(cuda_sim.run("layer_norm", x, [cols], w, w, 1e-5), ref,
                               **tolerance(dtype, "layer_norm"))
    (ref,), _ = reference("softmax", (x, -1))
    torch.testing.assert_close(cuda_sim.run("softmax", x, -1), ref, **tolerance(dtype, "softmax"))


# ---------------------------------------------------------------------------
# Edges the samples above do not reach: rows longer than the row cache,
# backward on misaligned rows, add's 128-bit broadcast paths, and gradients
# summed over many blocks
# ---------------------------------------------------------------------------


def _row_cache_bytes() -> int:
    """The row cache of row_common.cuh on the harness (kRowCacheMaxBytes: both
    arches' opt-in maxima are larger): rows past it re-read global memory."""
    text = (CUDA_KERNELS / "row_common.cuh").read_text()
    m = re.search(r"kRowCacheMaxBytes = (\d+) \* 1024;", text)
    assert m, "kRowCacheMaxBytes not found in row_common.cuh"
    return int(m.group(1)) * 1024


def _offset1(t):
    """The same values at storage offset 1: 16-byte aligned rows become misaligned."""
    if not isinstance(t, torch.Tensor):
        return t
    buf = torch.empty(t.numel() + 1, dtype=t.dtype)
    buf[1:].copy_(t.reshape(-1))
    return buf[1:].view(t.shape)


def _row_op_args(op: str, rows: int, cols: int, dtype: torch.dtype):
    torch.manual_seed(cols)

    def m(*shape, scale=1.0, offset=0.0):
        return (torch.randn(shape, dtype=torch.float64) * scale + offset).to(dtype)

    w = m(cols, scale=0.2, offset=1.0)
    if op == "rms_norm":
        return (m(rows, cols), [cols], w, 1e-6)
    if op == "fused_add_rms_norm":
        return (m(rows, cols), m(rows, cols), [cols], w, 1e-6)
    if op == "layer_norm":
        return (m(rows, cols), [cols], w, m(cols), 1e-5)
    return (m(rows, cols, scale=3.0), -1)


def _without_affine(op: str, args: tuple) -> tuple:
    """The norm's arguments with weight (and bias) None."""
    if op == "rms_norm":
        return args[:2] + (None,) + args[3:]
    if op == "fused_add_rms_norm":
        return args[:3] + (None,) + args[4:]
    if op == "layer_norm":
        return args[:2] + (None, None) + args[4:]
    return args


def _check_row_op(op: str, rows: int, cols: int, dtype: torch.dtype, misaligned: bool = False,
                  affine_backward: bool = True):
    """Forward against the reference, backward against the CPU kernels; every
    tensor at storage offset 1 when `misaligned`. Without `affine_backward` the
    backward has no weight or bias, so no weight gradient."""
    args = _row_op_args(op, rows, cols, dtype)
    name, bw_args = backward_args(op, args if affine_backward else _without_affine(op, args))
    if misaligned:
        args, bw_args = tuple(map(_offset1, args)), tuple(map(_offset1, bw_args))
        assert all(a.data_ptr() % 16 != 0 for a in args + bw_args if isinstance(a, torch.Tensor))
    what = f"{op} {rows}x{cols} {DTYPE_IDS[dtype]}{' offset1' if misaligned else ''}"
    expected, _ = reference(op, args)
    _assert_close_all(cuda_sim.run(op, *args), expected, tolerance(dtype, op, "forward"), what)
    _assert_close_all(cuda_sim.run_backward(op, *bw_args), getattr(torch.ops.custom, name)(*bw_args),
                      _twice(tolerance(dtype, op, "backward")), f"{what} {name}")


ROW_OPS = ("rms_norm", "fused_add_rms_norm", "layer_norm", "softmax")


@dtype_params
@pytest.mark.parametrize("shape", ["odd", "vector"])
@pytest.mark.parametrize("op", ROW_OPS)
def test_row_kernels_rows_longer_than_the_cache(op, shape, dtype):
    """Rows just past what the forward kernels cache in shared memory (2x for the
    backward ones, which cache two arrays): the kernels re-read global memory.
    "odd": the one-element path; "vector": a multiple of 8 elements, the 128-bit
    path. One row: a block of 1024 threads per row is what costs here. The
    forward has weight and bias; the backward norms (their long-row launches)
    have them on the 128-bit path and not on the other, where the weight is 1
    and no weight gradient is written."""
    per_row = _row_cache_bytes() // dtype.itemsize
    cols = per_row + (1 if shape == "odd" else 8)
    assert cols * dtype.itemsize > _row_cache_bytes()
    _check_row_op(op, 1, cols, dtype, affine_backward=shape == "vector")


@dtype_params
@pytest.mark.parametrize("cols", [8, 72])
@pytest.mark.parametrize("op", ROW_OPS)
def test_row_kernels_misaligned_forward_and_backward(op, cols, dtype):
    """Every pointer at storage offset 1 (forward and backward), with row lengths
    that would take the 128-bit path if aligned; test_row_kernels_misaligned_rows
    covers the forward of the unfused ops at more lengths."""
    _check_row_op(op, 3, cols, dtype, misaligned=True)


ADD_BROADCASTS = {
    # (input shape, other shape): which kernel and path they take when aligned.
    # add_row_vector_kernel: one operand a row vector, the other dense; chunks of 16 rows.
    "row_vector_128bit": ((3, 64), (64,)),
    "row_vector_chunks": ((37, 2, 72), (72,)),  # 74 rows: 5 chunks, the last of 10 rows
    "row_vector_size1_dims": ((1, 40, 1, 24), (1, 1, 1, 24)),
    # add_kernel: the other patterns.
    "column_splat_128bit": ((4, 64), (4, 1)),  # other broadcast along the run: one load, splat
    "leading_dims_128bit": ((2, 3, 64), (3, 64)),
    "input_broadcast_128bit": ((64,), (5, 64)),
    "odd_inner": ((3, 65), (65,)),  # not a multiple of the vector: one element at a time
}


@dtype_params
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "offset1"])
@pytest.mark.parametrize("case", ADD_BROADCASTS)
def test_add_broadcast_paths(case, misaligned, dtype):
    """add with broadcasting through add_row_vector_kernel and add_kernel's 128-bit
    paths (a dense or a splat operand) and, at storage offset 1, their one-element
    fallbacks; forward
    against the reference, backward (the sums over broadcast dims) against the
    CPU kernels."""
    torch.manual_seed(len(case))
    a_shape, b_shape = ADD_BROADCASTS[case]
    x = torch.randn(a_shape, dtype=torch.float64).to(dtype)
    y = torch.randn(b_shape, dtype=torch.float64).to(dtype)
    if misaligned:
        x, y = _offset1(x), _offset1(y)
    (ref,), _ = reference("add", (x, y, 0.5))
    torch.testing.assert_close(cuda_sim.run("add", x, y, 0.5), ref, **tolerance(dtype))
    name, bw_args = backward_args("add", (x, y, 0.5))
    if misaligned:
        bw_args = tuple(map(_offset1, bw_args))
    _assert_close_all(cuda_sim.run_backward("add", *bw_args), torch.ops.custom.add_backward(*bw_args),
                      _twice(tolerance(dtype, "add", "backward")), name)


def test_block_order_changes_an_order_dependent_sum():
    """The harness's reverse block order does change the bits of a kernel whose
    result depends on the order of its blocks (a planted float sum across blocks
    in block order): the bit-identity test below can fail."""
    assert cuda_sim._order_dependent_sum("linear") == 1.0
    assert cuda_sim._order_dependent_sum("reverse") == 0.0


# The two accumulation types: 16-bit gradients are the float sums, rounded once.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "layer_norm"])
def test_weight_gradients_bit_identical_in_any_block_order(op, dtype):
    """Weight (and bias) gradients are sums over rows taken by many blocks: 260
    rows make 130 groups of 2 rows (past 256 rows a group has several), one
    block each. On a GPU blocks run in any
    order, so the sums must not depend on it: a second run with the blocks in
    reverse order gives the same bits; and the values match the CPU kernels."""
    args = _row_op_args(op, 260, 40, dtype)
    name, bw_args = backward_args(op, args)
    first = cuda_sim.run_backward(op, *bw_args)
    reverse = cuda_sim.run_backward(op, *bw_args, block_order="reverse")
    # rms_norm and fused_add_rms_norm: (dx, dw); layer_norm: (dx, dw, db).
    for k in {"rms_norm": [1], "fused_add_rms_norm": [1], "layer_norm": [1, 2]}[op]:
        assert torch.equal(bits(first[k]), bits(reverse[k])), f"{name} output {k}: differs in reverse block order"
    _assert_close_all(first, getattr(torch.ops.custom, name)(*bw_args), _twice(tolerance(dtype, op, "backward")),
                      name)


def _check_norm_forward_against_float64(op, x, w, b):
    """The forward norm `op` of float32 rows x (weight w, and bias b for LayerNorm;
    fused_add_rms_norm with a zero residual, whose residual_out must be x) on the
    harness: finite, and within 1e-5 of float64 torch."""
    cols = x.shape[-1]
    x64, w64, b64 = x.double(), w.double(), b.double()
    if op == "layer_norm":
        got = cuda_sim.run(op, x, [cols], w, b, 1e-5)
        expected = F.layer_norm(x64, [cols], w64, b64, 1e-5)
    elif op == "rms_norm":
        got = cuda_sim.run(op, x, [cols], w, 1e-6)
        expected = F.rms_norm(x64, [cols], w64, 1e-6)
    else:
        got, residual_out = cuda_sim.run(op, x, torch.zeros_like(x), [cols], w, 1e-6)
        assert torch.equal(residual_out, x)
        expected = F.rms_norm(x64, [cols], w64, 1e-6)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "layer_norm"])
def test_forward_norms_take_rows_in_steps(op):
    """The forward norms take up to 4 rows at a time (a step), with at most 256
    blocks when the weight is held, so 1031 rows make blocks of several steps and
    a last step of 3 rows. Within one step, one row whose squares overflow float
    and one constant row far from 0 (LayerNorm refines its mean) take their own
    paths while their neighbours do not: every row matches float64 (the constant
    row's output is exactly the bias, where an unrefined mean gives ~0.02 off)."""
    torch.manual_seed(0)
    rows, cols = 1031, 24
    x = torch.randn(rows, cols, dtype=torch.float64)
    x[1029, 0] = 3e38  # the last step: rows 1028..1030
    x[1030] = 1000.1  # a float sum of 24 of them is off by ulps: LayerNorm's mean is refined
    x = x.float()
    w, b = torch.randn(cols).float(), torch.randn(cols).float()
    _check_norm_forward_against_float64(op, x, w, b)


@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "layer_norm"])
def test_forward_norms_take_uncached_rows_in_steps(op):
    """Rows too long for the row cache are also taken 4 at a time (the weight is
    read once per step): 5 rows make a step of 4 and one of 1; within the first
    step one row overflows float's squares and one is constant far from 0, and
    every row still matches float64."""
    torch.manual_seed(1)
    cols = _row_cache_bytes() // 4 + 8  # float32: past the cache, the 128-bit path
    x = torch.randn(5, cols, dtype=torch.float64)
    x[1, 3] = 3e38
    x[2] = 1000.1
    x = x.float()
    w, b = torch.randn(cols).float(), torch.randn(cols).float()
    _check_norm_forward_against_float64(op, x, w, b)


@pytest.mark.parametrize("extra", [8, 9], ids=["packs", "odd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
def test_layer_norm_of_uncached_rows_takes_mean_and_variance_in_one_pass(dtype, extra):
    """Rows past the row cache take their mean and variance in one pass (each
    thread folds in a pack at a time, the block combines the threads' counts,
    means and squared deviations), on rows hard for a variance: a large mean
    over a unit spread (refined, as a cached row would be), a mean
    14 standard deviations out (just short of refining: the one-pass variance is
    used as is; E[x^2] - mean^2 in float came out 2e-5 off there in a
    simulation, past the tolerance), a ramp (its spread is all between packs and between threads),
    a constant row (variance 0: the output is exactly the bias, no NaN) and one
    outlier; on the 128-bit path (its packs not a multiple of the block) and
    the scalar one (an odd row); 5 rows: a step of 4 and one of 1. Against
    float64 torch on the same inputs, where float's own rounding of a mean of
    1e4 (a few ulp of it, carried by rstd) is the only slack added."""
    torch.manual_seed(2)
    cols = _row_cache_bytes() // dtype.itemsize + extra
    spread = 200.0 if dtype == torch.bfloat16 else 1.0  # bfloat16's spacing at 1e4 is 64
    noise = torch.randn(5, cols, dtype=torch.float64)
    x = torch.stack([1e4 + spread * noise[0],
                     14.0 + noise[1],
                     torch.linspace(-3, 3, cols, dtype=torch.float64) + 0.01 * noise[2],
                     torch.full((cols,), 0.5, dtype=torch.float64),
                     noise[4]])
    x[4, cols // 3] = 1e4
    x = x.to(dtype)
    w = (1.0 + 0.2 * torch.randn(cols, dtype=torch.float64)).to(dtype)
    b = torch.randn(cols, dtype=torch.float64).to(dtype)
    got = cuda_sim.run("layer_norm", x, [cols], w, b, 1e-5)
    x64 = x.double()
    expected = F.layer_norm(x64, [cols], w.double(), b.double(), 1e-5)
    assert torch.isfinite(got).all()
    assert torch.equal(got[3], b), "a constant row's output is its bias"
    tol = tolerance(dtype, "layer_norm", "forward")
    if dtype == torch.float32:
        tol = {"atol": 1e-5, "rtol": 1e-5}
    # |mean| * eps * rstd * |w|: the mean's own rounding in the accumulator type
    acc_eps = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    rstd = torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5)
    slack = 4 * acc_eps * x64.mean(-1).abs() * rstd * w.double().abs().max()
    for r in range(x.shape[0]):
        torch.testing.assert_close(got[r].double(), expected[r], rtol=tol["rtol"], atol=tol["atol"] + slack[r].item(),
                                   msg=lambda m, r=r: f"row {r}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_softmax_of_uncached_rows_takes_max_and_sum_in_one_pass(dtype):
    """Rows past the row cache take the max and the sum in one pass, each thread
    rescaling its sum when its running max grows: a rising row (the max grows at
    every pack), a row masked to -inf but for its end, a row of -inf (0/0: NaN,
    as torch), rows holding +inf or NaN (NaN), a row with one dominant value;
    against float64 torch."""
    cols = _row_cache_bytes() // dtype.itemsize + 8
    rows = [torch.linspace(-30, 30, cols, dtype=torch.float64),
            torch.cat([torch.full((cols - 100,), float("-inf"), dtype=torch.float64),
                       torch.randn(100, dtype=torch.float64)]),
            torch.full((cols,), float("-inf"), dtype=torch.float64),
            torch.randn(cols, dtype=torch.float64),
            torch.randn(cols, dtype=torch.float64),
            torch.randn(cols, dtype=torch.float64)]
    rows[4][cols // 2] = float("inf")
    rows[5][7] = float("nan")
    dominant = torch.randn(cols, dtype=torch.float64)
    dominant[cols - 3] = 80.0
    x = torch.stack(rows + [dominant]).to(dtype)
    got = cuda_sim.run("softmax", x, -1)
    expected = torch.softmax(x.double(), -1)
    assert torch.isnan(got[2:3]).all() and torch.isnan(got[4:6]).all()
    torch.testing.assert_close(got.double(), expected, equal_nan=True, **tolerance(dtype, "softmax", "forward"))


def test_special_values_follow_the_cpu_kernels():
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e30, -1e30, 3.0])
    for approximate in ("none", "tanh"):
        torch.testing.assert_close(cuda_sim.run("gelu", x, approximate), torch.ops.custom.gelu(x, approximate),
                                   equal_nan=True)
    torch.testing.assert_close(cuda_sim.run("swiglu", x, x), torch.ops.custom.swiglu(x, x), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_16_bit_results_round_to_nearest_even(dtype):
    """add in float, rounded once: ties (exactly between two 16-bit values) go to the even one,
    as torch's own float -> 16-bit conversion does, for normal and subnormal results."""
    tiny = torch.finfo(dtype).smallest_normal
    base = torch.tensor([1.0, 3.0, -5.0, 1000.0, tiny, tiny / 8, 2 * tiny], dtype=torch.float32)
    eps = torch.finfo(dtype).eps
    for frac in (0.5, 1.5, 0.25, 0.75):
        step = base.abs() * eps * frac
        step[4:] = torch.finfo(dtype).smallest_normal * eps * frac  # subnormal spacing
        a, b = base.to(dtype), step.to(dtype)
        expected = (a.float() + b.float()).to(dtype)  # torch rounds to nearest even
        torch.testing.assert_close(cuda_sim.run("add", a, b), expected, atol=0, rtol=0)


def test_bad_input_raises_the_op_message():
    with pytest.raises(TypeError, match="custom::gelu"):
        cuda_sim.run("gelu", torch.ones(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="no CUDA kernel"):
        cuda_sim.run("matmul", torch.ones(3))
    with pytest.raises(ValueError, match="sm_80 or sm_90"):
        cuda_sim.run("gelu", torch.ones(3), arch="sm_70")
    with pytest.raises(ValueError, match="block_order must be linear or reverse"):
        cuda_sim.run("gelu", torch.ones(3), block_order="random")


def test_arguments_of_the_wrong_type_are_named_before_any_conversion():
    # rms_norm's backward converts eps=None from its input's dtype: given the
    # forward's arguments, it used to fail inside that conversion, naming nothing.
    x, w = torch.randn(4, 8), torch.randn(8)
    with pytest.raises(TypeError, match="cuda_sim: rms_norm_backward's argument 'input' must be Tensor, got list"):
        cuda_sim.traffic("rms_norm", x, [8], w, None, backward=True)
    with pytest.raises(TypeError, match="ascend_sim: rms_norm's argument 'eps' must be Optional\\[float\\], got str"):
        ascend_sim.run("rms_norm", x, [8], w, "1e-6")
    with pytest.raises(TypeError, match="cuda_sim: rms_norm_backward is missing argument 'normalized_shape'"):
        cuda_sim.run_backward("rms_norm", x, x)
    # What the dispatcher's binding takes, these take: a tuple or a torch.Size for
    # an int list, an int for a float.
    expected = torch.ops.custom.rms_norm(x, [8], w, 1.0)
    for shape in ((8,), torch.Size([8])):
        torch.testing.assert_close(cuda_sim.run("rms_norm", x, shape, w, 1), expected)


# ---------------------------------------------------------------------------
# The harness's reports, one planted mistake each (csrc/cuda_sim/misuse)
# ---------------------------------------------------------------------------


def test_clean_kernel_passes():
    cuda_sim._run_misuse("clean")


MISUSE = {
    "barrier_after_exit": r"barrier_after_exit_kernel: block \(0,0,0\) thread \(0,0,0\): __syncthreads at "
                          r".*misuse_kernels.cpp:\d+ is not reached by block \(0,0,0\) thread \(5,0,0\), which has exited",
    "barrier_in_branch": r"__syncthreads at .*:\d+ is not reached by block \(0,0,0\) thread \(1,0,0\), "
                         r"which waits at __syncthreads at .*:\d+",
    "shuffle_mask_leaves_out_caller": r"thread \(0,0,0\): __shfl_xor_sync with mask 0xfffffffe called by lane 0, "
                                      r"which the mask leaves out",
    "shuffle_lane_absent": r"__shfl_down_sync with mask 0xffffffff names lane 16, which does not take part "
                           r"\(it has exited\)",
    "shuffle_lane_beyond_warp": r"__shfl_down_sync with mask 0xffffffff names lanes beyond the 20 this warp has",
    "shuffle_lane_at_barrier": r"names lane 3, which does not take part \(it waits at __syncthreads\)",
    "too_many_threads": r"empty_kernel: invalid launch: more than 1024 threads per block.*block \(32,33,1\)",
    "too_much_shared": r"invalid launch: dynamic shared memory beyond the 48 KiB .* on sm_90.*49153 bytes",
    "shared_past_opt_in": r"shared_last_byte_kernel: invalid launch: dynamic shared memory beyond the 65536 bytes the "
                          r"kernel was given with cudaFuncSetAttribute.*65537 bytes",
    "opt_in_past_arch_max": r"shared_last_byte_kernel: cudaFuncSetAttribute\(MaxDynamicSharedMemorySize, 204800\) "
                            r"beyond the opt-in maximum of sm_80 \(166912 bytes\)",
    "empty_grid": r"invalid launch: an empty grid or block \(grid \(0,1,1\)",
    "static_shared_race": r"thread \(1,0,0\): shared memory race \(read after write\) at byte offset 0 of static "
                          r"__shared__ op_ext::cuda::misuse::static_shared_race_kernel\(float\*\)::total with "
                          r"block \(0,0,0\) thread \(0,0,0\)",
    "shared_out_of_bounds": r"thread \(31,0,0\): dynamic shared memory write out of bounds: byte offset 128 of a "
                            r"128-byte allocation",
    # Named as the array the index belongs to, not the one next to it.
    "static_shared_past_end": r"static_shared_past_end_kernel: block \(0,0,0\) thread \(31,0,0\): static __shared__ "
                              r"op_ext::cuda::misuse::static_shared_past_end_kernel\(float\*\)::first write out of "
                              r"bounds: byte offset 128 of a 128-byte array",
    "static_shared_before_start": r"static_shared_before_start_kernel: block \(0,0,0\) thread \(0,0,0\): static "
                                  r"__shared__ op_ext::cuda::misuse::static_shared_before_start_kernel\(float\*\)::slots "
                                  r"read out of bounds: byte offset -4 of a 128-byte array",
    # Threads run in order: thread 0 reads slot 1 before thread 1 writes it.
    "shared_read_after_write": r"thread \(1,0,0\): shared memory race \(write after read\) at byte offset 4 of "
                               r"dynamic shared memory with block \(0,0,0\) thread \(0,0,0\), no __syncthreads between",
    "shared_write_after_read": r"thread \(1,0,0\): shared memory race \(write after read\) at byte offset 0 of "
                               r"dynamic shared memory with block \(0,0,0\) thread \(0,0,0\)",
    "shared_write_after_write": r"thread \(1,0,0\): shared memory race \(write after write\) at byte offset 0 of "
                                r"dynamic shared memory with block \(0,0,0\) thread \(0,0,0\)",
    # Through the kernels' helpers, which check every byte of an access: the
    # first two pass a check of the first byte (the fault path's).
    "pack_past_the_end": r"pack_past_the_end_kernel: block \(0,0,0\) thread \(7,0,0\): dynamic shared memory write "
                         r"out of bounds: byte offset 120 of a 120-byte allocation",
    "race_on_a_later_byte": r"race_on_a_later_byte_kernel: block \(0,0,0\) thread \(1,0,0\): shared memory race "
                            r"\(read after write\) at byte offset 12 of dynamic shared memory with block \(0,0,0\) "
                            r"thread \(0,0,0\), no __syncthreads between",
    "helper_static_past_end": r"thread \(31,0,0\): static __shared__ op_ext::cuda::misuse::helper_static_past_end_kernel"
                              r"\(float\*\)::cache write out of bounds: byte offset 128 of a 128-byte array",
    "misaligned_pack": r"misaligned_pack_kernel: block \(0,0,0\) thread \(0,0,0\): misaligned 16-byte load at "
                       r"0x[0-9a-f]*[48c] \(the GPU needs 16-byte alignment\)",
    "load_shared_of_global": r"load_shared_of_global_kernel: block \(0,0,0\) thread \(0,0,0\): load_shared of 4 bytes "
                             r"at 0x[0-9a-f]+, which is not shared memory",
    # The global racecheck: two threads' accesses of one byte, one a write, that
    # no barrier orders. Blocks run in order, so the later block reports.
    "global_blocks_write_one_element": r"global_blocks_write_one_element_kernel: block \(1,0,0\) thread \(0,0,0\): "
                                       r"global memory race \(write after write\) at 0x[0-9a-f]+ with block \(0,0,0\) "
                                       r"thread \(0,0,0\), another block: nothing orders two blocks of a launch",
    "global_block_reads_another_blocks_partial": r"global_block_reads_another_blocks_partial_kernel: block \(2,0,0\) "
                                                 r"thread \(0,0,0\): global memory race \(read after write\) at "
                                                 r"0x[0-9a-f]+ with block \(0,0,0\) thread \(0,0,0\), another block",
    "global_read_after_write_in_block": r"global_read_after_write_in_block_kernel: block \(0,0,0\) thread \(1,0,0\): "
                                        r"global memory race \(read after write\) at 0x[0-9a-f]+ with block \(0,0,0\) "
                                        r"thread \(0,0,0\), no __syncthreads between",
    # Threads run in order: thread 0 reads element 1 before thread 1 writes it.
    "global_write_after_read_in_block": r"global_write_after_read_in_block_kernel: block \(0,0,0\) thread \(1,0,0\): "
                                        r"global memory race \(write after read\) at 0x[0-9a-f]+ with block \(0,0,0\) "
                                        r"thread \(0,0,0\), no __syncthreads between",
    # initcheck: a kernel reads an allocation made for the call that no kernel
    # wrote; the fmaxf it feeds drops the NaN bits, so only the read shows it.
    "global_uninitialized_read": r"global_max_of_buffer_kernel: block \(0,0,0\) thread \(0,0,0\): read of "
                                 r"uninitialized global memory \(initcheck\) at byte offset 0 of a 128-byte "
                                 r"workspace, which no kernel has written",
}


@pytest.mark.parametrize("name", MISUSE)
def test_misuse_is_reported(name):
    with pytest.raises(RuntimeError, match=MISUSE[name]):
        cuda_sim._run_misuse(name, arch="sm_90" if name == "too_much_shared" else "sm_80")
    cuda_sim._run_misuse("clean")  # a report leaves the harness usable


@pytest.mark.parametrize("block_order", cuda_sim.BLOCK_ORDERS)
def test_global_accesses_ordered_by_barriers_pass(block_order):
    """The control of the global racecheck: the in-place shift of
    global_write_after_read_in_block, with a __syncthreads between the reads and
    the writes and another before reading a neighbour's result, each block on
    its own slice; the host checks the values."""
    cuda_sim._run_misuse("global_clean", block_order=block_order)


def test_a_workspace_a_kernel_wrote_is_initialized():
    """The control of initcheck: the same buffer, written by a kernel in an
    earlier launch, then read in full."""
    cuda_sim._run_misuse("global_initialized_read")


def test_the_launchers_workspaces_are_tracked_by_initcheck():
    """The glue registers each launcher's workspace with initcheck: rms_norm's
    backward (partial sums of the weight gradient, then their sum in a second
    launch) registers its workspace's bytes and reads only what its first
    kernel wrote (every op's workspace is held to that in the tests above)."""
    before = cuda_sim._cuda_sim.uninitialized_bytes_tracked()
    x, w, dy = torch.randn(600, 256), torch.ones(256), torch.randn(600, 256)
    cuda_sim.run_backward("rms_norm", dy, x, [256], w, 1e-6)
    grown = cuda_sim._cuda_sim.uninitialized_bytes_tracked() - before
    assert grown >= 256 * 4  # at least one float partial row of the weight gradient


def test_the_helpers_check_shared_memory_without_a_fault():
    """The kernels' helpers (load_shared, store_shared, the packs) check shared
    memory in the call; the same kernel indexing its arrays directly is checked
    through a page fault per access, which shared_fault_count() counts."""
    before = cuda_sim.shared_fault_count()
    cuda_sim._run_misuse("clean_helpers")
    assert cuda_sim.shared_fault_count() == before
    cuda_sim._run_misuse("clean")
    assert cuda_sim.shared_fault_count() > before


_FORKED_VIEWS = """
import os, sys
from op_extension import cuda_sim

def views():
    # The memfds behind the static __shared__ arrays' pages (the dynamic windows
    # are unmapped after each launch): their inodes.
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[4] for line in maps if "cuda_sim shared memory" in line})

cuda_sim._run_misuse("clean")
parent = views()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    cuda_sim._run_misuse("clean")  # the child runs kernels on its own views
    os.write(write, " ".join(views()).encode())
    os._exit(0)
os.close(write)
child = os.read(read, 1 << 16).decode().split()
os.waitpid(pid, 0)
cuda_sim._run_misuse("clean")
print(len(parent), len(child), len(set(parent) & set(child)))
"""


def test_a_forked_child_gets_shared_arrays_of_its_own():
    """The static __shared__ arrays' pages are a memfd mapped twice (the helpers'
    unwatched view): a forked child would share them with its parent, so it
    maps views of its own at the fork."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _FORKED_VIEWS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    parent, child, shared = map(int, done.stdout.split())
    assert parent > 0 and child == parent and shared == 0, done.stdout


def test_a_kernel_that_opted_in_may_use_its_shared_memory():
    """The control of shared_past_opt_in: the op kernels' launch helper opts the
    kernel into the bytes it launches with (100 KiB here, past the 48 KiB
    default), and the launch then runs and writes its last byte."""
    for arch in ("sm_80", "sm_90"):
        cuda_sim._run_misuse("opted_in_shared", arch=arch)


# ---- the switch between a block's threads -------------------------------------------------------


def _expected_fiber_switch() -> str:
    """The harness's own switch of stacks on x86-64 Linux, unless asked for
    ucontext or the process runs with a CET shadow stack (csrc/cuda_sim/harness.cpp)."""
    import os
    import platform
    if os.environ.get("OP_EXT_CUDA_SIM_SWITCH") == "ucontext":
        return "ucontext"
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return "ucontext"
    status = Path("/proc/self/status").read_text()
    features = re.search(r"^x86_Thread_features:\s*(.*)$", status, re.M)
    return "ucontext" if features and "shstk" in features.group(1).split() else "stack"


def test_the_harness_switches_threads_as_the_platform_allows():
    assert cuda_sim._cuda_sim.fiber_switch() == _expected_fiber_switch()


def test_the_ucontext_switch_runs_the_same_kernels_and_checks():
    """OP_EXT_CUDA_SIM_SWITCH=ucontext, the switch of platforms without the
    harness's own: in a process of its own, the misuse reports (a report leaves
    a thread from the helper or from the page-fault handler), their clean
    controls, the fault path, a forked child, the block orders and the
    kernels of every op forward and backward, against the references."""
    import os
    import subprocess
    import sys
    selected = ("switches_threads or misuse or clean_kernel or global_accesses or helpers_check or forked or "
                "opted_in or bit_identical or (matches and f32)")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", selected, __file__],
                          cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OP_EXT_CUDA_SIM_SWITCH": "ucontext"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= 200, done.stdout[-2000:]
