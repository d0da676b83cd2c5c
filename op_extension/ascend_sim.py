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

from . import _ascend_sim, _sim_args, op_defs
from ._protos import load_protos

_PROTOS = load_protos()

__all__ = ["SOCS", "run", "run_backward", "tiling"]

SOCS = ("Ascend910B", "Ascend310P")

# Ops whose Ascend kernels the simulator binds (_ascend_sim.<op>), from the
# prototypes: forward, and those whose backward it binds too.
_FORWARD_OPS = _sim_args.forward_ops(lambda name: hasattr(_ascend_sim, name))
_OPS = _sim_args.forward_ops(lambda name: hasattr(_ascend_sim, name), backward=True)


def _shape_list(op: str, name: str, shape) -> list[int]:
    if isinstance(shape, numbers.Integral):
        return [int(shape)]
    if isinstance(shape, (Sequence, torch.Size)):
        return [int(s) for s in shape]
    raise TypeError(f"ascend_sim: {op}: {name} must be an int or a sequence of ints")


# The simulator's entry points take numbers as these Python types (anything else as it is).
_NUMBERS = {"float": float, "int": int}


def _call(op: str, op_name: str, args: tuple, kwargs: dict):
    """_ascend_sim.<op_name> on the arguments of custom::<op_name>: bound by name,
    converted (SIMULATOR_ARGS, then NPU_GLUE_ARGS of the op module, then each
    attr to its type); each output is returned in the shape the prototype's rule
    gives it on the arguments as bound (a 0-dim softmax passed as [1] comes back
    0-dim)."""
    bound = _sim_args.simulator_args("ascend_sim", op_name, args, kwargs)
    proto = _PROTOS[op_name]
    as_bound = dict(bound)
    glue = op_defs.piece(proto, "NPU_GLUE_ARGS", _PROTOS)
    if glue is not None:
        bound = glue(bound)
    for attr in proto.attrs:
        value = bound[attr.name]
        if attr.schema_type == "SymInt[]":
            bound[attr.name] = _shape_list(op, attr.name, value)
        elif attr.schema_type in _NUMBERS:
            bound[attr.name] = _NUMBERS[attr.schema_type](value)
    result = getattr(_ascend_sim, op_name)(*(bound[name] for name in proto.arg_order))
    outputs = result if isinstance(result, tuple) else (result,)
    shaped = []
    for out, desc in zip(outputs, proto.outputs):
        like = as_bound.get(desc.shape)
        if isinstance(like, torch.Tensor) and out.shape != like.shape and out.numel() == like.numel():
            out = out.view(like.shape)
        shaped.append(out)
    return tuple(shaped) if isinstance(result, tuple) else shaped[0]


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
    return _call(op, op, args, kwargs)


def run_backward(op: str, *args, soc: str = "Ascend910B", sat_mode: str | None = None, **kwargs):
    """Backward op of `op` (custom::<op>_backward's arguments) on the simulated `soc` (`sat_mode`: as run)."""
    _configure(soc, kwargs, sat_mode)
    if op not in _OPS:
        raise ValueError(f"ascend_sim: no Ascend backward kernel for op {op!r} (available: {', '.join(_OPS)})")
    return _call(op, _PROTOS[op].backward, args, kwargs)


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
