"""op_extension.tune: several implementations of an op, the tuner that picks the
fastest correct one per call key, and its cache on disk (docs/tuning.md).

Timing is replaced by a clock of the test's own wherever a choice is asserted
(tune._timer): which implementation is fastest on a shared machine is not
something a test can assert. One end-to-end test times for real and checks
only what does not depend on the machine's speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from op_extension import debug, nn, ops, tune

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_tuner(tmp_path, monkeypatch):
    """Each test: its own cache folder, no choice in memory, no version, the real timer."""
    monkeypatch.setenv(tune.ENV_CACHE, str(tmp_path / "tuning"))
    monkeypatch.setattr(tune, "_tables", {})
    monkeypatch.setattr(tune, "_versions", {})
    monkeypatch.setattr(tune, "_timer", tune._timer)
    debug._reset_for_tests()
    yield
    debug._reset_for_tests()


class Clock:
    """The tuner's timer: {implementation: seconds}; records what it was asked to time."""

    def __init__(self, **seconds):
        self.seconds = seconds
        self.asked: list[list[str]] = []
        self.compiling: list[bool] = []

    def __call__(self, fns, device):
        self.asked.append(sorted(fns))
        self.compiling.append(torch.compiler.is_compiling())
        for fn in fns.values():
            fn()  # each candidate runs, as the real timer runs it
        return {name: self.seconds.get(name, 1.0) for name in fns}, {}


class Spy:
    """A registered version that computes the op correctly (its kernel) and counts its calls."""

    def __init__(self, op: str, shift: float = 0.0, write_input: bool = False, fail: bool = False):
        self.op, self.shift, self.write_input, self.fail = op, shift, write_input, fail
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        if self.fail:
            raise RuntimeError("launch failed")
        out = getattr(torch.ops.custom, self.op).default.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU),
                                                                    *args)
        if self.write_input:
            args[0].add_(1.0)
        return out + self.shift if self.shift else out


def x_(*shape, dtype=torch.float32):
    torch.manual_seed(0)
    return torch.randn(*shape, dtype=dtype)


# ---- the implementations ------------------------------------------------------------


def test_every_op_has_its_kernel_and_composite_and_torchs_op_where_there_is_one():
    for op in debug.OPS:
        names = [i.name for i in tune.implementations(op, "cpu")]
        assert names[0] == "kernel" and "composite" in names, (op, names)
    assert [i.name for i in tune.implementations("rms_norm")] == ["kernel", "native", "composite"]
    assert [i.name for i in tune.implementations("swiglu")] == ["kernel", "composite"]
    assert "native" in [i.name for i in tune.implementations("softmax_backward")]


@pytest.mark.parametrize("op", ["gelu", "rms_norm", "layer_norm", "softmax", "add"])
def test_each_implementation_computes_the_op(op):
    args = {"gelu": lambda: [x_(8, 64), "tanh"], "rms_norm": lambda: [x_(8, 64), [64], x_(64), None],
            "layer_norm": lambda: [x_(8, 64), [64], x_(64), x_(64), 1e-5], "softmax": lambda: [x_(8, 64), -1],
            "add": lambda: [x_(8, 64), x_(64), 0.5]}[op]()
    expected = getattr(torch.ops.custom, op)(*args)
    for impl in tune.implementations(op):
        torch.testing.assert_close(impl.run(*args), expected, msg=impl.name)


def test_versions_register_beside_the_kernel_and_go():
    spy = Spy("gelu")
    tune.register("gelu", "v2", spy, devices=("cpu",))
    assert [i.name for i in tune.implementations("gelu", "cpu")] == ["kernel", "v2", "native", "composite"]
    assert "v2" not in [i.name for i in tune.implementations("gelu", "cuda")]
    tune.unregister("gelu", "v2")
    assert "v2" not in [i.name for i in tune.implementations("gelu")]
    with pytest.raises(ValueError, match=r"custom::gelu: 'native' cannot name a version"):
        tune.register("gelu", "native", spy)
    with pytest.raises(ValueError, match=r"no op custom::gelux"):
        tune.register("gelux", "v2", spy)
    with pytest.raises(ValueError, match=r"custom::gelu has no version 'v3'"):
        tune.unregister("gelu", "v3")


