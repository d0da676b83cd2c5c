"""op_extension's kernels in a Hugging Face transformers model, in one call.

    model = AutoModelForCausalLM.from_pretrained(...)
    report = op_extension.transformers.patch(model)   # in place, weights kept
    print(report)        # {'LlamaRMSNorm': 65, 'LlamaMLP': 32}; report.rope: the RoPE functions
                         # routed through the op; report.unknown: what was left alone

or, before a model is built (every model built afterwards gets the modules):

    op_extension.transformers.patch_classes()
    model = AutoModelForCausalLM.from_config(config)
    op_extension.transformers.unpatch_classes()       # back to Hugging Face's classes and functions

What is replaced, by class (Llama, Mistral, Qwen2, Qwen3, Gemma 1/2/3, Phi-3):
  * RMSNorm -> op_extension.nn.CustomRMSNorm with the family's arithmetic: Llama and
    its copies (Mistral, Qwen2, Qwen3 incl. its q/k norms, Phi-3) round the normalised
    value to the input's dtype before multiplying by the weight (casting_mode
    "llama"); Gemma 1/2/3 multiply by (1 + weight) in float32 and round once
    (offset 1, casting_mode "gemma");
  * gated MLPs -> CustomSwiGLUMLP (SiLU) or CustomGEGLUMLP (GELU, erf or tanh), with
    Phi-3's fused gate_up_proj kept as it is (fused_gate_up=True); an MLP whose
    activation is not SiLU or GELU is left alone and listed;
  * GELU activation modules elsewhere -> CustomGELU;
  * rotary position embedding: the modeling module's ``apply_rotary_pos_emb``
    function -> one that calls op_extension.ops.rotary_embedding (all eight
    families; Phi-3's partial rotary on its rotated part). A module function is
    shared by every model of the family in the process, so ``patch(model)``
    replaces it process-wide (as the class-level form does) and
    ``unpatch_classes()`` puts Hugging Face's back; ``with unpatched():`` runs a
    block with Hugging Face's (to compare with an unpatched model). Inputs the
    op does not take (mixed dtypes as under autocast, a head dim the tables do
    not cover, torch.func transforms ...) go to Hugging Face's function.
The replacement modules reuse the model's own Parameter and Linear objects, so
the weights, their dtype and device, tied weights and any optimizer built on
them are unchanged.

transformers is not imported by ``import op_extension`` (nor by ``patch``, which
recognises modules by class name and structure); ``patch_classes`` imports the
modeling modules it patches.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from collections import Counter
from typing import NamedTuple

import torch
from torch import nn
from torch._C import _has_torch_function

from . import ops, toolkit
from .nn import CustomGEGLUMLP, CustomGELU, CustomRMSNorm, CustomSwiGLUMLP

__all__ = ["FAMILIES", "Family", "PatchReport", "ROPE_CASTING_MODES", "patch", "patch_classes", "unpatch_classes",
           "unpatched"]


class Family(NamedTuple):
    module: str      # the modeling module
    rms_norm: str    # its RMSNorm class
    style: str       # the RMSNorm's arithmetic (CustomRMSNorm casting mode)
    mlp: str         # its MLP class
    attention: str   # the attention class, which calls the module's apply_rotary_pos_emb
    rope: str        # that function's form: "full" (Llama's) or "partial" (Phi-3's: rotates the
                     # first cos.shape[-1] dims of the head, passes the rest)


FAMILIES: dict[str, Family] = {
    "llama": Family("transformers.models.llama.modeling_llama", "LlamaRMSNorm", "llama", "LlamaMLP",
                    "LlamaAttention", "full"),
    "mistral": Family("transformers.models.mistral.modeling_mistral", "MistralRMSNorm", "llama", "MistralMLP",
                      "MistralAttention", "full"),
    "qwen2": Family("transformers.models.qwen2.modeling_qwen2", "Qwen2RMSNorm", "llama", "Qwen2MLP",
                    "Qwen2Attention", "full"),
    "qwen3": Family("transformers.models.qwen3.modeling_qwen3", "Qwen3RMSNorm", "llama", "Qwen3MLP",
                    "Qwen3Attention", "full"),
    "gemma": Family("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm", "gemma", "GemmaMLP",
                    "GemmaAttention", "full"),
    "gemma2": Family("transformers.models.gemma2.modeling_gemma2", "Gemma2RMSNorm", "gemma", "Gemma2MLP",
                     "Gemma2Attention", "full"),
    "gemma3": Family("transformers.models.gemma3.modeling_gemma3", "Gemma3RMSNorm", "gemma", "Gemma3MLP",
                     "Gemma3Attention", "full"),
    "phi3": Family("transformers.models.phi3.modeling_phi3", "Phi3RMSNorm", "llama", "Phi3MLP",
                   "Phi3Attention", "partial"),
}
_RMSNORM_STYLE = {f.rms_norm: f.style for f in FAMILIES.values()}
_MLP_CLASSES = {f.mlp for f in FAMILIES.values()}
_ATTENTION = {f.attention: name for name, f in FAMILIES.items()}

# Activation modules by class name -> GELU approximation, or "silu".
_ACTIVATIONS = {
    "SiLU": "silu",
    "SiLUActivation": "silu",
    "GELUActivation": "none",
    "GELUTanh": "tanh",
    "PytorchGELUTanh": "tanh",
    # the tanh approximation written out (same function, other rounding)
    "NewGELUActivation": "tanh",
    "FastGELUActivation": "tanh",
}


class PatchReport(dict):
    """Class name -> number of modules replaced; ``rope``: the RoPE functions the
    model's attention modules now call through op_extension's op
    ("modeling_llama.apply_rotary_pos_emb", whether this call or an earlier one
    replaced it) -> number of attention modules that call it; ``unknown``: class
    name -> number of modules that look like norms, MLPs or activations but were
    left alone (and a RoPE function whose signature is not Hugging Face's)."""

    def __init__(self) -> None:
        super().__init__()
        self.rope: dict[str, int] = {}
        self.unknown: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"PatchReport(replaced={dict(self)!r}, rope={self.rope!r}, unknown={self.unknown!r})"


def _activation_kind(module: nn.Module | None) -> str | None:
    """'silu', 'none' or 'tanh' (GELU), or None for anything else."""
    if module is None:
        return None
    if isinstance(module, nn.GELU):
        return module.approximate
    if isinstance(module, nn.SiLU):
        return "silu"
    return _ACTIVATIONS.get(type(module).__name__)


def _rms_norm_from(module: nn.Module, style: str) -> CustomRMSNorm | None:
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(weight, nn.Parameter) or weight.dim() != 1 or eps is None:
        return None
    if style == "gemma":
        new = CustomRMSNorm(dim=weight.shape[0], eps=eps, offset=1.0, casting_mode="gemma", device="meta")
    else:
        new = CustomRMSNorm(hidden_size=weight.shape[0], eps=eps, casting_mode="llama", device="meta")
    new.weight = weight  # the model's own Parameter
    new.train(module.training)
    return new


def _mlp_from(module: nn.Module, mlp_casting_mode: str) -> nn.Module | None:
    fused = hasattr(module, "gate_up_proj")
    act = getattr(module, "activation_fn", None) if fused else getattr(module, "act_fn", None)
    kind = _activation_kind(act)
    if kind is None:
        return None
    names = ("gate_up_proj", "down_proj") if fused else ("gate_proj", "up_proj", "down_proj")
    linears = [getattr(module, n, None) for n in names]
    if not all(isinstance(m, nn.Linear) for m in linears):
        return None
    hidden, intermediate = linears[-1].out_features, linears[-1].in_features
    options = {"fused_gate_up": fused, "casting_mode": mlp_casting_mode, "device": "meta",
               "bias": linears[0].bias is not None}
    if kind == "silu":
        new = CustomSwiGLUMLP(hidden, intermediate, **options)
    else:
        new = CustomGEGLUMLP(hidden, intermediate, approximate=kind, **options)
    for name, linear in zip(names, linears):
        setattr(new, name, linear)  # the model's own Linear modules
    new.train(module.training)
    return new


# ---- rotary position embedding ------------------------------------------------
#
# The attention classes call their modeling module's apply_rotary_pos_emb(q, k,
# cos, sin, unsqueeze_dim=1) by name, so it is that module attribute that is
# replaced (as Liger-Kernel does), once per process, and restored from
# _ORIGINALS. The replacement calls ops.rotary_embedding where the op computes
# what the function it replaces computes, and that function anywhere else.

# (modeling module, attribute) -> what was there before op_extension replaced it:
# the classes patch_classes replaced and the RoPE functions of both forms.
_ORIGINALS: dict[tuple[str, str], object] = {}

ROPE_CASTING_MODES = ("none", "hf")
_ROPE_FUNCTION = "apply_rotary_pos_emb"
_ROPE_PARAMETERS = ("q", "k", "cos", "sin", "unsqueeze_dim")
_ROPE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _rope_devices() -> tuple[str, ...]:
    """Device types with a kernel for custom::rotary_embedding ("meta": its fake kernel)."""
    keys = {"cpu": "CPU", "cuda": "CUDA", torch._C._get_privateuse1_backend_name(): "PrivateUse1"}
    return ("meta",) + tuple(dev for dev, key in keys.items()
                             if torch._C._dispatch_has_kernel_for_dispatch_key("custom::rotary_embedding", key))


def _rotary_dim(q, k, cos, sin, unsqueeze_dim, partial: bool, devices: tuple[str, ...]) -> int | None:
    """How many leading dims of each head the op rotates for these arguments, or
    None where Hugging Face's function must run instead: arguments the op refuses
    (dtypes that differ, as under autocast; an odd rotary dim; a device without a
    kernel; an unsqueeze_dim the function would raise for), arguments with which
    the function computes something else (cos/sin that broadcast q or k to a
    larger shape; with the "full" form, tables narrower than the head), and calls
    the op cannot take part in (torch.func transforms, forward-mode AD, tensor
    subclasses with __torch_function__ such as DTensor)."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(cos, torch.Tensor)
            and isinstance(sin, torch.Tensor)) or type(unsqueeze_dim) is not int:
        return None
    if not torch.compiler.is_compiling() and (toolkit.active() or _has_torch_function((q, k, cos, sin))):
        return None
    dtype, device = q.dtype, q.device
    if dtype not in _ROPE_DTYPES or k.dtype != dtype or cos.dtype != dtype or sin.dtype != dtype:
        return None
    if device.type not in devices or k.device != device or cos.device != device or sin.device != device:
        return None
    n = cos.dim()
    if q.dim() != n + 1 or k.dim() != n + 1 or sin.shape != cos.shape:
        return None
    dim = unsqueeze_dim + n + 1 if unsqueeze_dim < 0 else unsqueeze_dim
    if not 0 <= dim < n:  # out of range, or the tables' head dim would not be last
        return None
    rot, head = cos.shape[-1], q.shape[-1]
    if rot == 0 or rot % 2 or k.shape[-1] != head or (rot > head if partial else rot != head):
        return None
    table = list(cos.shape[:-1])
    table.insert(dim, 1)
    for i, size in enumerate(table):  # the tables broadcast to q and k, never the other way
        if size != 1 and (size != q.shape[i] or size != k.shape[i]):
            return None
    return rot


def _rope(q, k, cos, sin, unsqueeze_dim: int, casting_mode: str):
    if casting_mode == "none":  # one rounding per output
        return ops.rotary_embedding(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    # "hf": q * cos and rotate_half(q) * sin rounded to the dtype each, then their
    # sum, as Hugging Face's function computes them. The op with sin = 0 gives the
    # first product rounded once, with cos = 0 the second: the kernels multiply in
    # float32 (float64 for float64), where the product of two 16-bit numbers is
    # exact, and a float32 (float64) product is rounded as torch rounds it.
    zeros = torch.zeros_like(cos)
    q_cos, k_cos = ops.rotary_embedding(q, k, cos, zeros, unsqueeze_dim=unsqueeze_dim)
    q_sin, k_sin = ops.rotary_embedding(q, k, zeros, sin, unsqueeze_dim=unsqueeze_dim)
    return q_cos + q_sin, k_cos + k_sin


def _rope_function(original, partial: bool, casting_mode: str):
    """The replacement of a modeling module's apply_rotary_pos_emb `original`."""
    devices = _rope_devices()

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        rot = _rotary_dim(q, k, cos, sin, unsqueeze_dim, partial, devices)
        if rot is None:
            return original(q, k, cos, sin, unsqueeze_dim)
        if rot == q.shape[-1]:
            return _rope(q, k, cos, sin, unsqueeze_dim, casting_mode)
        # Phi-3's partial rotary: the first `rot` dims rotated, the rest passed on.
        q_embed, k_embed = _rope(q[..., :rot], k[..., :rot], cos, sin, unsqueeze_dim, casting_mode)
        return torch.cat([q_embed, q[..., rot:]], dim=-1), torch.cat([k_embed, k[..., rot:]], dim=-1)

    apply_rotary_pos_emb.__doc__ = (f"op_extension's stand-in for {original.__module__}.{_ROPE_FUNCTION} "
                                    f"(rope_casting_mode={casting_mode!r}); that function where the op does "
                                    "not apply.")
    apply_rotary_pos_emb.__wrapped__ = original
    apply_rotary_pos_emb._op_extension_rope = (original, casting_mode)
    return apply_rotary_pos_emb


def _has_rope_signature(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return tuple(params) == _ROPE_PARAMETERS and params["unsqueeze_dim"].default == 1


def _check_rope_casting_mode(caller: str, casting_mode: str) -> None:
    if casting_mode not in ROPE_CASTING_MODES:
        raise ValueError(f"op_extension.transformers.{caller}: rope_casting_mode must be one of "
                         f"{ROPE_CASTING_MODES}, got {casting_mode!r}")


def _install_rope(family: str, casting_mode: str) -> str | None:
    """Puts op_extension's apply_rotary_pos_emb into the family's (imported)
    modeling module, once; returns its name ("modeling_llama.apply_rotary_pos_emb"),
    or None where the function there does not take Hugging Face's arguments."""
    f = FAMILIES[family]
    modeling = sys.modules[f.module]
    key = (f.module, _ROPE_FUNCTION)
    current = getattr(modeling, _ROPE_FUNCTION, None)
    original = _ORIGINALS.get(key, current)
    name = f"{f.module.rsplit('.', 1)[-1]}.{_ROPE_FUNCTION}"
    if getattr(current, "_op_extension_rope", None) == (original, casting_mode):
        return name  # already there
    if original is None or not _has_rope_signature(original):
        return None
    _ORIGINALS[key] = original
    setattr(modeling, _ROPE_FUNCTION, _rope_function(original, f.rope == "partial", casting_mode))
    return name


def patch(
    model: nn.Module,
    *,
    rms_norm: bool = True,
    mlp: bool = True,
    activation: bool = True,
    rope: bool = True,
    mlp_casting_mode: str = "none",
    rope_casting_mode: str = "none",
) -> PatchReport:
    """Replaces, in place, every RMSNorm, gated MLP and GELU activation module of
    `model` that it knows (see the module docstring) by op_extension's modules,
    keeping the model's parameters, and the RoPE function of each family whose
    attention modules the model has (process-wide: see the module docstring).
    Returns what was replaced and what was left.

    mlp_casting_mode: "none" (default) computes act(gate) * up with one rounding,
    the fused kernel; "hf" rounds act(gate) first, as the model does in 16-bit
    dtypes, for bit-for-bit comparisons (two ops, slower).

    rope_casting_mode: "none" (default) computes q * cos + rotate_half(q) * sin
    with one rounding, one call of the op; "hf" rounds both products and then
    their sum, as the model does, for bit-for-bit comparisons (two calls of the
    op and an add, slower). The function is shared by every model of the family,
    so the last patch or patch_classes call sets the mode for all of them.
    """
    _check_rope_casting_mode("patch", rope_casting_mode)
    report = PatchReport()
    unknown: Counter = Counter()
    if rope:
        attention: Counter = Counter()
        for module in model.modules():
            family = _ATTENTION.get(type(module).__name__)
            if family is None:
                continue
            if type(module).__module__ == FAMILIES[family].module:
                attention[family] += 1
            else:
                unknown[type(module).__name__] += 1  # a class of that name from elsewhere: its RoPE is unknown
        for family, count in attention.items():
            name = _install_rope(family, rope_casting_mode)
            if name is None:
                unknown[f"{FAMILIES[family].module.rsplit('.', 1)[-1]}.{_ROPE_FUNCTION}"] += count
            else:
                report.rope[name] = count
    own = (CustomRMSNorm, CustomSwiGLUMLP, CustomGEGLUMLP, CustomGELU)
    removed: set[int] = set()  # modules taken out of the model (an MLP's old act_fn ...)
    for parent in list(model.modules()):
        if isinstance(parent, own) or id(parent) in removed:
            continue
        for child_name, child in list(parent.named_children()):
            if isinstance(child, own):
                continue
            name = type(child).__name__
            kind = _activation_kind(child)
            if name in _RMSNORM_STYLE:
                if not rms_norm:
                    continue
                new = _rms_norm_from(child, _RMSNORM_STYLE[name])
            elif name in _MLP_CLASSES:
                if not mlp:
                    continue
                new = _mlp_from(child, mlp_casting_mode)
            elif kind is not None:
                # SiLU alone has no kernel of ours (it is fused into swiglu).
                if not activation or kind == "silu":
                    continue
                new = CustomGELU(kind)
            elif name.endswith(("RMSNorm", "MLP")):
                new = None  # a norm or MLP class this module does not know
            else:
                continue
            if new is None:
                unknown[name] += 1
            else:
                removed.update(id(m) for m in child.modules())
                setattr(parent, child_name, new)
                report[name] = report.get(name, 0) + 1
    report.unknown = dict(unknown)
    return report


# ---- class-level patching ---------------------------------------------------


def _config_activation(config) -> str | None:
    name = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
    return {"silu": "silu", "swish": "silu", "gelu": "none", "gelu_pytorch_tanh": "tanh", "gelu_new": "tanh",
            "gelu_fast": "tanh"}.get(name)


def _patched_rms_norm_class(original: type, style: str) -> type:
    # A stand-in for Hugging Face's class whose constructor returns op_extension's
    # module (not an instance of it: the module initialises its own weight, 1 or,
    # with Gemma's offset, 0, as Hugging Face's init would).
    class PatchedRMSNorm(original):
        def __new__(cls, *args, **kwargs):
            if len(args) > 2 or set(kwargs) - {"hidden_size", "dim", "eps"}:
                return original(*args, **kwargs)  # arguments op_extension's module would not honour
            size = args[0] if args else kwargs.get("hidden_size", kwargs.get("dim"))
            eps = args[1] if len(args) > 1 else kwargs.get("eps", 1e-6)
            if style == "gemma":
                return CustomRMSNorm(dim=size, eps=eps, offset=1.0, casting_mode="gemma")
            return CustomRMSNorm(hidden_size=size, eps=eps, casting_mode="llama")

    PatchedRMSNorm.__name__ = PatchedRMSNorm.__qualname__ = original.__name__
    return PatchedRMSNorm


def _patched_mlp_class(original: type, mlp_casting_mode: str) -> type:
    class PatchedMLP(original):
        def __new__(cls, config, *args, **kwargs):
            kind = _config_activation(config)
            fused = original.__name__ == "Phi3MLP"
            if kind is None or args or kwargs:
                return original(config, *args, **kwargs)  # an activation without a kernel: Hugging Face's
            bias = bool(getattr(config, "mlp_bias", False)) and not fused
            if kind == "silu":
                return CustomSwiGLUMLP(config, bias=bias, fused_gate_up=fused, casting_mode=mlp_casting_mode)
            return CustomGEGLUMLP(config, bias=bias, approximate=kind, fused_gate_up=fused,
                                  casting_mode=mlp_casting_mode)

    PatchedMLP.__name__ = PatchedMLP.__qualname__ = original.__name__
    return PatchedMLP


def patch_classes(
    families: list[str] | tuple[str, ...] | None = None,
    *,
    rms_norm: bool = True,
    mlp: bool = True,
    rope: bool = True,
    mlp_casting_mode: str = "none",
    rope_casting_mode: str = "none",
) -> list[str]:
    """Replaces the RMSNorm and MLP classes and the RoPE function in the modeling
    modules of `families` (default: all of FAMILIES) so that models built
    afterwards use op_extension's modules, and every model of those families
    (built before too) its RoPE. Returns what was replaced
    ("modeling_llama.LlamaRMSNorm", ..., "modeling_llama.apply_rotary_pos_emb").
    unpatch_classes() restores them. The casting modes are patch()'s. Imports
    transformers."""
    families = list(FAMILIES) if families is None else list(families)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"op_extension.transformers.patch_classes: unknown families {unknown}; known: {list(FAMILIES)}")
    _check_rope_casting_mode("patch_classes", rope_casting_mode)  # before anything is replaced
    replaced = []
    for family in families:
        f = FAMILIES[family]
        module_name = f.module
        modeling = importlib.import_module(module_name)
        targets = []
        if rms_norm:
            targets.append((f.rms_norm, lambda orig, s=f.style: _patched_rms_norm_class(orig, s)))
        if mlp:
            targets.append((f.mlp, lambda orig: _patched_mlp_class(orig, mlp_casting_mode)))
        for class_name, make in targets:
            key = (module_name, class_name)
            original = _ORIGINALS.get(key, getattr(modeling, class_name))
            _ORIGINALS[key] = original
            setattr(modeling, class_name, make(original))
            replaced.append(f"{module_name.rsplit('.', 1)[-1]}.{class_name}")
        if rope:
            name = _install_rope(family, rope_casting_mode)
            if name is not None:
                replaced.append(name)
    return replaced


def unpatch_classes() -> None:
    """Puts back every class patch_classes replaced and every RoPE function that
    patch_classes or patch replaced. (Modules that patch(model) replaced inside a
    model stay as they are.)"""
    for (module_name, name), original in _ORIGINALS.items():
        setattr(importlib.import_module(module_name), name, original)
    _ORIGINALS.clear()


@contextlib.contextmanager
def unpatched():
    """Runs the block with Hugging Face's own classes and RoPE functions where
    patch_classes or patch replaced them, and puts op_extension's back after it:
    to run an unpatched model beside a patched one in one process. (Modules that
    patch(model) replaced inside a model stay as they are.) Do not patch or
    unpatch inside the block."""
    saved = []
    for (module_name, name), original in list(_ORIGINALS.items()):
        modeling = sys.modules[module_name]
        saved.append((modeling, name, getattr(modeling, name)))
        setattr(modeling, name, original)
    try:
        yield
    finally:
        for modeling, name, value in saved:
            setattr(modeling, name, value)
