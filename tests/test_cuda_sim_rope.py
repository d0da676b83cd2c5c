"""rotary_embedding's CUDA kernels (kernel/cuda/rotary_embedding.cu) on the CPU
harness, called through their launchers (run_launchers: one
tensor per call, as the op's glue calls them for q and for k), against a float64
reference written in torch: Hugging Face's apply_rotary_pos_emb for the forward,
torch.autograd of it for the backward.

Every input is a view into a buffer of NaN, so a read past either end of x, cos
or sin shows as a NaN in the result; the harness fills the output with NaN before
the launch (an element not written shows) and raises if the kernel writes past
either end of it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from op_extension import cuda_sim
from op_extension._reference import tolerance
from reference import bits

ROPE_CU = Path(__file__).resolve().parent.parent / "op_extension" / "csrc" / "kernel" / "cuda" / "rotary_embedding.cu"

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DTYPE_IDS = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16"}
dtype_params = pytest.mark.parametrize("dtype", DTYPES, ids=[DTYPE_IDS[d] for d in DTYPES])


# ---- the launchers on the harness ----------------------------------------------------


def cos_row_strides_of(x_shape, cos_shape, unsqueeze_dim: int = 1) -> list[int]:
    """cos_row_strides of RotaryEmbeddingArgs (kernel/cpu/rotary_embedding.h) for
    Hugging Face's apply_rotary_pos_emb: a dense cos of `cos_shape` ([B or 1, S, D])
    broadcast to x's `x_shape` by cos.unsqueeze(unsqueeze_dim). One stride per
    leading dim of x, in rows of D elements; 0 where cos broadcasts."""
    cos = torch.empty(cos_shape, device="meta").unsqueeze(unsqueeze_dim).expand(x_shape)
    dim = x_shape[-1]
    assert cos.stride(-1) == 1 and all(s % dim == 0 for s in cos.stride()[:-1])
    return [0 if size == 1 else stride // dim for size, stride in zip(cos.shape[:-1], cos.stride()[:-1])]


def run_launchers(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1, *,
                  backward: bool = False, cos_row_strides=None, arch: str = "sm_80",
                  block_order: str = "linear") -> torch.Tensor:
    """rotary_embedding's CUDA launchers on the harness, for ONE tensor, without
    the op's glue (the op calls them for q, then k): the forward of `x`
    ([..., D], contiguous), or with `backward` the gradient of x given `x` =
    the gradient of the output. cos and sin are contiguous with rows of D; their
    row for each row of x is Hugging Face's cos.unsqueeze(unsqueeze_dim)
    broadcast, or `cos_row_strides` (one per leading dim of x) when given.
    The output is NaN before the launch, and a write past either end of it
    raises RuntimeError (the probe: csrc/cuda_sim/probes/rotary_embedding.cpp)."""
    if cos_row_strides is None:
        cos_row_strides = cos_row_strides_of(x.shape, cos.shape, unsqueeze_dim)
    cuda_sim._configure(arch, block_order)
    return torch.ops.cuda_sim.rotary_embedding_launchers(x, cos, sin, list(cos_row_strides), backward)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def reference(x, cos, sin, unsqueeze_dim):
    """apply_rotary_pos_emb of Hugging Face for one tensor, in float64 (cos and sin
    used as they are when unsqueeze_dim is None)."""
    cos, sin = cos.double(), sin.double()
    if unsqueeze_dim is not None:
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    x = x.double()
    return x * cos + rotate_half(x) * sin


def reference_backward(grad, x, cos, sin, unsqueeze_dim):
    """The gradient of x, by torch.autograd of the float64 reference."""
    x64 = x.double().requires_grad_()
    reference(x64, cos, sin, unsqueeze_dim).backward(grad.double())
    return x64.grad


GUARD = 64  # elements: 128 bytes or more, so the views keep the buffer's 16-byte alignment


def guarded(t: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """t's values, contiguous, inside a buffer of NaN (`offset` more elements in front)."""
    buf = torch.full((t.numel() + 2 * GUARD + offset,), float("nan"), dtype=t.dtype)
    view = buf[GUARD + offset : GUARD + offset + t.numel()].view(t.shape)
    view.copy_(t)
    return view


def rope_inputs(x_shape, cos_shape, dtype, seed=0, offset=0):
    """x, cos, sin (the real thing: cos^2 + sin^2 = 1, angles up to a few thousand
    radians) and a gradient of the output, all of `dtype`, NaN-guarded."""
    g = torch.Generator().manual_seed(seed)
    dim = x_shape[-1]
    pos = torch.arange(cos_shape[-2], dtype=torch.float64).view(-1, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim)
    angles = torch.cat([pos * inv_freq] * 2, dim=-1)  # [S, dim]
    angles = angles + torch.rand(cos_shape, generator=g, dtype=torch.float64)  # batches differ
    x = torch.randn(x_shape, generator=g, dtype=torch.float64)
    dy = torch.randn(x_shape, generator=g, dtype=torch.float64)
    return tuple(guarded(t.to(dtype), offset) for t in (x, angles.cos(), angles.sin(), dy))


