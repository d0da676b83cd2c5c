"""The Ascend NPU path of swiglu_backward, geglu_backward and softmax_backward
(SwiGluGradCustom, GeGluGradCustom, SoftmaxGradCustom) on the CPU simulator.

As test_ascend_sim.py and test_ascend_sim_part2.py (whose helpers this file
reuses): shapes per path -- one tile, many tiles (a shrunk UB via `_ub_size`),
tails that are not 32-byte aligned, more cores than work, softmax rows and dims
that do not fit in the UB (split rows, split dim), any softmax dim -- plus
generated shapes, in each dtype on both SoCs (bfloat16 on Ascend910B only;
Ascend310P has no DataCopyPad, so its softmax rows / inner dims are whole 32-byte
blocks). Outputs start as NaN (the binding's Unwritten), so an element no core
writes fails.

References: the GLU gradients are PyTorch autograd of F.silu(gate) * up and
F.gelu(gate) * up (tests/reference.py); softmax_backward is PyTorch's own
softmax backward (torch._softmax_backward_data) given the same output y, in
float (float64 where stated), rounded to the dtype. Tolerances: reference.py's.
"""

from __future__ import annotations

import random

import pytest
import torch

from op_extension import ascend_sim
from reference import DTYPE_IDS, acc_dtype, reference
from test_ascend_sim import KERNEL_DTYPES, SOCS, ascend_tolerance, params, rand, supported



def case_params(cases, socs_at: int):
    """(case, dtype, soc) for every dtype and every SoC listed at case[socs_at]."""
    return [
        pytest.param(case, dt, soc, id=f"{case[0]}-{DTYPE_IDS[dt]}-{soc}")
        for case in cases
        for dt in KERNEL_DTYPES
        for soc in case[socs_at]
        if supported(dt, soc)
    ]


# ---------------------------------------------------------------------------
# swiglu_backward, geglu_backward: elementwise over same-shape dy/gate/up
# ---------------------------------------------------------------------------

_rng = random.Random(12)
# (id, shape, simulator options)
GLU_CASES = [
    ("single_tile_3x769", (3, 769), {}),
    ("many_tiles_small_ub", (5, 1000), {"_ub_size": 4096}),
    ("many_tiles_tiny_ub_2_cores", (7, 333), {"_ub_size": 2048, "_core_num": 2}),
    ("unaligned_tail_3_cores", (1025,), {"_ub_size": 4096, "_core_num": 3}),
    ("more_cores_than_work_17", (17,), {}),
    ("one_half_block_16", (16,), {}),
    ("hidden_4096", (2, 4096), {}),
    ("every_core_busy", (48 * 300 + 5,), {}),
] + [(f"generated_{n}", (n,), {"_ub_size": _rng.choice([4096, 8192, 196608])})
     for n in (_rng.randint(16, 20000) for _ in range(4))]


def _glu_grads(op, shape, dtype, soc, options, *extra):
    gate = rand(*shape, dtype=dtype, scale=3).requires_grad_()
    up = rand(*shape, dtype=dtype).requires_grad_()
    dy = rand(*shape, dtype=dtype)
    got = ascend_sim.run_backward(op, dy, gate.detach(), up.detach(), *extra, soc=soc, **options)
    _, grads = reference(op, (gate, up, *extra), grad_outputs=(dy,))
    return got, (grads[0], grads[1])


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("case", GLU_CASES, ids=[c[0] for c in GLU_CASES])
def test_swiglu_backward_matches_reference(case, dtype, soc):
    _, shape, options = case
    (grad_gate, grad_up), (want_gate, want_up) = _glu_grads("swiglu", shape, dtype, soc, options)
    assert grad_gate.shape == grad_up.shape == shape and grad_gate.dtype == grad_up.dtype == dtype
    tol = ascend_tolerance(dtype, "swiglu", "backward")
    torch.testing.assert_close(grad_gate, want_gate, **tol, msg=lambda m: f"grad_gate: {m}")
    torch.testing.assert_close(grad_up, want_up, **tol, msg=lambda m: f"grad_up: {m}")


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("case", GLU_CASES, ids=[c[0] for c in GLU_CASES])
def test_geglu_backward_matches_reference(case, approximate, dtype, soc):
    _, shape, options = case
    (grad_gate, grad_up), (want_gate, want_up) = _glu_grads("geglu", shape, dtype, soc, options, approximate)
    assert grad_gate.shape == grad_up.shape == shape and grad_gate.dtype == grad_up.dtype == dtype
    tol = ascend_tolerance(dtype, "geglu", "backward")
    torch.testing.assert_close(grad_gate, want_gate, **tol, msg=lambda m: f"grad_gate: {m}")
    torch.testing.assert_close(grad_up, want_up, **tol, msg=lambda m: f"grad_up: {m}")


