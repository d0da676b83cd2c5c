"""scripts/build_progress.py, the filter `make build` runs `pip install -v` through:
one line per compiled object, errors and our own warnings shown, header noise
counted, everything in the log, the command's exit status kept. The command here
is a stand-in that prints what pip -v prints during a build (lines taken from a
real one, and compiles through ccache)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "build_progress.py"

TORCH_H = "/venv/lib/python3.11/site-packages/torch/include/ATen/cpu/vec/vec256/vec256_bfloat16.h"
PIP_OUTPUT = f"""\
Obtaining file://{ROOT}
  Running command Building editable for op_extension (pyproject.toml)
  running build_ext
  building 'op_extension._C' extension
  [1/2] c++ -MMD -MF /tmp/b/build/generated/isa/norm.avx2.o.d -O3 -I{ROOT}/build/generated -c -c {ROOT}/build/generated/isa/norm.avx2.cpp -o /tmp/b/build/generated/isa/norm.avx2.o -fopenmp
  In file included from {ROOT}/op_extension/csrc/kernel/cpu/norm.cpp:8,
  {TORCH_H}:41:3: warning: AVX vector return without AVX enabled changes the ABI [-Wpsabi]
     41 |   }});
  {TORCH_H}:52:3: warning: AVX vector return without AVX enabled changes the ABI [-Wpsabi]
  [2/2] c++ -MMD -MF /tmp/b/op_extension/csrc/torch_ext/checks.o.d -O3 -c -c {ROOT}/op_extension/csrc/torch_ext/checks.cpp -o /tmp/b/op_extension/csrc/torch_ext/checks.o
  {ROOT}/op_extension/csrc/torch_ext/checks.cpp:12:5: warning: unused variable 'n' [-Wunused-variable]
  g++ -O3 -Wall -shared /tmp/b/build/generated/isa/norm.avx2.o /tmp/b/op_extension/csrc/torch_ext/checks.o -o /tmp/b/op_extension/_C.cpython-311-x86_64-linux-gnu.so -fopenmp
  building 'op_extension._cuda_sim' extension
  op_extension: ninja not found; the build will be slow (pip install ninja)
  ccache g++ -pthread -O3 -fPIC -c {ROOT}/op_extension/csrc/cuda_sim/binding/cuda_sim_module.cpp -o /tmp/b/cuda_sim_module.o
  [1/1] ccache c++ -MMD -MF /tmp/b/op_extension/csrc/cuda_sim/harness.o.d -O3 -c -c {ROOT}/op_extension/csrc/cuda_sim/harness.cpp -o /tmp/b/op_extension/csrc/cuda_sim/harness.o
  ../../op_extension/csrc/cuda_sim/harness.cpp:7:9: warning: unused variable 'm' [-Wunused-variable]
  ../../{TORCH_H.lstrip("/")}:52:3: warning: AVX vector return without AVX enabled changes the ABI [-Wpsabi]
"""
FAILING_TAIL = f"""\
  FAILED: /tmp/b/op_extension/csrc/cuda_sim/harness.o
  {ROOT}/op_extension/csrc/cuda_sim/harness.cpp:40:1: error: expected ';' before '}}' token
  ninja: build stopped: subcommand failed.
  error: subprocess-exited-with-error
"""


def _run(tmp_path: Path, output: str, status: int) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "pip_output.txt").write_text(output)
    fake_pip = (f"import sys; sys.stdout.write(open({str(tmp_path / 'pip_output.txt')!r}).read()); "
                f"sys.exit({status})")
    log = tmp_path / "logs" / "build.log"
    result = subprocess.run([sys.executable, str(SCRIPT), str(log), sys.executable, "-c", fake_pip],
                            capture_output=True, text=True, timeout=60)
    return result, log


def test_a_build_shows_one_line_per_object_and_keeps_everything_in_the_log(tmp_path):
    result, log = _run(tmp_path, PIP_OUTPUT, 0)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    steps = [line for line in lines if line.startswith("build: [")]
    # Compiled without ninja: setuptools prints the command, no counts.
    assert any(re.fullmatch(r"build: +\d+:\d\d  op_extension/csrc/cuda_sim/binding/cuda_sim_module\.cpp", line)
               for line in lines), lines
    assert "op_extension: ninja not found; the build will be slow (pip install ninja)" in lines
    assert [s.split()[-1] for s in steps] == [
        "build/generated/isa/norm.avx2.cpp", "op_extension/csrc/torch_ext/checks.cpp",
        "op_extension/csrc/cuda_sim/harness.cpp"]
    assert steps[0].startswith("build: [1/2]") and steps[2].startswith("build: [1/1]")
    assert lines[0] == f"build: started; one line per compiled file, the whole output in {log}"
    assert lines[1] == "build: op_extension._C"
    assert "build: linking op_extension._C" in lines and "build: op_extension._cuda_sim" in lines
    # Our own warnings are shown, also where ccache made the path relative to the
    # compiler's working directory (build/temp.*); the three elsewhere only counted.
    assert any("checks.cpp:12:5: warning: unused variable" in line for line in lines)
    assert "../../op_extension/csrc/cuda_sim/harness.cpp:7:9: warning: unused variable 'm' [-Wunused-variable]" in lines
    assert not any("Wpsabi" in line for line in lines)
    assert "build: 3 warnings outside op_extension/ (torch's and the compiler's headers) not shown" in lines
    assert lines[-1].startswith("build: done in ") and str(log) in lines[-1]
    assert log.read_text() == PIP_OUTPUT
    assert len(lines) < len(PIP_OUTPUT.splitlines())


def test_a_failed_build_shows_the_error_and_keeps_the_exit_status(tmp_path):
    result, log = _run(tmp_path, PIP_OUTPUT + FAILING_TAIL, 3)
    assert result.returncode == 3
    out = result.stdout
    assert "harness.cpp:40:1: error: expected ';'" in out
    assert "build: FAILED after" in out and f"last lines of {log}" in out
    errors = out[out.index("build: errors:"):]
    assert "FAILED: /tmp/b/op_extension/csrc/cuda_sim/harness.o" in errors
    assert "error: expected ';' before" in errors


def test_make_build_runs_pip_through_the_filter():
    result = subprocess.run(["make", "-n", "-B", "build", "VENV=/nonexistent-venv"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    recipe = result.stdout.replace("\\\n", " ")
    assert "scripts/build_progress.py build/build.log" in recipe
    assert "-m pip install -v --no-build-isolation --no-deps -e ." in recipe