def test_liger_kernels_are_listed_on_cuda_where_liger_is_installed(monkeypatch):
    calls = []

    class FakeRMSNorm:
        @staticmethod
        def apply(x, w, eps, offset, casting_mode):
            calls.append((eps, offset, casting_mode))
            return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)

    package = types.ModuleType("liger_kernel")
    ops_module = types.ModuleType("liger_kernel.ops")
    rms_module = types.ModuleType("liger_kernel.ops.rms_norm")
    rms_module.LigerRMSNormFunction = FakeRMSNorm
    for name, module in (("liger_kernel", package), ("liger_kernel.ops", ops_module),
                         ("liger_kernel.ops.rms_norm", rms_module)):
        monkeypatch.setitem(sys.modules, name, module)
    assert "liger" not in [i.name for i in tune.implementations("rms_norm", "cpu")]  # CUDA only
    (liger,) = [i for i in tune.implementations("rms_norm", "cuda") if i.name == "liger"]
    x, w = x_(4, 16), x_(16)
    torch.testing.assert_close(liger.run(x, [16], w, None), torch.ops.custom.rms_norm(x, [16], w, None))
    assert calls == [(torch.finfo(torch.float32).eps, 0.0, "llama")]
    with pytest.raises(NotImplementedError, match="weight"):
        liger.run(x, [16], None, None)
    # swiglu's module is not installed here: no liger implementation, no error
    assert "liger" not in [i.name for i in tune.implementations("swiglu", "cuda")]


# ---- choosing -------------------------------------------------------------------------


def test_the_fastest_correct_implementation_runs_from_then_on():
    spy = Spy("gelu")
    tune.register("gelu", "v2", spy)
    clock = Clock(kernel=3e-6, v2=1e-6, native=2e-6, composite=4e-6)
    tune._timer = clock
    x = x_(8, 64)
    with tune.tuning():
        first = ops.gelu(x, "tanh")
        runs_after_tuning = spy.calls
        for _ in range(3):
            again = ops.gelu(x, "tanh")
    assert clock.asked == [["composite", "kernel", "native", "v2"]]  # once per key
    assert spy.calls == runs_after_tuning + 3
    torch.testing.assert_close(first, torch.ops.custom.gelu(x, "tanh"))
    torch.testing.assert_close(again, first)
    (choice,) = tune.choices().values()
    assert choice.chosen == "v2" and choice.margin() == pytest.approx(2.0)
    # another shape bucket is another key
    with tune.tuning():
        ops.gelu(x_(300, 64), "tanh")
    assert len(clock.asked) == 2 and len(tune.choices()) == 2


def test_call_keys_bucket_rows_and_keep_the_arguments_that_choose_code():
    key = tune.call_key
    assert key("gelu", [x_(8, 64), "tanh"]) == "gelu|float32|8x64,'tanh'"
    assert key("gelu", [x_(5, 64), "tanh"]) == key("gelu", [x_(8, 64), "tanh"])  # rows up to a power of two
    assert key("gelu", [x_(9, 64), "tanh"]) == "gelu|float32|16x64,'tanh'"
    assert key("softmax", [x_(2, 3, 4), 0]) == "softmax|float32|8x4,0"
    assert key("rms_norm", [x_(4, 16, dtype=torch.bfloat16), [16], None, 1e-6]) == "rms_norm|bfloat16|4x16,16,-"
    assert key("add", [x_(()), x_(3), 2.5]) == "add|float32|scalar,1x3"


