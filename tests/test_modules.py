"""op_extension.nn modules are drop-in replacements: same constructor, parameter
names, state_dict keys and repr as their torch (or Hugging Face LLaMA)
counterparts, and the same outputs and gradients."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from op_extension.nn import (
    CustomGEGLUMLP,
    CustomGELU,
    CustomLayerNorm,
    CustomRMSNorm,
    CustomSoftmax,
    CustomSwiGLUMLP,
    FusedAddRMSNorm,
)
from reference import tolerance

DTYPES = [torch.float32, torch.float64]
dtype_params = pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])


class LlamaMLP(nn.Module):
    """The Hugging Face LlamaMLP layout, written out: down(act(gate(x)) * up(x))."""

    def __init__(self, hidden_size, intermediate_size, bias=False, act=F.silu, dtype=None):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias, dtype=dtype)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias, dtype=dtype)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias, dtype=dtype)
        self.act = act

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class FusedAddRMSNormReference(nn.Module):
    """x + r, then torch.nn.RMSNorm; returns (normed, x + r)."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.norm = nn.RMSNorm(*args, **kwargs)

    def forward(self, x, r):
        z = x + r
        return self.norm(z), z


def _randomize(module: nn.Module) -> None:
    """Parameters away from their (ones/zeros) init, so that a swapped or
    ignored parameter shows: norm weights 1 + 0.3 * randn, biases 0.3 * randn,
    Linear weights randn / sqrt(fan_in)."""
    with torch.no_grad():
        for m in module.modules():
            for name, p in m.named_parameters(recurse=False):
                if isinstance(m, nn.Linear) and name == "weight":
                    p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
                elif name == "weight":
                    p.copy_(1 + 0.3 * torch.randn_like(p))
                else:
                    p.copy_(0.3 * torch.randn_like(p))


# Each case: (custom module factory, torch module factory, input shapes).
# Factories take the dtype.
MODULE_CASES = {
    "gelu-none": (lambda dt: CustomGELU(), lambda dt: nn.GELU(), [(3, 5, 7)]),
    "gelu-tanh": (lambda dt: CustomGELU("tanh"), lambda dt: nn.GELU(approximate="tanh"), [(3, 5, 7)]),
    "softmax-dim-1": (lambda dt: CustomSoftmax(-1), lambda dt: nn.Softmax(-1), [(3, 5, 7)]),
    "softmax-dim0": (lambda dt: CustomSoftmax(0), lambda dt: nn.Softmax(0), [(3, 5, 7)]),
    "softmax-dim1": (lambda dt: CustomSoftmax(dim=1), lambda dt: nn.Softmax(dim=1), [(3, 5, 7)]),
    "rms_norm-int": (lambda dt: CustomRMSNorm(7, dtype=dt), lambda dt: nn.RMSNorm(7, dtype=dt), [(3, 5, 7)]),
    "rms_norm-list_eps": (lambda dt: CustomRMSNorm([7], eps=1e-6, dtype=dt), lambda dt: nn.RMSNorm([7], eps=1e-6, dtype=dt), [(3, 5, 7)]),
    "rms_norm-multi_dim": (lambda dt: CustomRMSNorm((5, 7), dtype=dt), lambda dt: nn.RMSNorm((5, 7), dtype=dt), [(3, 5, 7)]),
    "rms_norm-no_affine": (lambda dt: CustomRMSNorm(7, elementwise_affine=False, dtype=dt),
                           lambda dt: nn.RMSNorm(7, elementwise_affine=False, dtype=dt), [(3, 5, 7)]),
    "rms_norm-769": (lambda dt: CustomRMSNorm(769, dtype=dt), lambda dt: nn.RMSNorm(769, dtype=dt), [(3, 769)]),
    "layer_norm-default": (lambda dt: CustomLayerNorm(7, dtype=dt), lambda dt: nn.LayerNorm(7, dtype=dt), [(3, 5, 7)]),
    "layer_norm-no_bias": (lambda dt: CustomLayerNorm(7, bias=False, dtype=dt), lambda dt: nn.LayerNorm(7, bias=False, dtype=dt), [(3, 5, 7)]),
    "layer_norm-no_affine": (lambda dt: CustomLayerNorm(7, elementwise_affine=False, dtype=dt),
                             lambda dt: nn.LayerNorm(7, elementwise_affine=False, dtype=dt), [(3, 5, 7)]),
    "layer_norm-multi_dim_eps": (lambda dt: CustomLayerNorm([5, 7], eps=1e-3, dtype=dt),
                                 lambda dt: nn.LayerNorm([5, 7], eps=1e-3, dtype=dt), [(3, 5, 7)]),
    "layer_norm-769": (lambda dt: CustomLayerNorm(769, dtype=dt), lambda dt: nn.LayerNorm(769, dtype=dt), [(3, 769)]),
    "fused_add_rms_norm": (lambda dt: FusedAddRMSNorm(7, dtype=dt), lambda dt: FusedAddRMSNormReference(7, dtype=dt),
                           [(3, 5, 7), (3, 5, 7)]),
    "fused_add_rms_norm-multi_dim_eps": (lambda dt: FusedAddRMSNorm((5, 7), eps=1e-5, dtype=dt),
                                         lambda dt: FusedAddRMSNormReference((5, 7), eps=1e-5, dtype=dt), [(3, 5, 7), (3, 5, 7)]),
    "fused_add_rms_norm-no_affine": (lambda dt: FusedAddRMSNorm(7, elementwise_affine=False, dtype=dt),
                                     lambda dt: FusedAddRMSNormReference(7, elementwise_affine=False, dtype=dt), [(4, 7), (4, 7)]),
    "swiglu_mlp": (lambda dt: CustomSwiGLUMLP(16, 40, dtype=dt), lambda dt: LlamaMLP(16, 40, dtype=dt), [(2, 3, 16)]),
    "swiglu_mlp-bias": (lambda dt: CustomSwiGLUMLP(16, 40, bias=True, dtype=dt), lambda dt: LlamaMLP(16, 40, bias=True, dtype=dt), [(2, 3, 16)]),
    "geglu_mlp-tanh_default": (lambda dt: CustomGEGLUMLP(16, 40, dtype=dt),
                               lambda dt: LlamaMLP(16, 40, act=lambda g: F.gelu(g, approximate="tanh"), dtype=dt), [(2, 3, 16)]),
    "geglu_mlp-none_bias": (lambda dt: CustomGEGLUMLP(16, 40, bias=True, approximate="none", dtype=dt),
                            lambda dt: LlamaMLP(16, 40, bias=True, act=F.gelu, dtype=dt), [(2, 3, 16)]),
}


