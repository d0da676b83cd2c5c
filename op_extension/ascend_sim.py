"""Run the Ascend NPU path of an op -- aclnn entry point, tiling function and
Ascend C kernel -- on the CPU simulator of the Ascend C API.

    from op_extension import ascend_sim
    y = ascend_sim.run("rms_norm", x, (4096,), w, 1e-6)                 # like ops.rms_norm
    y = ascend_sim.run("gelu", x, "tanh", soc="Ascend310P")
    dx, dw = ascend_sim.run_backward("rms_norm", dy, x, [4096], w, 1e-6)  # like custom::rms_norm_backward

Arguments are those of the op's ``op_extension.ops`` function (``run``) or of
``torch.ops.custom.<op>_backward`` (``run_backward``); tensors are CPU tensors
and results are CPU tensors. Every simulator check that fails (UB overflow, a
misaligned copy, a queue misused, an out-of-bounds access, bad arguments
rejected by the aclnn entry point, ...) raises RuntimeError with its message.

Test-only keywords: ``_ub_size`` (bytes) and ``_core_num`` shrink the simulated
SoC, so that many-tile and split-row paths are reached with small inputs.

See docs/ascend.md for what the simulator checks and what it does not.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from . import _ascend_sim

__all__ = ["SOCS", "run", "run_backward", "tiling"]

SOCS = ("Ascend910B", "Ascend310P")

# Ops whose Ascend kernels exist: forward and backward (every op).
_OPS = ("add", "gelu", "rms_norm", "fused_add_rms_norm", "layer_norm", "softmax", "swiglu", "geglu",
        "rotary_embedding")
_FORWARD_OPS = _OPS


def _bind(op_name: str, args: tuple, kwargs: dict) -> dict:
    """Arguments by name, defaults filled in, from the registered schema of custom::<op_name>."""
    schema = getattr(torch.ops.custom, op_name).default._schema
    names = [a.name for a in schema.arguments]
    if len(args) > len(names):
        raise TypeError(f"ascend_sim: {op_name} takes at most {len(names)} arguments, got {len(args)}")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"ascend_sim: {op_name} has no argument {key!r} (arguments: {', '.join(names)})")
        if key in bound:
            raise TypeError(f"ascend_sim: {op_name} got argument {key!r} twice")
        bound[key] = value
    for a in schema.arguments:
        if a.name not in bound:
            if not a.has_default_value():
                raise TypeError(f"ascend_sim: {op_name} is missing argument {a.name!r}")
            bound[a.name] = a.default_value
    return bound


def _shape_list(op: str, shape) -> list[int]:
    if isinstance(shape, numbers.Integral):
        return [int(shape)]
    if isinstance(shape, (Sequence, torch.Size)):
        return [int(s) for s in shape]
    raise TypeError(f"ascend_sim: {op}: normalized_shape must be an int or a sequence of ints")


def _rms_norm_eps(eps, x: torch.Tensor) -> float:
    # F.rms_norm's eps=None: machine epsilon of the computation dtype (float32 for
    # 16-bit inputs), as op_extension.ops.rms_norm. The aclnn entry takes a number.
    if eps is not None:
        return float(eps)
    return torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps


def _configure(soc: str, options: dict, sat_mode: str | None = None) -> None:
    ub_size = options.pop("_ub_size", None)
    core_num = options.pop("_core_num", None)
    _ascend_sim.configure(soc, ub_size, core_num, sat_mode)


def run(op: str, *args, soc: str = "Ascend910B", sat_mode: str | None = None, **kwargs):
    """Forward op `op` (one of _FORWARD_OPS) on the simulated `soc`.

    `sat_mode`: the device's float overflow mode, as aclrtSetDeviceSatMode sets it:
    "saturation" (float16/bfloat16 results: inf -> +-max, NaN -> 0) or "inf_nan";
    None is the SoC's default (Ascend910B: inf_nan; Ascend310P: saturation, its only mode).
    """
    _configure(soc, kwargs, sat_mode)
    if op not in _FORWARD_OPS:
        raise ValueError(f"ascend_sim: no Ascend kernel for op {op!r} (available: {', '.join(_FORWARD_OPS)})")
    if op == "add" and len(args) >= 2 and not isinstance(args[1], torch.Tensor):
        # As ops.add: a number `other` becomes a 0-dim tensor of input's dtype.
        args = (args[0], torch.full((), args[1], dtype=args[0].dtype)) + tuple(args[2:])
    a = _bind(op, args, kwargs)
    if op == "add":
        return _ascend_sim.add(a["input"], a["other"], float(a["alpha"]))
    if op == "gelu":
        return _ascend_sim.gelu(a["input"], a["approximate"])
    if op == "softmax":
        return _ascend_sim.softmax(a["input"], int(a["dim"]))
    if op == "swiglu":
        return _ascend_sim.swiglu(a["gate"], a["up"])
    if op == "geglu":
        return _ascend_sim.geglu(a["gate"], a["up"], a["approximate"])
    if op == "rotary_embedding":
        return _ascend_sim.rotary_embedding(a["q"], a["k"], a["cos"], a["sin"], int(a["unsqueeze_dim"]))
    x = a["input"]
    if op == "fused_add_rms_norm":
        return _ascend_sim.fused_add_rms_norm(x, a["residual"], _shape_list(op, a["normalized_shape"]), a["weight"],
                                              _rms_norm_eps(a["eps"], x))
    if op == "layer_norm":
        return _ascend_sim.layer_norm(x, _shape_list(op, a["normalized_shape"]), a["weight"], a["bias"],
                                      float(a["eps"]))
    return _ascend_sim.rms_norm(x, _shape_list(op, a["normalized_shape"]), a["weight"], _rms_norm_eps(a["eps"], x))


def run_backward(op: str, *args, soc: str = "Ascend910B", sat_mode: str | None = None, **kwargs):
    """Backward op of `op` (custom::<op>_backward's arguments) on the simulated `soc` (`sat_mode`: as run)."""
    _configure(soc, kwargs, sat_mode)
    if op not in _OPS:
        raise ValueError(f"ascend_sim: no Ascend backward kernel for op {op!r} (available: {', '.join(_OPS)})")
    a = _bind(f"{op}_backward", args, kwargs)
    if op == "add":
        return _ascend_sim.add_backward(a["grad_output"], _shape_list(op, a["input_size"]), float(a["alpha"]))
    if op == "gelu":
        return _ascend_sim.gelu_backward(a["grad_output"], a["input"], a["approximate"])
    if op == "fused_add_rms_norm":
        z = a["residual_out"]
        return _ascend_sim.fused_add_rms_norm_backward(a["grad_output"], a["grad_residual_out"], z,
                                                       _shape_list(op, a["normalized_shape"]), a["weight"],
                                                       _rms_norm_eps(a["eps"], z))
    if op == "softmax":
        return _ascend_sim.softmax_backward(a["grad_output"], a["output"], int(a["dim"]))
    if op == "swiglu":
        return _ascend_sim.swiglu_backward(a["grad_output"], a["gate"], a["up"])
    if op == "rotary_embedding":
        return _ascend_sim.rotary_embedding_backward(a["grad_q_embed"], a["grad_k_embed"], a["cos"], a["sin"],
                                                     int(a["unsqueeze_dim"]))
    if op == "geglu":
        return _ascend_sim.geglu_backward(a["grad_output"], a["gate"], a["up"], a["approximate"])
    x = a["input"]
    if op == "layer_norm":
        return _ascend_sim.layer_norm_backward(a["grad_output"], x, _shape_list(op, a["normalized_shape"]),
                                               a["weight"], a["bias"], float(a["eps"]))
    return _ascend_sim.rms_norm_backward(a["grad_output"], x, _shape_list(op, a["normalized_shape"]), a["weight"],
                                         _rms_norm_eps(a["eps"], x))


def _run_misuse(name: str, soc: str = "Ascend910B", sat_mode: str | None = None) -> None:
    """Runs one of the simulator's planted-mistake kernels (csrc/ascendc_sim/misuse);
    raises RuntimeError with the simulator's report. "clean" runs without error."""
    _ascend_sim.configure(soc, None, None, sat_mode)
    _ascend_sim._run_misuse(name)


def tiling(op: str, shapes, dtype: torch.dtype, soc: str = "Ascend910B", **attrs) -> list[dict]:
    """The TilingData the host tiling function of `op` computes, as dicts.

    `op`: "add", "add_backward", "gelu", ...; `shapes`: the tensor shapes the
    tiling depends on (see each <op>_tiling.cpp); `attrs`: op attributes
    (alpha, eps, approximate, input_size, ...) plus the test-only _ub_size and
    _core_num. Several dicts when the op launches several kernels.
    """
    _configure(soc, attrs)
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    if dtype not in names:
        raise TypeError(f"ascend_sim.tiling: dtype must be float32, float16 or bfloat16, got {dtype}")
    flat = {}
    for key, value in attrs.items():
        if isinstance(value, (list, tuple, torch.Size)):
            for i, v in enumerate(value):
                flat[f"{key}.{i}"] = float(v)
            flat[f"{key}.size"] = float(len(value))
        else:
            flat[key] = value
    return _ascend_sim.tiling(op, [list(s) for s in shapes], names[dtype], flat)
