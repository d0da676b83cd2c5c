"""The real npu glue (csrc/torch_ext/npu/*.cpp, npu/ops/*.cpp and the generated
registration), run on a simulated npu device.

Run by tests/test_npu_sim_device.py in a separate process, because it turns
PrivateUse1 into a device named "npu" for the whole process. The glue is
compiled with the test stand-ins of tests/npu_sim/include for the three
torch_npu headers it uses, and linked with the Ascend C simulator's aclnn entry
points, tilings and kernels (what `op_extension._ascend_sim` runs); the device
itself is tests/npu_sim/sim_npu_device.cpp.

What this checks, that the compile check cannot: the glue passes the right
tensors and attributes to each aclnn entry point (results equal those of
`op_extension.ascend_sim`, which drives the same kernels from its own binding,
and match the CPU ops), handles strides, storage offsets, broadcasting and empty
tensors, reports aclnn failures, keeps working when launches run after the glue
returned, runs the CPU fallback, and autograd on npu tensors reaches the npu
backward kernels.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
import torch

from op_extension import ascend_sim

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CSRC = ROOT / "op_extension" / "csrc"

sys.path.insert(0, str(HERE.parent))
from cache_dirs import op_ext_cache_dir  # noqa: E402
from test_ascend_sim import ascend_tolerance  # noqa: E402  (the Ascend kernels' tolerances)

# Kept between runs (a first build takes minutes on 2 cores), one per checkout,
# in the cache folder every test and script uses (tests/cache_dirs.py).
BUILD_DIR = op_ext_cache_dir() / "npu_sim_device" / hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _build() -> None:
    from torch.utils.cpp_extension import load

    spec = importlib.util.spec_from_file_location("_cpp_gen_for_npu_sim", ROOT / "op_extension" / "_cpp_gen.py")
    cpp_gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cpp_gen
    spec.loader.exec_module(cpp_gen)
    generated = BUILD_DIR / "generated"
    cpp_gen.generate_all(generated, ROOT)  # rewrites only what changed

    # The npu glue: the shared files, every op's file, and the registration the
    # build derives from the prototypes.
    sources = sorted((CSRC / "torch_ext" / "npu").glob("*.cpp")) + sorted((CSRC / "torch_ext" / "npu" / "ops").glob("*.cpp"))
    sources += [generated / cpp_gen.NPU_REGISTRATION, CSRC / "torch_ext" / "checks.cpp", HERE / "sim_npu_device.cpp"]
    for folder in ("host/aclnn", "host/tiling", "kernel/ascendc"):
        sources += sorted((CSRC / folder).glob("*.cpp"))
    sources.append(generated / cpp_gen.ACLNN_ENTRIES)  # the aclnn entry points, around host/aclnn's plans
    includes = [HERE / "include", CSRC / "ascendc_sim" / "include", CSRC / "host" / "aclnn",
                CSRC / "host" / "tiling", CSRC / "kernel" / "ascendc", generated]
    load(
        name="op_ext_npu_sim_device",
        sources=[str(s) for s in sources],
        extra_include_paths=[str(i) for i in includes],
        # The simulated Unified Buffer is a byte array read through typed pointers.
        extra_cflags=["-O1", "-fno-strict-aliasing", "-DOP_EXT_ASCEND_SIM=1", "-DOP_EXT_WITH_NPU=1"],
        build_directory=str(BUILD_DIR),
        is_python_module=False,
    )


@pytest.fixture(scope="module", autouse=True)
def npu_device():
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    _build()
    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", _device_module())
    yield


def _device_module():
    """The `torch.npu` module PyTorch's Python side asks about a PrivateUse1 device."""
    import types

    module = types.ModuleType("npu_sim_device_module")
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: 0
    module.is_initialized = lambda: True
    module._lazy_init = lambda: None
    module._is_in_bad_fork = lambda: False
    module.manual_seed_all = lambda seed: None  # tensors are made on the CPU and copied
    module.synchronize = lambda device=None: torch.ops.npu_sim.synchronize()
    module.get_device_name = lambda device=None: torch.ops.npu_sim.soc_name()  # as torch_npu: the SoC
    return module


def npu(t: torch.Tensor) -> torch.Tensor:
    return t.to("npu")


def rand(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=torch.float32).to(dtype)


# ---- forward ops through aclnn ------------------------------------------------------