def _param_names(m: nn.Module) -> list[tuple[str, tuple, torch.dtype]]:
    return [(k, tuple(v.shape), v.dtype) for k, v in m.named_parameters()]


def _strip(names, prefix="norm."):
    return [(n[0].removeprefix(prefix),) + tuple(n[1:]) for n in names]


def _make_pair(case, dtype):
    make_custom, make_torch, shapes = MODULE_CASES[case]
    custom, ref = make_custom(dtype), make_torch(dtype)
    return custom, ref, shapes


def _ref_state(ref: nn.Module) -> dict:
    sd = ref.state_dict()
    if isinstance(ref, FusedAddRMSNormReference):
        sd = {k.removeprefix("norm."): v for k, v in sd.items()}
    return sd


def _load_ref(ref: nn.Module, sd: dict) -> None:
    if isinstance(ref, FusedAddRMSNormReference):
        ref.norm.load_state_dict(sd, strict=True)
    else:
        ref.load_state_dict(sd, strict=True)


@dtype_params
@pytest.mark.parametrize("case", list(MODULE_CASES))
def test_same_parameters_and_state_dict(case, dtype):
    custom, ref, _ = _make_pair(case, dtype)
    ref_params = _strip(_param_names(ref))
    assert _param_names(custom) == ref_params
    assert [(k, tuple(v.shape)) for k, v in custom.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in _ref_state(ref).items()]
    # Fresh modules start from the same values (ones/zeros for the norms).
    if not case.startswith(("swiglu", "geglu")):
        for (name, a), b in zip(custom.state_dict().items(), _ref_state(ref).values()):
            assert torch.equal(a, b), name
    for p in custom.parameters():
        assert p.requires_grad and p.dtype == dtype


