"""rotary_embedding and rotary_embedding_backward: the test data of the shared tests
(see op_cases/__init__.py). tests/test_rotary_embedding.py holds the op's own tests
(Hugging Face's apply_rotary_pos_emb as the reference, every layout)."""

import math

import torch
from hypothesis import strategies as st

from fuzz_kit import MAX_NUMEL, Expect, f64
from op_cases import SAME_DTYPE, Bad, Call, Fake, H, grand, huge, placed, rand, sample
from op_extension import ops

custom = torch.ops.custom

# q [batch, heads, seq, head dim] (unsqueeze_dim 1) or [batch, seq, heads, head dim]
# (unsqueeze_dim 2); k with fewer heads (GQA); cos/sin [batch or 1, seq, head dim].
# cos and sin take no gradient here, as a model's rotary tables: their gradients
# are a composite in the input dtype (sums over heads), not a kernel held to one
# rounding (test_rotary_embedding.py and GRADCHECK below check them).


def cs(m, *shape, **kw):
    return m(*shape, grad=False, **kw)


SAMPLES = [
    sample("bhsd_gqa", lambda m: ((m(2, 4, 5, 16), m(2, 2, 5, 16), cs(m, 2, 5, 16), cs(m, 2, 5, 16)), {})),
    sample("bshd_unsqueeze2", lambda m: ((m(2, 5, 4, 16), m(2, 5, 2, 16), cs(m, 2, 5, 16), cs(m, 2, 5, 16)),
                                         {"unsqueeze_dim": 2})),
    sample("cos_shared_by_batch", lambda m: ((m(3, 2, 5, 32), m(3, 2, 5, 32), cs(m, 1, 5, 32), cs(m, 1, 5, 32)), {})),
    sample("head_dim2", lambda m: ((m(1, 2, 3, 2), m(1, 1, 3, 2), cs(m, 1, 3, 2), cs(m, 1, 3, 2)), {})),
    sample("half_65", lambda m: ((m(2, 3, 9, 130), m(2, 3, 9, 130), cs(m, 2, 9, 130), cs(m, 2, 9, 130)), {})),
    # q and k as attention makes them: read in place, each output in its input's layout,
    # as Hugging Face's composite gives it (test_ops.py compares the layouts).
    sample("attention_layout", lambda m: ((m(2, 4, 5, 16, layout="heads_transposed"),
                                           m(2, 2, 5, 16, layout="heads_transposed"), cs(m, 2, 5, 16),
                                           cs(m, 2, 5, 16)), {})),
    # q with its head dim strided (the last two dims transposed), next to a row-major k
    # of its shape: q is copied, both outputs row-major (test_ops.py: mixed layouts).
    sample("transposed_q", lambda m: ((m(2, 4, 5, 16, layout="transposed"), m(2, 4, 5, 16), cs(m, 2, 5, 16),
                                       cs(m, 2, 5, 16, layout="strided")), {})),
    sample("empty_seq", lambda m: ((m(2, 4, 0, 16), m(2, 2, 0, 16), cs(m, 2, 0, 16), cs(m, 2, 0, 16)), {})),
    sample("large_8x300x128", lambda m: ((m(2, 8, 300, 128), m(2, 2, 300, 128), cs(m, 2, 300, 128),
                                          cs(m, 2, 300, 128)), {}), True),
]

# An LLM-like call for the CUDA traffic model (tests/test_cuda_sim_traffic.py):
# attention's q and k ([batch, heads, seq, dim] views), 8 query and 2 key heads.
TRAFFIC = [sample("gqa_8_2_heads_seq16", lambda m: ((m(1, 8, 16, 128, layout="heads_transposed"),
                                                     m(1, 2, 16, 128, layout="heads_transposed"),
                                                     cs(m, 1, 16, 128), cs(m, 1, 16, 128)), {}))]


def schema_args(x):
    # q [1, 2, 3, 4] (batch, heads, seq, head dim), k with one head, cos/sin [1, 3, 4]
    return x(1, 2, 3, 4), x(1, 1, 3, 4), x(1, 3, 4), x(1, 3, 4), 1


def backward_schema_args(x):
    return x(1, 2, 3, 4), x(1, 1, 3, 4), x(1, 3, 4), x(1, 3, 4), 1