# Gates where exp over/underflows or the input is not finite; dy includes 0 and up
# an infinity, so 0 * inf products appear too.
EXTREME_GATES = [-1e20, -200.0, -90.0, -30.0, -1e-30, -0.0, 0.0, 1e-30, 30.0, 90.0, 1e20,
                 float("inf"), float("-inf"), float("nan"), 0.5, -0.75]


@pytest.mark.parametrize("op,extra", [("swiglu", ()), ("geglu", ("none",)), ("geglu", ("tanh",))],
                         ids=["swiglu", "geglu_erf", "geglu_tanh"])
@pytest.mark.parametrize("soc", SOCS)
def test_glu_backward_special_values_as_the_cpu_op(op, extra, soc):
    # The kernels follow the CPU kernel's formulas and product order: the same
    # infinities, the same NaN, zeros where the CPU has (near) zeros.
    n = len(EXTREME_GATES)
    gate = torch.tensor(EXTREME_GATES).repeat(3)
    up = torch.tensor([2.0] * n + [-3.0] * (n - 1) + [float("inf")] + [0.25] * n)
    dy = torch.tensor([1.0] * n + [0.0] * n + [-2.0] * n)
    got = ascend_sim.run_backward(op, dy, gate, up, *extra, soc=soc)
    want = getattr(torch.ops.custom, f"{op}_backward")(dy, gate, up, *extra)
    for name, g, w in zip(("grad_gate", "grad_up"), got, want):
        assert torch.equal(g.isnan(), w.isnan()), (name, g, w)
        # The CPU's float exp saturates where the simulator's overflows to inf:
        # differences of ~1e-38 absolute where silu's sigmoid underflows.
        torch.testing.assert_close(g, w, atol=1e-6, rtol=2e-6, equal_nan=True, msg=lambda m: f"{name}: {m}")


def test_glu_backward_empty_and_non_contiguous():
    empty = torch.empty(0, 8)
    grad_gate, grad_up = ascend_sim.run_backward("swiglu", empty, empty, empty)
    assert grad_gate.shape == grad_up.shape == (0, 8)
    # Strided inputs: made contiguous by the binding, as by the torch_npu glue.
    dy, gate, up = rand(33, 9).t(), rand(9, 66)[:, ::2], rand(9, 33)
    got = ascend_sim.run_backward("geglu", dy, gate, up, "tanh")
    want = torch.ops.custom.geglu_backward(dy, gate, up, "tanh")
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_glu_backward_does_not_depend_on_the_split():
    # Elementwise: every core count and tile size gives the same bits.
    dy, gate, up = rand(3001), rand(3001, scale=3), rand(3001)
    base = ascend_sim.run_backward("geglu", dy, gate, up, "none")
    for options in ({"_core_num": 1}, {"_core_num": 5, "_ub_size": 2048}, {"_ub_size": 8192}):
        for g, b in zip(ascend_sim.run_backward("geglu", dy, gate, up, "none", **options), base):
            assert torch.equal(g, b), options


# ---------------------------------------------------------------------------
# softmax_backward: rows mode (last dim) and columns mode (any other dim)
# ---------------------------------------------------------------------------

