"""CUDA-only behaviour of the custom ops: streams, CUDA graphs, the scalar
(misaligned) and uncached (long-row) kernel paths, deterministic parameter
gradients, 64-bit indexing and torch.compile(mode="reduce-overhead").

Collected only where torch sees a GPU (tests/conftest.py); everything that does
not need one runs on every device in the other test files.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from op_extension import ops
from reference import acc_dtype, default_rms_norm_eps, reference, tolerance

if not torch.cuda.is_available():  # only when asked for by path: conftest does not collect it
    pytest.skip("no CUDA GPU: tests/test_cuda.py needs one", allow_module_level=True)

custom = torch.ops.custom
CUDA = "cuda"


def _randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, dtype=acc_dtype(dtype), device=CUDA) * scale).to(dtype)


def _weight(n, dtype=torch.float32):
    return (1 + 0.2 * torch.randn(n, dtype=acc_dtype(dtype), device=CUDA)).to(dtype)


# Every op, forward and backward, as (name, inputs builder, call). The builders
# make CUDA tensors; calls take them positionally.
def _cases(rows=37, cols=1000, dtype=torch.float32):
    x = lambda: _randn(rows, cols, dtype=dtype)  # noqa: E731
    w = lambda: _weight(cols, dtype)  # noqa: E731
    return {
        "add": (lambda: (x(), _randn(cols, dtype=dtype)), lambda a, b: ops.add(a, b, alpha=0.5)),
        "add_backward": (lambda: (x(),), lambda g: custom.add_backward(g, [cols], 2.0)),
        "gelu": (lambda: (x(),), lambda a: ops.gelu(a, "tanh")),
        "gelu_backward": (lambda: (x(), x()), lambda g, a: custom.gelu_backward(g, a, "none")),
        "swiglu": (lambda: (x(), x()), ops.swiglu),
        "swiglu_backward": (lambda: (x(), x(), x()), custom.swiglu_backward),
        "geglu": (lambda: (x(), x()), lambda g, u: ops.geglu(g, u, "none")),
        "geglu_backward": (lambda: (x(), x(), x()), lambda dy, g, u: custom.geglu_backward(dy, g, u, "tanh")),
        "rms_norm": (lambda: (x(), w()), lambda a, b: ops.rms_norm(a, [cols], b, 1e-6)),
        "rms_norm_backward": (lambda: (x(), x(), w()), lambda g, a, b: custom.rms_norm_backward(g, a, [cols], b, 1e-6)),
        "fused_add_rms_norm": (lambda: (x(), x(), w()), lambda a, r, b: ops.fused_add_rms_norm(a, r, [cols], b)),
        "fused_add_rms_norm_backward": (
            lambda: (x(), x(), x(), w()),
            lambda g, gr, z, b: custom.fused_add_rms_norm_backward(g, gr, z, [cols], b, None),
        ),
        "layer_norm": (lambda: (x(), w(), w()), lambda a, b, c: ops.layer_norm(a, [cols], b, c)),
        "layer_norm_backward": (
            lambda: (x(), x(), w(), w()),
            lambda g, a, b, c: custom.layer_norm_backward(g, a, [cols], b, c, 1e-5),
        ),
        "softmax": (lambda: (x(),), lambda a: ops.softmax(a, -1)),
        "softmax_dim0": (lambda: (x(),), lambda a: ops.softmax(a, 0)),
        "softmax_backward": (lambda: (x(), torch.softmax(x(), -1)), lambda g, y: custom.softmax_backward(g, y, -1)),
    }


CASE_NAMES = list(_cases())


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


# ---------------------------------------------------------------------------
# Streams and CUDA graphs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_NAMES)
def test_runs_on_the_current_stream(name):
    """On a side stream, the inputs are written after a ~10 ms GPU sleep and the
    op is called right after, without waiting. Only a kernel queued on that
    same stream sees the written values; one on another stream would read
    the zeros that were there before."""
    make, call = _cases()[name]
    values = make()
    want = _as_tuple(call(*values))
    inputs = [torch.zeros_like(v) for v in values]
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # GPU cycles
        for dst, src in zip(inputs, values):
            dst.copy_(src)
        got = _as_tuple(call(*inputs))
    torch.cuda.synchronize()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_cuda_graph_capture_and_replay(name):
    """Captured once, replayed on new input values: the same results as eager
    calls on those values (the launches go to the capturing stream, and the
    workspaces come from the graph's memory pool)."""
    make, call = _cases()[name]
    static = [v.clone() for v in make()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch recommends
        call(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = _as_tuple(call(*static))
    for _ in range(2):
        fresh = make()
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        want = _as_tuple(call(*fresh))
        for g, w in zip(outs, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_works_on_a_second_device_and_keeps_the_current_one():
    """The device guard launches on the tensors' device; the caller's current
    device is unchanged afterwards."""
    if torch.cuda.device_count() < 2:
        # One GPU: the guard still has to leave the current device alone.
        x = _randn(4, 64)
        before = torch.cuda.current_device()
        torch.testing.assert_close(ops.rms_norm(x, [64]), F.rms_norm(x, [64], None, default_rms_norm_eps(x.dtype)))
        assert torch.cuda.current_device() == before
        return
    x = _randn(4, 64).to("cuda:1")
    with torch.cuda.device(0):
        got = ops.rms_norm(x, [64])
        assert torch.cuda.current_device() == 0
    assert got.device == x.device
    torch.testing.assert_close(got, F.rms_norm(x, [64], None, default_rms_norm_eps(x.dtype)))


# ---------------------------------------------------------------------------
# Kernel paths: misaligned data (scalar accesses), odd sizes, long rows
# ---------------------------------------------------------------------------


def _misaligned_copy(t: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, but starting one element into its storage:
    not 16-byte aligned, so the kernels must use their one-element path."""
    base = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    out = base[1:].view(t.shape)
    out.copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 16 != 0
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_misaligned_inputs_match_aligned(name, dtype):
    """storage_offset 1 (misaligned) inputs give the aligned result: bit for bit
    for elementwise ops (same per-element math), within the dtype's tolerance
    for the row reductions (another reduction order)."""
    make, call = _cases(rows=5, cols=1000, dtype=dtype)[name]
    values = make()
    want = _as_tuple(call(*values))
    got = _as_tuple(call(*[_misaligned_copy(v) for v in values]))
    exact = name.split("_backward")[0] in ("add", "gelu", "swiglu", "geglu")
    for g, w in zip(got, want):
        if exact:
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        else:
            torch.testing.assert_close(g, w, **tolerance(dtype, "layer_norm", "backward"))


@pytest.mark.parametrize("cols", [1, 7, 33, 1023, 4097])
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "layer_norm", "softmax", "gelu", "swiglu", "add"])
def test_odd_sizes_against_reference(op, cols):
    """Sizes that are no multiple of the vector width (tails, rows shorter than
    a warp, one element), forward and backward, in bfloat16 and float32."""
    for dtype in (torch.float32, torch.bfloat16):
        m_args = {
            "rms_norm": lambda: (_randn(6, cols, dtype=dtype), [cols], _weight(cols, dtype)),
            "fused_add_rms_norm": lambda: (_randn(6, cols, dtype=dtype), _randn(6, cols, dtype=dtype), [cols], _weight(cols, dtype)),
            "layer_norm": lambda: (_randn(6, cols, dtype=dtype), [cols], _weight(cols, dtype), _randn(cols, dtype=dtype)),
            "softmax": lambda: (_randn(6, cols, dtype=dtype, scale=3), -1),
            "gelu": lambda: (_randn(6, cols, dtype=dtype, scale=3),),
            "swiglu": lambda: (_randn(6, cols, dtype=dtype, scale=3), _randn(6, cols, dtype=dtype)),
            "add": lambda: (_randn(6, cols, dtype=dtype), _randn(cols, dtype=dtype), 1.5),
        }[op]()
        args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in m_args)
        outs = _as_tuple(getattr(ops, op)(*args))
        gos = [torch.randn_like(o) for o in outs]
        leaves = [a for a in args if isinstance(a, torch.Tensor)]
        grads = torch.autograd.grad(outs, leaves, gos)
        ref_outs, ref_grads = reference(op, args, {}, gos)
        for o, r in zip(outs, ref_outs):
            torch.testing.assert_close(o, r, **tolerance(dtype, op, "forward"))
        tensor_idx = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        for i, g in zip(tensor_idx, grads):
            torch.testing.assert_close(g, ref_grads[i], **tolerance(dtype, "row_sum" if g.dim() == 1 and dtype == torch.float32 else op, "backward"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cols", [16384, 20001, 40000, 65536])
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "layer_norm", "softmax"])
def test_long_rows_against_reference(op, cols, dtype):
    """Rows around and past the shared-memory row cache (128 KiB, opted into past
    the 48 KiB default: 16384 float32 columns fit forward and backward, 20001 fit
    forward only (the backward caches two rows), 40000 and 65536 re-read global
    memory); 20001 also takes the one-element path. Forward and backward against
    torch in float32."""
    rows = 3
    x = _randn(rows, cols, dtype=dtype, scale=2).requires_grad_()
    if op == "rms_norm":
        args = (x, [cols], _weight(cols, dtype).requires_grad_())
    elif op == "fused_add_rms_norm":
        args = (x, _randn(rows, cols, dtype=dtype).requires_grad_(), [cols], _weight(cols, dtype).requires_grad_())
    elif op == "layer_norm":
        args = (x, [cols], _weight(cols, dtype).requires_grad_(), _randn(cols, dtype=dtype).requires_grad_())
    else:
        args = (x, -1)
    outs = _as_tuple(getattr(ops, op)(*args))
    gos = [torch.randn_like(o) for o in outs]
    leaves = [a for a in args if isinstance(a, torch.Tensor)]
    grads = torch.autograd.grad(outs, leaves, gos)
    ref_outs, ref_grads = reference(op, args, {}, gos)
    # Long float32 sums: a few ulp per term more than the default table allows.
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else tolerance(dtype)
    for o, r in zip(outs, ref_outs):
        torch.testing.assert_close(o, r, **tol)
    tensor_idx = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    for i, g in zip(tensor_idx, grads):
        torch.testing.assert_close(g, ref_grads[i], **tol)


@pytest.mark.parametrize("case", [("rms_norm", torch.float32, 20480), ("layer_norm", torch.bfloat16, 65536),
                                  ("fused_add_rms_norm", torch.bfloat16, 40960)], ids=str)
def test_rows_held_by_a_cluster_many_rows(case):
    """Forward norms whose rows a thread-block cluster holds on sm_90 (norm.cu,
    "rows held by a cluster"), at 600 rows: clusters of several steps, the
    launch capped at 256 blocks. Against torch in float64, and the same bits on
    a second run (the blocks combine their statistics in rank order)."""
    op, dtype, cols = case
    rows = 600
    x = _randn(rows, cols, dtype=dtype, scale=2)
    w = _weight(cols, dtype)
    if op == "layer_norm":
        b = _randn(cols, dtype=dtype)
        run = lambda: ops.layer_norm(x, [cols], w, b)  # noqa: E731
        expected = torch.nn.functional.layer_norm(x.double(), [cols], w.double(), b.double())
    elif op == "rms_norm":
        run = lambda: ops.rms_norm(x, [cols], w, 1e-6)  # noqa: E731
        expected = torch.nn.functional.rms_norm(x.double(), [cols], w.double(), 1e-6)
    else:
        r = _randn(rows, cols, dtype=dtype)
        run = lambda: ops.fused_add_rms_norm(x, r, [cols], w, 1e-6)[0]  # noqa: E731
        expected = torch.nn.functional.rms_norm((x + r).double(), [cols], w.double(), 1e-6)
    got = run()
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else tolerance(dtype)
    torch.testing.assert_close(got.double(), expected, **tol)
    assert torch.equal(run(), got)


# ---------------------------------------------------------------------------
# Determinism of the sums over rows
# ---------------------------------------------------------------------------


PARAM_GRAD_CASES = {
    "rms_norm": lambda d: ((_randn(3000, 1000, dtype=d), [1000], _weight(1000, d)), (0, 2)),
    "fused_add_rms_norm": lambda d: ((_randn(3000, 1000, dtype=d), _randn(3000, 1000, dtype=d), [1000], _weight(1000, d)), (0, 1, 3)),
    "layer_norm": lambda d: ((_randn(3000, 1000, dtype=d), [1000], _weight(1000, d), _randn(1000, dtype=d)), (0, 2, 3)),
    "add": lambda d: ((_randn(3000, 1000, dtype=d), _randn(1000, dtype=d)), (0, 1)),
    "add_column": lambda d: ((_randn(3000, 1000, dtype=d), _randn(3000, 1, dtype=d)), (0, 1)),
    "add_scalar": lambda d: ((_randn(3000, 1000, dtype=d), _randn(dtype=d)), (0, 1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", list(PARAM_GRAD_CASES))
def test_parameter_gradients_bit_identical_across_runs(case, dtype):
    """Weight, bias and broadcast-operand gradients sum over 3000 rows in fixed
    groups and a fixed order (no float atomics): two runs, the same bits."""
    op = case.split("_column")[0].split("_scalar")[0]
    args, leaves_at = PARAM_GRAD_CASES[case](dtype)
    args = tuple(a.requires_grad_() if i in leaves_at else a for i, a in enumerate(args))
    leaves = [args[i] for i in leaves_at]
    outs = _as_tuple(getattr(ops, op)(*args))
    gos = [torch.randn_like(o) for o in outs]

    def grads():
        return torch.autograd.grad(_as_tuple(getattr(ops, op)(*args)), leaves, gos)

    first, second = grads(), grads()
    for k, (a, b) in enumerate(zip(first, second)):
        assert torch.equal(a, b), f"gradient {k} differs between two runs"
    # And right. In float32 against float64 sums: over 3000 rows float32
    # summation error reaches ~1e-4 (it grows like sqrt(rows)), a missing or
    # doubled row is ~1. In bfloat16 against the usual float32 reference.
    if dtype == torch.float32:
        args64 = tuple(a.detach().double().requires_grad_(i in leaves_at) if isinstance(a, torch.Tensor) else a
                       for i, a in enumerate(args))
        _, ref = reference(op, args64, {}, [g.double() for g in gos])
    else:
        _, ref = reference(op, args, {}, gos)
    for k, i in enumerate(leaves_at):
        tol = tolerance(dtype, op, "backward")
        if dtype == torch.float32 and args[i].numel() < args[0].numel():
            tol = {"atol": 1e-3, "rtol": 1e-4}
        torch.testing.assert_close(first[k], ref[i].to(dtype), **tol)


# ---------------------------------------------------------------------------
# 64-bit indexing
# ---------------------------------------------------------------------------


def test_more_than_2_31_elements():
    """Tensors past 2**31 elements (4 GiB of bfloat16 each): the last elements
    are computed, from the right inputs (64-bit offsets everywhere)."""
    free, _ = torch.cuda.mem_get_info()
    n_cols = 4096
    rows = (1 << 31) // n_cols + 3
    assert free > 5 * rows * n_cols * 2, "needs ~22 GiB of free GPU memory"
    x = torch.empty(rows, n_cols, dtype=torch.bfloat16, device=CUDA)
    x[-8:].normal_()
    x[:-8].zero_()
    tail = x[-8:].float()
    y = ops.gelu(x)
    torch.testing.assert_close(y[-8:].float(), F.gelu(tail).bfloat16().float(), **tolerance(torch.bfloat16))
    del y
    y = ops.rms_norm(x, [n_cols])
    want = F.rms_norm(tail, [n_cols], None, default_rms_norm_eps(torch.bfloat16))
    torch.testing.assert_close(y[-8:].float(), want.bfloat16().float(), **tolerance(torch.bfloat16))
    del y
    y = ops.softmax(x, -1)
    torch.testing.assert_close(y[-8:].float(), torch.softmax(tail, -1).bfloat16().float(), **tolerance(torch.bfloat16))


# ---------------------------------------------------------------------------
# torch.compile with CUDA graphs
# ---------------------------------------------------------------------------


def _block(x, r, w, b):
    h, r = ops.fused_add_rms_norm(x, r, [x.shape[-1]], w, 1e-6)
    h = ops.layer_norm(ops.gelu(h, "tanh"), [x.shape[-1]], w, b)
    g = ops.swiglu(h, ops.add(h, r, alpha=0.5))
    return ops.softmax(ops.geglu(g, h), -1), r


def test_compile_reduce_overhead_matches_eager():
    """mode="reduce-overhead" records the graph (our kernels included) into a
    CUDA graph and replays it: the replays match eager, for fresh inputs too."""
    torch._dynamo.reset()
    compiled = torch.compile(_block, mode="reduce-overhead", fullgraph=True)
    w, b = _weight(256), _randn(256)
    with torch.no_grad():
        for step in range(4):  # the first calls warm up and record, the later ones replay
            x, r = _randn(64, 256), _randn(64, 256)
            got = compiled(x, r, w, b)
            want = _block(x, r, w, b)
            for g, e in zip(got, want):
                torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6, msg=lambda m: f"step {step}: {m}")


def test_compile_reduce_overhead_training_step():
    """Forward and backward under mode="reduce-overhead": gradients match eager."""
    torch._dynamo.reset()

    def loss_fn(x, w):
        return ops.rms_norm(ops.swiglu(x, x * 0.5), [x.shape[-1]], w).square().sum()

    compiled = torch.compile(loss_fn, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        x = _randn(32, 128).requires_grad_()
        w = _weight(128).requires_grad_()
        gx, gw = torch.autograd.grad(compiled(x, w), (x, w))
        ex, ew = torch.autograd.grad(loss_fn(x, w), (x, w))
        torch.testing.assert_close(gx, ex, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gw, ew, rtol=1e-5, atol=1e-4)