def f_rotary_embedding(q, k):
    # cos/sin built inside, as a model's rotary module does (they get no gradient).
    seq, dim = q.shape[-2], q.shape[-1]
    angle = torch.arange(seq, dtype=q.dtype, device=q.device)[:, None] * torch.arange(
        1, dim + 1, dtype=q.dtype, device=q.device) / dim
    return ops.rotary_embedding(q, k, angle.cos()[None], angle.sin()[None])


def f_rotary_embedding_attention(hq, hk):
    # q and k as attention makes them: [batch, heads, seq, dim] views of the
    # projections' [batch, seq, heads * dim] (read in place; each output keeps its
    # input's layout, which the compiled code then indexes: the fake kernel must agree).
    b, n = hq.shape[0], hq.shape[1]
    q = hq.view(b, n, 4, H).transpose(1, 2)
    k = hk.view(b, n, 2, H).transpose(1, 2)
    angle = torch.arange(n, dtype=q.dtype, device=q.device)[:, None] * torch.arange(
        1, H + 1, dtype=q.dtype, device=q.device) / H
    q_embed, k_embed = ops.rotary_embedding(q, k, angle.cos()[None], angle.sin()[None])
    return q_embed * 2 + 1, k_embed.transpose(1, 2).reshape(b, n, 2 * H)


CALLS = [Call(f_rotary_embedding, lambda n: (rand(2, 4, n, H), rand(2, 2, n, H))),
         Call(f_rotary_embedding_attention, lambda n: (rand(2, n, 4 * H), rand(2, n, 2 * H)))]
FAKE = {"": Fake(lambda q, k, c, s: ops.rotary_embedding(q, k, c, s),
                 lambda d: tuple(torch.randn(*s).to(d) for s in ((2, 4, 5, H), (2, 2, 5, H), (2, 5, H), (2, 5, H))))}
BACKWARD_FAKE = {"": Fake(lambda gq, gk, cs, sn: custom.rotary_embedding_backward(gq, gk, cs, sn, 1),
                          lambda d: tuple(torch.randn(*s).to(d) for s in ((2, 4, 5, H), (2, 2, 5, H), (2, 5, H), (2, 5, H))))}


def _qkcs(t, head_dim=8, seq=3, cos_seq=3, sin_dim=None):
    return t(1, 2, seq, head_dim), t(1, 2, seq, head_dim), t(1, cos_seq, head_dim), t(1, cos_seq, sin_dim or head_dim)


BAD = {
    "odd_head_dim": Bad(lambda t: ops.rotary_embedding(*_qkcs(t, head_dim=7)), ValueError,
                        r"the head dim \(last\) of q must be even, got 7"),
    "sin_shape": Bad(lambda t: ops.rotary_embedding(*_qkcs(t, sin_dim=4)), ValueError,
                     r"sin has shape \[1, 3, 4\] but cos has shape \[1, 3, 8\]"),
    "unsqueeze_dim_out_of_range": Bad(lambda t: ops.rotary_embedding(*_qkcs(t), unsqueeze_dim=5), IndexError,
                                      "unsqueeze_dim 5 is out of range for cos of 3 dims"),
    "unsqueeze_dim_last": Bad(lambda t: ops.rotary_embedding(*_qkcs(t), unsqueeze_dim=3), ValueError,
                              "would put cos's head dim off the last position"),
    "cos_does_not_broadcast": Bad(lambda t: ops.rotary_embedding(*_qkcs(t, seq=4)), ValueError,
                                  r"does not broadcast to q's shape \[1, 2, 4, 8\]"),
    "k_float64": Bad(lambda t: ops.rotary_embedding(t(1, 2, 3, 8), t(1, 2, 3, 8, dtype=torch.float64), t(1, 3, 8),
                                                    t(1, 3, 8)), TypeError, SAME_DTYPE),
}
BACKWARD_BAD = {
    "odd_head_dim": Bad(lambda t: custom.rotary_embedding_backward(*_qkcs(t, head_dim=7), 1), ValueError,
                        r"the head dim \(last\) of grad_q_embed must be even, got 7"),
    "sin_shape": Bad(lambda t: custom.rotary_embedding_backward(*_qkcs(t, sin_dim=4), 1), ValueError,
                     r"sin has shape \[1, 3, 4\] but cos has shape \[1, 3, 8\]"),
    "unsqueeze_dim_out_of_range": Bad(lambda t: custom.rotary_embedding_backward(*_qkcs(t), 5), IndexError,
                                      "unsqueeze_dim 5 is out of range for cos of 3 dims"),
}
PYTHON_LEVEL = {
    "unsqueeze_dim_float": (lambda: ops.rotary_embedding(*(torch.randn(s) for s in ((1, 2, 3, 8),) * 2 + ((1, 3, 8),) * 2),
                                                         unsqueeze_dim=1.5), TypeError, "unsqueeze_dim must be an int"),
}
# glue::rotary_pair (csrc/torch_ext/ops/rotary_embedding.h) checks the head dim and
# the broadcast before it makes q and k contiguous or allocates an output.
CHECKED_FIRST = {
    "head_dim": (lambda: ops.rotary_embedding(huge(1, 1 << 16, 1 << 15, 7), huge(1, 1 << 16, 1 << 15, 7),
                                              huge(1, 1 << 15, 7), huge(1, 1 << 15, 7)), ValueError, "must be even"),
    "cos_shape": (lambda: ops.rotary_embedding(huge(1, 1 << 16, 1 << 15, 8), huge(1, 1 << 16, 1 << 15, 8),
                                               torch.randn(1, 3, 8), torch.randn(1, 3, 8)), ValueError,
                  "does not broadcast"),
    "sin_shape": (lambda: ops.rotary_embedding(huge(1, 1 << 16, 1 << 15, 8), huge(1, 1 << 16, 1 << 15, 8),
                                               torch.randn(1, 1 << 15, 8), torch.randn(1, 3, 8)), ValueError,
                  "sin has shape"),
}