@dtype_params
@pytest.mark.parametrize("case", list(MODULE_CASES))
def test_load_state_dict_both_ways_and_match(case, dtype, device):
    """torch -> custom and custom -> torch checkpoints load strictly, and the
    two modules then compute the same outputs and gradients."""
    custom, ref, shapes = _make_pair(case, dtype)
    _randomize(ref)
    custom.load_state_dict(_ref_state(ref), strict=True)
    for (name, a), b in zip(custom.state_dict().items(), _ref_state(ref).values()):
        assert torch.equal(a, b), name
    custom, ref = custom.to(device), ref.to(device)

    inputs = [torch.randn(s, dtype=dtype).to(device).requires_grad_() for s in shapes]
    out_c = custom(*inputs)
    ref_leaves = [x.detach().clone().requires_grad_() for x in inputs]
    out_r = ref(*ref_leaves)
    outs_c = out_c if isinstance(out_c, tuple) else (out_c,)
    outs_r = out_r if isinstance(out_r, tuple) else (out_r,)
    assert len(outs_c) == len(outs_r)
    tol = tolerance(dtype, None, "backward")
    for a, b in zip(outs_c, outs_r):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, **tol)

    grads = [torch.randn_like(o) for o in outs_c]
    params_c = [p for _, p in custom.named_parameters()]
    params_r = [p for _, p in ref.named_parameters()]
    g_c = torch.autograd.grad(outs_c, inputs + params_c, grads)
    g_r = torch.autograd.grad(outs_r, ref_leaves + params_r, grads)
    names = [f"input{i}" for i in range(len(inputs))] + [n for n, _ in custom.named_parameters()]
    for name, a, b in zip(names, g_c, g_r):
        torch.testing.assert_close(a, b, **tol, msg=lambda m: f"grad of {name}: {m}")

    # and back: a custom checkpoint loads into the torch module
    _randomize(custom)
    ref2 = MODULE_CASES[case][1](dtype)
    _load_ref(ref2, custom.state_dict())
    for (name, a), b in zip(custom.state_dict().items(), _ref_state(ref2).values()):
        assert torch.equal(a.cpu(), b), name


@pytest.mark.parametrize("case", list(MODULE_CASES))
def test_repr(case):
    custom, ref, shapes = _make_pair(case, torch.float32)
    text = repr(custom)
    assert text.startswith(type(custom).__name__ + "(")
    str(custom)
    if case.startswith(("swiglu", "geglu")):
        for name in ("gate_proj", "up_proj", "down_proj"):
            assert f"({name}): {getattr(ref, name)!r}" in text
    else:
        assert custom.extra_repr()  # says how it was configured


def test_geglu_mlp_repr_shows_approximate():
    """The GELU form is the one setting that tells two GEGLU MLPs apart: repr
    must show it (as nn.GELU's does)."""
    none, tanh = CustomGEGLUMLP(4, 8, approximate="none"), CustomGEGLUMLP(4, 8, approximate="tanh")
    assert repr(none) != repr(tanh)
    assert "'none'" in repr(none) and "'tanh'" in repr(tanh)


@pytest.mark.parametrize("case", [c for c in MODULE_CASES if not c.startswith(("swiglu", "geglu"))])
def test_extra_repr_matches_torch(case):
    """A drop-in replacement prints its configuration as torch's module does
    (e.g. nn.LayerNorm shows bias=...)."""
    custom, ref, _ = _make_pair(case, torch.float32)
    ref = ref.norm if isinstance(ref, FusedAddRMSNormReference) else ref
    assert custom.extra_repr() == ref.extra_repr()


def test_module_attributes_match_torch():
    for custom, ref in [
        (CustomRMSNorm(8), nn.RMSNorm(8)),
        (CustomRMSNorm((2, 4), eps=1e-6, elementwise_affine=False), nn.RMSNorm((2, 4), eps=1e-6, elementwise_affine=False)),
        (CustomLayerNorm(8), nn.LayerNorm(8)),
        (CustomLayerNorm([2, 4], eps=1e-3, bias=False), nn.LayerNorm([2, 4], eps=1e-3, bias=False)),
    ]:
        for attr in ("normalized_shape", "eps", "elementwise_affine"):
            assert getattr(custom, attr) == getattr(ref, attr), attr
        assert (custom.weight is None) == (ref.weight is None)
    assert CustomLayerNorm(8, bias=False).bias is None
    assert CustomGELU("tanh").approximate == nn.GELU("tanh").approximate
    assert CustomSoftmax(1).dim == nn.Softmax(1).dim


def test_reset_parameters():
    for m in (CustomRMSNorm(6), FusedAddRMSNorm(6), CustomLayerNorm(6)):
        _randomize(m)
        m.reset_parameters()
        assert torch.equal(m.weight, torch.ones(6))
        if getattr(m, "bias", None) is not None:
            assert torch.equal(m.bias, torch.zeros(6))


def test_factory_kwargs():
    for m in (CustomRMSNorm(6, dtype=torch.bfloat16), FusedAddRMSNorm(6, dtype=torch.bfloat16),
              CustomLayerNorm(6, dtype=torch.bfloat16), CustomSwiGLUMLP(4, 8, dtype=torch.bfloat16),
              CustomGEGLUMLP(4, 8, bias=True, dtype=torch.bfloat16)):
        assert all(p.dtype == torch.bfloat16 for p in m.parameters())
    m = CustomLayerNorm(6, device="meta")
    assert m.weight.device.type == "meta" and m.bias.device.type == "meta"
    out = m(torch.empty(2, 6, device="meta"))
    assert out.shape == (2, 6) and out.device.type == "meta"


