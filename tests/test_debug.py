"""op_extension.debug: forced fallback, fallback on error, autocompare, argument
dumps, per-op stats and profiler names, on the CPU here and on the simulated npu
device in tests/npu_sim/sim_device_debug_checks.py (its own process).

Faulty kernels are planted with the test-only hooks of op_extension.debug
(_plant_wrong_kernel, _plant_failing_kernel, _plant_input_write): they act where
the device kernel is called, so every switch sees them as a faulty kernel.

"Every op" is every op of op_protos/, run through each forward op's CALLS of
tests/op_cases/<op>.py (whose backward calls the backward op).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import op_cases
import op_extension
from op_extension import _reference, debug, op_defs, ops

ROOT = Path(__file__).resolve().parents[1]
OFF = dict(force_fallback=False, fallback_on_error=False, autocompare=False, dump=0, stats=False)


@pytest.fixture(autouse=True)
def debug_off():
    """Every test starts and ends with every switch off (debug._reset_for_tests)."""
    debug._reset_for_tests()
    yield
    debug._reset_for_tests()


def lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[op_extension.debug]")]


def has_backend_select_kernel(op: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"custom::{op}", "BackendSelect")


# ---- what exists --------------------------------------------------------------------


def test_every_custom_op_has_a_reference():
    exposed = {s.name.removeprefix("custom::") for s in torch._C._jit_get_all_schemas() if s.name.startswith("custom::")}
    # Less the ops without a prototype (op_defs.extra_ops: rotary_embedding_table_backward,
    # checked against its float64 reference in tests/test_rotary_embedding_tables.py).
    exposed -= op_defs.extra_ops()
    assert exposed == set(_reference.REFERENCES) == set(debug.OPS) == set(op_cases.ALL_OPS)


def test_off_by_default_leaves_the_dispatcher_untouched():
    assert debug.current() == debug.Settings()
    assert not debug.hooks_installed()
    assert not any(has_backend_select_kernel(op) for op in debug.OPS)
    with debug.settings(stats=True):
        assert all(has_backend_select_kernel(op) for op in debug.OPS)
    # Off again: the kernels are deregistered, not left behind testing a flag.
    assert not any(has_backend_select_kernel(op) for op in debug.OPS)


def test_op_selectors():
    backward = {op for op in debug.OPS if op.endswith("_backward")}
    with debug.settings(force_fallback="rms_norm, softmax"):
        assert debug.current().force_fallback == {"rms_norm", "softmax"}
    with debug.settings(autocompare=".*_backward"):
        assert debug.current().autocompare == backward == set(op_cases.BACKWARD_OPS)
    with debug.settings(autocompare=".*"):
        assert debug.current().autocompare == set(debug.OPS)
    with debug.settings(force_fallback=["custom::gelu"], autocompare="1"):
        assert debug.current().force_fallback == {"gelu"}
        assert debug.current().autocompare == set(debug.OPS)
    with pytest.raises(ValueError, match=r"force_fallback: 'rms_nrom' matches no op of torch.ops.custom"):
        debug.configure(force_fallback="rms_nrom")
    with pytest.raises(ValueError, match=r"dump must be 0 \(off\), 1 .* got 7"):
        debug.configure(dump=7)
    assert debug.current() == debug.Settings()  # a refused configure changed nothing


def test_settings_restores_and_configure_returns_the_old_settings():
    old = debug.configure(dump=1)
    assert old == debug.Settings()
    with debug.settings(dump=3, stats=True):
        assert (debug.current().dump, debug.current().stats) == (3, True)
    assert debug.current() == debug.Settings(dump=1)
    debug.configure(**OFF)
    assert not debug.hooks_installed()


def _run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_environment_variables_are_read_at_import():
    code = (
        "import torch, op_extension\n"
        "from op_extension import debug\n"
        "print(sorted(debug.current().force_fallback), debug.current().fallback_on_error,"
        " len(debug.current().autocompare), debug.current().dump, debug.current().stats)\n"
        "op_extension.ops.gelu(torch.randn(2, 3))\n"
        "print(debug.stats()['gelu']['cpu']['calls'])\n"
    )
    result = _run_python(code, {"OP_EXT_FORCE_FALLBACK_OPS": ".*_backward", "OP_EXT_FALLBACK_ON_ERROR": "1",
                                "OP_EXT_AUTOCOMPARE": "gelu,softmax", "OP_EXT_DUMP_OP_ARGS": "1", "OP_EXT_STATS": "1"})
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == f"{sorted(op_cases.BACKWARD_OPS)} True 2 1 True"
    assert out[1] == "1"
    assert f"[op_extension.debug] custom::gelu -> cpu kernel ({op_extension._C.cpu_isa()})" in result.stderr
    assert "[op_extension.debug] autocompare custom::gelu([2, 3] float32 cpu) output [2, 3] float32 cpu: allclose" \
        in result.stderr

    bad = _run_python("import op_extension", {"OP_EXT_DUMP_OP_ARGS": "verbose"})
    assert bad.returncode != 0
    assert "OP_EXT_DUMP_OP_ARGS must be 0 (off), 1 (op and kernel), 2 (+ arguments) or 3 (+ values), " \
           "got 'verbose'" in bad.stderr


# ---- forced fallback ------------------------------------------------------------------


def test_forced_fallback_repairs_a_wrong_kernel(capsys):
    x = torch.randn(2, 8)
    debug._plant_wrong_kernel("gelu", amount=0.5, index=3)
    wrong = ops.gelu(x)
    assert (wrong - F.gelu(x)).abs().max().item() == pytest.approx(0.5, abs=1e-6)
    with debug.settings(force_fallback="gelu"):
        first, second = ops.gelu(x), torch.ops.custom.gelu(x)
    torch.testing.assert_close(first, F.gelu(x), atol=0, rtol=0)
    torch.testing.assert_close(second, F.gelu(x), atol=0, rtol=0)
    forced = [line for line in lines(capsys) if "forced fallback" in line]
    assert forced == ["[op_extension.debug] custom::gelu: forced fallback: running the reference (ATen composite) "
                      "instead of the cpu kernel"]  # once per op, not per call


def test_forced_fallback_of_backward_ops(capsys):
    x = torch.randn(3, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    debug._plant_wrong_kernel("rms_norm_backward", amount=1.0, index=0)
    with debug.settings(force_fallback=".*_backward"):
        ops.rms_norm(x, (16,), w, 1e-6).sum().backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    F.rms_norm(xr, (16,), wr, 1e-6).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
    assert any("custom::rms_norm_backward: forced fallback" in line for line in lines(capsys))


def _every_op_forward_backward(dtype=torch.float32):
    """Every forward op's CALLS (3 rows, inputs in `dtype` requiring grad), then
    backward through all of them: every op and backward op runs.
    Returns (outputs, input gradients)."""
    outs, leaves = [], []
    for _, calls in op_cases.each("CALLS"):
        for call in calls:
            inputs = [t.to(dtype).requires_grad_() for t in call.make(3)]
            out = call.fn(*inputs)
            outs += list(out) if isinstance(out, tuple) else [out]
            leaves += inputs
    torch.autograd.backward([o.float().sum() for o in outs])
    return [o.detach() for o in outs], [x.grad for x in leaves]


def test_forcing_every_op_keeps_every_result_and_gradient():
    def step():
        torch.manual_seed(1)
        return _every_op_forward_backward()

    kernels = step()
    with debug.settings(force_fallback=".*"):
        references = step()
    assert debug._logged == {("forced", op) for op in debug.OPS}
    for kernel, reference in zip(kernels, references):
        torch.testing.assert_close(reference, kernel, atol=1e-4, rtol=1e-5)


# ---- autocompare ---------------------------------------------------------------------


def test_autocompare_reports_a_planted_error_with_its_index(capsys):
    debug._plant_wrong_kernel("gelu", amount=0.5, index=11)
    with debug.settings(autocompare="gelu"):
        ops.gelu(torch.randn(2, 8), "tanh")
    (line,) = lines(capsys)
    assert line.startswith("[op_extension.debug] autocompare custom::gelu([2, 8] float32 cpu) "
                           "output [2, 8] float32 cpu: MISMATCH in 1 of 16 elements: max abs err 0.5 at index (1, 3), ")
    assert line.endswith("(atol 1e-05, rtol 1.3e-06)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_autocompare_every_op_and_backward_op_is_allclose(capsys, dtype):
    with debug.settings(autocompare=True):
        _every_op_forward_backward(dtype)
    found = lines(capsys)
    compared = {re.match(r"\[op_extension.debug\] autocompare custom::(\w+)\(", line).group(1) for line in found}
    assert compared == set(debug.OPS)
    assert not [line for line in found if "allclose" not in line]
    name = str(dtype).removeprefix("torch.")
    assert f"autocompare custom::rms_norm_backward([3, 16] {name} cpu, [3, 16] {name} cpu, [16] {name} cpu) " \
           f"grad_weight [16] {name} cpu: allclose" in "\n".join(found)


def test_autocompare_reports_an_op_that_writes_its_input(capsys):
    debug._plant_input_write("swiglu", amount=2.0)
    gate = torch.randn(4, 5)
    with debug.settings(autocompare="swiglu"):
        ops.swiglu(gate, torch.randn(4, 5))
    found = lines(capsys)
    assert found[-1] == ("[op_extension.debug] autocompare custom::swiglu: the op MODIFIED its input 'gate' "
                         "[4, 5] float32 cpu: 1 elements changed, max abs change 2 at index (0, 0)")
    assert "output [4, 5] float32 cpu: allclose" in found[0]  # the reference ran on copies made before


# ---- fallback on error, bad input -------------------------------------------------------------


def test_fallback_on_error_warns_once_and_runs_the_reference():
    x = torch.randn(4, 6)
    debug._plant_failing_kernel("softmax")
    with pytest.raises(RuntimeError, match=r"custom::softmax: kernel launch failed"):
        ops.softmax(x, -1)  # off: the failure is the caller's
    with debug.settings(fallback_on_error=True):
        with pytest.warns(RuntimeWarning, match=r"custom::softmax: the cpu kernel failed \(RuntimeError: "
                                                r"custom::softmax: kernel launch failed .*\); running the reference "
                                                r"\(ATen composite\) instead"):
            first = ops.softmax(x, -1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second warning would raise here
            second = ops.softmax(x, 0)
    torch.testing.assert_close(first, torch.softmax(x, -1), atol=0, rtol=0)
    torch.testing.assert_close(second, torch.softmax(x, 0), atol=0, rtol=0)


@pytest.mark.parametrize("switch", ["force_fallback", "fallback_on_error", "autocompare"])
def test_bad_input_still_raises_the_ops_error(switch):
    for op in ("gelu", "softmax", "rms_norm"):
        debug._plant_failing_kernel(op)
    with debug.settings(**{switch: True}), warnings.catch_warnings():
        warnings.simplefilter("error")  # and no fallback warning
        with pytest.raises(TypeError, match=r"^custom::gelu: input has dtype (int64|Long), which is not supported"):
            ops.gelu(torch.ones(3, dtype=torch.int64))
        with pytest.raises(IndexError, match=r"^custom::softmax: dim 2 is out of range for a tensor with 2 dims"):
            ops.softmax(torch.randn(2, 3), 2)
        with pytest.raises(ValueError, match=r"^custom::rms_norm: normalized_shape \[4\] does not match"):
            torch.ops.custom.rms_norm(torch.randn(2, 3), [4], None, None)
        with pytest.raises(RuntimeError, match=r"^custom::rms_norm: weight is on meta but input is on cpu"):
            torch.ops.custom.rms_norm(torch.randn(2, 3), [3], torch.ones(3, device="meta"), None)


# ---- dumps -------------------------------------------------------------------------------------


def test_dump_levels_can_change_at_run_time(capsys):
    x = torch.randn(6, 4).t()[1:]  # strided, offset into its storage
    op_extension._C.set_cpu_isa("default")
    debug.configure(dump=1)
    ops.gelu(x, "tanh")
    assert lines(capsys) == ["[op_extension.debug] custom::gelu -> cpu kernel (default)"]
    debug.configure(dump=2)
    ops.gelu(x, "tanh")
    assert capsys.readouterr().err.splitlines() == [
        "[op_extension.debug] custom::gelu -> cpu kernel (default)",
        "    input: Tensor shape=[3, 6] stride=[1, 4] dtype=float32 device=cpu storage_offset=1",
        "    approximate: 'tanh'",
    ]
    debug.configure(dump=3)
    ops.gelu(x, "tanh")
    err = capsys.readouterr().err
    assert "        " + repr(x).splitlines()[0] in err.splitlines()
    big = torch.arange(5000.0)
    ops.gelu(big)
    # summarised as torch prints it
    assert "        tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.9970e+03, 4.9980e+03," \
        in capsys.readouterr().err.splitlines()
    debug.configure(dump=0)
    ops.gelu(x)
    assert capsys.readouterr().err == ""


def test_dump_names_the_forced_reference(capsys):
    with debug.settings(dump=1, force_fallback="softmax"):
        ops.softmax(torch.randn(2, 3), 0)
    assert lines(capsys)[0] == "[op_extension.debug] custom::softmax -> reference (ATen composite, forced fallback)"


# ---- stats and the profiler ---------------------------------------------------------------------


def test_stats_count_and_time_each_op_and_device():
    x = torch.randn(8, 32, requires_grad=True)
    ops.gelu(x)  # stats off: not counted
    debug.configure(stats=True)
    for _ in range(3):
        ops.gelu(x)
    ops.rms_norm(x, (32,)).sum().backward()
    s = debug.stats()
    assert set(s) == {"gelu", "rms_norm", "rms_norm_backward"}
    gelu = s["gelu"]["cpu"]
    assert gelu["calls"] == 3 and gelu["total_ms"] > 0
    assert gelu["mean_ms"] == pytest.approx(gelu["total_ms"] / 3)
    assert 0 < gelu["p50_ms"] <= gelu["p90_ms"] <= gelu["p99_ms"] <= gelu["total_ms"]
    assert "peak_alloc_bytes" not in gelu  # measured on CUDA only
    assert s["rms_norm_backward"]["cpu"]["calls"] == 1
    table = debug.format_stats().splitlines()
    assert table[0].split() == ["op", "device", "calls", "total", "ms", "mean", "ms", "p50", "ms", "p90", "ms",
                                "p99", "ms", "peak", "alloc"]
    assert table[1].split()[:3] == ["custom::gelu", "cpu", "3"] and table[1].split()[-1] == "-"
    debug.reset_stats()
    assert debug.stats() == {}


def test_stats_percentiles_interpolate_over_the_latest_calls(monkeypatch):
    monkeypatch.setattr(debug, "PERCENTILE_WINDOW", 4)
    entry = debug._OpStats()
    entry.recent_ns = debug.collections.deque(maxlen=4)
    for ns in (9_000_000, 1_000_000, 2_000_000, 3_000_000, 4_000_000):  # the first falls out of the window
        entry.calls += 1
        entry.total_ns += ns
        entry.recent_ns.append(ns)
    monkeypatch.setitem(debug._stats, ("gelu", "cpu"), entry)
    s = debug.stats()["gelu"]["cpu"]
    assert s["calls"] == 5 and s["mean_ms"] == pytest.approx(19 / 5)
    assert s["p50_ms"] == pytest.approx(2.5) and s["p90_ms"] == pytest.approx(3.7)
    assert s["p99_ms"] == pytest.approx(3.97)


def test_power_is_sampled_on_a_thread_while_stats_are_on():
    readings = iter([100.0, 300.0, None] + [200.0] * 1000)
    sampler = debug._PowerSampler(lambda device: (lambda: next(readings)) if device.type == "cuda" else None)
    debug.configure(stats=True)
    try:
        sampler.start(torch.device("cpu"))  # no reader: never asked again, no thread
        sampler.start(torch.device("cuda", 0))
        sampler.start(torch.device("cuda", 0))  # one thread per device
        deadline = time.monotonic() + 30
        while sampler.summary().get("cuda:0", {}).get("samples", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        sampler.stop()
        debug.configure(stats=False)
    summary = sampler.summary()
    assert list(summary) == ["cuda:0"] and sampler.threads == {}
    got = summary["cuda:0"]
    assert got["samples"] >= 3 and got["max_w"] == 300.0  # None (unreadable) skipped
    assert got["mean_w"] == pytest.approx((100 + 300 + 200 * (got["samples"] - 2)) / got["samples"])
    sampler.reset()
    assert sampler.summary() == {}


def test_every_op_appears_under_its_name_in_the_profiler():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _every_op_forward_backward()
    names = {e.key for e in prof.key_averages()}
    assert {f"custom::{op}" for op in debug.OPS} <= names


# ---- torch.compile ---------------------------------------------------------------------------------


def test_switches_work_in_a_compiled_graph(capsys):
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: ops.gelu(t) * 2, backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 8)
    debug._plant_wrong_kernel("gelu", amount=0.25, index=5)
    with debug.settings(autocompare="gelu"):
        wrong = compiled(x)
    assert "max abs err 0.25 at index (0, 5)" in lines(capsys)[0]
    with debug.settings(force_fallback="gelu"):
        repaired = compiled(x)
    torch.testing.assert_close(repaired, F.gelu(x) * 2, atol=0, rtol=0)
    assert (wrong - repaired).abs().max().item() == pytest.approx(0.5, abs=1e-6)
    torch._dynamo.reset()


# ---- the simulated npu device -------------------------------------------------------------------------


def test_switches_on_the_simulated_npu_device():
    """tests/npu_sim/sim_device_debug_checks.py, in its own process (it makes
    PrivateUse1 a device named npu). It reuses the simulated device's build of
    tests/test_npu_sim_device.py (minutes the first time, seconds after)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(ROOT / "tests" / "npu_sim" / "sim_device_debug_checks.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert re.search(r"\b\d+ passed", result.stdout) and " failed" not in result.stdout
