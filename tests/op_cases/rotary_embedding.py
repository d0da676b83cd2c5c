"""rotary_embedding and rotary_embedding_backward: the test data of the shared tests
(see op_cases/__init__.py). tests/test_rotary_embedding.py holds the op's own tests
(Hugging Face's apply_rotary_pos_emb as the reference, every layout)."""

import torch

from op_cases import SAME_DTYPE, Bad, Call, Fake, H, huge, rand, sample
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
