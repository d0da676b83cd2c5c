"""The gradients of rotary_embedding's cos and sin: custom::rotary_embedding_table_backward
(csrc/torch_ext/ops/rotary_embedding.h), which RotaryEmbeddingFunction's backward calls
when the tables require grad.

Its CUDA kernel (kernel/cuda/rotary_embedding.cu) runs on the CPU harness
(op_extension.cuda_sim) against a float64 reference, torch.autograd of Hugging
Face's apply_rotary_pos_emb; its composite (the CPU and NPU kernel) against the
same reference and gradcheck; the traffic of the kernel against the rules of
tests/test_cuda_sim_traffic.py.
"""

from __future__ import annotations

import pytest
import torch

from op_extension import cuda_sim, ops
from reference import bits
from test_cuda_sim_traffic import MAX_LAUNCHES, broken_rules, moved_ratio

OP = "rotary_embedding_table_backward"
custom = torch.ops.custom

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
IDS = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}
dtype_params = pytest.mark.parametrize("dtype", DTYPES, ids=[IDS[d] for d in DTYPES])

# Each table element is a float sum rounded once to the dtype: within half an ulp
# of the float64 value (rtol), plus the float sum's own error (atol, for elements
# near zero; the sums here are of at most 40 products of N(0, 1) values).
TOL = {torch.float64: dict(atol=1e-12, rtol=1e-12), torch.float32: dict(atol=2e-5, rtol=2e-6),
       torch.float16: dict(atol=2e-5, rtol=2 ** -11), torch.bfloat16: dict(atol=2e-5, rtol=2 ** -8)}


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def reference(dq, dk, q, k, cos, unsqueeze_dim):
    """(grad_cos, grad_sin) in float64: torch.autograd of apply_rotary_pos_emb,
    sin's values irrelevant (the gradients do not depend on the tables)."""
    c = cos.double().requires_grad_()
    s = torch.zeros_like(c, requires_grad=True)
    cu, su = c.unsqueeze(unsqueeze_dim), s.unsqueeze(unsqueeze_dim)
    qd, kd = q.double(), k.double()
    outs = (qd * cu + rotate_half(qd) * su, kd * cu + rotate_half(kd) * su)
    torch.autograd.backward(outs, (dq.double(), dk.double()))
    return c.grad, s.grad


def make(shape, dtype, g, layout=None, offset=0):
    """A tensor of `shape` and `dtype`. layout "bshd": a [B, H, S, D] view of
    [B, S, H, D] memory (attention's q and k); "offset": `offset` elements into
    its buffer (breaks 16-byte alignment); every buffer is bordered by NaN, so a
    read past its ends shows."""
    if layout == "bshd":
        b, h, s, d = shape
        base = make((b, s, h, d), dtype, g, offset=offset)
        return base.transpose(1, 2)
    values = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    guard = 64
    buf = torch.full((values.numel() + 2 * guard + offset,), float("nan"), dtype=dtype)
    view = buf[guard + offset: guard + offset + values.numel()].view(shape)
    view.copy_(values)
    return view


def inputs(q_shape, k_shape, cos_shape, dtype, *, seed=0, layout=None, grad_layout="same", offset=0):
    g = torch.Generator().manual_seed(seed)
    q, k = make(q_shape, dtype, g, layout, offset), make(k_shape, dtype, g, layout, offset)
    glayout = layout if grad_layout == "same" else grad_layout
    dq, dk = make(q_shape, dtype, g, glayout, offset), make(k_shape, dtype, g, glayout, offset)
    cos = make(cos_shape, dtype, g)
    return dq, dk, q, k, cos


def check_kernel(dq, dk, q, k, cos, unsqueeze_dim=1, *, cos_grad=True, sin_grad=True, reverse=True):
    """The kernel on the harness against the reference; the same bits in reverse block order."""
    gc, gs = cuda_sim.run(OP, dq, dk, q, k, cos, unsqueeze_dim, cos_grad, sin_grad)
    want_c, want_s = reference(dq, dk, q, k, cos, unsqueeze_dim)
    tol = TOL[q.dtype]
    for got, want, wanted, name in ((gc, want_c, cos_grad, "grad_cos"), (gs, want_s, sin_grad, "grad_sin")):
        if not wanted:
            assert got.shape == (0,), f"{name} not asked for: an empty placeholder, got shape {list(got.shape)}"
            continue
        assert got.dtype == q.dtype and got.shape == cos.shape and got.is_contiguous()
        torch.testing.assert_close(got.double(), want, **tol, msg=lambda m: f"{name}: {m}")
    if reverse:
        rc, rs = cuda_sim.run(OP, dq, dk, q, k, cos, unsqueeze_dim, cos_grad, sin_grad, block_order="reverse")
        for got, again in ((gc, rc), (gs, rs)):
            assert torch.equal(bits(got), bits(again)), "differs in reverse block order"
    return gc, gs


