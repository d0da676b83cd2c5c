"""op_extension/op_defs: the per-op Python modules and the pieces the shared
modules collect from them (op_defs/__init__.py lists them).

Every op of op_protos/ gets its pieces from its module or the derived default;
a module that misnames a piece, or keys one by another op, is refused at import
rather than silently ignored; the derived functional function and fake kernel
work on the real ops too.
"""

from __future__ import annotations

import inspect
import types

import pytest
import torch
from torch.func import jvp

import op_extension
from op_extension import _fake, _protos, _reference, op_defs, ops, toolkit

PROTOS = _protos.load_protos()
FORWARD = sorted(p.name for p in PROTOS.values() if not p.backward_of)


def test_exports_come_from_the_prototypes():
    assert ops.__all__ == FORWARD
    assert op_extension.__all__ == sorted(FORWARD + ["debug", "nn", "ops", "tune"])
    for name in FORWARD:
        assert getattr(op_extension, name) is getattr(ops, name)


@pytest.mark.parametrize("name", FORWARD)
def test_every_op_module_is_collected(name):
    module = op_defs.module(PROTOS[name])
    assert module is not None and module.__name__ == f"op_extension.op_defs.{name}"
    assert op_defs.module(PROTOS[PROTOS[name].backward]) is module
    # Its own function where it has one (fast path, conversions); a new op may
    # have none (op_defs/__init__.py): ops.<name> is then the derived one.
    if hasattr(module, name):
        assert getattr(ops, name) is getattr(module, name)
    else:
        assert getattr(ops, name).__module__ != module.__name__
    for op in (name, PROTOS[name].backward):
        assert _reference.REFERENCES[op] is module.REFERENCES[op]


@pytest.mark.parametrize("name", FORWARD)
def test_the_functional_defaults_are_the_prototypes(name):
    """ops.<op>'s default for each attribute is the prototype's, of its type: a
    float attribute defaults to a float, which toolkit.float_arg returns at once
    (ops.add's alpha=1, an int, took its number checks on every call: 1.3x
    torch.add's dispatch cost instead of 0.95x)."""
    params = inspect.signature(getattr(ops, name)).parameters
    for attr in PROTOS[name].attrs:
        if not attr.has_default:
            continue
        default = params[attr.name].default
        assert default == attr.default and type(default) is type(attr.default), (
            f"ops.{name}: {attr.name}={default!r}, the prototype's default is {attr.default!r}")


def _module(**pieces) -> types.ModuleType:
    module = types.ModuleType("fake_op_module")
    module.__file__ = "op_extension/op_defs/gelu.py"
    vars(module).update(pieces)
    return module


@pytest.mark.parametrize("pieces,message", [
    ({"REFERENCE": {}}, "REFERENCE is not a piece of an op module; did you mean REFERENCES?"),
    ({"TOLERANCE": {}}, "did you mean TOLERANCES?"),
    ({"FAKES": {}}, "did you mean FAKE?"),
    ({"FAKE": {"gelu_backwards": toolkit.FakeRule()}}, r"FAKE has entries for \['gelu_backwards'\], which are not ops "
                                                     r"of this module \(its ops: gelu, gelu_backward\)"),
    ({"REFERENCES": [len]}, "REFERENCES must be a dict keyed by op name"),
    ({"TOLERANCES": {torch.float32: {"gelu_backward.backward": (1, 1)}}}, "must be 'gelu.forward' or 'gelu.backward'"),
    ({"gelu": 3}, "gelu must be the functional API function"),
])
def test_a_misnamed_piece_is_refused(pieces, message):
    with pytest.raises(op_defs.OpDefError, match=message):
        op_defs.validate(_module(**pieces), "gelu")


def test_constants_of_the_module_itself_are_fine():
    op_defs.validate(_module(KEEP_LAYOUT=toolkit.KEEP_LAYOUT, _CHOICES=("a",), REFERENCES={}), "gelu")


def test_an_op_module_needs_a_prototype():
    with pytest.raises(op_defs.OpDefError, match="no prototype op_protos/scale_shift.json"):
        op_defs.validate(_module(), "scale_shift")


@pytest.mark.parametrize("rule,message", [
    (toolkit.FakeRule(dtype_of="x"), r"names \['x'\], which are not inputs of gelu_backward"),
    (toolkit.FakeRule(same=("grad_output",), same_shape=("input",)), r"same_shape \['input'\] must be among same"),
    (toolkit.FakeRule(layout="channels_last"), "layout 'channels_last' is not one of"),
])
def test_a_fake_rule_is_checked_against_the_prototype(rule, message):
    with pytest.raises(op_defs.OpDefError, match=message):
        _fake.derived_kernel(PROTOS["gelu_backward"], rule)


def test_a_fake_rule_checks_a_required_tensor():
    with pytest.raises(op_defs.OpDefError, match="dtype_of 'weight' is an optional input"):
        _fake.derived_kernel(PROTOS["rms_norm"], toolkit.FakeRule(dtype_of="weight"))


