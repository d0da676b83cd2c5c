"""The CUDA traffic model's figure beside a row's time (issue 26).

A GPU run shows a row's time and its %copy bandwidth; what it cannot show is
whether a slow row is a kernel that moves more bytes than it must or one that
moves them slowly. The CPU harness of the CUDA kernels (op_extension.cuda_sim)
counts every global load and store, so each row gets the harness's bytes moved
over the minimum ("model", 1.00 = each input read once, each output written
once; the workspace's own round trip left out, as tests/test_cuda_sim_traffic.py
counts it) and its launches: a row far from 1.00 is off its bytes, a row at 1.00
but below its %copy target is off its bandwidth.

The row's call is taken from the op itself: `ours` runs once on CPU copies of a
smaller setup (at most TRAFFIC_TOKENS tokens: the harness runs every GPU thread
on the CPU) under a dispatch mode that records the torch.ops.custom calls it
makes (the forward op, and for fwd+bwd the backward op), and each recorded call
runs on the harness. Nothing here names an op.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .harness import with_grad
from .plan import make_setup

# Tokens of the harness's call: the per-row pattern of every kernel is reached
# (the norms' blocks take up to 4 rows, RoPE's threads up to 8 heads), and one
# row costs well under a second on the harness.
TRAFFIC_TOKENS = 16


class _RecordCustomCalls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "custom":
            self.calls.append((func._opname, tuple(_detached(a) for a in args), kwargs))
        return func(*args, **kwargs)


def _detached(a):
    return a.detach().clone() if isinstance(a, torch.Tensor) else a


def recorded_calls(ops, name, direction, dtype, tokens=TRAFFIC_TOKENS, hidden=None):
    """The torch.ops.custom calls (op name, args, kwargs) of `ours` for the row,
    at `tokens` tokens on the CPU (`hidden`: the row's last dim, if not the op's)."""
    setup = make_setup(ops, name, tokens, dtype, "cpu", hidden)
    if direction != "fwd":
        setup = with_grad(setup)
    with _RecordCustomCalls() as mode:
        out = setup.impls["ours"](*setup.inputs)
        if direction != "fwd":
            outs = out if isinstance(out, (tuple, list)) else (out,)
            torch.autograd.backward(list(outs), [torch.randn_like(o) for o in outs])
    return mode.calls


def harness_arch() -> str:
    """The arch whose launch limits the harness counts with: the GPU's where the
    benchmark runs on one (sm_90 from compute capability 9.0: thread-block
    clusters; sm_80 below), else sm_90, the H100/H200 the project is timed on."""
    if torch.cuda.is_available():
        return "sm_90" if torch.cuda.get_device_capability()[0] >= 9 else "sm_80"
    return "sm_90"


def harness_traffic(ops, name, direction, dtype, tokens=TRAFFIC_TOKENS, hidden=None):
    """{"model": bytes moved / minimum, "launches": n, "tokens": tokens,
    "per_launch": [{"op", "kernel", "bytes", "share"}]} of the row's kernels on the
    harness (forward, plus backward for fwd+bwd), or None where the CUDA harness
    is not built. per_launch says which launch moves what: each launch's bytes
    (read and written, its workspace included) and their share of all the row's
    bytes, so that a row above 1.00x names the kernel to look at."""
    try:
        from op_extension import cuda_sim
    except ImportError:
        return None
    moved = minimum = launches = 0
    per_launch = []
    for op, args, kwargs in recorded_calls(ops, name, direction, dtype, tokens, hidden):
        backward = op.endswith("_backward")
        t = cuda_sim.traffic(op.removesuffix("_backward") if backward else op, *args, backward=backward,
                             arch=harness_arch(), **kwargs)
        moved += t["bytes_read"] + t["bytes_written"] - 2 * t["workspace_bytes"]
        minimum += t["min_bytes"]
        launches += t["launches"]
        per_launch += [{"op": op, "kernel": launch["kernel"], "bytes": launch["bytes_read"] + launch["bytes_written"]}
                       for launch in t["per_launch"]]
    if minimum == 0:
        return None
    total = sum(launch["bytes"] for launch in per_launch)
    for launch in per_launch:
        launch["share"] = launch["bytes"] / total if total else 0.0
    return {"model": moved / minimum, "launches": launches, "tokens": tokens, "per_launch": per_launch}


def call_launch_plan(op, args, kwargs, arch) -> list[dict]:
    """cuda_sim.launch_plan of one call recorded_calls returned (`op` a forward op
    or its "<op>_backward")."""
    from op_extension import cuda_sim

    backward = op.endswith("_backward")
    return cuda_sim.launch_plan(op.removesuffix("_backward") if backward else op, *args, backward=backward,
                                arch=arch, **kwargs)


def harness_occupancy(ops, name, direction, dtype, tokens, hidden=None):
    """The occupancy model (op_extension.cuda_occupancy) of the row's launches at
    the row's own shape, on the GPU the benchmark runs on (harness_arch):
    {"warps_per_sm": the fewest warps any of its launches keeps resident on an SM
    it reaches, "active_sms": the fewest SMs any reaches, "sms": the GPU's, "per_launch":
    [{"kernel", "blocks_per_sm", "limited_by", "warps_per_sm", "waves"}]}; None
    where the CUDA harness is not built. The launches are planned on the harness
    (cuda_sim.launch_plan), not run, so the row's full shape costs nothing there."""
    try:
        from op_extension import cuda_occupancy, cuda_sim
    except ImportError:
        return None
    arch = harness_arch()
    per_launch = []
    for call in recorded_calls(ops, name, direction, dtype, tokens, hidden):
        for launch in call_launch_plan(*call, arch):
            o = cuda_occupancy.launch_occupancy(launch, arch)
            per_launch.append({k: o[k] for k in ("kernel", "blocks_per_sm", "limited_by", "warps_per_sm", "waves")}
                              | {"active_sms": o["active_sms"]})
    if not per_launch:
        return None
    return {"warps_per_sm": min(p["warps_per_sm"] for p in per_launch),
            "active_sms": min(p["active_sms"] for p in per_launch),
            "sms": cuda_occupancy.GPUS[arch].sms, "per_launch": per_launch}


def row_models(ops, name, direction, dtype, tokens, hidden=None) -> dict:
    """The CUDA models' figures of a row: {"harness": harness_traffic's,
    "occupancy": harness_occupancy's, "errors": {model: what it raised}} (a
    model that fails is reported with the row; its timings stand)."""
    from .harness import error_text

    figures = {"errors": {}}
    for key, model in (("harness", lambda: harness_traffic(ops, name, direction, dtype, hidden=hidden)),
                       ("occupancy", lambda: harness_occupancy(ops, name, direction, dtype, tokens, hidden))):
        try:
            figures[key] = model()
        except Exception as e:
            figures["errors"][key] = error_text(e)
    return figures


def launch_breakdown(harness) -> str:
    """'rms_norm_forward_kernel 34% · rms_norm_backward_kernel 51% · ...' (one row's launches)."""
    return " · ".join(f"{launch['kernel']} {100 * launch['share']:.0f}%" for launch in harness["per_launch"])