def check(x, cos, sin, dy, unsqueeze_dim, *, cos_row_strides=None, reverse_too=True, what=""):
    dtype = x.dtype
    kw = dict(cos_row_strides=cos_row_strides)
    out = run_launchers(x, cos, sin, unsqueeze_dim, **kw)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, reference(x, cos, sin, unsqueeze_dim).to(dtype),
                               **tolerance(dtype, "rotary_embedding", "forward"),
                               msg=lambda m: f"forward {what}: {m}")
    dx = run_launchers(dy, cos, sin, unsqueeze_dim, backward=True, **kw)
    torch.testing.assert_close(dx, reference_backward(dy, x, cos, sin, unsqueeze_dim).to(dtype),
                               **tolerance(dtype, "rotary_embedding", "backward"),
                               msg=lambda m: f"backward {what}: {m}")
    if reverse_too:
        # Blocks run in any order on a GPU: the same bits in reverse block order.
        out_r = run_launchers(x, cos, sin, unsqueeze_dim, block_order="reverse", **kw)
        dx_r = run_launchers(dy, cos, sin, unsqueeze_dim, backward=True, block_order="reverse",
                                             **kw)
        assert torch.equal(bits(out), bits(out_r)), f"forward {what}: differs in reverse block order"
        assert torch.equal(bits(dx), bits(dx_r)), f"backward {what}: differs in reverse block order"
    return out, dx


# ---------------------------------------------------------------------------
# Hugging Face's layouts
# ---------------------------------------------------------------------------

LAYOUTS = {
    # q [B, H, S, D], cos [B, S, D], cos.unsqueeze(1): the layout of the attention modules
    "bhsd": (lambda b, h, s, d: (b, h, s, d), 1),
    # q [B, S, H, D], cos.unsqueeze(2)
    "bshd": (lambda b, h, s, d: (b, s, h, d), 2),
}