def _forward_cases(dtype):
    """(op, CPU args) pairs, some inputs non-contiguous or offset into their storage."""
    x, y = rand(6, 40, dtype=dtype), rand(6, 40, dtype=dtype)
    w, b = rand(40, dtype=dtype), rand(40, dtype=dtype)
    return [
        ("add", (x, y, 1.0)),
        ("add", (x, rand(40, dtype=dtype), -0.5)),  # broadcast: other is materialised by the glue
        ("add", (rand(6, 1, dtype=dtype), rand(1, 40, dtype=dtype), 1.0)),  # both broadcast
        ("gelu", (x, "none")),
        ("gelu", (rand(40, 6, dtype=dtype).t(), "tanh")),  # transposed: densified by the glue
        ("rms_norm", (x, [40], w, 1e-6)),
        ("rms_norm", (x, [40], None, None)),  # eps None: the dtype's epsilon, resolved by the glue
        ("rms_norm", (rand(7, 40, dtype=dtype)[1:], [40], w, 1e-5)),  # storage offset of one row
        ("rms_norm", (rand(3, 4, 10, dtype=dtype), [4, 10], rand(4, 10, dtype=dtype), 1e-6)),
        ("fused_add_rms_norm", (x, y, [40], w, 1e-6)),
        ("fused_add_rms_norm", (x, y.t().contiguous().t(), [40], None, None)),
        ("layer_norm", (x, [40], w, b, 1e-5)),
        ("layer_norm", (x[:, ::2], [20], None, None, 1e-5)),  # strided columns
        ("softmax", (x, -1)),
        ("softmax", (rand(4, 6, 5, dtype=dtype), 1)),  # over a middle dim
        ("softmax", (rand(dtype=dtype), 0)),  # 0-dim: one element
        ("swiglu", (x, y)),
        ("geglu", (x, y, "none")),
        ("geglu", (x[1:], y[:-1], "tanh")),
    ]


def _sim_reference(op, args):
    """The same kernels through op_extension.ascend_sim's own binding, or None."""
    try:
        if op == "add":
            return ascend_sim.run("add", args[0], args[1], alpha=args[2])
        return ascend_sim.run(op, *args)
    except ValueError:  # ascend_sim has no kernel for this op
        return None


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
def test_forward_ops_match_the_simulator_and_the_cpu(dtype):
    checked = set()
    for op, args in _forward_cases(dtype):
        npu_args = [npu(a) if isinstance(a, torch.Tensor) else a for a in args]
        outs = _as_tuple(getattr(torch.ops.custom, op)(*npu_args))
        assert all(out.device.type == "npu" for out in outs)
        outs = tuple(out.cpu() for out in outs)
        expected = _as_tuple(getattr(torch.ops.custom, op)(*args))
        for out, want in zip(outs, expected, strict=True):
            torch.testing.assert_close(out, want, **ascend_tolerance(dtype, op), msg=lambda m: f"{op}: {m}")
        simulated = _sim_reference(op, args)
        if simulated is not None:  # same kernels, same inputs: the same bits
            for out, sim in zip(outs, _as_tuple(simulated), strict=True):
                torch.testing.assert_close(out, sim, atol=0, rtol=0, msg=lambda m: f"{op} vs ascend_sim: {m}")
        checked.add(op)
    assert "add" in checked  # the one Ascend op committed with the simulator


def _backward_cases(dtype):
    """(backward op, CPU args) pairs for the backward ops with Ascend kernels written
    after the first three, some inputs non-contiguous or offset into their storage."""
    dy, g, u = rand(6, 40, dtype=dtype), rand(6, 40, dtype=dtype), rand(6, 40, dtype=dtype)
    y_last = torch.softmax(rand(6, 40), -1).to(dtype)
    y_mid = torch.softmax(rand(4, 6, 5), 1).to(dtype)
    return [
        ("swiglu_backward", (dy, g, u)),
        ("swiglu_backward", (dy[1:], g[1:], u[:-1])),  # storage offsets
        ("geglu_backward", (dy, g, u, "none")),
        ("geglu_backward", (rand(40, 6, dtype=dtype).t(), g, u, "tanh")),  # transposed: densified by the glue
        ("softmax_backward", (dy, y_last, -1)),
        ("softmax_backward", (rand(4, 6, 5, dtype=dtype), y_mid, 1)),  # over a middle dim
        ("softmax_backward", (rand(7, 40, dtype=dtype)[1:], y_last, 1)),  # storage offset of one row
        ("softmax_backward", (rand(dtype=dtype), torch.ones((), dtype=dtype), 0)),  # 0-dim
    ]


