"""Small calls that crashed worker processes on the first GPU run of the suite
(H200, torch 2.11.0+cu130, benchmarks/results/gpu_2026-11-26_h200/): each is run
alone in a fresh interpreter by scripts/gpu_check.sh, which reruns the first one
that dies of a signal under a debugger for its native backtrace.

    python scripts/gpu_crash_probes.py --list      the probes' names
    python scripts/gpu_crash_probes.py NAME        runs one: exit 0 when it behaved

What was seen there: loading _ascend_sim alone and running one rms_norm died
with SIGSEGV (tests/test_library_isolation.py's probe, every time); test
workers died inside _ascend_sim calls and inside ops whose C++ checks raise
(test_bad_input: softmax with dim -3 on a 2-d tensor, add of shapes that do not
broadcast, on cpu and cuda). Here each of those is one call.

None of it happened on the CPU machines (gcc 12, Python 3.11, torch 2.13), nor
with Python 3.12 and torch 2.11.0+cu130 built by gcc 12 there (the whole of
test_ascend_sim*, test_bad_input and test_library_isolation under xdist, and
this script): what is left is the GPU machines' compiler (their Python's
sysconfig links with /opt/gcc/bin/g++, torch's ninja build compiles with $CXX
or `c++`) and the machine itself.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# Where ascend_sim_alone loads _ascend_sim from: gpu_check.sh points it at a copy
# built with another compiler when the one in the package crashed.
PACKAGE = Path(os.environ.get("OP_EXT_PROBE_DIR", ROOT / "op_extension"))


def _load_alone(name: str):
    """The library straight from its file, without the package (whose import loads _C)."""
    path = next(PACKAGE.glob(name + ".*.so"))
    loader = importlib.machinery.ExtensionFileLoader("op_extension." + name, str(path))
    spec = importlib.util.spec_from_file_location("op_extension." + name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _rows():
    torch.manual_seed(0)
    return torch.randn(37, 1000), 1 + 0.2 * torch.randn(1000)


def ascend_sim_alone():
    x, w = _rows()
    y = _load_alone("_ascend_sim").rms_norm(x, [1000], w, 1e-6)
    print("ascend_sim_alone: rms_norm ok, max", y.abs().max().item())


def ascend_sim_in_package():
    sys.path.insert(0, str(ROOT))
    from op_extension import ascend_sim

    x, w = _rows()
    y = ascend_sim.run("rms_norm", x, [1000], w, 1e-6)
    print("ascend_sim_in_package: rms_norm ok, max", y.abs().max().item())


def _expect_error(call, what: str):
    try:
        call()
    except (RuntimeError, IndexError, ValueError) as e:
        print(f"{what}: raised {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        return
    raise SystemExit(f"{what}: returned instead of raising")


def _c_errors(device: str):
    sys.path.insert(0, str(ROOT))
    import op_extension  # noqa: F401  (loads _C and registers custom::)

    x = torch.randn(3, 4, device=device)
    _expect_error(lambda: torch.ops.custom.softmax(x, -3), f"softmax dim -3 on {device}")
    _expect_error(lambda: torch.ops.custom.add(x, torch.randn(5, 4, device=device)), f"add 3x4 + 5x4 on {device}")


def c_error_cpu():
    _c_errors("cpu")


def c_error_cuda():
    if not torch.cuda.is_available():
        print("c_error_cuda: no CUDA device, nothing to run")
        return
    _c_errors("cuda")


def cuda_sim_error():
    sys.path.insert(0, str(ROOT))
    from op_extension import cuda_sim

    x = torch.randn(3, 4)
    _expect_error(lambda: cuda_sim.run("softmax", x, -3), "harness softmax dim -3")


PROBES = {f.__name__: f for f in (ascend_sim_alone, ascend_sim_in_package, c_error_cpu, c_error_cuda, cuda_sim_error)}

if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        print(" ".join(PROBES))
    elif len(sys.argv) == 2 and sys.argv[1] in PROBES:
        PROBES[sys.argv[1]]()
    else:
        raise SystemExit(f"usage: {sys.argv[0]} --list | {' | '.join(PROBES)}")
