"""op_extension.debug on the simulated npu device (the real npu glue, aclnn entry
points and Ascend C kernels on the CPU simulator; see sim_device_checks.py).

Run by tests/test_debug.py in a separate process, because the device makes
PrivateUse1 a device named "npu" for the whole process. On the npu the
reference is the CPU kernel, on CPU copies of the inputs, its outputs copied back.
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

from op_extension import debug, ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_device_checks import npu_device  # noqa: E402,F401  (module fixture: builds and registers the device)


@pytest.fixture(autouse=True)
def debug_off():
    debug._reset_for_tests()
    yield
    debug._reset_for_tests()
    torch.ops.npu_sim.use_soc("Ascend910B")


def lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[op_extension.debug]")]


def test_dump_names_the_simulated_soc(capsys):
    x = torch.randn(4, 8).to("npu")
    with debug.settings(dump=2):
        ops.gelu(x)
        torch.ops.npu_sim.use_soc("Ascend310P")
        ops.gelu(x)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "[op_extension.debug] custom::gelu -> npu kernel via aclnn (Ascend910B2)"
    assert err[1] == "    input: Tensor shape=[4, 8] stride=[8, 1] dtype=float32 device=npu:0 storage_offset=0"
    assert "[op_extension.debug] custom::gelu -> npu kernel via aclnn (Ascend310P3)" in err
    with debug.settings(dump=3):
        ops.gelu(x)
    assert "        " + repr(x.cpu()).splitlines()[0] in capsys.readouterr().err.splitlines()


def test_autocompare_forward_and_backward_ops(capsys):
    x = torch.randn(3, 16).to("npu").requires_grad_()
    w = torch.randn(16).to("npu").requires_grad_()
    with debug.settings(autocompare=True):
        ops.rms_norm(x, (16,), w, 1e-6).sum().backward()
    found = lines(capsys)
    assert {re.match(r"\[op_extension.debug\] autocompare custom::(\w+)\(", line).group(1) for line in found} \
        == {"rms_norm", "rms_norm_backward"}
    assert all("allclose" in line for line in found), found
    assert any(line.startswith("[op_extension.debug] autocompare custom::rms_norm_backward([3, 16] float32 npu:0, "
                               "[3, 16] float32 npu:0, [16] float32 npu:0) grad_weight [16] float32 npu:0: allclose")
               for line in found)


def test_autocompare_reports_a_planted_error(capsys):
    debug._plant_wrong_kernel("gelu", amount=0.5, index=3)
    with debug.settings(autocompare="gelu"):
        out = ops.gelu(torch.randn(2, 8).to("npu"))
    assert out.device.type == "npu"
    (line,) = lines(capsys)
    assert line.startswith("[op_extension.debug] autocompare custom::gelu([2, 8] float32 npu:0) output "
                           "[2, 8] float32 npu:0: MISMATCH in 1 of 16 elements: max abs err 0.5 at index (0, 3), ")


def test_forced_fallback_runs_the_cpu_kernel(capsys):
    x = torch.randn(4, 8)
    cpu_kernel = torch.ops.custom.gelu(x, "tanh")  # before the plant, which acts on every device
    debug._plant_wrong_kernel("gelu", amount=0.5, index=0)
    with debug.settings(force_fallback="gelu"):
        out = ops.gelu(x.to("npu"), "tanh")
    assert out.device.type == "npu"
    torch.testing.assert_close(out.cpu(), cpu_kernel, atol=0, rtol=0)
    assert lines(capsys) == ["[op_extension.debug] custom::gelu: forced fallback: running the reference "
                             "(CPU kernel) instead of the npu kernel"]


def test_fallback_on_error_and_bad_input():
    x = torch.randn(4, 8)
    cpu_kernel = torch.ops.custom.layer_norm(x, [8], None, None, 1e-5)  # before the plant
    debug._plant_failing_kernel("layer_norm")
    with debug.settings(fallback_on_error=True):
        with pytest.warns(RuntimeWarning, match=r"custom::layer_norm: the npu kernel failed .*; "
                                                r"running the reference \(CPU kernel\) instead"):
            out = ops.layer_norm(x.to("npu"), (8,))
        torch.testing.assert_close(out.cpu(), cpu_kernel, atol=0, rtol=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match=r"^custom::layer_norm: normalized_shape \[7\] does not match"):
                ops.layer_norm(x.to("npu"), (7,))
            with pytest.raises(RuntimeError, match=r"^custom::layer_norm: weight is on cpu but input is on npu:0"):
                torch.ops.custom.layer_norm(x.to("npu"), [8], torch.ones(8), None, 1e-5)


def test_stats_per_device():
    with debug.settings(stats=True):
        ops.softmax(torch.randn(2, 8).to("npu"), -1)
        ops.softmax(torch.randn(2, 8), -1)
        ops.softmax(torch.randn(2, 8).to("npu"), 0)
    s = debug.stats()["softmax"]
    assert (s["npu"]["calls"], s["cpu"]["calls"]) == (2, 1)
    assert s["npu"]["total_ms"] > 0