# (id, shape, dim, options, socs)
SOFTMAX_CASES = [
    ("last_dim_3x769", (3, 769), -1, {}, SOCS),
    ("last_dim_hidden_4096", (4, 4096), 1, {}, SOCS),
    ("last_dim_many_rows_per_tile", (70, 64), -1, {"_core_num": 3}, SOCS),
    ("last_dim_many_rows_unaligned", (70, 33), -1, {}, SOCS),
    ("last_dim_many_tiles_small_ub", (40, 128), -1, {"_ub_size": 4096, "_core_num": 2}, SOCS),
    ("last_dim_split_small_ub", (5, 1000), -1, {"_ub_size": 4096}, SOCS),
    ("last_dim_split_aligned", (3, 1024), -1, {"_ub_size": 4096}, SOCS),
    ("last_dim_split_real_ub", (2, 30001), -1, {}, SOCS),
    ("last_dim_split_real_ub_aligned", (2, 40960), -1, {}, SOCS),
    ("middle_dim_unaligned_inner", (4, 7, 33), 1, {}, SOCS),
    ("middle_dim_aligned_inner", (3, 16, 32), 1, {}, SOCS),
    ("first_dim", (6, 5, 64), 0, {}, SOCS),
    ("middle_dim_wide_inner_many_cores", (1, 7, 4096), 1, {}, SOCS),
    ("middle_dim_many_slabs_small_ub", (3, 20, 96), -2, {"_ub_size": 2048, "_core_num": 2}, SOCS),
    ("middle_dim_split_small_ub", (2, 300, 40), 1, {"_ub_size": 4096}, SOCS),
    ("middle_dim_split_aligned", (2, 300, 32), 1, {"_ub_size": 4096}, SOCS),
    ("middle_dim_split_past_4095_rows", (1, 5000, 16), 1, {}, SOCS),
    ("4d_dim_2", (2, 3, 4, 5), 2, {}, SOCS),
    ("more_cores_than_work", (1, 9), -1, {}, SOCS),
    ("one_element_dim", (4, 1, 40), 1, {}, SOCS),
]
_rng = random.Random(1201)
SOFTMAX_CASES += [
    (f"generated_{i}_{shape}_{dim}", shape, dim, {"_ub_size": ub}, SOCS)
    for i, (shape, dim, ub) in enumerate(
        ((_rng.randint(1, 9), _rng.randint(1, 700), _rng.randint(1, 50)), _rng.choice([0, 1, 2, -1]),
         _rng.choice([4096, 16384, 196608])) for _ in range(6))
]


def softmax_backward_reference(dy: torch.Tensor, y: torch.Tensor, dim: int, acc=None) -> torch.Tensor:
    """PyTorch's softmax backward given the output y, in acc (the compute dtype by default)."""
    acc = acc or acc_dtype(y.dtype)
    return torch._softmax_backward_data(dy.to(acc), y.to(acc), dim, acc).to(y.dtype)


def softmax_inputs(shape, dim, dtype, scale=3.0):
    x = rand(*shape, dtype=torch.float32, scale=scale)
    return rand(*shape, dtype=dtype), torch.softmax(x, dim).to(dtype)


@pytest.mark.parametrize("case,dtype,soc", case_params(SOFTMAX_CASES, 4))
def test_softmax_backward_matches_reference(case, dtype, soc):
    _, shape, dim, options, _ = case
    dy, y = softmax_inputs(shape, dim, dtype)
    dx = ascend_sim.run_backward("softmax", dy, y, dim, soc=soc, **options)
    assert dx.shape == y.shape and dx.dtype == dtype
    torch.testing.assert_close(dx, softmax_backward_reference(dy, y, dim),
                               **ascend_tolerance(dtype, "softmax", "backward"))


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("dim,options", [(-1, {}), (-1, {"_ub_size": 4096}), (0, {}), (0, {"_ub_size": 2048})],
                         ids=["rows", "rows_split", "columns", "columns_split"])
def test_softmax_backward_float32_against_float64(dim, options, soc):
    # The sum over the dim is float32 in a different order than PyTorch's; against
    # float64 the kernel stays within a few ulp of |dy| (dx = y (dy - s), y <= 1).
    dy, y = softmax_inputs((64, 256), dim, torch.float32)
    dx = ascend_sim.run_backward("softmax", dy, y, dim, soc=soc, **options).double()
    exact = softmax_backward_reference(dy, y, dim, acc=torch.float64).double()
    assert (dx - exact).abs().max() <= 1e-6


@pytest.mark.parametrize("dim,options", [(-1, {}), (-1, {"_ub_size": 4096}), (0, {}), (0, {"_ub_size": 2048})],
                         ids=["rows", "rows_split", "columns", "columns_split"])