@dtype_params
@pytest.mark.parametrize("dim", [2, 64, 128, 130])
@pytest.mark.parametrize("cos_batch", ["batch", "batch1"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_hugging_face_layouts(layout, cos_batch, dim, dtype):
    """dim 2 (one pair per row), 64 and 128 (128-bit accesses), 130 (odd half:
    one element per access); cos with the batch of q, or batch 1 broadcast."""
    shape_of, unsqueeze_dim = LAYOUTS[layout]
    b, h, s = 2, 3, 5
    x_shape = shape_of(b, h, s, dim)
    cos_shape = (b if cos_batch == "batch" else 1, s, dim)
    check(*rope_inputs(x_shape, cos_shape, dtype, seed=dim), unsqueeze_dim, what=f"{layout} {cos_batch} {dim}")


def test_cos_row_strides_of_the_hugging_face_layouts():
    """The strides the helper derives: rows of cos, 0 on the heads and a broadcast batch."""
    strides = cos_row_strides_of
    assert strides((2, 3, 5, 8), (2, 5, 8), 1) == [5, 0, 1]
    assert strides((2, 5, 3, 8), (2, 5, 8), 2) == [5, 1, 0]
    assert strides((2, 3, 5, 8), (1, 5, 8), 1) == [0, 0, 1]
    assert strides((2, 5, 3, 8), (1, 5, 8), 2) == [0, 1, 0]


# ---------------------------------------------------------------------------
# Paths and edges
# ---------------------------------------------------------------------------


def _launch_constants():
    text = ROPE_CU.read_text()
    threads = int(re.search(r"kRopeThreads = (\d+);", text).group(1))
    max_blocks = int(re.search(r"kRopeMaxBlocks = (\d+);", text).group(1))
    return threads, max_blocks


def _row_threads(dim: int, vec: int) -> int:
    """The launcher's blockDim.x for `dim` with `vec` elements per access."""
    threads, _ = _launch_constants()
    pairs = dim // 2 // vec
    tx = 1
    while tx < pairs and tx < threads:
        tx *= 2
    return tx


@pytest.mark.parametrize("dtype,dim,vec", [(torch.float16, 262, 1), (torch.float32, 1040, 4)],
                         ids=["f16-262-scalar", "f32-1040-vector"])
def test_more_tasks_than_one_grid(dtype, dim, vec):
    """More tasks than the capped grid's threads take in one pass: the blocks
    loop. Rows of more pairs than a block has threads make a block one task (a
    position and up to 8 of its heads): 2100 positions of one head each are
    enough, where short rows would need 2048 x 256 / pairs of them."""
    threads, max_blocks = _launch_constants()
    assert _row_threads(dim, vec) == threads
    s = 2100  # [1, 1 head, 2100, dim] with cos [1, 2100, dim]: a task per position
    x, cos, sin, dy = rope_inputs((1, 1, s, dim), (1, s, dim), dtype, seed=1)
    assert s > max_blocks
    check(x, cos, sin, dy, 1, reverse_too=False, what=f"1x1x{s}x{dim}")


@dtype_params
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_heads_in_chunks_of_a_thread(layout, dtype):
    """A thread rotates up to 8 broadcast rows of one position with one read of
    its cos/sin packs: 2 batches x 11 heads over a batch-1 cos are 22 broadcast
    rows, two chunks of 8 and a partial one of 6, over two broadcast dims (batch
    and heads) in either memory order."""
    shape, dim_u = ((2, 11, 5, 64), 1) if layout == "bhsd" else ((2, 5, 11, 64), 2)
    check(*rope_inputs(shape, (1, 5, 64), dtype, seed=11), dim_u, what=f"{layout} 2x11 heads")


@dtype_params
@pytest.mark.parametrize("dim", [514, 2400])
def test_rows_longer_than_a_block(dim, dtype):
    """More pairs in a row than threads in a block: the threads loop along the row
    (514: odd half, one element per access; 2400: 128-bit accesses)."""
    check(*rope_inputs((2, 3, 2, dim), (2, 3, dim), dtype, seed=dim), 2, what=str(dim))


@dtype_params
@pytest.mark.parametrize("dim", [16, 64, 128])
def test_misaligned_pointers_take_the_one_element_path(dim, dtype):
    """Every tensor at one element past the 16-byte grid: dims that would take
    128-bit accesses fall back to one element per access."""
    x, cos, sin, dy = rope_inputs((2, 3, 4, dim), (2, 4, dim), dtype, seed=dim, offset=1)
    assert all(t.data_ptr() % 16 != 0 for t in (x, cos, sin, dy))
    check(x, cos, sin, dy, 1, what=f"offset1 {dim}")


@dtype_params
def test_explicit_cos_row_strides(dtype):
    """Layouts other than Hugging Face's: x [tokens, heads, dim] with cos [tokens,
    dim] (strides [1, 0]); x [rows, dim] with one cos row each (strides [1]); x
    [4, 3, 2, dim] whose cos rows run in reverse order over the first dim."""
    dim = 64
    x, cos, sin, dy = rope_inputs((7, 3, dim), (7, dim), dtype, seed=3)
    out, dx = check(x, cos, sin, dy, 1, cos_row_strides=[1, 0], what="tokens x heads")

    x, cos, sin, dy = rope_inputs((9, dim), (9, dim), dtype, seed=4)
    out, dx = check(x, cos, sin, dy, None, cos_row_strides=[1], what="rows")
    torch.testing.assert_close(out, (x.double() * cos.double() + rotate_half(x.double()) * sin.double()).to(dtype),
                               **tolerance(dtype, "rotary_embedding"))

    # cos row of (i, j, k) = 1 * i + 4 * j + 12 * k of a [24, dim] cos
    x, cos, sin, dy = rope_inputs((4, 3, 2, dim), (24, dim), dtype, seed=5)
    out = run_launchers(x, cos, sin, cos_row_strides=[1, 4, 12])
    rows = (torch.arange(4).view(4, 1, 1) + 4 * torch.arange(3).view(1, 3, 1) + 12 * torch.arange(2).view(1, 1, 2))
    c, s = cos[rows], sin[rows]  # [4, 3, 2, dim]
    expected = x.double() * c.double() + rotate_half(x.double()) * s.double()
    torch.testing.assert_close(out, expected.to(dtype), **tolerance(dtype, "rotary_embedding"))


@dtype_params
def test_no_rows_launches_nothing(dtype):
    x, cos, sin, _ = rope_inputs((0, 3, 5, 64), (1, 5, 64), dtype)
    for backward in (False, True):
        out = run_launchers(x, cos, sin, 1, backward=backward)
        assert out.shape == (0, 3, 5, 64) and out.dtype == dtype


def test_special_values_stay_in_their_element():
    """inf and NaN reach only the outputs whose formula reads them."""
    x = torch.zeros(1, 1, 1, 8)
    x[..., 1] = float("inf")
    cos = torch.ones(1, 1, 8)
    sin = torch.zeros(1, 1, 8)
    out = run_launchers(x, cos, sin, 1)
    # out[1] = x[1] c[1] - x[5] s[1] = inf; out[5] = x[5] c[5] + x[1] s[5] = inf * 0 = NaN
    assert out[..., 1].isinf().all() and out[..., 5].isnan().all()
    others = [i for i in range(8) if i not in (1, 5)]
    assert (out[..., others] == 0).all()


def test_bad_arguments_raise_before_any_launch():
    x = torch.randn(2, 3, 4, 8)
    cos = sin = torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match="cos_row_strides reach cos row"):
        run_launchers(x, cos, sin, cos_row_strides=[4, 0, 2])  # reaches row 10 of 8
    with pytest.raises(ValueError, match="3 cos_row_strides expected"):
        run_launchers(x, cos, sin, cos_row_strides=[4, 1])
    with pytest.raises(ValueError, match="must be even"):
        run_launchers(torch.randn(2, 3, 4, 7), torch.randn(2, 4, 7), torch.randn(2, 4, 7), 1)
    with pytest.raises(TypeError, match="one dtype"):
        run_launchers(x, cos.double(), sin, 1)
