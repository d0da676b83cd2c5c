"""The CPU RMSNorm statistics are torch's, bit for bit.

Hugging Face's RMSNorm classes compute ``x.float().pow(2).mean(-1)`` and
``rsqrt(mean + eps)``; the kernel sums the rounded squares in the order of torch's
CPU sum kernel (norm.cpp, "the sum of squares in torch's order"), so its
normalised rows equal that composite exactly. A sum in any other order, or a square
fused into its add (fma), differs in the last bit for a fraction of rows, and
then a 16-bit output rounds the other way: the patched model is no longer
bit-identical to the model it replaces (tests/test_transformers.py).
"""
import pytest
import torch

from op_extension import ops

# Under one 8-float vector (the scalar cascade), one vector, vectors plus a tail,
# 1-3 vectors past the last group of four, the first cascade level (16 groups of
# 4 vectors: 512), several levels, and a long row.
WIDTHS = [1, 3, 7, 8, 9, 31, 32, 33, 63, 100, 511, 512, 513, 2048, 4099, 11008, 40000]


def torch_composite(x: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x if x.dtype == torch.float64 else x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_rms_norm_equals_the_torch_composite(cpu_isa, dtype):
    torch.manual_seed(0)
    for cols in WIDTHS:
        rows = max(2, 20000 // cols)
        x = (torch.randn(rows, cols) * 2.5).to(dtype)
        want = torch_composite(x, 1e-6).to(dtype)
        got = ops.rms_norm(x, [cols], None, 1e-6)
        assert torch.equal(got, want), (cpu_isa, cols, (got != want).sum().item())


def test_fused_add_rms_norm_statistics_read_the_rounded_sum(cpu_isa):
    torch.manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        for cols in (7, 100, 4099):
            x, r = torch.randn(64, cols).to(dtype), torch.randn(64, cols).to(dtype)
            normed, total = ops.fused_add_rms_norm(x, r, [cols], None, 1e-5)
            assert torch.equal(total, x + r)
            assert torch.equal(normed, torch_composite(x + r, 1e-5).to(dtype)), (cpu_isa, dtype, cols)


def test_statistics_do_not_depend_on_the_thread_count(num_threads):
    x = torch.randn(300, 4099)
    num_threads(1)
    one = ops.rms_norm(x, [4099], None, 1e-6)
    num_threads(2)
    assert torch.equal(ops.rms_norm(x, [4099], None, 1e-6), one)
    assert torch.equal(one, torch_composite(x, 1e-6))


def test_rows_whose_squares_overflow_are_still_normalised():
    # torch's composite overflows to inf and returns zeros there; the kernel
    # rescales such a row (norm.cpp) and is right: this is where it departs from
    # torch on purpose.
    x = torch.full((2, 16), 1e20)
    x[1] = torch.linspace(-3, 3, 16)
    got = ops.rms_norm(x, [16], None, 1e-6)
    assert torch.equal(torch_composite(x, 1e-6)[0], torch.zeros(16))
    torch.testing.assert_close(got[0], torch.ones(16))
    assert torch.equal(got[1], torch_composite(x, 1e-6)[1])