def _sim_backward_reference(op, args):
    return ascend_sim.run_backward(op.removesuffix("_backward"), *args)


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
def test_backward_ops_match_the_simulator_and_the_cpu(dtype):
    for op, args in _backward_cases(dtype):
        npu_args = [npu(a) if isinstance(a, torch.Tensor) else a for a in args]
        outs = _as_tuple(getattr(torch.ops.custom, op)(*npu_args))
        assert all(out.device.type == "npu" for out in outs)
        outs = tuple(out.cpu() for out in outs)
        expected = _as_tuple(getattr(torch.ops.custom, op)(*args))
        simulated = _as_tuple(_sim_backward_reference(op, args))
        kind = op.removesuffix("_backward")
        for out, want, sim in zip(outs, expected, simulated, strict=True):
            assert out.shape == want.shape
            torch.testing.assert_close(out, want, **ascend_tolerance(dtype, kind, "backward"),
                                       msg=lambda m: f"{op}: {m}")
            # Same kernels, same inputs: the same bits.
            torch.testing.assert_close(out, sim, atol=0, rtol=0, msg=lambda m: f"{op} vs ascend_sim: {m}")


def test_backward_ops_of_empty_tensors_launch_nothing():
    empty = npu(rand(0, 8))
    for grads in (torch.ops.custom.swiglu_backward(empty, empty, empty),
                  torch.ops.custom.geglu_backward(empty, empty, empty, "tanh")):
        assert [t.shape for t in grads] == [(0, 8), (0, 8)]
    assert torch.ops.custom.softmax_backward(empty, empty, 0).shape == (0, 8)
    assert torch.ops.npu_sim.queued_launches() == 0


def test_an_aclnn_rejection_is_reported_with_the_entry_points_message():
    # Ascend310P has no bfloat16: the glue's checks let it through (the SoC is the
    # kernel side's business), the aclnn entry point rejects it.
    x = npu(rand(4, 8, dtype=torch.bfloat16))
    torch.ops.npu_sim.use_soc("Ascend310P")
    try:
        with pytest.raises(RuntimeError) as info:
            torch.ops.custom.gelu(x, "none")
    finally:
        torch.ops.npu_sim.use_soc("Ascend910B")
    message = str(info.value).splitlines()[0]
    assert message.startswith("custom::gelu: aclnnGeluCustomGetWorkspaceSize failed with status 161002: GeluCustom: ")
    assert "bfloat16" in message and "Ascend310P" in message
    assert torch.ops.npu_sim.queued_launches() == 0


def test_launches_run_after_the_glue_returns():
    x = rand(3, 16)
    out = torch.ops.custom.gelu(npu(x), "none")
    # Queued, as on torch_npu's task queue; the glue's temporaries are gone by now.
    assert torch.ops.npu_sim.queued_launches() == 1
    torch.testing.assert_close(out.cpu(), torch.ops.custom.gelu(x, "none"), **ascend_tolerance(torch.float32, "gelu"))
    assert torch.ops.npu_sim.queued_launches() == 0


def test_empty_tensors_launch_nothing():
    empty = npu(rand(0, 8))
    assert torch.ops.custom.gelu(empty, "tanh").shape == (0, 8)
    assert torch.ops.custom.rms_norm(empty, [8], npu(rand(8)), 1e-6).shape == (0, 8)
    grad_input, grad_weight = torch.ops.custom.rms_norm_backward(empty, empty, [8], npu(rand(8)), 1e-6)
    assert grad_input.shape == (0, 8)
    assert torch.equal(grad_weight.cpu(), torch.zeros(8))  # a sum over no rows
    assert torch.equal(torch.ops.custom.add_backward(npu(rand(0, 8)), [8], 1.0).cpu(), torch.zeros(8))
    assert torch.ops.npu_sim.queued_launches() == 0


# ---- checks ------------------------------------------------------------------------

def _error(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value).splitlines()[0]