def test_the_default_fake_rule_on_a_real_op():
    """FakeRule(): the first input's dtype, the others' device and dtype, allowed
    values, outputs by the shape rules, row-major."""
    kernel = _fake.derived_kernel(PROTOS["geglu"])
    gate = torch.empty(4, 6, device="meta").t()
    out = kernel(gate, torch.empty(6, 4, device="meta").t())
    assert out.shape == (6, 4) and out.is_contiguous()
    with pytest.raises(ValueError, match="custom::geglu: approximate must be 'none' or 'tanh', got 'erf'"):
        kernel(gate, gate, "erf")
    with pytest.raises(TypeError, match="custom::geglu: up has dtype float16 but gate has dtype float32"):
        kernel(gate, gate.half())


def test_the_derived_function_on_a_real_op():
    """rotary_embedding's derived default (its module's function also takes
    position_ids) calls the op with the prototype's signature."""
    derived = ops.derived_function(PROTOS["rotary_embedding"])
    assert str(inspect.signature(derived)) == "(q, k, cos, sin, unsqueeze_dim=1)"
    q, k, cos, sin = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    for got, want in zip(derived(q, k, cos, sin), ops.rotary_embedding(q, k, cos, sin)):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_the_derived_function_takes_the_fast_path_eagerly():
    """With `fast` (function_of passes _C.<name>), eager calls on plain tensors go
    there with every argument positional; under a torch function mode they go to
    the op; mixed dtypes, which the fast path leaves (NotImplemented), get the
    op's refusal."""
    calls = []

    def fast(*args):
        calls.append(args)
        return op_extension._C.rotary_embedding(*args)

    derived = ops.derived_function(PROTOS["rotary_embedding"], fast=fast)
    q, k, cos, sin = torch.randn(2, 3, 4, 8), torch.randn(2, 1, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    got = derived(q, k, cos, sin)
    assert len(calls) == 1 and calls[0][4] == 1  # the prototype's default, passed on
    for g, w in zip(got, torch.ops.custom.rotary_embedding(q, k, cos, sin)):
        torch.testing.assert_close(g, w, atol=0, rtol=0)
    with _SeenOps() as mode:
        derived(q, k, cos, sin, unsqueeze_dim=1)
    assert len(calls) == 1 and "custom.rotary_embedding.default" in mode.seen
    with pytest.raises(TypeError, match=r"custom::rotary_embedding: k has dtype Double but q has dtype Float"):
        derived(q, k.double(), cos, sin)
    assert len(calls) == 2


class _SeenOps(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", FORWARD)
def test_every_forward_op_has_a_generated_fast_path(name):
    """_C.<name>, generated from the prototype (op_ext_fast_path.h), documented
    by the schema's arguments in order."""
    assert getattr(op_extension._C, name).__doc__ == f"{name}({', '.join(PROTOS[name].arg_order)})"


def test_the_fast_path_leaves_mixed_dtypes_to_python():
    """A tensor of another dtype than the first tensor argument's: NotImplemented,
    for the op's function to convert (the norms) or to refuse through the op."""
    C = op_extension._C
    x = torch.randn(2, 8)
    assert C.add(x, x.double(), 1.0) is NotImplemented
    assert C.rms_norm(x, [8], torch.randn(8, dtype=torch.float64), None) is NotImplemented
    assert C.rms_norm(x, [8], None, None).dtype == torch.float32  # an absent optional tensor has no dtype
    q, cs = torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8)
    assert C.rotary_embedding(q, q, cs, cs.half(), 1) is NotImplemented
    with pytest.raises(TypeError, match="custom::add: other has dtype Double but input has dtype Float"):
        ops.add(x, x.double())


def test_an_op_without_a_transform_refuses_torch_func_from_the_fast_path():
    """The fast path hands calls under torch.func, or with a tangent, to the
    handler _transforms registered; for an op module without a TRANSFORM
    (rotary_embedding) that is the op, whose Autograd kernel refuses them."""
    assert getattr(op_defs.module(PROTOS["rotary_embedding"]), "TRANSFORM", None) is None
    q, k, cos, sin = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    with pytest.raises(RuntimeError, match="custom::rotary_embedding: torch.func transforms"):
        torch.func.grad(lambda a: ops.rotary_embedding(a, k, cos, sin)[0].sum())(q)
    with pytest.raises(RuntimeError, match="custom::rotary_embedding: an input carries a forward-mode AD tangent"):
        jvp(lambda a: ops.rotary_embedding(a, k, cos, sin), (q,), (torch.randn_like(q),))


def test_the_derived_function_goes_through_the_transform_under_torch_func():
    """With the module's TRANSFORM, a derived function takes forward-mode AD as ops.gelu does."""
    module = op_defs.module(PROTOS["gelu"])
    derived = ops.derived_function(PROTOS["gelu"], transform=module.TRANSFORM)
    x, t = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    got = jvp(derived, (x,), (t,))
    want = jvp(ops.gelu, (x,), (t,))
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="custom::gelu: an input carries a forward-mode AD tangent"):  # no transform
        jvp(ops.derived_function(PROTOS["gelu"]), (x,), (t,))
