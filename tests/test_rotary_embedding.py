"""rotary_embedding: torch.ops.custom.rotary_embedding against Hugging Face's
apply_rotary_pos_emb (the reference), forward and backward, on every CPU kernel
variant; its checks; fake kernel, opcheck, torch.compile and torch.export.

Scaffolded by `python -m op_extension.scaffold op_protos/rotary_embedding.json`,
then filled in.
"""

import subprocess
import sys

import pytest
import torch

import op_extension  # noqa: F401  (registers torch.ops.custom)
from op_extension import ops

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-12),
       torch.bfloat16: dict(atol=2e-2, rtol=2e-2), torch.float16: dict(atol=2e-3, rtol=2e-3)}


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def reference(q, k, cos, sin, unsqueeze_dim=1):
    """Hugging Face's apply_rotary_pos_emb, in float64."""
    cos, sin = cos.double().unsqueeze(unsqueeze_dim), sin.double().unsqueeze(unsqueeze_dim)
    q, k = q.double(), k.double()
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope_tables(batch, seq, dim, dtype, seed=0):
    """cos/sin as a rotary embedding module makes them (the halves repeat), and
    random ones (the kernel must not rely on the repetition)."""
    g = torch.Generator().manual_seed(seed)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    pos = torch.arange(seq, dtype=torch.float64)[None, :, None] + torch.randint(0, 50, (batch, 1, 1), generator=g)
    emb = torch.cat([pos * inv_freq, pos * inv_freq], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


LAYOUTS = [
    # (q shape, k shape, cos batch, unsqueeze_dim)
    ((2, 4, 7, 64), (2, 2, 7, 64), 2, 1),     # [batch, heads, seq, dim], GQA
    ((2, 7, 4, 64), (2, 7, 2, 64), 2, 2),     # [batch, seq, heads, dim]
    ((3, 4, 5, 128), (3, 4, 5, 128), 1, 1),   # cos shared by the batch
    ((1, 2, 3, 2), (1, 1, 3, 2), 1, 1),       # head dim 2
    ((2, 3, 9, 130), (2, 3, 9, 130), 2, 1),   # a half of 65: a partial vector
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", LAYOUTS, ids=["bhsd", "bshd", "shared-cos", "dim2", "dim130"])
def test_matches_hugging_face(cpu_isa, dtype, layout):
    q_shape, k_shape, cos_batch, unsqueeze_dim = layout
    seq = q_shape[2] if unsqueeze_dim == 1 else q_shape[1]
    cos, sin = rope_tables(cos_batch, seq, q_shape[-1], dtype)
    q, k = torch.randn(q_shape).to(dtype), torch.randn(k_shape).to(dtype)
    got = ops.rotary_embedding(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    want = reference(q, k, cos, sin, unsqueeze_dim)
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == w.shape
        torch.testing.assert_close(g.double(), w, **TOL[dtype])
    # Random tables too: nothing may depend on cos/sin's repeated halves.
    cos, sin = torch.randn_like(cos), torch.randn_like(sin)
    for g, w in zip(ops.rotary_embedding(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim),
                    reference(q, k, cos, sin, unsqueeze_dim)):
        torch.testing.assert_close(g.double(), w, **TOL[dtype])


def test_many_rows_and_threads(num_threads):
    q, k = torch.randn(4, 8, 300, 64), torch.randn(4, 2, 300, 64)
    cos, sin = torch.randn(4, 300, 64), torch.randn(4, 300, 64)
    want = reference(q, k, cos, sin)
    for n in (1, 2):
        num_threads(n)
        for g, w in zip(ops.rotary_embedding(q, k, cos, sin), want):
            torch.testing.assert_close(g.double(), w, atol=1e-5, rtol=1e-5)


def test_non_contiguous_inputs():
    q = torch.randn(2, 7, 4, 64).transpose(1, 2)  # [b, h, s, d] view of a [b, s, h, d] tensor
    k = torch.randn(2, 7, 2, 64).transpose(1, 2)
    cos, sin = torch.randn(2, 64, 7).transpose(1, 2), torch.randn(2, 7, 64)
    for g, w in zip(ops.rotary_embedding(q, k, cos, sin), reference(q, k, cos, sin)):
        torch.testing.assert_close(g.double(), w, atol=1e-5, rtol=1e-5)


def test_outputs_keep_the_attention_layout_of_q_and_k_as_hugging_face():
    # q and k as attention makes them are read in place, and each output has its
    # input's strides, as Hugging Face's composite returns them; so do the gradients.
    q = torch.randn(2, 7, 4, 64).transpose(1, 2).requires_grad_()
    k = torch.randn(2, 7, 2, 64).transpose(1, 2)
    cos, sin = torch.randn(2, 7, 64), torch.randn(2, 7, 64)
    q_embed, k_embed = ops.rotary_embedding(q, k, cos, sin)
    hf_q, hf_k = (q * cos.unsqueeze(1) + rotate_half(q) * sin.unsqueeze(1),
                  k * cos.unsqueeze(1) + rotate_half(k) * sin.unsqueeze(1))
    assert q_embed.stride() == q.stride() == hf_q.stride() and k_embed.stride() == k.stride() == hf_k.stride()
    torch.testing.assert_close(q_embed, hf_q)
    torch.testing.assert_close(k_embed, hf_k)
    grad = torch.randn(2, 7, 4, 64).transpose(1, 2)
    (dq,) = torch.autograd.grad(q_embed, q, grad)
    (hf_dq,) = torch.autograd.grad(hf_q, q, grad)
    assert dq.stride() == grad.stride()
    torch.testing.assert_close(dq, hf_dq)
    # A head dim that is not innermost cannot be read in place: copied, row-major outputs.
    q_t = torch.randn(2, 4, 64, 7).transpose(-1, -2)
    assert ops.rotary_embedding(q_t, k, cos, sin)[0].is_contiguous()


def test_position_ids_is_accepted_and_unused_as_in_hugging_face():
    q, k, cos, sin = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    a = ops.rotary_embedding(q, k, cos, sin, position_ids=torch.arange(3)[None])
    b = ops.rotary_embedding(q, k, cos, sin)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# ---- backward ----------------------------------------------------------------------------


def test_gradcheck():
    q = torch.randn(2, 3, 4, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 4, 8, dtype=torch.float64, requires_grad=True)
    cos, sin = torch.randn(2, 4, 8, dtype=torch.float64), torch.randn(2, 4, 8, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda q, k: ops.rotary_embedding(q, k, cos, sin), (q, k))
    q2 = q.detach().transpose(1, 2).contiguous().requires_grad_()
    k2 = k.detach().transpose(1, 2).contiguous().requires_grad_()
    assert torch.autograd.gradcheck(lambda q, k: ops.rotary_embedding(q, k, cos[:1], sin[:1], unsqueeze_dim=2),
                                    (q2, k2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_matches_autograd_of_the_reference(cpu_isa, dtype):
    cos, sin = torch.randn(2, 9, 130).to(dtype), torch.randn(2, 9, 130).to(dtype)
    q = torch.randn(2, 4, 9, 130).to(dtype).requires_grad_()
    k = torch.randn(2, 2, 9, 130).to(dtype).requires_grad_()
    gq, gk = torch.randn(2, 4, 9, 130).to(dtype), torch.randn(2, 2, 9, 130).to(dtype)
    qe, ke = ops.rotary_embedding(q, k, cos, sin)
    torch.autograd.backward((qe, ke), (gq, gk))
    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    torch.autograd.backward(reference(q64, k64, cos, sin), (gq.double(), gk.double()))
    torch.testing.assert_close(q.grad.double(), q64.grad, **TOL[dtype])
    torch.testing.assert_close(k.grad.double(), k64.grad, **TOL[dtype])


def test_only_k_requires_grad():
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8, requires_grad=True)
    cos, sin = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    _, ke = ops.rotary_embedding(q, k, cos, sin)
    ke.sum().backward()
    k64 = k.detach().double().requires_grad_()
    reference(q, k64, cos, sin)[1].sum().backward()
    torch.testing.assert_close(k.grad.double(), k64.grad)


def test_gradients_of_cos_and_sin_too():
    q = torch.randn(2, 3, 4, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 4, 8, dtype=torch.float64, requires_grad=True)
    cos = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)  # broadcast over batch and heads
    sin = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, c, s: ops.rotary_embedding(q, k, c, s), (q, k, cos, sin))
    q2 = q.detach().transpose(1, 2).contiguous().requires_grad_()
    k2 = k.detach().transpose(1, 2).contiguous().requires_grad_()
    assert torch.autograd.gradcheck(lambda c, s: ops.rotary_embedding(q2, k2, c, s, unsqueeze_dim=2), (cos, sin))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_gradients_of_cos_and_sin_are_rounded_once(dtype):
    # 32 q heads and 8 k heads over 2 batches: each cos/sin gradient element sums
    # 80 products. Summed in the table's dtype they were ~6 ulp off; summed in
    # float and rounded once, within one rounding (half an ulp, relative to |g| + 1).
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 32, 16, 64, generator=g).to(dtype)
    k = torch.randn(2, 8, 16, 64, generator=g).to(dtype)
    cos = torch.randn(2, 16, 64, generator=g).to(dtype).requires_grad_()
    sin = torch.randn(2, 16, 64, generator=g).to(dtype).requires_grad_()
    grads = torch.randn(q.shape, generator=g).to(dtype), torch.randn(k.shape, generator=g).to(dtype)
    torch.autograd.backward(ops.rotary_embedding(q, k, cos, sin), grads)
    cos64, sin64 = cos.detach().double().requires_grad_(), sin.detach().double().requires_grad_()
    torch.autograd.backward(reference(q, k, cos64, sin64), tuple(t.double() for t in grads))
    for got, want in ((cos.grad, cos64.grad), (sin.grad, sin64.grad)):
        assert got.dtype == dtype
        err = ((got.double() - want).abs() / (want.abs() + 1)).max().item()
        assert err <= torch.finfo(dtype).eps / 2 * 1.01, err


def test_forward_mode_ad_is_refused_with_the_op_name():
    import torch.autograd.forward_ad as fwAD

    q, k, cos, sin = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    with fwAD.dual_level(), pytest.raises(RuntimeError, match="rotary_embedding"):
        ops.rotary_embedding(fwAD.make_dual(q, torch.randn_like(q)), k, cos, sin)


# ---- empty tensors ---------------------------------------------------------------------------


# A regression test (found by tests/test_fuzz.py): the glue computed cos's row
# strides as stride / head before skipping the launch of an empty tensor, so a
# head dim of 0 divided by zero (SIGFPE). Each call runs in a child process, as a
# crash would take pytest down.
@pytest.mark.parametrize("call", [
    "ops.rotary_embedding(q, q, cos, cos)",
    "torch.ops.custom.rotary_embedding_backward(q, q, cos, cos, 1)",
    "torch.ops.cuda_sim.rotary_embedding(q, q, cos, cos, 1)",  # the CUDA kernels' glue, on the harness
], ids=["cpu", "cpu-backward", "cuda-sim"])
def test_head_dim_zero_gives_empty_results(call):
    """q [1, 2, 3, 0] with cos [1, 3, 0]: empty results of q's shape, as Hugging
    Face's formula (and the Ascend path) gives them. Run in a child process: the
    bug kills the interpreter."""
    code = ("import torch, op_extension; from op_extension import ops, cuda_sim; "
            "q, cos = torch.empty(1, 2, 3, 0), torch.empty(1, 3, 0); "
            f"out = {call}; assert [tuple(t.shape) for t in out] == [(1, 2, 3, 0)] * 2; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


# ---- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("args,kwargs,error,message", [
    ((torch.randn(1, 2, 3, 7), torch.randn(1, 2, 3, 7), torch.randn(1, 3, 7), torch.randn(1, 3, 7)), {},
     ValueError, "the head dim \\(last\\) of q must be even, got 7"),
    ((torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8).double(), torch.randn(1, 3, 8), torch.randn(1, 3, 8)), {},
     TypeError, "k has dtype Double but q has dtype Float"),
    ((torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 4)), {},
     ValueError, "sin has shape \\[1, 3, 4\\] but cos has shape \\[1, 3, 8\\]"),
    ((torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)),
     {"unsqueeze_dim": 5}, IndexError, "unsqueeze_dim 5 is out of range for cos of 3 dims"),
    ((torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)),
     {"unsqueeze_dim": 3}, ValueError, "would put cos's head dim off the last position"),
    ((torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)), {},
     ValueError, "does not broadcast to q's shape \\[1, 2, 4, 8\\]"),
    ((torch.randn(1, 2, 3, 8).int(), torch.randn(1, 2, 3, 8).int(), torch.randn(1, 3, 8).int(),
      torch.randn(1, 3, 8).int()), {}, TypeError, "q has dtype Int, which is not supported"),
], ids=["odd-dim", "k-dtype", "sin-shape", "dim-range", "dim-last", "no-broadcast", "int"])
def test_bad_input_is_refused_with_the_op_name(args, kwargs, error, message):
    with pytest.raises(error, match="custom::rotary_embedding: .*" + message):
        ops.rotary_embedding(*args, **kwargs)
    # The fake kernel says the same (torch.compile / export see it).
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(a) for a in args]
        with pytest.raises(Exception, match=message.replace("Double", "(Double|float64)").replace(
                "Float", "(Float|float32)").replace("Int,", "(Int|int32),")):
            torch.ops.custom.rotary_embedding(*fakes, **kwargs)