GRADCHECK = {
    "": lambda m: ((m(2, 3, 4, 8), m(2, 1, 4, 8), m(2, 4, 8), m(2, 4, 8)), {}),
    "unsqueeze_dim2": lambda m: ((m(2, 4, 3, 8), m(2, 4, 1, 8), m(1, 4, 8), m(1, 4, 8)), {"unsqueeze_dim": 2}),
}


# ---- DTensor cases (tests/test_distributed.py; op_cases/_kinds.py's Placed) ----


def _dt_rope(batch_of_tables=4):
    """q [batch, heads, seq, head_dim], k with fewer heads, cos/sin [batch, seq, head_dim]."""
    return lambda g: [grand(g, 4, 8, 8, 16), grand(g, 4, 4, 8, 16), grand(g, batch_of_tables, 8, 16),
                      grand(g, batch_of_tables, 8, 16)]


def _dt_cases():
    # cos/sin split with the batch or the sequence, replicated with the heads
    # (and when broadcast along the batch).
    return [placed(p, _dt_rope(), [p, p, table, table], [p, p])
            for p, table in (("R", "R"), ("S0", "S0"), ("S1", "R"), ("S2", "S1"))] + [
        placed("S0-broadcast-batch", _dt_rope(1), ["S0", "S0", "R", "R"], ["S0", "S0"]),
        placed("P", _dt_rope(), ["P", "P", "R", "R"], ["P", "P"]),
        placed("S2-tables-replicated", _dt_rope(), ["S2", "S2", "R", "R"], ["S2", "S2"]),
        placed("S3-redistributed", _dt_rope(), ["S3", "S3", "R", "R"], [("R", "S0", "S1", "S2")] * 2),
    ]


DISTRIBUTED = _dt_cases() + [
    placed("S0,S2", _dt_rope(), ["S0,S2", "S0,S2", "S0,S1", "S0,S1"], ["S0,S2", "S0,S2"], mesh=2)]
BACKWARD_DISTRIBUTED = _dt_cases()


