"""rotary_embedding: Hugging Face's apply_rotary_pos_emb on q and k
(op_protos/rotary_embedding.json), and rotary_embedding_backward."""

from __future__ import annotations

import torch

from op_extension.toolkit import (LIKE_DENSE_SOURCE, FakeRule, check_dtype, check_same, check_same_shape, eager, fast_path,
                                  placements)

_custom = torch.ops.custom


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     position_ids: torch.Tensor | None = None, unsqueeze_dim: int = 1
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding, exactly Hugging Face's apply_rotary_pos_emb:
    ``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)`` with cos
    and sin unsqueezed at `unsqueeze_dim` (1 for q of [batch, heads, seq, dim],
    2 for [batch, seq, heads, dim]) and rotate_half(x) = cat(-x2, x1) of x's two
    halves. position_ids is accepted and unused, as there. Computed in float
    with one rounding per output; q, k, cos and sin are all differentiable."""
    del position_ids  # deprecated and unused in Hugging Face's function too
    if not isinstance(unsqueeze_dim, int) or isinstance(unsqueeze_dim, bool):
        raise TypeError(f"custom::rotary_embedding: unsqueeze_dim must be an int, got {type(unsqueeze_dim).__name__}")
    if eager(q, k, cos, sin):
        out = fast_path.rotary_embedding(q, k, cos, sin, unsqueeze_dim)
        if out is not NotImplemented:  # tensors of mixed dtypes: the op's check refuses them
            return out
    return _custom.rotary_embedding.default(q, k, cos, sin, unsqueeze_dim)


# ---- fake kernels ------------------------------------------------------------------


def _check_rotary(op, q, q_name, k, k_name, cos, sin, unsqueeze_dim):
    """As check_rotary and rotary_args in csrc/torch_ext/ops/rotary_embedding.h, with the same messages
    (the dtype and device of k, cos and sin are the derived checks)."""
    check_same_shape(op, cos, "cos", sin, "sin")
    nd = cos.dim()
    torch._check_value(nd >= 1, lambda: f"custom::{op}: cos must have at least one dim (the head dim), got shape {list(cos.shape)}")
    torch._check_index(-(nd + 1) <= unsqueeze_dim <= nd, lambda: f"custom::{op}: unsqueeze_dim {unsqueeze_dim} is out of range "
                       f"for cos of {nd} dims (allowed: {-(nd + 1)} to {nd})")
    dim = unsqueeze_dim + nd + 1 if unsqueeze_dim < 0 else unsqueeze_dim
    torch._check_value(dim != nd, lambda: f"custom::{op}: unsqueeze_dim {unsqueeze_dim} would put cos's head dim off the "
                       "last position; use a dim before the last")
    cos_u = cos.unsqueeze(dim)
    for x, name in ((q, q_name), (k, k_name)):
        torch._check_value(2 <= x.dim() <= 17, lambda: f"custom::{op}: {name} must have 2 to 17 dims (leading dims, then "
                           f"the head dim), got shape {list(x.shape)}")
        torch._check_value(x.shape[-1] % 2 == 0, lambda: f"custom::{op}: the head dim (last) of {name} must be even, "
                           f"got {x.shape[-1]}")
        ok = cos_u.dim() <= x.dim() and cos_u.shape[-1] == x.shape[-1]
        for d in range(1, cos_u.dim()):
            ok = ok and (cos_u.shape[-1 - d] == 1 or cos_u.shape[-1 - d] == x.shape[-1 - d])
        torch._check_value(ok, lambda: f"custom::{op}: cos.unsqueeze({dim}) of shape {list(cos_u.shape)} does not "
                           f"broadcast to {name}'s shape {list(x.shape)} (the result must have {name}'s shape)")


def _check(op, q, k, cos, sin, unsqueeze_dim=1):
    _check_rotary(op, q, "q", k, "k", cos, sin, unsqueeze_dim)


def _check_backward(op, grad_q_embed, grad_k_embed, cos, sin, unsqueeze_dim=1):
    _check_rotary(op, grad_q_embed, "grad_q_embed", grad_k_embed, "grad_k_embed", cos, sin, unsqueeze_dim)


# Outputs in their input's layout when it is dense with the head dim innermost
# (the transposed q and k of attention are read in place): rotary_buffers in
# csrc/torch_ext/ops/rotary_embedding.h.
FAKE = {
    "rotary_embedding": FakeRule(check=_check, layout=LIKE_DENSE_SOURCE),
    "rotary_embedding_backward": FakeRule(check=_check_backward, layout=LIKE_DENSE_SOURCE),
}


# The dtypes of rotary_embedding's prototype, which the C++ check takes
# (gen::kRotaryEmbeddingDtypes; tests/test_rotary_embedding_tables.py keeps them equal).
TABLE_DTYPES = (torch.float16, torch.float32, torch.bfloat16, torch.float64)


def _table_backward_fake(grad_q_embed, grad_k_embed, q, k, cos, unsqueeze_dim=1, cos_grad=True, sin_grad=True):
    # custom::rotary_embedding_table_backward (no prototype: csrc/torch_ext/ops/rotary_embedding.h),
    # with check_rotary_table's checks and messages: each wanted table gradient
    # row-major in cos's shape, an unwanted one an empty [0] placeholder.
    op = "rotary_embedding_table_backward"
    torch._check_value(cos_grad or sin_grad, lambda: f"custom::{op}: cos_grad and sin_grad are both false: "
                       "nothing to compute")
    check_dtype(op, q, "q", TABLE_DTYPES)
    for t, name in ((k, "k"), (cos, "cos"), (grad_q_embed, "grad_q_embed"), (grad_k_embed, "grad_k_embed")):
        check_same(op, q, "q", t, name)
    _check_rotary(op, q, "q", k, "k", cos, cos, unsqueeze_dim)
    check_same_shape(op, q, "q", grad_q_embed, "grad_q_embed")
    check_same_shape(op, k, "k", grad_k_embed, "grad_k_embed")
    return (cos.new_empty(cos.shape) if cos_grad else cos.new_empty((0,)),
            cos.new_empty(cos.shape) if sin_grad else cos.new_empty((0,)))


EXTRA_FAKE = {"rotary_embedding_table_backward": _table_backward_fake}


# ---- references ----------------------------------------------------------------------


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def ref_rotary_embedding(q, k, cos, sin, unsqueeze_dim=1, *, dtype):
    # Hugging Face's apply_rotary_pos_emb.
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def ref_rotary_embedding_backward(grad_q_embed, grad_k_embed, cos, sin, unsqueeze_dim=1, *, dtype):
    # The transpose of x -> x cos + rotate_half(x) sin: g cos - rotate_half(g sin).
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return tuple(g * cos - _rotate_half(g * sin) for g in (grad_q_embed, grad_k_embed))


REFERENCES = {"rotary_embedding": ref_rotary_embedding, "rotary_embedding_backward": ref_rotary_embedding_backward}


# ---- DTensor sharding rules: op_extension.distributed registers them ----------------


def _shard_rotary_embedding(q, k, cos, sin, unsqueeze_dim=1):
    # q and k split on any dim but the head dim (last: rotate_half pairs its
    # halves), together; cos and sin split on the same dim where they span it
    # (sequence, batch), replicated where they are broadcast along it (heads,
    # a batch of 1). Linear in q and k: Partial ones give Partial outputs.
    R, S, P = placements()
    found = [([R, R], [R, R, R, R]), ([P, P], [P, P, R, R])]
    if q.ndim != k.ndim:
        return found
    at = unsqueeze_dim + cos.ndim + 1 if unsqueeze_dim < 0 else unsqueeze_dim  # cos.unsqueeze(at) broadcasts to q
    offset = q.ndim - (cos.ndim + 1)
    for d in range(q.ndim - 1):
        j = d - offset  # d's dim in cos.unsqueeze(at)
        c = j if j < at else j - 1  # and in cos
        table = S(c) if j >= 0 and j != at and cos.shape[c] == q.shape[d] else R
        found.append(([S(d), S(d)], [S(d), S(d), table, table]))
    return found


def _shard_table_backward(grad_q_embed, grad_k_embed, q, k, cos, unsqueeze_dim=1, cos_grad=True, sin_grad=True):
    # The table gradients are sums over what cos broadcasts over: q, k and their
    # gradients split together on a dim cos spans give tables split on cos's dim;
    # on a dim it is broadcast along (heads, a batch of 1), Partial tables. Linear
    # in (grad_q_embed, grad_k_embed) and in (q, k): Partial ones give Partial
    # tables. An unwanted table (an empty [0] placeholder) stays replicated.
    R, S, P = placements()

    def outs(t):
        return [t if cos_grad else R, t if sin_grad else R]

    found = [(outs(R), [R] * 5), (outs(P), [P, P, R, R, R]), (outs(P), [R, R, P, P, R])]
    if q.ndim != k.ndim:
        return found
    at = unsqueeze_dim + cos.ndim + 1 if unsqueeze_dim < 0 else unsqueeze_dim
    offset = q.ndim - (cos.ndim + 1)
    for d in range(q.ndim - 1):
        j = d - offset
        c = j if j < at else j - 1
        spans = j >= 0 and j != at and cos.shape[c] == q.shape[d]
        found.append((outs(S(c) if spans else P), [S(d)] * 4 + [S(c) if spans else R]))
    return found


# The backward is linear in the output gradients as the forward is in q and k,
# with the same shapes: the same rule.
SHARDING = {"rotary_embedding": _shard_rotary_embedding, "rotary_embedding_backward": _shard_rotary_embedding,
            "rotary_embedding_table_backward": _shard_table_backward}


# ---- benchmark: python -m op_extension.bench ---------------------------------------
# Imported here rather than with the op's imports above: nothing else in this
# module uses them.
from op_extension.bench_spec import HIDDEN, Bench, OpSetup, randn  # noqa: E402

# The attention of LLaMA-3-8B: 32 q heads of 128 (= the hidden size) and 8 k/v
# heads (grouped-query attention), one sequence of `tokens` positions.
ROPE_HEAD_DIM = 128
ROPE_Q_PER_KV = 4
ROPE_THETA = 500000.0


def composite_rotate_half(x):
    # Hugging Face rotate_half.
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def composite_rotary_embedding(q, k, cos, sin):
    # Hugging Face apply_rotary_pos_emb (Llama, Mistral, Qwen2/3, Gemma 1/2/3),
    # unsqueeze_dim=1: q, k [batch, heads, seq, head_dim], cos, sin [batch, seq, head_dim].
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (composite_rotate_half(q) * sin), (k * cos) + (composite_rotate_half(k) * sin)


def _bench_setup(ops, tokens, dtype, device, hidden):
    # q, k as the attention makes them: projections viewed [1, seq, heads, head_dim]
    # and transposed to [1, heads, seq, head_dim] (not contiguous); cos, sin as the
    # rotary embedding module makes them ([1, seq, head_dim], halves repeated).
    # `hidden` = q heads x head_dim (the dispatch section's 8: q, k, cos, sin of one head of 8).
    head_dim = min(ROPE_HEAD_DIM, hidden)
    q_heads = hidden // head_dim
    kv_heads = max(1, q_heads // ROPE_Q_PER_KV)
    q = randn((1, tokens, q_heads, head_dim), dtype, device).transpose(1, 2)
    k = randn((1, tokens, kv_heads, head_dim), dtype, device).transpose(1, 2)
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    freqs = torch.arange(tokens, dtype=torch.float32, device=device)[None, :, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    return OpSetup([q, k, cos, sin], [0, 1], {
        "ours": lambda q, k, c, s: ops.rotary_embedding(q, k, c, s),
        "composite": composite_rotary_embedding,
    }, num_outputs=2, shape=tuple(q.shape), numel=q.numel() + k.numel(), weight_numel=cos.numel(),
        output_shapes=[tuple(q.shape), tuple(k.shape)])


# N = q + k, H = one table. fwd: read q, k, cos, sin; write q_embed, k_embed.
# bwd: read dq_embed, dk_embed, cos, sin; write dq, dk (q and k are not needed).
BENCH = Bench(
    _bench_setup, fwd_bytes=(2, 2), bwd_bytes=(2, 2), order=90, n_is="q and k", h_is="one cos/sin table",
    shapes=f"q [1, {HIDDEN // ROPE_HEAD_DIM}, tokens, {ROPE_HEAD_DIM}], "
           f"k [1, {HIDDEN // ROPE_HEAD_DIM // ROPE_Q_PER_KV}, tokens, {ROPE_HEAD_DIM}]",
    config={"rope": {"q_heads": HIDDEN // ROPE_HEAD_DIM, "kv_heads": HIDDEN // ROPE_HEAD_DIM // ROPE_Q_PER_KV,
                     "head_dim": ROPE_HEAD_DIM, "theta": ROPE_THETA, "batch": 1}})