# ---- fake kernel, opcheck, compile, export --------------------------------------------------------


def test_opcheck():
    q, k = torch.randn(2, 4, 5, 16, requires_grad=True), torch.randn(2, 2, 5, 16, requires_grad=True)
    cos, sin = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    torch.library.opcheck(torch.ops.custom.rotary_embedding.default, (q, k, cos, sin, 1))
    torch.library.opcheck(torch.ops.custom.rotary_embedding_backward.default,
                          (torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16), cos, sin, 1))


@pytest.mark.compile
def test_compile_fullgraph_dynamic_and_export():
    def f(q, k, cos, sin):
        qe, ke = ops.rotary_embedding(q, k, cos, sin)
        return (qe * ke.sum(1, keepdim=True)).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for seq in (5, 9):
        q = torch.randn(2, 4, seq, 16, requires_grad=True)
        k = torch.randn(2, 2, seq, 16, requires_grad=True)
        cos, sin = torch.randn(2, seq, 16), torch.randn(2, seq, 16)
        torch.testing.assert_close(compiled(q, k, cos, sin), f(q, k, cos, sin))
        gq, gk = torch.autograd.grad(compiled(q, k, cos, sin), (q, k))
        wq, wk = torch.autograd.grad(f(q, k, cos, sin), (q, k))
        torch.testing.assert_close((gq, gk), (wq, wk))

    class M(torch.nn.Module):
        def forward(self, q, k, cos, sin):
            return ops.rotary_embedding(q, k, cos, sin)

    args = (torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16))
    ep = torch.export.export(M(), args)
    assert sum(1 for n in ep.graph.nodes if n.target is torch.ops.custom.rotary_embedding.default) == 1
    for g, w in zip(ep.module()(*args), M()(*args)):
        torch.testing.assert_close(g, w)