# ---- fuzzing (tests/test_fuzz.py; tests/fuzz_kit.py says what each entry is) ----

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
    # Imported here: test_ascend_sim_rope imports test_ascend_sim, which imports
    # reference.py, which imports this module (a cycle at import time).
    from test_ascend_sim_rope import rope_ub_bytes

    if not target.startswith("ascend") or not draw(st.booleans()):
        return {}
    options = {"_core_num": draw(st.sampled_from([1, 2, 3, 5]))}
    if d:
        block = 32 // dtype.itemsize
        half_stride = -(-(d // 2) // block) * block
        rows = draw(st.integers(1, 3))
        options["_ub_size"] = max(1024, rope_ub_bytes(dtype, rows, half_stride, d // 2))
    return options


# cos/sin: no near-max values, no big rows (|cos|, |sin| < 6: randn of scale <= 1).
TABLE_SCALES = (1.0, 0.5, 0.1)


def fuzz_case(fz):
    qs, ks, cs, dim = fz.draw(rope_shapes(fz.target))
    # Constraint: q and k's near-max values are max/8 (backward_primal), and
    # cos/sin have none: q * cos does not overflow in float where the float64
    # q * cos - q' * sin is finite (or +-inf where a NaN would come out: -4e38 +
    # inf). No big rows either (a row scaled twice holds values up to 3e38); the
    # op reduces nothing.
    q = fz.spec(qs, rows=False, backward_primal=True)
    k = fz.spec(ks, rows=False, backward_primal=True)
    cos, sin = (fz.spec(cs, rows=False, near_max=False, scales=TABLE_SCALES) for _ in range(2))
    return fz.case((q, k, cos, sin),
                   kwargs={"unsqueeze_dim": dim, **fz.draw(rope_soc_options(fz.target, fz.dtype, qs[-1]))})


def backward_fuzz_case(fz):
    qs, ks, cs, dim = fz.draw(rope_shapes(fz.target))
    cos, sin = (fz.spec(cs, rows=False, near_max=False, scales=TABLE_SCALES) for _ in range(2))
    if fz.kind == "cpu" and fz.boolean():
        # Through autograd: the backward op for q and k, and the gradients of
        # cos and sin that the op's autograd composes (sums of dy * q over
        # what cos broadcasts along). Constraint: q and k have no near-max
        # values and no big rows: those sums are formed as two partial sums
        # (q's, k's) in the dtype, which may overflow where their sum does not.
        q = fz.spec(qs, rows=False, near_max=False)
        k = fz.spec(ks, rows=False, near_max=False)
        n = (math.prod(qs) + math.prod(ks)) // max(1, math.prod(cs))
        return fz.case((q, k, cos, sin), row_len=max(1, n), kwargs={"unsqueeze_dim": dim},
                       grad_outputs=(fz.grad_output(qs), fz.grad_output(ks)))
    return fz.case((fz.grad_output(qs), fz.grad_output(ks), cos, sin, dim),
                   kwargs=fz.draw(rope_soc_options(fz.target, fz.dtype, qs[-1])))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rope(x, cos_u, sin_u):
    """Hugging Face's x cos + rotate_half(x) sin, with its magnitude."""
    a, b = x * cos_u, _rotate_half(x) * sin_u
    return Expect(a + b, a.abs() + b.abs())


def _rope_grad(g, cos_u, sin_u):
    """Its transpose g cos - rotate_half(g sin), with its magnitude."""
    a, b = g * cos_u, _rotate_half(g * sin_u)
    return Expect(a - b, a.abs() + b.abs())


# cos and sin as Hugging Face unsqueezes them: the op's own dim wrapping is what
# is tested, so the models leave it to torch. NaN/inf classes are exact here (no
# nan_means_undefined): an output is x c -+ x' s, whose NaN/inf do not depend on
# how it is grouped, and a table gradient is a sum of products, NaN where it
# mixes +inf and -inf in any order.
def _tables(args, dim):
    cos, sin = f64(args[2]), f64(args[3])
    return cos, cos.unsqueeze(dim), sin.unsqueeze(dim)


def fuzz_model(case, args, grad_outputs):
    _, cos_u, sin_u = _tables(args, case.kwargs["unsqueeze_dim"])
    return [_rope(f64(x), cos_u, sin_u) for x in args[:2]]


def backward_fuzz_model(case, args, grad_outputs):
    if case.grad_outputs is None:
        _, cos_u, sin_u = _tables(args, args[4])
        return [_rope_grad(f64(g), cos_u, sin_u) for g in args[:2]]
    # autograd: q, k as the backward op gives them; cos and sin: the sums of
    # dy * q (dy * rotate_half(q)) and of k's over the dims cos broadcasts along.
    cos, cos_u, sin_u = _tables(args, case.kwargs["unsqueeze_dim"])
    (q, k), (gq, gk) = (f64(t) for t in args[:2]), (f64(g) for g in grad_outputs)

    def table_grad(f):
        terms = [g * f(x) for g, x in ((gq, q), (gk, k))]
        total = sum(t.sum_to_size(cos_u.shape) for t in terms).reshape(cos.shape)
        mag = sum(t.abs().sum_to_size(cos_u.shape) for t in terms).reshape(cos.shape)
        # composed by the op's autograd from ATen ops: the products and their sums
        # in float for 16-bit dtypes, rounded once (FUZZ_TOLERANCE's "table_grads")
        return Expect(total, mag, case.row_len, key="table_grads")

    return [_rope_grad(gq, cos_u, sin_u), _rope_grad(gk, cos_u, sin_u), table_grad(lambda x: x),
            table_grad(_rotate_half)]
