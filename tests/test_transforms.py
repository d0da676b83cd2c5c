"""Forward-mode AD and torch.func transforms: a direct torch.ops.custom call
with a tangent, or under a torch.func transform, is refused by name."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.func import grad, jvp
from torch.utils import _pytree as pytree

custom = torch.ops.custom


DIRECT_CALLS = {
    "add": lambda x, w: custom.add(x, w, 2.0),
    "gelu": lambda x, w: custom.gelu(x, "tanh"),
    "swiglu": lambda x, w: custom.swiglu(x, x * 2),
    "geglu": lambda x, w: custom.geglu(x, x * 2, "none"),
    "rms_norm": lambda x, w: custom.rms_norm(x, [8], w, None),
    "fused_add_rms_norm": lambda x, w: custom.fused_add_rms_norm(x, x * 2, [8], w, None),
    "layer_norm": lambda x, w: custom.layer_norm(x, [8], w, None, 1e-5),
    "softmax": lambda x, w: custom.softmax(x, -1),
}


WITH_WEIGHT = ("add", "rms_norm", "fused_add_rms_norm", "layer_norm")  # a second tensor `w` to carry a tangent


@pytest.mark.parametrize(
    "op,tangent_on", [(op, "input") for op in DIRECT_CALLS] + [(op, "weight") for op in WITH_WEIGHT]
)
def test_direct_dispatcher_call_with_a_tangent_raises(op, tangent_on):
    """torch.ops.custom.<op> has no forward derivative: a tangent on any input
    is refused by name, pointing at op_extension.ops.<op>."""
    x, w = torch.randn(3, 8), torch.randn(8)
    message = rf"custom::{op}: an input carries a forward-mode AD tangent .* call op_extension\.ops\.{op} "
    with fwAD.dual_level():
        dx = fwAD.make_dual(x, torch.randn_like(x)) if tangent_on == "input" else x
        dw = fwAD.make_dual(w, torch.randn_like(w)) if tangent_on == "weight" else w
        with pytest.raises(RuntimeError, match=message):
            DIRECT_CALLS[op](dx, dw)
    # torch.func.jvp reaches the kernel with the same kind of tangent
    with pytest.raises(RuntimeError, match=message):
        if tangent_on == "input":
            jvp(lambda a: DIRECT_CALLS[op](a, w), (x,), (x,))
        else:
            jvp(lambda b: DIRECT_CALLS[op](x, b), (w,), (w,))


@pytest.mark.parametrize("op", list(DIRECT_CALLS))
def test_direct_dispatcher_call_under_grad_transform_names_the_op(op):
    x, w = torch.randn(3, 8), torch.randn(8)
    with pytest.raises(RuntimeError, match=rf"custom::{op}: torch.func transforms .* call op_extension\.ops\.{op} "):
        grad(lambda a: pytree.tree_leaves(DIRECT_CALLS[op](a, w))[0].sum())(x)
