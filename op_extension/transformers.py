"""op_extension's kernels in a Hugging Face transformers model, in one call.

    model = AutoModelForCausalLM.from_pretrained(...)
    report = op_extension.transformers.patch(model)   # in place, weights kept
    print(report)        # {'LlamaRMSNorm': 65, 'LlamaMLP': 32}; report.unknown: what was left alone

or, before a model is built (every model built afterwards gets the modules):

    op_extension.transformers.patch_classes()
    model = AutoModelForCausalLM.from_config(config)
    op_extension.transformers.unpatch_classes()       # back to Hugging Face's classes

What is replaced, by class (Llama, Mistral, Qwen2, Qwen3, Gemma 1/2/3, Phi-3):
  * RMSNorm -> op_extension.nn.CustomRMSNorm with the family's arithmetic: Llama and
    its copies (Mistral, Qwen2, Qwen3 incl. its q/k norms, Phi-3) round the normalised
    value to the input's dtype before multiplying by the weight (casting_mode
    "llama"); Gemma 1/2/3 multiply by (1 + weight) in float32 and round once
    (offset 1, casting_mode "gemma");
  * gated MLPs -> CustomSwiGLUMLP (SiLU) or CustomGEGLUMLP (GELU, erf or tanh), with
    Phi-3's fused gate_up_proj kept as it is (fused_gate_up=True); an MLP whose
    activation is not SiLU or GELU is left alone and listed;
  * GELU activation modules elsewhere -> CustomGELU.
The replacement modules reuse the model's own Parameter and Linear objects, so
the weights, their dtype and device, tied weights and any optimizer built on
them are unchanged.

transformers is not imported by ``import op_extension`` (nor by ``patch``, which
recognises modules by class name and structure); ``patch_classes`` imports the
modeling modules it patches.
"""

from __future__ import annotations

import importlib
from collections import Counter

import torch
from torch import nn

from .nn import CustomGEGLUMLP, CustomGELU, CustomRMSNorm, CustomSwiGLUMLP

__all__ = ["PatchReport", "patch", "patch_classes", "unpatch_classes", "FAMILIES"]

# family -> (modeling module, RMSNorm class, its arithmetic, MLP class)
FAMILIES: dict[str, tuple[str, str, str, str]] = {
    "llama": ("transformers.models.llama.modeling_llama", "LlamaRMSNorm", "llama", "LlamaMLP"),
    "mistral": ("transformers.models.mistral.modeling_mistral", "MistralRMSNorm", "llama", "MistralMLP"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2RMSNorm", "llama", "Qwen2MLP"),
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", "Qwen3RMSNorm", "llama", "Qwen3MLP"),
    "gemma": ("transformers.models.gemma.modeling_gemma", "GemmaRMSNorm", "gemma", "GemmaMLP"),
    "gemma2": ("transformers.models.gemma2.modeling_gemma2", "Gemma2RMSNorm", "gemma", "Gemma2MLP"),
    "gemma3": ("transformers.models.gemma3.modeling_gemma3", "Gemma3RMSNorm", "gemma", "Gemma3MLP"),
    "phi3": ("transformers.models.phi3.modeling_phi3", "Phi3RMSNorm", "llama", "Phi3MLP"),
}
_RMSNORM_STYLE = {norm: style for _, norm, style, _ in FAMILIES.values()}
_MLP_CLASSES = {mlp for *_, mlp in FAMILIES.values()}

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
    """Class name -> number of modules replaced; ``unknown``: class name -> number
    of modules that look like norms, MLPs or activations but were left alone."""

    def __init__(self) -> None:
        super().__init__()
        self.unknown: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"PatchReport(replaced={dict(self)!r}, unknown={self.unknown!r})"


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


def patch(
    model: nn.Module,
    *,
    rms_norm: bool = True,
    mlp: bool = True,
    activation: bool = True,
    mlp_casting_mode: str = "none",
) -> PatchReport:
    """Replaces, in place, every RMSNorm, gated MLP and GELU activation module of
    `model` that it knows (see the module docstring) by op_extension's modules,
    keeping the model's parameters. Returns what was replaced and what was left.

    mlp_casting_mode: "none" (default) computes act(gate) * up with one rounding,
    the fused kernel; "hf" rounds act(gate) first, as the model does in 16-bit
    dtypes, for bit-for-bit comparisons (two ops, slower).
    """
    report = PatchReport()
    unknown: Counter = Counter()
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

_ORIGINALS: dict[tuple[str, str], type] = {}


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
    mlp_casting_mode: str = "none",
) -> list[str]:
    """Replaces the RMSNorm and MLP classes in the modeling modules of `families`
    (default: all of FAMILIES) so that models built afterwards use op_extension's
    modules. Returns the classes replaced ("modeling_llama.LlamaRMSNorm", ...).
    unpatch_classes() restores them. Imports transformers."""
    families = list(FAMILIES) if families is None else list(families)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"op_extension.transformers.patch_classes: unknown families {unknown}; known: {list(FAMILIES)}")
    replaced = []
    for family in families:
        module_name, norm_name, style, mlp_name = FAMILIES[family]
        modeling = importlib.import_module(module_name)
        targets = []
        if rms_norm:
            targets.append((norm_name, lambda orig, s=style: _patched_rms_norm_class(orig, s)))
        if mlp:
            targets.append((mlp_name, lambda orig: _patched_mlp_class(orig, mlp_casting_mode)))
        for class_name, make in targets:
            key = (module_name, class_name)
            original = _ORIGINALS.get(key, getattr(modeling, class_name))
            _ORIGINALS[key] = original
            setattr(modeling, class_name, make(original))
            replaced.append(f"{module_name.rsplit('.', 1)[-1]}.{class_name}")
    return replaced


def unpatch_classes() -> None:
    """Puts back every class patch_classes replaced."""
    for (module_name, class_name), original in _ORIGINALS.items():
        setattr(importlib.import_module(module_name), class_name, original)
    _ORIGINALS.clear()