def test_a_wrong_a_failing_and_an_input_writing_implementation_are_reported_and_never_chosen(caplog):
    tune.register("gelu", "off_by_one", Spy("gelu", shift=1.0))
    tune.register("gelu", "writes_input", Spy("gelu", write_input=True))
    tune.register("gelu", "fails", Spy("gelu", fail=True))
    clock = Clock(off_by_one=1e-9, writes_input=1e-9, fails=1e-9, kernel=2e-6, native=3e-6, composite=4e-6)
    tune._timer = clock
    x = x_(8, 64)
    before = x.clone()
    with tune.tuning():
        out = ops.gelu(x, "none")
    assert torch.equal(x, before)  # the candidates ran on copies
    torch.testing.assert_close(out, torch.ops.custom.gelu(x, "none"))
    assert clock.asked == [["composite", "kernel", "native"]]
    (choice,) = tune.choices().values()
    assert choice.chosen == "kernel"
    assert choice.rejected["off_by_one"].startswith("output [8, 64] float32 cpu: MISMATCH in 512 of 512 elements")
    assert "MODIFIED its input 'input'" in choice.rejected["writes_input"]
    assert choice.rejected["fails"] == "RuntimeError: launch failed"
    report = tune.report()
    assert "off_by_one" in report and "rejected: output [8, 64] float32 cpu: MISMATCH" in report