def test_softmax_backward_of_masked_softmax(dim, options):
    # Masked entries have y = 0 and get exactly 0; a fully masked row (column) has
    # y = NaN and gets NaN, as on CPU.
    x = rand(64, 64, scale=2)
    mask = torch.ones(64, 64, dtype=torch.bool).triu(1)
    mask = mask if dim == -1 else mask.t()
    x = x.masked_fill(mask, float("-inf"))
    if dim == -1:
        x[5] = float("-inf")
    else:
        x[:, 5] = float("-inf")
    y = torch.softmax(x, dim)
    dy = rand(64, 64)
    dx = ascend_sim.run_backward("softmax", dy, y, dim, **options)
    expected = torch.ops.custom.softmax_backward(dy, y, dim)
    torch.testing.assert_close(dx, expected, equal_nan=True)
    assert torch.equal(dx.isnan(), expected.isnan()) and dx.isnan().sum() == 64
    assert (dx[mask & ~dx.isnan()] == 0).all()


def test_softmax_backward_zero_dim_empty_and_non_contiguous():
    assert torch.equal(ascend_sim.run_backward("softmax", torch.tensor(0.7), torch.tensor(1.0), 0),
                       torch.tensor(0.0))
    assert ascend_sim.run_backward("softmax", torch.empty(3, 0, 4), torch.empty(3, 0, 4), 1).shape == (3, 0, 4)
    dy, y = rand(40, 9).t(), torch.softmax(rand(40, 9), 0).t()
    torch.testing.assert_close(ascend_sim.run_backward("softmax", dy, y, 1), torch.ops.custom.softmax_backward(dy, y, 1))


# ---------------------------------------------------------------------------
# Bad input: rejected by the aclnn entry point, naming the op
# ---------------------------------------------------------------------------

def _bw(op, *args, **kwargs):
    return lambda: ascend_sim.run_backward(op, *args, **kwargs)


BAD_INPUT = [
    ("swiglu_grad_shapes", _bw("swiglu", torch.ones(3, 5), torch.ones(3, 4), torch.ones(3, 4)),
     r"SwiGluGradCustom: gradOutput has shape \[3, 5\] but gate has \[3, 4\]"),
    ("swiglu_grad_up_dtype", _bw("swiglu", torch.ones(3, 4), torch.ones(3, 4), torch.ones(3, 4).half()),
     r"SwiGluGradCustom: up has dtype float16 but gate has float32"),
    ("swiglu_grad_float64", _bw("swiglu", *(torch.ones(8, dtype=torch.float64),) * 3),
     r"SwiGluGradCustom: gate has dtype float64; supported: float16, float32, bfloat16"),
    ("geglu_grad_approximate", _bw("geglu", *(torch.ones(8),) * 3, "fast"),
     r"GeGluGradCustom: approximate must be 'none' or 'tanh', got 'fast'"),
    ("geglu_grad_bf16_310p", _bw("geglu", *(torch.ones(16).bfloat16(),) * 3, soc="Ascend310P"),
     r"GeGluGradCustom: gate is bfloat16, which Ascend310P does not support"),
    ("softmax_grad_dim", _bw("softmax", torch.ones(3, 8), torch.ones(3, 8), 2),
     r"SoftmaxGradCustom: dim 2 is out of range for output \[3, 8\] \(expected \[-2, 1\]\)"),
    ("softmax_grad_shapes", _bw("softmax", torch.ones(3, 9), torch.ones(3, 8), 1),
     r"SoftmaxGradCustom: gradOutput has shape \[3, 9\] but output has \[3, 8\]"),
    ("softmax_grad_dtypes", _bw("softmax", torch.ones(3, 8).half(), torch.ones(3, 8), 1),
     r"SoftmaxGradCustom: gradOutput has dtype float16 but output has float32"),
    ("softmax_grad_float64", _bw("softmax", *(torch.ones(3, 8, dtype=torch.float64),) * 2, 1),
     r"SoftmaxGradCustom: output has dtype float64; supported: float16, float32, bfloat16"),
]


@pytest.mark.parametrize("name,call,message", BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_rejected_naming_the_op(name, call, message):
    with pytest.raises(RuntimeError, match=message):
        call()
