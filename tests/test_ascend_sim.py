"""The Ascend NPU path (aclnn entry point -> tiling -> Ascend C kernel) on the CPU
simulator, against the PyTorch references of tests/reference.py.

Shapes are chosen per path rather than swept: one tile, many tiles (a shrunk
Unified Buffer, `_ub_size`, makes tiles small), tails that are not 32-byte
aligned, more cores than work, rows that do not fit in the UB; each dtype; both
SoCs. Simulated kernels are slow (every vector instruction is a Python-free but
element-by-element C++ loop), so shapes stay modest.

Tolerances: the float32/bfloat16/float16 defaults of reference.TOLERANCES apply,
except where a kernel computes in float16 itself: AddCustom adds float16 inputs
in float16, rounding after Muls and after Add, which ASCEND_TOLERANCES records.
"""

from __future__ import annotations

import pytest
import torch

from op_extension import ascend_sim
from reference import DTYPE_IDS, reference, tolerance

SOCS = ascend_sim.SOCS
KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Ascend-specific tolerances, (atol, rtol), on top of reference.TOLERANCES:
# * add.forward in float16 with alpha != 1: two float16 roundings (Muls, then
#   Add) instead of one; each is half an ulp (2^-11 relative), so the result
#   is within 1.5 ulp of the float reference: 2e-3 relative plus 1e-3 absolute.
#   The exact float16 behaviour is checked separately (test_add_float16_rounds_per_instruction).
ASCEND_TOLERANCES = {
    (torch.float16, "add.forward"): (1e-3, 2e-3),
}


def ascend_tolerance(dtype: torch.dtype, op: str, kind: str = "forward") -> dict:
    if (dtype, f"{op}.{kind}") in ASCEND_TOLERANCES:
        atol, rtol = ASCEND_TOLERANCES[(dtype, f"{op}.{kind}")]
        return {"atol": atol, "rtol": rtol}
    return tolerance(dtype, op, kind)


def supported(dtype: torch.dtype, soc: str) -> bool:
    return not (dtype == torch.bfloat16 and soc == "Ascend310P")


def params(dtypes=KERNEL_DTYPES, socs=SOCS):
    return [
        pytest.param(dt, soc, id=f"{DTYPE_IDS[dt]}-{soc}") for dt in dtypes for soc in socs if supported(dt, soc)
    ]


def rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, dtype=torch.float32) * scale).to(dtype)


# ---------------------------------------------------------------------------
# add
# ---------------------------------------------------------------------------

# (id, input shape, other shape, alpha, simulator options)
ADD_CASES = [
    ("single_tile_3x769", (3, 769), (3, 769), 1.0, {}),
    ("alpha_2.5", (3, 769), (3, 769), 2.5, {}),
    ("many_tiles_small_ub", (5, 1000), (5, 1000), -0.5, {"_ub_size": 2048}),
    ("broadcast_row", (4, 77), (77,), 1.0, {}),
    ("broadcast_column_and_row", (6, 1), (1, 9), 0.75, {}),
    ("scalar_other", (3, 33), (), 2.0, {}),
    ("more_cores_than_work_17", (17,), (17,), 1.0, {}),
    ("tail_of_one_element", (1025,), (1025,), 1.0, {"_ub_size": 4096, "_core_num": 3}),
    ("every_core_busy", (48 * 300 + 5,), (48 * 300 + 5,), 1.0, {}),
]


@pytest.mark.parametrize("dtype,soc", params())
@pytest.mark.parametrize("case", ADD_CASES, ids=[c[0] for c in ADD_CASES])
def test_add_matches_reference(case, dtype, soc):
    _, xs, ys, alpha, options = case
    x, y = rand(*xs, dtype=dtype), rand(*ys, dtype=dtype)
    out = ascend_sim.run("add", x, y, alpha, soc=soc, **options)
    (expected,), _ = reference("add", (x, y, alpha))
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, **ascend_tolerance(dtype, "add"))


@pytest.mark.parametrize("soc", SOCS)
def test_add_float16_rounds_per_instruction(soc):
    # Muls then Add, each rounded to float16 -- exactly what PyTorch's CPU float16
    # ops do one at a time (compute in float, round to half).
    x, y = rand(4, 1000, dtype=torch.float16, scale=3), rand(4, 1000, dtype=torch.float16, scale=3)
    out = ascend_sim.run("add", x, y, 2.7, soc=soc)
    scaled = y * torch.tensor(2.7, dtype=torch.float16)
    assert torch.equal(out, x + scaled)
    # ... which differs from rounding the float result once: the simulator really rounds twice.
    once = (x.float() + torch.tensor(2.7, dtype=torch.float16).float() * y.float()).half()
    assert not torch.equal(out, once)