def test_choices_persist_and_a_later_process_times_nothing(tmp_path):
    tune._timer = Clock(kernel=2e-6, native=1e-6, composite=3e-6)
    x = x_(8, 64)
    with tune.tuning():
        ops.rms_norm(x, [64])
    path = tune.cache_file()
    data = json.loads(path.read_text())
    assert data["torch"] == torch.__version__ and data["device"] == tune.device_name("cpu")
    assert data["choices"]["rms_norm|float32|8x64,64,-,-"]["chosen"] == "native"
    # A new process: OP_EXT_TUNE=1, the same cache; a timer that would fail the run.
    script = ("import torch, op_extension\n"
              "from op_extension import tune, ops\n"
              "def no_timing(fns, device): raise AssertionError('timed again')\n"
              "tune._timer = no_timing\n"
              "torch.manual_seed(0)\n"
              "print(ops.rms_norm(torch.randn(8, 64), [64]).shape)\n"
              "print(sorted(tune.choices()))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "OP_EXT_TUNE": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["torch.Size([8, 64])", "['rms_norm|float32|8x64,64,-,-']"]
    # --report, then --clear, in one call (each call is a process start: seconds here).
    done = subprocess.run([sys.executable, "-m", "op_extension.tune", "--report", "--clear"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"tuning cache: {path}"
    assert lines[2].split() == ["rms_norm|float32|8x64,64,-,-", "native", "1.00", "chosen,", "2.00x", "ahead"]
    assert [line.split()[0] for line in lines[3:-1]] == ["kernel", "composite"]
    assert lines[-1] == f"cleared {path}" and not path.exists()


def test_a_corrupt_or_foreign_cache_is_ignored_with_a_warning():
    path = tune.cache_file()
    path.parent.mkdir(parents=True)
    header = tune._versions_header("cpu")
    good = {"format": 1, **header,
            "choices": {"gelu|float32|8x64,'tanh'": {"chosen": "native", "times_s": {"native": 1e-6}}}}
    cases = {
        "not json": "{",
        "another torch": json.dumps({**good, "torch": "1.0.0"}),
        "another device": json.dumps({**good, "device": "some other GPU"}),
        "another format": json.dumps({**good, "format": 99}),
        "a choice without its time": json.dumps({**good, "choices": {"k": {"chosen": "v9", "times_s": {}}}}),
    }
    for what, text in cases.items():
        path.write_text(text)
        tune._tables.clear()
        with pytest.warns(RuntimeWarning, match=r"op_extension.tune: ignoring the tuning cache .*"):
            assert tune.choices() == {}, what
    path.write_text(json.dumps(good))
    tune._tables.clear()
    assert tune.choices()["gelu|float32|8x64,'tanh'"].chosen == "native"


def test_the_cache_file_is_keyed_by_device_torch_and_package(monkeypatch):
    first = tune.cache_file()
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert tune.cache_file() != first and "torch-9.9.9" in tune.cache_file().name
    monkeypatch.setattr(tune, "_package_version", "7.0")
    assert "op_extension-7.0" in tune.cache_file().name


def test_a_new_version_retunes_its_op_only():
    tune._timer = Clock(kernel=1e-6)
    with tune.tuning():
        ops.gelu(x_(8, 64))
        ops.softmax(x_(8, 64), -1)
    assert len(tune.choices()) == 2
    tune.register("gelu", "v2", Spy("gelu"))
    assert [k.split("|")[0] for k in tune.choices()] == ["softmax"]


# ---- with tuning off, with compile --------------------------------------------------------


def test_with_tuning_off_nothing_is_hooked():
    spy = Spy("gelu")
    tune.register("gelu", "v2", spy)
    tune._timer = Clock(v2=1e-9)
    with tune.tuning():
        ops.gelu(x_(8, 64))
        assert debug.hooks_installed()
    calls = spy.calls
    assert not debug.hooks_installed()
    ops.gelu(x_(8, 64))
    assert spy.calls == calls  # the kernel ran: the choice applies in tuning mode only


def test_no_tuning_inside_a_trace_and_compiled_code_uses_the_choices(monkeypatch):
    spy = Spy("rms_norm")
    tune.register("rms_norm", "v2", spy)
    clock = Clock(v2=1e-9)
    tune._timer = clock
    x = x_(8, 64)
    # A call while compiling: the kernel, no tuning (the key stays open).
    with monkeypatch.context() as m, tune.tuning():
        m.setattr(torch.compiler, "is_compiling", lambda: True)
        ops.rms_norm(x, [64])
    assert clock.asked == [] and tune.choices() == {}

    compiled = torch.compile(lambda t: ops.rms_norm(t, [64]) * 2, fullgraph=True)
    with tune.tuning():
        out = compiled(x)  # traced with fake tensors, then run: tuned at run time, outside the trace
    assert clock.asked == [["composite", "kernel", "native", "v2"]] and clock.compiling == [False]
    torch.testing.assert_close(out, torch.ops.custom.rms_norm(x, [64], None, None) * 2)
    calls = spy.calls
    with tune.tuning():
        compiled(x)
    assert spy.calls == calls + 1
    # A new choice reaches the same compiled code (the op dispatches at run time).
    tune.unregister("rms_norm", "v2")
    tune._timer = Clock(native=1e-9)
    with tune.tuning():
        compiled(x)
    assert tune.choices()["rms_norm|float32|8x64,64,-,-"].chosen == "native" and spy.calls == calls + 1


def test_outputs_keep_the_layout_the_fake_kernel_promises():
    # torch's gelu keeps a transposed input's layout, as ours does; rms_norm's
    # output is row-major whatever torch's composite returns.
    tune._timer = Clock(native=1e-9)
    xt = x_(64, 8).t()
    with tune.tuning():
        g = ops.gelu(xt)
        r = ops.rms_norm(xt, [64])
    assert g.stride() == torch.ops.custom.gelu(xt).stride()
    assert r.stride() == torch.ops.custom.rms_norm(xt, [64]).stride() == (64, 1)
    assert {c.chosen for c in tune.choices().values()} == {"native"}


# ---- end to end -----------------------------------------------------------------------------


def test_tuning_a_small_model_for_real(monkeypatch, capsys):
    """The real timer (a few ms per implementation): every key of a training step
    tuned once, the outputs and gradients those of the kernels, and the report."""
    monkeypatch.setenv(tune.ENV_BUDGET, "2")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), nn.CustomRMSNorm(64), torch.nn.Linear(64, 32))
    x = torch.randn(16, 32)

    def step():
        model.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss, grads = step()
    with tune.tuning():
        tuned_loss, tuned_grads = step()
        step()  # the keys are tuned: nothing timed again
    keys = sorted(tune.choices())
    assert keys == ["rms_norm_backward|float32|16x64,16x64,64,1x64,-", "rms_norm|float32|16x64,64,1x64,-"]
    torch.testing.assert_close(tuned_loss, loss)
    for a, b in zip(tuned_grads, grads):
        torch.testing.assert_close(a, b)
    report = tune.report().splitlines()
    assert sum("chosen" in line for line in report) == 2
    assert {line.split()[0] for line in report[2:] if line.startswith("rms_norm")} == set(keys)
    print("\n".join(report))
