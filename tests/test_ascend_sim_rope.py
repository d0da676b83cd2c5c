"""The Ascend NPU path of rotary_embedding and rotary_embedding_backward
(RotaryEmbeddingCustom, RotaryEmbeddingGradCustom) on the CPU simulator.

Reference: Hugging Face's apply_rotary_pos_emb in float64 --
q * cos.unsqueeze(d) + rotate_half(q) * sin.unsqueeze(d) -- rounded to the dtype,
and its torch.autograd gradient for the backward. Both SoCs (bfloat16 on
Ascend910B only), both layouts ([B, N, S, D] with unsqueeze_dim 1, [B, S, N, D]
with 2), cos batch 1 and B, q and k with different head counts, D of whole
blocks and D whose half is not a whole 32-byte block (DataCopyPad on 910B,
RowCopier's whole-block copies on 310P, element-wise below one block), one row,
rows not divisible by the core count, many rows over many tiles. Outputs start as
NaN (the binding's Unwritten), so an element no core writes fails.
Tolerances: reference.py's table.
"""

from __future__ import annotations

import pytest
import torch

from op_extension import ascend_sim
from reference import DTYPE_IDS, tolerance
from test_ascend_sim import KERNEL_DTYPES, SOCS, supported


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def ref_rope(q, k, cos, sin, unsqueeze_dim):
    c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s


def make_inputs(b, s, nq, nk, d, cos_batch, unsqueeze_dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)

    def shape(n):
        return (b, n, s, d) if unsqueeze_dim == 1 else (b, s, n, d)

    q = torch.randn(shape(nq), generator=g).to(dtype)
    k = torch.randn(shape(nk), generator=g).to(dtype)
    angle = torch.randn(cos_batch, s, d, generator=g) * 3
    return q, k, angle.cos().to(dtype), angle.sin().to(dtype)


# (id, B, S, Nq, Nk, D, cos batch, simulator options)
CASES = [
    ("one_row", 1, 1, 1, 1, 64, 1, {}),
    ("d128_rows_not_div_cores", 2, 7, 3, 1, 128, 2, {"_core_num": 5}),
    ("d64_many_rows_many_tiles", 2, 33, 4, 2, 64, 1, {"_ub_size": 8192}),
    ("d64_cos_batch_b", 3, 5, 2, 2, 64, 3, {}),
    ("d128_many_cores", 2, 40, 4, 2, 128, 1, {}),
    ("d80_tail", 2, 9, 3, 2, 80, 2, {"_core_num": 3}),     # half 40: not whole blocks (f32 8, f16 16)
    ("d20_short_half", 2, 6, 2, 1, 20, 1, {}),              # half 10: under one block in 16-bit, 1 f32 block + 2
    ("d4_tiny", 1, 3, 2, 1, 4, 1, {}),                      # half 2: element-wise stores on 310P
    ("decode_s1", 3, 1, 4, 2, 128, 3, {}),                  # one position per batch: cos rows repeat
    ("decode_s1_cos1", 2, 1, 8, 2, 64, 1, {"_core_num": 3}),
]


def case_params():
    return [
        pytest.param(case, ud, dt, soc, id=f"{case[0]}-ud{ud}-{DTYPE_IDS[dt]}-{soc}")
        for case in CASES
        for ud in (1, 2)
        for dt in KERNEL_DTYPES
        for soc in SOCS
        if supported(dt, soc)
    ]


@pytest.mark.parametrize("case,unsqueeze_dim,dtype,soc", case_params())
def test_rotary_embedding_forward(case, unsqueeze_dim, dtype, soc):
    _, b, s, nq, nk, d, cb, opts = case
    q, k, cos, sin = make_inputs(b, s, nq, nk, d, cb, unsqueeze_dim, dtype)
    got_q, got_k = ascend_sim.run("rotary_embedding", q, k, cos, sin, unsqueeze_dim, soc=soc, **dict(opts))
    want_q, want_k = ref_rope(q.double(), k.double(), cos.double(), sin.double(), unsqueeze_dim)
    tol = tolerance(dtype, "rotary_embedding", "forward")
    torch.testing.assert_close(got_q, want_q.to(dtype), **tol)
    torch.testing.assert_close(got_k, want_k.to(dtype), **tol)


