"""The Ascend C kernels and their tiling headers compile the way CANN's device compile sees them.

Nothing else compiles that branch here: the simulator build defines OP_EXT_ASCEND_SIM and has
the whole host C++ library on its include path, so a kernel that uses <cstdint>, <vector> or a
host-only TilingData accessor, or a tiling header that uses uint64_t before anything declared
it, compiles on the simulator and fails only on an Ascend machine. This test compiles every
kernel source, every kernel header and every <op>_custom_tiling.h with g++ -fsyntax-only,
-std=c++17, -nostdinc -nostdinc++ (the device compile has no host headers), __CCE_AICORE__ set
as CANN's device pass sets it (220: Atlas A2/A3, 200: Ascend310P), OP_EXT_ASCEND_SIM undefined,
and only the include paths of the device build: the kernels folder, the tiling headers folder
and tests/device_compile/include, a declaration-only stand-in for kernel_operator.h that
declares just the Ascend C API the kernels use (and the fixed-width integer types, as CANN's
does). The planted cases at the end prove that it catches include-order and host-header mistakes.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "op_extension" / "csrc" / "kernel" / "ascendc"
TILING = ROOT / "op_extension" / "csrc" / "host" / "tiling"
STAND_IN = ROOT / "tests" / "device_compile" / "include"
CXX = shutil.which("g++")

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ not found")

AICORE = {"910B": "220", "310P": "200"}

SOURCES = sorted(KERNELS.glob("*.cpp")) + sorted(KERNELS.glob("*.h")) + sorted(TILING.glob("*_custom_tiling.h"))


def device_compile(source, aicore="220", include_first=()):
    """g++ -fsyntax-only as the device compile: returns (returncode, diagnostics)."""
    cmd = [CXX, "-fsyntax-only", "-std=c++17", "-nostdinc", "-nostdinc++", f"-D__CCE_AICORE__={aicore}",
           "-UOP_EXT_ASCEND_SIM", "-x", "c++"]
    for d in (*include_first, STAND_IN, KERNELS, TILING):
        cmd += ["-I", str(d)]
    cmd.append(str(source))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stderr


def test_every_kernel_and_tiling_header_is_covered():
    names = {p.name for p in SOURCES}
    assert {"add_custom.cpp", "add_grad_custom.cpp", "geglu_custom.cpp", "kernel_tiling.h"} <= names
    # Every kernel's tiling header is in the list (one per op).
    for kernel in KERNELS.glob("*_custom.cpp"):
        assert kernel.name.replace(".cpp", "_tiling.h") in names


@pytest.mark.parametrize("soc", sorted(AICORE))
@pytest.mark.parametrize("source", SOURCES, ids=[p.name for p in SOURCES])
def test_compiles_as_the_device_compile_does(source, soc):
    rc, err = device_compile(source, AICORE[soc])
    assert rc == 0, f"{source.name} does not compile for the device ({soc}, __CCE_AICORE__={AICORE[soc]}):\n{err}"


def test_stand_in_has_no_host_headers():
    # The stand-in must not pull in host headers itself, or it would hide a kernel's reliance on them.
    text = (STAND_IN / "kernel_operator.h").read_text()
    assert "#include" not in text


# ---------------------------------------------------------------------------
# Planted mistakes: each must fail to compile
# ---------------------------------------------------------------------------

def _plant(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("header", ["cstdint", "vector"])
def test_planted_host_header_in_a_kernel_fails(tmp_path, header):
    kernel = _plant(tmp_path, "planted_custom.cpp", f"""
#include <{header}>
#include "kernel_operator.h"
extern "C" __global__ __aicore__ void planted_custom(GM_ADDR x) {{ (void)x; }}
""")
    rc, err = device_compile(kernel)
    assert rc != 0
    assert f"{header}: No such file or directory" in err


def test_planted_tiling_header_before_kernel_operator_fails_with_the_old_tiling_def(tmp_path):
    # The bug this test was written for: tiling_def.h's device branch declared the TilingData with
    # uint64_t / uint32_t fields but included nothing, and add_grad, fused_add_rms_norm and geglu
    # included their tiling header before kernel_operator.h. Rebuild that device branch (the
    # current one minus its kernel_operator.h include) and compile such a kernel against it.
    current = (TILING / "tiling_def.h").read_text()
    assert '#include "kernel_operator.h"' in current
    old = tmp_path / "old"
    old.mkdir()
    (old / "tiling_def.h").write_text(current.replace('#include "kernel_operator.h"', "", 1))
    # Beside it, so that its quoted #include "tiling_def.h" finds the old one first.
    shutil.copy(TILING / "add_grad_custom_tiling.h", old)
    kernel = _plant(tmp_path, "planted_custom.cpp", """
#include "add_grad_custom_tiling.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
extern "C" __global__ __aicore__ void planted_custom(GM_ADDR x, GM_ADDR tiling) {
  (void)x;
  GET_TILING_DATA(t, tiling);
  (void)t;
}
""")
    rc, err = device_compile(kernel, include_first=[old])
    assert rc != 0
    assert "'uint64_t' does not name a type" in err.replace("‘", "'").replace("’", "'")
    # The same kernel compiles with the fixed tiling_def.h: a tiling header is self-contained.
    rc, err = device_compile(kernel)
    assert rc == 0, err


def test_planted_host_only_tiling_accessor_in_a_kernel_fails(tmp_path):
    # set_<field> / GetDataSize exist only on the host side of tiling_def.h.
    kernel = _plant(tmp_path, "planted_custom.cpp", """
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "gelu_custom_tiling.h"
extern "C" __global__ __aicore__ void planted_custom(GM_ADDR x, GM_ADDR tiling) {
  (void)x;
  GET_TILING_DATA(t, tiling);
  t.set_totalLength(0);
}
""")
    rc, err = device_compile(kernel)
    assert rc != 0
    assert "set_totalLength" in err


def test_planted_api_missing_on_310p_fails(tmp_path):
    # DataCopyPad does not exist in the 310P device compile; kernels must guard it with
    # OP_EXT_HAS_DATA_COPY_PAD (kernel_common.h).
    kernel = _plant(tmp_path, "planted_custom.cpp", """
#include "kernel_operator.h"
extern "C" __global__ __aicore__ void planted_custom(GM_ADDR x) {
  AscendC::GlobalTensor<float> g;
  AscendC::LocalTensor<float> l;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(x), 8);
  AscendC::DataCopyPad(g, l, AscendC::DataCopyExtParams(1, 4, 0, 0, 0));
}
""")
    assert device_compile(kernel, AICORE["910B"])[0] == 0
    rc, err = device_compile(kernel, AICORE["310P"])
    assert rc != 0
    assert "DataCopyPad" in err
