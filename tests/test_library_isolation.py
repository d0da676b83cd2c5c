"""The extension libraries share no state: _C, _cuda_sim and _ascend_sim, loaded
into one process in any order, each run their own kernels.

They once did not: the kernel stubs were inline globals, which g++ exports as
GNU-unique symbols that the dynamic linker merges across every library of a
process, and each .cu file wrote its CUDA launcher into its stub at load. So
_cuda_sim, loaded after a CUDA build of _C, replaced _C's launchers with the CPU
harness's, and the next CUDA op crashed. Now the launchers are bound at link time
(kernel/cuda/cuda_kernels.h) and every library is built with hidden visibility
(setup.py); scripts/check_symbols.py holds the rule on the built libraries, and
the planted pair below proves that the check sees a shared inline global.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import check_symbols  # noqa: E402

LIBRARIES = check_symbols.LIBRARIES

# Run in a fresh interpreter: loads the named libraries straight from their files,
# in the order given, without the op_extension package (whose import would load _C
# first), then runs one rms_norm on each library loaded and prints what it saw.
PROBE = textwrap.dedent("""
    import hashlib, importlib.machinery, importlib.util, json, sys
    import torch

    package = sys.argv[1]
    order = sys.argv[2].split(",")
    modules = {}
    for name in order:
        path = next(__import__("pathlib").Path(package).glob(name + ".*.so"))
        loader = importlib.machinery.ExtensionFileLoader("op_extension." + name, str(path))
        spec = importlib.util.spec_from_file_location("op_extension." + name, path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        modules[name] = module

    def digest(t):
        return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()

    torch.manual_seed(0)
    x = torch.randn(37, 1000)
    w = 1 + 0.2 * torch.randn(1000)
    seen = {}
    launches = modules["_cuda_sim"].launch_count if "_cuda_sim" in modules else (lambda: 0)
    for name in order:
        before = launches()
        if name == "_C":
            y = torch.ops.custom.rms_norm(x, [1000], w, 1e-6)
            seen["_C_stub"] = modules[name]._kernel_stub_address()
        elif name == "_cuda_sim":
            y = torch.ops.cuda_sim.rms_norm(x, [1000], w, 1e-6)
            seen["_cuda_sim_stub"] = modules[name]._kernel_stub_address()
        else:
            y = modules[name].rms_norm(x, [1000], w, 1e-6)
        seen[name] = {"digest": digest(y), "harness_launches": launches() - before}
    if "_C" in modules and torch.cuda.is_available() and torch._C._dispatch_has_kernel_for_dispatch_key(
            "custom::rms_norm", "CUDA"):
        # A real launch of _C's CUDA kernel after every library was loaded.
        y = torch.ops.custom.rms_norm(x.cuda(), [1000], w.cuda(), 1e-6)
        torch.cuda.synchronize()
        ref = torch.ops.custom.rms_norm(x, [1000], w, 1e-6)
        seen["cuda_max_error"] = (y.cpu() - ref).abs().max().item()
    print(json.dumps(seen))
""")


def _probe(order: tuple[str, ...]) -> dict:
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", PROBE, str(ROOT / "op_extension"), ",".join(order)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, f"loading {order} failed (exit {result.returncode}):\n{result.stderr[-5000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def alone() -> dict:
    """What each library computes when it is the only one in its process."""
    return {name: _probe((name,))[name] for name in LIBRARIES}


@pytest.mark.parametrize("order", list(itertools.permutations(LIBRARIES)), ids=lambda o: "-".join(o))
def test_each_library_runs_its_own_kernels_in_any_load_order(order, alone):
    seen = _probe(order)
    for name in LIBRARIES:
        # The same bits as alone: _C's CPU kernel, the harness's CUDA kernel, the
        # Ascend C kernel on its simulator.
        assert seen[name]["digest"] == alone[name]["digest"], f"{name} computed otherwise after loading {order}"
    # Only the harness's op launched on the harness.
    assert seen["_C"]["harness_launches"] == 0
    assert seen["_ascend_sim"]["harness_launches"] == 0
    assert seen["_cuda_sim"]["harness_launches"] >= 1
    # Each library's code sees its own stub, not one merged by the dynamic linker.
    assert seen["_C_stub"] != seen["_cuda_sim_stub"]
    if "cuda_max_error" in seen:
        assert seen["cuda_max_error"] < 1e-4, seen


def test_the_built_libraries_export_nothing_of_the_project_but_their_module_init():
    libraries = check_symbols.built_libraries()
    assert check_symbols.problems(libraries) == []


def _build_planted_library(tmp_path: Path, name: str, flags: list[str]) -> Path:
    # Two libraries holding the same inline global, as two extensions that include
    # one kernel header do.
    tmp_path.mkdir(exist_ok=True)
    source = tmp_path / f"{name}.cpp"
    source.write_text(textwrap.dedent("""
        namespace op_ext::cpu {
        struct Stub { void (*launcher)() = nullptr; };
        inline Stub planted_stub;
        }
        static void own_launcher() {}
        extern "C" int PyInit_%s() {
          op_ext::cpu::planted_stub.launcher = &own_launcher;
          return 0;
        }
    """ % name))
    library = tmp_path / f"{name}.so"
    subprocess.run(["g++", "-std=c++17", "-shared", "-fPIC", *flags, str(source), "-o", str(library)], check=True)
    return library


def test_the_check_sees_an_inline_global_shared_by_two_libraries(tmp_path):
    libraries = [_build_planted_library(tmp_path, name, []) for name in ("_first", "_second")]
    found = check_symbols.problems(libraries)
    assert any(line.startswith("_first: exports a GNU-unique object") and "planted_stub" in line for line in found)
    assert any(line.startswith("defined by _first, _second:") and "planted_stub" in line for line in found)
    # The module init alone is allowed.
    assert not any("PyInit" in line for line in found)
    # Built as setup.py builds the extensions, the same sources pass.
    hidden = [_build_planted_library(tmp_path / "hidden", name, setup_visibility_flags())
              for name in ("_first", "_second")]
    assert check_symbols.problems(hidden) == []


def setup_visibility_flags() -> list[str]:
    """setup.py's visibility flags, read from its source (importing setup.py would run setup())."""
    text = (ROOT / "setup.py").read_text()
    line = next(l for l in text.splitlines() if l.startswith("HIDDEN = "))
    return json.loads(line.split("=", 1)[1].strip())


def test_the_check_sees_an_exported_function_of_the_project(tmp_path):
    source = tmp_path / "exported.cpp"
    source.write_text("namespace op_ext { int kernel_dtype(int d) { return d; } }\n")
    library = tmp_path / "_exported.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    assert check_symbols.problems([library]) == [
        "_exported: exports a symbol of the project's (only PyInit__exported may be exported): "
        "op_ext::kernel_dtype(int)"]