# ---- the kernel on the harness ---------------------------------------------------------------


@dtype_params
@pytest.mark.parametrize("cos_batch", [1, 2], ids=["cos_batch1", "cos_batchB"])
@pytest.mark.parametrize("layout", [None, "bshd"], ids=["bhsd", "attention_views"])
def test_kernel_unsqueeze_dim_1(dtype, cos_batch, layout):
    # q [B, Hq, S, D], k [B, Hk, S, D] (grouped-query: Hk < Hq), cos [1 or B, S, D].
    check_kernel(*inputs((2, 4, 5, 32), (2, 2, 5, 32), (cos_batch, 5, 32), dtype, layout=layout))


@dtype_params
@pytest.mark.parametrize("cos_batch", [1, 3])
def test_kernel_unsqueeze_dim_2(dtype, cos_batch):
    # q [B, S, Hq, D], cos [1 or B, S, D].unsqueeze(2).
    check_kernel(*inputs((3, 6, 4, 16), (3, 6, 1, 16), (cos_batch, 6, 16), dtype), unsqueeze_dim=2)


@pytest.mark.parametrize("cos_grad,sin_grad", [(True, False), (False, True)], ids=["cos_only", "sin_only"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_kernel_computes_only_the_table_asked_for(cos_grad, sin_grad, dtype):
    args = inputs((2, 4, 5, 32), (2, 2, 5, 32), (1, 5, 32), dtype, layout="bshd")
    gc, gs = check_kernel(*args, cos_grad=cos_grad, sin_grad=sin_grad)
    both = cuda_sim.run(OP, *args, 1, True, True)
    # The table asked for alone has the bits it has beside the other.
    assert torch.equal(bits(gc if cos_grad else gs), bits(both[0] if cos_grad else both[1]))


def test_kernel_reads_each_tensor_through_its_own_strides():
    # The output gradients row-major beside attention-layout q and k, and k row-major
    # beside q of the attention layout: each read in place.
    dq, dk, q, k, cos = inputs((2, 4, 5, 32), (2, 2, 5, 32), (2, 5, 32), torch.float32, layout="bshd",
                               grad_layout=None)
    check_kernel(dq, dk, q, k.contiguous(), cos)
    # A head dim that is not contiguous is copied first.
    g = torch.Generator().manual_seed(3)
    qt = torch.randn(2, 4, 32, 5, generator=g).transpose(-1, -2)
    check_kernel(dq, dk, qt, k, cos)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("dim", [2, 130, 600, 1032], ids=lambda d: f"D{d}")
def test_kernel_head_dims(dtype, dim):
    # 2, 130 and 600: halves not a whole number of 16-byte packs (one element per
    # access); 2: 32 lane rows of one lane each; 130, 600 and 1032 in float32 (65,
    # 300 and 129 pairs or packs): one lane row walking the row 32 pairs at a time.
    check_kernel(*inputs((1, 3, 4, dim), (1, 2, 4, dim), (1, 4, dim), dtype, layout="bshd"))


def test_kernel_unaligned_inputs_take_the_element_path():
    check_kernel(*inputs((2, 4, 5, 32), (2, 2, 5, 32), (2, 5, 32), torch.bfloat16, offset=1))


def test_kernel_more_table_rows_than_warps():
    # 2 x 2100 table rows: past the launch's 512 blocks of 8 warps, the warps loop.
    check_kernel(*inputs((2, 2, 2100, 8), (2, 1, 2100, 8), (2, 2100, 8), torch.float32))


def test_kernel_no_heads_gives_zero_gradients():
    dq, dk, q, k, cos = inputs((2, 0, 5, 16), (2, 0, 5, 16), (2, 5, 16), torch.float32)
    gc, gs = cuda_sim.run(OP, dq, dk, q, k, cos)
    assert torch.equal(gc, torch.zeros_like(cos)) and torch.equal(gs, torch.zeros_like(cos))


@pytest.mark.parametrize("device", ["harness", "cpu"])
def test_bad_input_is_refused_with_the_op_name(device):
    run = (lambda *a: cuda_sim.run(OP, *a)) if device == "harness" else custom.rotary_embedding_table_backward
    dq, dk, q, k, cos = inputs((1, 2, 3, 8), (1, 1, 3, 8), (1, 3, 8), torch.float32)
    with pytest.raises(ValueError, match=f"custom::{OP}: cos_grad and sin_grad are both false"):
        run(dq, dk, q, k, cos, 1, False, False)
    with pytest.raises(ValueError, match=f"custom::{OP}: grad_q_embed has shape"):
        run(dk, dk, q, k, cos, 1, True, True)
    with pytest.raises(TypeError, match=f"custom::{OP}: grad_k_embed has dtype"):
        run(dq, dk.double(), q, k, cos, 1, True, True)
    with pytest.raises(ValueError, match=f"custom::{OP}: cos.unsqueeze"):
        run(dq, dk, q, k, cos[:, :2], 1, True, True)


# ---- the composite (CPU) -------------------------------------------------------------------


@dtype_params
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_composite_matches_the_reference_and_the_kernel(dtype, unsqueeze_dim):
    shapes = ((2, 4, 5, 16), (2, 2, 5, 16)) if unsqueeze_dim == 1 else ((2, 5, 4, 16), (2, 5, 2, 16))
    args = inputs(*shapes, (1, 5, 16), dtype)
    gc, gs = custom.rotary_embedding_table_backward(*args, unsqueeze_dim)
    want_c, want_s = reference(*args, unsqueeze_dim)
    torch.testing.assert_close(gc.double(), want_c, **TOL[dtype])
    torch.testing.assert_close(gs.double(), want_s, **TOL[dtype])
    kc, ks = cuda_sim.run(OP, *args, unsqueeze_dim)
    # Both round a float sum once; the sums' orders differ, by an ulp at most.
    ulp = {torch.float64: 1e-12, torch.float32: 2e-6, torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}[dtype]
    torch.testing.assert_close(kc, gc, atol=4e-5, rtol=ulp)
    torch.testing.assert_close(ks, gs, atol=4e-5, rtol=ulp)
    only_sin = custom.rotary_embedding_table_backward(*args, unsqueeze_dim, False, True)
    assert only_sin[0].shape == (0,) and torch.equal(only_sin[1], gs)


def test_gradcheck_of_the_tables_through_the_op():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64).transpose(1, 2)  # [B, S, H, D] for dim 2
    k = torch.randn(2, 4, 1, 8, generator=g, dtype=torch.float64)
    cos = torch.randn(1, 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    sin = torch.randn(1, 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda c, s: ops.rotary_embedding(q, k, c, s, unsqueeze_dim=2), (cos, sin))


# ---- autograd (CPU) ------------------------------------------------------------------------


class Calls(torch.utils._python_dispatch.TorchDispatchMode):
    """The custom ops a block of code runs, with their arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, args))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("wanted", ["cos", "sin", "both", "none"])
def test_autograd_asks_for_the_tables_that_require_grad(wanted):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 5, 16, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 5, 16, generator=g, requires_grad=True)
    cos = torch.randn(1, 5, 16, generator=g, requires_grad=wanted in ("cos", "both"))
    sin = torch.randn(1, 5, 16, generator=g, requires_grad=wanted in ("sin", "both"))
    dq, dk = torch.randn(2, 4, 5, 16, generator=g), torch.randn(2, 2, 5, 16, generator=g)
    qe, ke = ops.rotary_embedding(q, k, cos, sin)
    with Calls() as seen:
        torch.autograd.backward((qe, ke), (dq, dk))
    # The dispatcher leaves out trailing arguments equal to their defaults (1, True, True).
    tables = [(*args, *(1, True, True)[len(args) - 5:]) for func, args in seen.calls
              if func is custom.rotary_embedding_table_backward.default]
    if wanted == "none":
        assert tables == [] and cos.grad is None and sin.grad is None
        return
    assert len(tables) == 1 and tables[0][-2:] == (wanted != "sin", wanted != "cos")
    want_c, want_s = reference(dq, dk, q.detach(), k.detach(), cos.detach(), 1)
    if wanted != "sin":
        torch.testing.assert_close(cos.grad.double(), want_c, **TOL[torch.float32])
    else:
        assert cos.grad is None
    if wanted != "cos":
        torch.testing.assert_close(sin.grad.double(), want_s, **TOL[torch.float32])
    else:
        assert sin.grad is None


def test_autograd_of_the_tables_matches_hugging_faces_composite():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 6, 4, 32, generator=g).transpose(1, 2).requires_grad_()  # attention's view
    k = torch.randn(2, 6, 2, 32, generator=g).transpose(1, 2).requires_grad_()
    cos = torch.randn(2, 6, 32, generator=g, requires_grad=True)
    sin = torch.randn(2, 6, 32, generator=g, requires_grad=True)
    qe, ke = ops.rotary_embedding(q, k, cos, sin)
    (qe.square().sum() + ke.sin().sum()).backward()
    c2, s2 = cos.detach().clone().requires_grad_(), sin.detach().clone().requires_grad_()
    q2, k2 = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    cu, su = c2.unsqueeze(1), s2.unsqueeze(1)
    qh, kh = q2 * cu + rotate_half(q2) * su, k2 * cu + rotate_half(k2) * su
    (qh.square().sum() + kh.sin().sum()).backward()
    for got, want in ((cos.grad, c2.grad), (sin.grad, s2.grad), (q.grad, q2.grad), (k.grad, k2.grad)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ---- fake kernel, compile --------------------------------------------------------------------


def test_the_fake_takes_the_dtypes_of_the_prototype():
    from op_extension._protos import load_protos
    from op_extension.op_defs import rotary_embedding as op_module

    assert op_module.TABLE_DTYPES == tuple(getattr(torch, d) for d in load_protos()["rotary_embedding"].dtypes)
    args = [t.to("meta") for t in inputs((1, 2, 3, 8), (1, 1, 3, 8), (1, 3, 8), torch.float32)]
    with pytest.raises(TypeError, match=f"custom::{OP}: q has dtype"):
        custom.rotary_embedding_table_backward(*[t.to(torch.int32) for t in args])
    with pytest.raises(ValueError, match=f"custom::{OP}: cos_grad and sin_grad are both false"):
        custom.rotary_embedding_table_backward(*args, 1, False, False)
    gc, gs = custom.rotary_embedding_table_backward(*args, 1, True, False)
    assert gc.shape == (1, 3, 8) and gs.shape == (0,)


def test_opcheck():
    args = inputs((2, 4, 5, 16), (2, 2, 5, 16), (1, 5, 16), torch.float32, layout="bshd")
    torch.library.opcheck(custom.rotary_embedding_table_backward.default, (*args, 1, True, True))
    torch.library.opcheck(custom.rotary_embedding_table_backward.default, (*args, 1, False, True))


@pytest.mark.compile
def test_compile_fullgraph_dynamic_with_table_gradients():
    def f(q, k, cos, sin):
        qe, ke = ops.rotary_embedding(q, k, cos, sin)
        return (qe * ke.sum(1, keepdim=True)).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for seq in (5, 9):
        q = torch.randn(2, 4, seq, 16, requires_grad=True)
        k = torch.randn(2, 2, seq, 16, requires_grad=True)
        cos, sin = torch.randn(1, seq, 16, requires_grad=True), torch.randn(1, seq, 16, requires_grad=True)
        got = torch.autograd.grad(compiled(q, k, cos, sin), (cos, sin))
        want = torch.autograd.grad(f(q, k, cos, sin), (cos, sin))
        torch.testing.assert_close(got, want)


# ---- traffic on the harness ------------------------------------------------------------------

# attention's q and k ([1, heads, seq, dim] views of [1, seq, heads, dim]), 8 query
# and 2 key heads, cos [1, seq, dim] as a rotary module makes it.
TRAFFIC_SHAPE = dict(seq=256, q_heads=8, k_heads=2, dim=128)


def table_traffic(dtype, cos_grad=True, sin_grad=True):
    s = TRAFFIC_SHAPE
    args = inputs((1, s["q_heads"], s["seq"], s["dim"]), (1, s["k_heads"], s["seq"], s["dim"]),
                  (1, s["seq"], s["dim"]), dtype, layout="bshd")
    t = cuda_sim.traffic(OP, *args, 1, cos_grad, sin_grad)
    # cuda_sim.traffic counts cos as an input read once; the kernel needs its shape only.
    cos_bytes = args[4].numel() * args[4].element_size()
    t["min_bytes_read"] -= cos_bytes
    t["min_bytes"] -= cos_bytes
    return t


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_traffic_meets_the_rules(dtype):
    t = table_traffic(dtype)
    assert broken_rules(t) == [], f"{IDS[dtype]}: moved {moved_ratio(t):.3f}, efficiency {t['sector_efficiency']:.3f}"
    assert t["launches"] == 1 <= MAX_LAUNCHES and t["workspace_bytes"] == 0
    # q, k and their gradients read once each, the two tables written once each: exactly.
    assert (t["bytes_read"], t["bytes_written"]) == (t["min_bytes_read"], t["min_bytes_written"])


def test_traffic_of_one_table_writes_that_table_only():
    t = table_traffic(torch.bfloat16, cos_grad=False)
    s = TRAFFIC_SHAPE
    assert t["bytes_written"] == s["seq"] * s["dim"] * 2 and broken_rules(t) == []
