"""The NPU part of setup.py: whether to build for Ascend NPUs, and how.

Standard library only, so that setup.py can use it before deciding anything and
tests can check the decisions on machines without torch_npu or CANN.

An NPU build (OP_EXT_WITH_NPU=1, or auto with torch_npu installed and
ASCEND_HOME_PATH set) does two things more than a CPU build:
  1. runs CMake on cmake/ascend/CMakeLists.txt: CANN's Ascend C compiler builds
     the kernels, the host compiler the tiling and aclnn code, into
     libop_ext_ascend.so (+ libop_ext_ascend_kernels.so);
  2. builds _C with torch_npu's NpuExtension, adding the npu glue
     (csrc/torch_ext/npu/*.cpp), linked against those libraries, CANN's
     ascendcl and nnopbase, and torch_npu.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

CMAKE_SOURCE_DIR = Path(__file__).resolve().parent
# The libraries _C links besides torch's and torch_npu's (NpuExtension adds those).
LINK_LIBRARIES = ["op_ext_ascend", "ascendcl", "nnopbase"]
# What the CMake install step produces; setup.py copies them next to _C.
BUILT_LIBRARIES = ["libop_ext_ascend.so", "libop_ext_ascend_kernels.so"]


def torch_npu_installed() -> bool:
    # find_spec does not import: importing torch_npu without CANN fails.
    return importlib.util.find_spec("torch_npu") is not None


def npu_build_wanted(
    env: Mapping[str, str], torch_npu_is_installed: bool, import_torch_npu: Callable[[], object]
) -> bool:
    """OP_EXT_WITH_NPU=auto|0|1 (default auto), like OP_EXT_WITH_CUDA.

    auto builds for NPU when torch_npu is installed, ASCEND_HOME_PATH names a
    directory and torch_npu imports; 1 requires all three and says which is
    missing; 0 never builds for NPU. import_torch_npu is only called when the
    other two hold.
    """
    want = env.get("OP_EXT_WITH_NPU", "auto").lower()
    if want not in ("auto", "0", "1"):
        raise SystemExit(f"OP_EXT_WITH_NPU must be auto, 0 or 1, got {want!r}")
    if want == "0":
        return False
    ascend_home = env.get("ASCEND_HOME_PATH", "")
    missing = []
    if not torch_npu_is_installed:
        missing.append("torch_npu is not installed")
    if not ascend_home:
        missing.append("ASCEND_HOME_PATH is not set (source CANN's set_env.sh)")
    elif not os.path.isdir(ascend_home):
        missing.append(f"ASCEND_HOME_PATH={ascend_home} is not a directory")
    if missing:
        if want == "1":
            raise SystemExit("OP_EXT_WITH_NPU=1 but " + "; ".join(missing))
        return False
    try:
        import_torch_npu()
    except Exception as error:  # torch_npu raises several kinds when CANN is broken
        if want == "1":
            raise SystemExit(f"OP_EXT_WITH_NPU=1 but `import torch_npu` failed: {error}") from error
        print(f"op_extension: torch_npu and CANN found but `import torch_npu` failed ({error}); "
              "building without NPU support (OP_EXT_WITH_NPU=1 makes this an error)")
        return False
    return True


def soc_version(env: Mapping[str, str], query_device: Callable[[], str]) -> str:
    """The SoC the kernels are compiled for: OP_EXT_ASCEND_SOC, else the name of NPU 0."""
    soc = env.get("OP_EXT_ASCEND_SOC", "").strip()
    if soc:
        return soc
    try:
        soc = query_device().strip()
    except Exception as error:
        raise SystemExit(
            "op_extension: cannot tell which Ascend SoC to build for (no NPU visible: "
            f"{error}); set OP_EXT_ASCEND_SOC, e.g. OP_EXT_ASCEND_SOC=Ascend910B4"
        ) from error
    if not soc:
        raise SystemExit("op_extension: NPU 0 has no name; set OP_EXT_ASCEND_SOC, e.g. Ascend910B4")
    return soc


def cmake_commands(ascend_home: str, soc: str, build_dir: Path, jobs: int, debug: bool) -> list[list[str]]:
    """Configure, build and install the Ascend libraries into build_dir/out/lib."""
    return [
        [
            "cmake", "-S", str(CMAKE_SOURCE_DIR), "-B", str(build_dir),
            f"-DASCEND_CANN_PACKAGE_PATH={ascend_home}",
            f"-DSOC_VERSION={soc}",
            f"-DCMAKE_BUILD_TYPE={'Debug' if debug else 'Release'}",
        ],
        ["cmake", "--build", str(build_dir), "-j", str(jobs)],
        ["cmake", "--install", str(build_dir), "--prefix", str(build_dir / "out")],
    ]


def build_ascend_libraries(ascend_home: str, soc: str, build_dir: Path, jobs: int, debug: bool) -> Path:
    """Runs the CMake build; returns the folder holding BUILT_LIBRARIES."""
    for command in cmake_commands(ascend_home, soc, build_dir, jobs, debug):
        print("op_extension:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    lib_dir = build_dir / "out" / "lib"
    missing = [name for name in BUILT_LIBRARIES if not (lib_dir / name).exists()]
    if missing:
        raise SystemExit(f"op_extension: the Ascend build did not produce {missing} in {lib_dir}")
    return lib_dir
