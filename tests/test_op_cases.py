"""tests/op_cases/: every op of op_protos/ has its test data, and an op without it
fails the shared tests with a message naming the file to write."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import op_cases

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.mark.parametrize("op", op_cases.ALL_OPS)
def test_every_op_has_its_test_data(op):
    problems = op_cases.problems(op)
    assert not problems, "\n".join(problems)


def test_every_module_is_a_forward_op():
    modules = {p.stem for p in (TESTS / "op_cases").glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(op_cases.FORWARD_OPS), (
        f"tests/op_cases/ modules without a forward op in op_protos/: {sorted(modules - set(op_cases.FORWARD_OPS))}")


def test_entry_names_follow_the_op_kind():
    assert op_cases.attribute("gelu", "BAD") == "BAD"
    assert op_cases.attribute("gelu_backward", "BAD") == "BACKWARD_BAD"
    assert op_cases.attribute("gelu_backward", "schema_args") == "backward_schema_args"
    assert op_cases.forward_of("gelu_backward") == "gelu" and op_cases.path_of("gelu_backward").name == "gelu.py"


def _new_op(name: str):
    """Prototypes of an op `name` (and its backward) that has no test data: gelu's, renamed."""
    fwd = dataclasses.replace(op_cases.PROTOS["gelu"], name=name, backward=f"{name}_backward")
    bwd = dataclasses.replace(op_cases.PROTOS["gelu_backward"], name=f"{name}_backward", backward_of=name)
    return fwd, bwd


def test_an_op_without_a_module_is_missing_everywhere(monkeypatch):
    fwd, bwd = _new_op("scale_shift")
    monkeypatch.setitem(op_cases.PROTOS, fwd.name, fwd)
    monkeypatch.setitem(op_cases.PROTOS, bwd.name, bwd)
    message = ("custom::scale_shift (op_protos/scale_shift.json) has no test data: write tests/op_cases/scale_shift.py")
    assert message in op_cases.problems("scale_shift")[0]
    assert "write tests/op_cases/scale_shift.py" in op_cases.problems("scale_shift_backward")[0]
    ((op, key, bad),) = op_cases.items("BAD", ("scale_shift",))
    assert (op, key) == ("scale_shift", "MISSING")
    with pytest.raises(op_cases.OpCasesError, match="write tests/op_cases/scale_shift.py"):
        bad.exc  # noqa: B018  (any use of a Missing entry fails)
    ((_, calls),) = op_cases.each("CALLS", ("scale_shift",))
    with pytest.raises(op_cases.OpCasesError, match="write tests/op_cases/scale_shift.py"):
        list(calls)


def test_a_missing_entry_is_named(monkeypatch):
    module = op_cases.module("swiglu")
    monkeypatch.delattr(module, "BACKWARD_BAD")
    assert op_cases.problems("swiglu") == []
    (problem,) = op_cases.problems("swiglu_backward")
    assert problem.startswith("tests/op_cases/swiglu.py has no BACKWARD_BAD (the test data of custom::swiglu_backward)")
    assert op_cases.get("swiglu", "LAYOUT", None) is not None and op_cases.get("softmax", "BACKWARD_LAYOUT", None) is None


PLUGIN = '''
import dataclasses, sys
sys.path.insert(0, {tests!r})
import op_cases
fwd = dataclasses.replace(op_cases.PROTOS["gelu"], name="scale_shift", backward="scale_shift_backward")
bwd = dataclasses.replace(op_cases.PROTOS["gelu_backward"], name="scale_shift_backward", backward_of="scale_shift")
op_cases.PROTOS.update(scale_shift=fwd, scale_shift_backward=bwd)
op_cases.FORWARD_OPS += ("scale_shift",)
op_cases.BACKWARD_OPS += ("scale_shift_backward",)
op_cases.ALL_OPS += ("scale_shift", "scale_shift_backward")
'''


def test_shared_tests_fail_for_an_op_without_test_data(tmp_path):
    """An op added to op_protos/ without tests/op_cases/<op>.py: the shared tests
    collect as before and fail for it, each saying which file to write."""
    (tmp_path / "new_op_plugin.py").write_text(PLUGIN.format(tests=str(TESTS)))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "new_op_plugin", "-k", "scale_shift",
         str(TESTS / "test_bad_input.py"), str(TESTS / "test_ops.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "1000"},
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-5000:]
    assert "error" not in out.splitlines()[-1], out[-5000:]  # collected, no collection error
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    for test in ("test_bad_input[scale_shift-MISSING-cpu]", "test_bad_input[scale_shift_backward-MISSING-cpu]",
                 "test_unsupported_dtype[scale_shift-torch.int32-cpu]", "test_opcheck[cpu-scale_shift-MISSING-no_grad]",
                 "test_gradcheck[cpu-scale_shift_MISSING]", "test_double_backward_raises[cpu-scale_shift]"):
        assert any(test in line for line in failed), (test, failed)
    assert all("write tests/op_cases/scale_shift.py" in line for line in failed), [
        line for line in failed if "write tests/op_cases/scale_shift.py" not in line]