@pytest.mark.parametrize(
    "name, call",
    [
        ("dtype mismatch", lambda d: torch.ops.custom.add(d(rand(2, 3)), d(rand(2, 3, dtype=torch.float16)), 1.0)),
        ("not broadcastable", lambda d: torch.ops.custom.add(d(rand(2, 3)), d(rand(4)), 1.0)),
        ("approximate", lambda d: torch.ops.custom.gelu(d(rand(2, 3)), "exact")),
        ("normalized_shape", lambda d: torch.ops.custom.rms_norm(d(rand(2, 3)), [4], None, None)),
        ("weight shape", lambda d: torch.ops.custom.rms_norm(d(rand(2, 3)), [3], d(rand(4)), None)),
        ("glu shapes", lambda d: torch.ops.custom.swiglu(d(rand(2, 3)), d(rand(2, 4)))),
        ("softmax dim", lambda d: torch.ops.custom.softmax(d(rand(2, 3)), 2)),
        ("add_backward size", lambda d: torch.ops.custom.add_backward(d(rand(2, 3)), [4], 1.0)),
        ("int dtype", lambda d: torch.ops.custom.gelu(d(torch.ones(3, dtype=torch.int32)), "none")),
    ],
)
def test_bad_input_raises_as_on_cpu(name, call):
    assert _error(lambda: call(npu)) == _error(lambda: call(lambda t: t))


def test_float64_is_a_type_error_on_npu():
    with pytest.raises(TypeError, match="custom::gelu: input has dtype Double, which is not supported on npu"):
        torch.ops.custom.gelu(npu(rand(3, dtype=torch.float64)), "none")


def test_mixed_devices_are_rejected():
    with pytest.raises(RuntimeError, match="custom::gelu_backward: grad_output is on cpu but input is on npu:0"):
        torch.ops.custom.gelu_backward(rand(3), npu(rand(3)), "none")
    with pytest.raises(RuntimeError, match="custom::softmax_backward: grad_output is on cpu but output is on npu:0"):
        torch.ops.custom.softmax_backward(rand(2, 3), npu(rand(2, 3)), -1)


# ---- backward -----------------------------------------------------------------------

def _backward_cases(dtype):
    """(backward op, CPU args) pairs of the norm backward ops with Ascend kernels."""
    g, x, u = rand(6, 40, dtype=dtype), rand(6, 40, dtype=dtype), rand(6, 40, dtype=dtype)
    w, b = rand(40, dtype=dtype), rand(40, dtype=dtype)
    return [
        ("fused_add_rms_norm_backward", (g, u, x, [40], w, 1e-6)),
        ("fused_add_rms_norm_backward", (g, None, x.t().contiguous().t(), [40], None, None)),
        ("layer_norm_backward", (g, x, [40], w, b, 1e-5)),
        ("layer_norm_backward", (g, x, [40], None, b, 1e-5)),
        ("layer_norm_backward", (g[:, ::2], x[:, ::2], [20], None, None, 1e-5)),  # strided columns
    ]


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
def test_norm_backward_ops_match_the_simulator_and_the_cpu(dtype):
    for op, args in _backward_cases(dtype):
        npu_args = [npu(a) if isinstance(a, torch.Tensor) else a for a in args]
        outs = tuple(out.cpu() for out in getattr(torch.ops.custom, op)(*npu_args))
        expected = getattr(torch.ops.custom, op)(*args)
        simulated = ascend_sim.run_backward(op[: -len("_backward")], *args)
        for i, (out, want, sim) in enumerate(zip(outs, expected, simulated, strict=True)):
            kind = op[: -len("_backward")] if i == 0 else "row_sum"  # parameter grads: sums over rows
            assert out.shape == want.shape, f"{op} output {i}"
            torch.testing.assert_close(out, want, **ascend_tolerance(dtype, kind, "backward"),
                                       msg=lambda m: f"{op} output {i}: {m}")
            torch.testing.assert_close(out, sim, atol=0, rtol=0, msg=lambda m: f"{op} output {i} vs ascend_sim: {m}")


def test_norm_backward_ops_with_no_rows():
    empty, w = npu(rand(0, 8)), npu(rand(8))
    dx, dw, db = torch.ops.custom.layer_norm_backward(empty, empty, [8], w, w, 1e-5)
    assert dx.shape == (0, 8) and torch.equal(dw.cpu(), torch.zeros(8)) and torch.equal(db.cpu(), torch.zeros(8))
    dx, dw = torch.ops.custom.fused_add_rms_norm_backward(empty, empty, empty, [8], w, 1e-6)
    assert dx.shape == (0, 8) and torch.equal(dw.cpu(), torch.zeros(8))
    assert torch.ops.npu_sim.queued_launches() == 0


BACKWARD_OPS = ("add_backward", "gelu_backward", "rms_norm_backward", "fused_add_rms_norm_backward",
                "layer_norm_backward", "softmax_backward", "swiglu_backward", "geglu_backward")