@pytest.mark.parametrize("case,unsqueeze_dim,dtype,soc", case_params())
def test_rotary_embedding_backward(case, unsqueeze_dim, dtype, soc):
    _, b, s, nq, nk, d, cb, opts = case
    q, k, cos, sin = make_inputs(b, s, nq, nk, d, cb, unsqueeze_dim, dtype, seed=1)
    gq = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    gk = torch.randn(k.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    got_q, got_k = ascend_sim.run_backward("rotary_embedding", gq, gk, cos, sin, unsqueeze_dim, soc=soc,
                                           **dict(opts))
    q64 = q.double().requires_grad_()
    k64 = k.double().requires_grad_()
    oq, ok = ref_rope(q64, k64, cos.double(), sin.double(), unsqueeze_dim)
    want_q, want_k = torch.autograd.grad((oq, ok), (q64, k64), (gq.double(), gk.double()))
    tol = tolerance(dtype, "rotary_embedding", "backward")
    torch.testing.assert_close(got_q, want_q.to(dtype), **tol)
    torch.testing.assert_close(got_k, want_k.to(dtype), **tol)


@pytest.mark.parametrize("soc", SOCS)
def test_results_do_not_depend_on_cores_or_tiles(soc):
    q, k, cos, sin = make_inputs(2, 17, 3, 2, 80, 2, 1, torch.float16)
    base = ascend_sim.run("rotary_embedding", q, k, cos, sin, 1, soc=soc, _core_num=1)
    for opts in ({"_core_num": 7}, {"_ub_size": 4096}, {}):
        got = ascend_sim.run("rotary_embedding", q, k, cos, sin, 1, soc=soc, **opts)
        assert torch.equal(got[0], base[0]) and torch.equal(got[1], base[1])


def test_empty_k_runs_q_only():
    q, _, cos, sin = make_inputs(1, 4, 2, 1, 64, 1, 1, torch.float32)
    k = torch.empty(1, 0, 4, 64)
    got_q, got_k = ascend_sim.run("rotary_embedding", q, k, cos, sin, 1)
    torch.testing.assert_close(got_q, ref_rope(q, q, cos, sin, 1)[0])
    assert got_k.shape == k.shape


# (arguments changed, message fragment)
BAD = [
    ("unsqueeze", r"RotaryEmbeddingCustom: unsqueeze_dim 0 is not supported"),
    ("odd_d", r"RotaryEmbeddingCustom: q's last dim 7 is odd"),
    ("cos_2d", r"RotaryEmbeddingCustom: cos has shape \[4, 64\]"),
    ("cos_seq", r"RotaryEmbeddingCustom: cos has shape \[1, 5, 64\] but q"),
    ("q_3d", r"RotaryEmbeddingCustom: q has shape \[2, 4, 64\]"),
    ("double", r"RotaryEmbeddingCustom"),
    ("mixed", r"RotaryEmbeddingCustom: k has dtype"),
]


@pytest.mark.parametrize("what,message", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_are_refused_with_the_op_name(what, message):
    q, k, cos, sin = make_inputs(2, 4, 2, 1, 64, 1, 1, torch.float32)
    ud = 1
    if what == "unsqueeze":
        ud = 0
    elif what == "odd_d":
        q, k = q[..., :7].contiguous(), k[..., :7].contiguous()
        cos, sin = cos[..., :7].contiguous(), sin[..., :7].contiguous()
    elif what == "cos_2d":
        cos, sin = cos[0], sin[0]
    elif what == "cos_seq":
        cos, sin = torch.ones(1, 5, 64), torch.ones(1, 5, 64)
    elif what == "q_3d":
        q = q[0]
    elif what == "double":
        q, k, cos, sin = q.double(), k.double(), cos.double(), sin.double()
    elif what == "mixed":
        k = k.half()
    with pytest.raises(RuntimeError, match=message):
        ascend_sim.run("rotary_embedding", q, k, cos, sin, ud)


def test_backward_refuses_with_its_own_name():
    q, k, cos, sin = make_inputs(2, 4, 2, 1, 64, 1, 1, torch.float32)
    with pytest.raises(RuntimeError, match="RotaryEmbeddingGradCustom: unsqueeze_dim 3"):
        ascend_sim.run_backward("rotary_embedding", q, k, cos, sin, 3)


def test_bfloat16_refused_on_310p():
    q, k, cos, sin = make_inputs(1, 4, 2, 1, 64, 1, 1, torch.bfloat16)
    with pytest.raises(RuntimeError, match="RotaryEmbeddingCustom"):
        ascend_sim.run("rotary_embedding", q, k, cos, sin, 1, soc="Ascend310P")


# ---------------------------------------------------------------------------
# tiling contract
# ---------------------------------------------------------------------------

SOC_LIMITS = {"Ascend910B": (48, 196608), "Ascend310P": (8, 262144)}
DTYPE_BYTES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}


def rope_ub_bytes(dtype, k, half_stride, half):
    e = DTYPE_BYTES[dtype]
    hf = -(-half // 8) * 8
    scratch = hf if dtype == torch.float32 else 9 * hf
    return 4 * 2 * k * 2 * half_stride * e + 4 * scratch + 32


@pytest.mark.parametrize("op", ["rotary_embedding", "rotary_embedding_backward"])
@pytest.mark.parametrize("soc", SOCS)
def test_tiling_stays_in_the_ub_and_uses_the_cores(op, soc):
    core_num, ub_size = SOC_LIMITS[soc]
    for dtype in KERNEL_DTYPES:
        if not supported(dtype, soc):
            continue
        e = DTYPE_BYTES[dtype]
        for (b, s, nq, nk, d, cb, ud) in [(1, 1, 1, 1, 64, 1, 1), (4, 2048, 32, 8, 128, 1, 1),
                                           (2, 100, 7, 3, 64, 2, 2), (3, 9, 5, 5, 80, 3, 1),
                                           (8, 512, 16, 16, 256, 1, 2), (1, 3, 2, 1, 4, 1, 1)]:
            shapes = [(b, nq, s, d), (b, nk, s, d)] if ud == 1 else [(b, s, nq, d), (b, s, nk, d)]
            tilings = ascend_sim.tiling(op, shapes + [(cb, s, d)], dtype, soc=soc, unsqueeze_dim=ud)
            assert len(tilings) == 2
            for t, n in zip(tilings, (nq, nk)):
                rows = b * n * s
                half = d // 2
                block = 32 // e
                assert (t["rows"], t["dim"], t["half"]) == (rows, d, half)
                assert t["halfStride"] == -(-half // block) * block
                used, per, big = int(t["usedCoreNum"]), int(t["rowsPerCore"]), int(t["bigCoreNum"])
                assert 1 <= used <= core_num and big < used
                assert used * per + big == rows  # every row on exactly one core, balanced within one
                if soc == "Ascend310P" and half * e < 32:
                    assert used == 1  # element-wise stores: one core
                elif rows * d * e >= 1024 * core_num:
                    assert used == core_num  # enough work: every core
                assert t["_ubBytes"] == rope_ub_bytes(dtype, t["rowsPerTile"], t["halfStride"], half)
                assert t["_ubBytes"] <= ub_size
                assert 1 <= t["rowsPerTile"] <= min(2047, per + (1 if big else 0))
                if t["rowsPerTile"] < min(2047, per + (1 if big else 0)):
                    # as many rows as fit
                    assert rope_ub_bytes(dtype, t["rowsPerTile"] + 1, t["halfStride"], half) > ub_size
                assert t["seqDiv"] == (1 if ud == 1 else n) and t["batchRows"] == n * s
                assert t["cosRows"] == cb * s and t["cosBatched"] == (cb != 1)


def test_tiling_refuses_a_row_that_does_not_fit():
    with pytest.raises(RuntimeError, match="RotaryEmbeddingCustom: one row of 2048 float32 elements does not fit"):
        ascend_sim.tiling("rotary_embedding", [(1, 1, 1, 2048)] * 2 + [(1, 1, 2048)], torch.float32,
                          _ub_size=16384)


@pytest.mark.parametrize("negative,positive", [(-3, 1), (-2, 2)])
def test_negative_unsqueeze_dim_counts_from_the_end(negative, positive):
    q, k, cos, sin = make_inputs(2, 5, 3, 1, 64, 2, positive, torch.float32)
    got = ascend_sim.run("rotary_embedding", q, k, cos, sin, negative)
    want = ascend_sim.run("rotary_embedding", q, k, cos, sin, positive)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], ref_rope(q, k, cos, sin, negative)[0])
