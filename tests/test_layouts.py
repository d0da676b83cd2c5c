"""Output layouts (issue 14): the elementwise ops and rms_norm keep the input's
dense layout (channels_last, a transpose) where torch's ops do, on the real
kernels and in the fake kernels alike; layer_norm, softmax and the fused op
return row-major outputs, as torch's layer_norm and softmax do.

The ops are those whose tests/op_cases/<op>.py has LAYOUT (ours and torch's
call) and BACKWARD_LAYOUT (the backward op's call)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import op_cases
import op_extension  # noqa: F401
from op_extension import ops

def channels_last(*shape):
    return torch.randn(*shape).to(memory_format=torch.channels_last)


def transposed(rows, cols):
    return torch.randn(cols, rows).t()


LAYOUTS = {"channels_last": lambda: channels_last(2, 3, 4, 6), "transposed": lambda: transposed(6, 10)}

# op -> (ours, torch's), on one or two tensors of the layout
CASES = dict(op_cases.each("LAYOUT", default=None))
# forward op -> its backward op's call (dy, x, y), whose outputs keep a channels_last layout
BACKWARD_CASES = {op_cases.forward_of(op): call for op, call in op_cases.each("LAYOUT", op_cases.BACKWARD_OPS, default=None)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", CASES)
def test_output_layout_follows_torch(op, layout):
    x, y = LAYOUTS[layout](), LAYOUTS[layout]()
    ours, theirs = CASES[op]
    got, want = ours(x, y), theirs(x, y)
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # The fake kernel gives the same strides (torch.compile and export see them).
    with FakeTensorMode() as mode:
        fake = ours(mode.from_tensor(x), mode.from_tensor(y))
    assert fake.stride() == got.stride()


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


@pytest.mark.parametrize("op", list(BACKWARD_CASES))
def test_backward_outputs_keep_the_layout(op):
    x, y = channels_last(2, 3, 4, 6), channels_last(2, 3, 4, 6)
    dy = channels_last(2, 3, 4, 6)
    call = BACKWARD_CASES[op]
    got = _tuple(call(dy, x, y))
    for g in got:
        assert g.is_contiguous(memory_format=torch.channels_last)
    with FakeTensorMode() as mode:
        fx, fy, fdy = (mode.from_tensor(t) for t in (x, y, dy))
        fake = _tuple(call(fdy, fx, fy))
    assert [f.stride() for f in fake] == [g.stride() for g in got]


def test_mixed_layouts_give_row_major():
    # Operands of different layouts: row-major output (copies in), on both sides.
    x, y = channels_last(2, 3, 4, 6), torch.randn(2, 3, 4, 6)
    out = ops.swiglu(x, y)
    assert out.is_contiguous()
    torch.testing.assert_close(out, F.silu(x) * y)
    with FakeTensorMode() as mode:
        assert ops.swiglu(mode.from_tensor(x), mode.from_tensor(y)).is_contiguous()


def test_gradients_through_channels_last():
    x = channels_last(2, 3, 4, 6).requires_grad_()
    w = torch.randn(6, requires_grad=True)
    ops.rms_norm(ops.gelu(x), [6], w, 1e-6).sum().backward()
    xr = x.detach().clone().requires_grad_()
    wr = w.detach().clone().requires_grad_()
    F.rms_norm(F.gelu(xr), [6], wr, 1e-6).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.grad, wr.grad, atol=1e-5, rtol=1e-5)