def _backward_call(op, d):
    g, u, x, w = rand(4, 8), rand(4, 8), rand(4, 8), rand(8)
    if op == "add_backward":
        return torch.ops.custom.add_backward(d(g), [8], 0.5)
    if op == "gelu_backward":
        return torch.ops.custom.gelu_backward(d(g), d(x), "none")
    if op == "rms_norm_backward":
        return torch.ops.custom.rms_norm_backward(d(g), d(x), [8], d(w), 1e-6)
    if op == "fused_add_rms_norm_backward":
        return torch.ops.custom.fused_add_rms_norm_backward(d(g), d(u), d(x), [8], d(w), 1e-6)
    if op == "layer_norm_backward":
        return torch.ops.custom.layer_norm_backward(d(g), d(x), [8], d(w), d(rand(8)), 1e-5)
    if op == "softmax_backward":
        return torch.ops.custom.softmax_backward(d(g), d(torch.softmax(x, -1)), -1)
    if op == "swiglu_backward":
        return torch.ops.custom.swiglu_backward(d(g), d(x), d(u))
    return torch.ops.custom.geglu_backward(d(g), d(x), d(u), "tanh")


@pytest.mark.parametrize("op", BACKWARD_OPS)
def test_every_backward_op_runs_an_ascend_kernel(op):
    # Training on npu never leaves the device: each backward op launches its
    # Ascend kernel (no CPU fallback is registered) and matches the CPU op.
    torch.manual_seed(1)
    expected = _backward_call(op, lambda t: t)
    before = torch.ops.npu_sim.queued_launches()
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = _backward_call(op, npu)
    assert torch.ops.npu_sim.queued_launches() > before
    results = results if isinstance(results, tuple) else (results,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(results, expected, strict=True):
        assert got.device.type == "npu"
        torch.testing.assert_close(got.cpu(), want, rtol=2e-5, atol=2e-5)


def _autograd_case(op, d, dtype):
    """op's forward on leaves made by d (to npu or not); returns (output, leaves)."""
    torch.manual_seed(2)

    def leaf(*shape):
        return d(rand(*shape, dtype=dtype)).requires_grad_()

    x = leaf(5, 24)
    if op == "add":
        other = leaf(24)  # its gradient is a reduction: add_backward
        return torch.ops.custom.add(x, other, 0.5), (x, other)
    if op == "gelu":
        return torch.ops.custom.gelu(x, "tanh"), (x,)
    if op == "rms_norm":
        w = leaf(24)
        return torch.ops.custom.rms_norm(x, [24], w, 1e-6), (x, w)
    if op == "fused_add_rms_norm":
        r, w = leaf(5, 24), leaf(24)
        out, residual_out = torch.ops.custom.fused_add_rms_norm(x, r, [24], w, 1e-6)
        return out + residual_out, (x, r, w)
    if op == "layer_norm":
        w, b = leaf(24), leaf(24)
        return torch.ops.custom.layer_norm(x, [24], w, b, 1e-5), (x, w, b)
    if op == "softmax":
        return torch.ops.custom.softmax(x, -1), (x,)
    up = leaf(5, 24)
    if op == "swiglu":
        return torch.ops.custom.swiglu(x, up), (x, up)
    return torch.ops.custom.geglu(x, up, "none"), (x, up)


@pytest.mark.parametrize("op", ["add", "gelu", "rms_norm", "fused_add_rms_norm", "layer_norm", "softmax",
                                "swiglu", "geglu"])
@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=str)
def test_autograd_on_npu(op, dtype):
    """Backward on npu tensors runs the npu backward op's Ascend kernel."""
    out, leaves = _autograd_case(op, lambda t: npu(t).detach(), dtype)
    grad_out = rand(*out.shape, dtype=dtype)
    out.backward(npu(grad_out))
    cpu_out, cpu_leaves = _autograd_case(op, lambda t: t, dtype)
    cpu_out.backward(grad_out)
    for leaf, cpu_leaf in zip(leaves, cpu_leaves, strict=True):
        assert leaf.grad.device.type == "npu"
        kind = "row_sum" if leaf.dim() == 1 and op != "add" else op  # norm weight/bias: sums over rows
        torch.testing.assert_close(leaf.grad.cpu(), cpu_leaf.grad, **ascend_tolerance(dtype, kind, "backward"),
                                   msg=lambda m: f"{op} gradient: {m}")