@pytest.mark.parametrize("cls", [CustomSwiGLUMLP, CustomGEGLUMLP])
@pytest.mark.parametrize("mlp_bias", [None, False, True], ids=["no_attr", "False", "True"])
def test_mlp_from_config(cls, mlp_bias):
    cfg = SimpleNamespace(hidden_size=12, intermediate_size=20)
    if mlp_bias is not None:
        cfg.mlp_bias = mlp_bias
    m = cls.from_config(cfg, dtype=torch.float64)
    assert isinstance(m, cls)
    assert m.gate_proj.weight.shape == (20, 12) and m.up_proj.weight.shape == (20, 12)
    assert m.down_proj.weight.shape == (12, 20)
    assert (m.gate_proj.bias is not None) == bool(mlp_bias)
    assert m.gate_proj.weight.dtype == torch.float64
    assert m(torch.randn(2, 12, dtype=torch.float64)).shape == (2, 12)


def test_invalid_constructor_arguments():
    with pytest.raises(ValueError, match="approximate"):
        CustomGELU("fast")
    with pytest.raises(ValueError, match="approximate"):
        CustomGEGLUMLP(4, 8, approximate="exact")
    with pytest.raises(ValueError, match="dim"):
        CustomSoftmax()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", ["rms_norm-769", "layer_norm-769", "fused_add_rms_norm", "swiglu_mlp", "geglu_mlp-tanh_default", "gelu-none"])
def test_reduced_precision_close_to_float32(case, dtype, device):
    """In float16/bfloat16 the module stays within one storage rounding (per
    the tolerance table) of its float32 self on the same (rounded) values."""
    custom32, _, shapes = _make_pair(case, torch.float32)
    _randomize(custom32)
    custom = copy.deepcopy(custom32).to(dtype)
    with torch.no_grad():
        for p32, p in zip(custom32.parameters(), custom.parameters()):
            p32.copy_(p.float())
    custom32, custom = custom32.to(device), custom.to(device)
    inputs = [torch.randn(s).to(device=device, dtype=dtype) for s in shapes]
    outs = custom(*inputs)
    outs32 = custom32(*[x.float() for x in inputs])
    outs = outs if isinstance(outs, tuple) else (outs,)
    outs32 = outs32 if isinstance(outs32, tuple) else (outs32,)
    # MLPs chain three matmuls, each rounding to dtype: allow 3 roundings.
    tol = tolerance(dtype)
    scale = 3 if "mlp" in case else 1
    for a, b in zip(outs, outs32):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b, atol=tol["atol"] * scale, rtol=tol["rtol"] * scale)


@pytest.mark.parametrize("scale", [1.0, 1e-3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cls", [CustomRMSNorm, FusedAddRMSNorm])
def test_rms_norm_modules_default_eps_match_torch(cls, dtype, scale, device):
    """With eps=None the modules normalise as torch.nn.RMSNorm(eps=None) does in
    float16/bfloat16 too, also for inputs small enough that eps matters."""
    x = (torch.randn(4, 64, dtype=torch.float64) * scale).to(device=device, dtype=dtype)
    ours = cls(64, dtype=dtype, device=device)
    theirs = nn.RMSNorm(64, dtype=dtype, device=device)
    out = ours(x, torch.zeros_like(x))[0] if cls is FusedAddRMSNorm else ours(x)
    # reference: torch's module on float32 copies (same eps rule), rounded once
    want = nn.RMSNorm(64, device=device)(x.float()).to(dtype)
    torch.testing.assert_close(out, want, **tolerance(dtype))
    torch.testing.assert_close(theirs(x), want, **tolerance(dtype))


def test_module_in_a_model_trains_like_torch(device):
    """A pre-norm block built from the custom modules follows the same SGD
    trajectory as the torch one with the same weights."""

    def block(norm_cls, mlp_cls, **mlp_kw):
        return nn.ModuleDict({"norm": norm_cls(16), "mlp": mlp_cls(16, 32, **mlp_kw)})

    def forward(b, x):
        return x + b["mlp"](b["norm"](x))

    torch_block = block(nn.RMSNorm, LlamaMLP).double().to(device)
    custom_block = block(CustomRMSNorm, CustomSwiGLUMLP).double().to(device)
    _randomize(torch_block)
    custom_block.load_state_dict({k: v for k, v in torch_block.state_dict().items()}, strict=True)
    opt_t = torch.optim.SGD(torch_block.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(custom_block.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 5, 16, dtype=torch.float64, device=device)
        for b, opt in ((torch_block, opt_t), (custom_block, opt_c)):
            opt.zero_grad()
            forward(b, x).pow(2).mean().backward()
            opt.step()
    for (k, a), b in zip(custom_block.state_dict().items(), torch_block.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m: f"{k}: {m}")