def test_add_number_other():
    x = rand(3, 40)
    torch.testing.assert_close(ascend_sim.run("add", x, 1.5), x + 1.5)


@pytest.mark.parametrize("soc", SOCS)
def test_add_empty(soc):
    out = ascend_sim.run("add", torch.empty(0, 5), torch.empty(0, 5), soc=soc)
    assert out.shape == (0, 5)


# ---------------------------------------------------------------------------
# Bad input: rejected by the aclnn entry point, naming the op
# ---------------------------------------------------------------------------


def test_add_rejects_float64():
    x = torch.randn(4, 8, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"AddCustom: input has dtype float64; supported: float16, float32"):
        ascend_sim.run("add", x, x)


def test_add_rejects_mixed_dtypes():
    with pytest.raises(RuntimeError, match=r"AddCustom: other has dtype float16 but input has float32"):
        ascend_sim.run("add", torch.randn(4, 8), torch.randn(4, 8).half())


def test_bfloat16_rejected_on_310p():
    x = rand(4, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"AddCustom: input is bfloat16, which Ascend310P does not support"):
        ascend_sim.run("add", x, x, soc="Ascend310P")


def test_310p_rejects_tensor_below_one_block():
    # No DataCopyPad on 310P: 5 floats (20 bytes) cannot be moved at all.
    x = torch.randn(5)
    with pytest.raises(RuntimeError, match=r"AddCustom: on Ascend310P a tensor of 5 float32 elements is smaller than one "
                                           r"32-byte block"):
        ascend_sim.run("add", x, x, soc="Ascend310P")
    # The same tensor on 910B moves with DataCopyPad.
    torch.testing.assert_close(ascend_sim.run("add", x, x, soc="Ascend910B"), 2 * x)


def test_unknown_soc():
    with pytest.raises(ValueError, match=r"unknown soc 'Ascend999'"):
        ascend_sim.run("add", torch.ones(8), torch.ones(8), soc="Ascend999")


# ---------------------------------------------------------------------------
# The simulator's own checks, on small kernels with one planted mistake each
# ---------------------------------------------------------------------------

MISUSE = [
    ("ub_overflow", r"UB overflow: TPipe::InitBuffer of TQue<VECIN, 2> #1 requests 327680 bytes \(2 x 163840\) at UB "
                    r"offset 0 but the Unified Buffer has 196608 bytes \(196608 available\)"),
    ("misaligned_copy_length", r"DataCopy\(GM->UB\): moves 5 x float = 20 bytes, not a multiple of 32 bytes"),
    ("misaligned_ub_address", r"DataCopy\(GM->UB\): LocalTensor start address UB\+12 is not 32-byte aligned"),
    ("deque_empty", r"TQue::DeQue on an empty queue"),
    ("never_freed", r"tensor never freed: a buffer of TQue<VECIN, 1> #1 \(UB\+0\) was allocated with AllocTensor"),
    ("alloc_past_depth", r"TQue::AllocTensor: all 2 buffers of TQue<VECIN, 2> #1 are in use"),
    ("free_foreign_tensor", r"TQue::FreeTensor: tensor was not allocated from TQue<VECOUT, 1> #2 \(it belongs to "
                            r"TQue<VECIN, 1> #1\)"),
    ("use_after_free", r"DataCopy\(UB->GM\): LocalTensor used after FreeTensor"),
    ("local_out_of_bounds", r"LocalTensor::SetValue: 65 elements of float requested but the LocalTensor has 64"),
    ("global_out_of_bounds", r"DataCopy\(GM->UB\): 128 elements requested from a GlobalTensor of 64 elements"),
    ("core_race", r"core 1 overwrites byte \d+ of GM buffer 'aclrtMalloc buffer' that core 0 wrote with a different "
                  r"value in the same launch"),
    ("padding_read", r"wrote NaN to element 5 \(it computed on undefined UB bytes\)"),
]


@pytest.mark.parametrize("name,message", MISUSE, ids=[m[0] for m in MISUSE])
def test_misuse_is_reported(name, message):
    with pytest.raises(RuntimeError, match=r"AscendC simulator|kernel " + name) as info:
        ascend_sim._run_misuse(name, soc="Ascend910B")
    assert __import__("re").search(message, str(info.value)), str(info.value)


def test_misuse_control_kernel_runs():
    ascend_sim._run_misuse("clean", soc="Ascend910B")
    ascend_sim._run_misuse("clean", soc="Ascend310P")


def test_data_copy_pad_exists_only_on_910b():
    ascend_sim._run_misuse("data_copy_pad", soc="Ascend910B")
    with pytest.raises(RuntimeError, match=r"DataCopyPad is not available on Ascend310P"):
        ascend_sim._run_misuse("data_copy_pad", soc="Ascend310P")
