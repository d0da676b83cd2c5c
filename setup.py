"""Builds op_extension._C: the custom ops' schemas, glue and kernels.

Sources are found by folder, so adding an op adds files, never a line here:
  op_extension/csrc/torch_ext/*.cpp     torch glue (schemas, CPU glue, fast path); each
                                        op's glue is ops/<op>.h, registered for every
                                        device by the generated op_ext_glue.h
  op_extension/csrc/torch_ext/autograd/*.cpp   autograd written by hand (the rest is
                                        derived from the prototypes: _cpp_gen.py)
  op_extension/csrc/kernel/cpu/*.cpp    CPU kernels; each file that registers kernels
                                        is compiled once per instruction set
  op_extension/csrc/kernel/cuda/*.cu    CUDA kernels (when CUDA is built)
  op_extension/csrc/torch_ext/npu/*.cpp, npu/ops/<op>.cpp   torch_npu glue (when NPU is
                                        built), registered by the generated
                                        op_ext_npu_registration.cpp; the Ascend C
                                        kernels and their host code are then built with
                                        CANN by cmake/ascend/CMakeLists.txt and linked
and op_extension._ascend_sim (always): the Ascend C kernels (csrc/kernel/ascendc), their
tiling (csrc/host/tiling) and aclnn entry points (csrc/host/aclnn, generated) on the CPU simulator
(csrc/ascendc_sim), see ascend_sim_extension(); and op_extension._cuda_sim (always): the
CUDA kernels (csrc/kernel/cuda/*.cu) compiled by g++ for the CPU harness (csrc/cuda_sim),
see cuda_sim_extension().

Build switches (environment variables), all read in build_config():
  OP_EXT_WITH_CUDA=auto|0|1   auto: build CUDA when torch has CUDA and nvcc is found
  OP_EXT_WITH_NPU=auto|0|1    auto: build for Ascend NPUs when torch_npu is installed and
                              ASCEND_HOME_PATH (CANN) is set; see cmake/ascend/npu_build.py
  OP_EXT_ASCEND_SOC=<SoC>     the SoC the Ascend kernels target, e.g. Ascend910B4
                              (default: the name of NPU 0)
  OP_EXT_CPU_ISAS=default,avx2,avx512   CPU kernel variants to build (x86-64)
  OP_EXT_DEBUG=1              -O0 -g instead of -O3 -g1 (line tables only: see optimisation())
  OP_EXT_CCACHE=1|0           1 (default): compile through ccache where it is installed
                              (scripts/setup_env.sh puts it in the venv), with a cache
                              that another copy of this tree can hit; see compiler_cache()
  OP_EXT_EXTENSIONS=_C,_cuda_sim,_ascend_sim   which extensions to build (default: all);
                              scripts/gpu_check.sh builds them side by side, one process each
  OP_EXT_SANITIZE=address,undefined   build both extensions with these sanitizers
                              (any of address, undefined): -O1 -g, frame pointers kept,
                              UBSan aborting on its first report, -fno-wrapv; linked
                              with the same -fsanitize. Python and torch are not sanitized, so
                              the ASan runtime must be preloaded: scripts/check_sanitizers.sh
                              builds into its own folder and runs the tests that way

Always build against the torch already installed:
  pip install --no-build-isolation -e .
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from setuptools import find_packages, setup

import torch
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = Path(__file__).resolve().parent
CSRC = Path("op_extension") / "csrc"
GENERATED = Path("build") / "generated"

# What each CPU kernel variant is compiled for. The macros are the ones ATen's
# vectorised headers select their implementation by; the pragma lets one
# translation unit use the instructions without compiling the whole extension
# for them (the variant is only called after a CPUID check).
ISA_PREAMBLES = {
    "default": ("", ["CPU_CAPABILITY DEFAULT", "CPU_CAPABILITY_DEFAULT"]),
    "avx2": (
        "avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt",
        ["__AVX__ 1", "__AVX2__ 1", "__FMA__ 1", "__F16C__ 1", "CPU_CAPABILITY AVX2",
         "CPU_CAPABILITY_AVX2"],
    ),
    "avx512": (
        "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt",
        ["__AVX__ 1", "__AVX2__ 1", "__FMA__ 1", "__F16C__ 1", "__AVX512F__ 1", "__AVX512BW__ 1",
         "__AVX512VL__ 1", "__AVX512DQ__ 1", "CPU_CAPABILITY AVX512", "CPU_CAPABILITY_AVX512"],
    ),
}


def load_npu_build_module():
    spec = importlib.util.spec_from_file_location("_op_ext_npu_build", ROOT / "cmake" / "ascend" / "npu_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


npu_build = load_npu_build_module()

SANITIZERS = ("address", "undefined")

# Every extension keeps its own code to itself: of the project's symbols it exports
# its module init (PyInit_<name>, which pybind11 marks visible) and nothing else.
# Without this, g++ exports each inline global (a kernel stub, a function-local
# static) as a GNU-unique symbol, and the dynamic linker merges those across every
# library of the process, whatever Python's RTLD_LOCAL says: _cuda_sim, loaded
# after _C, then wrote into _C's stubs. scripts/check_symbols.py holds the rule.
HIDDEN = ["-fvisibility=hidden", "-fvisibility-inlines-hidden"]


@dataclass(frozen=True)
class BuildConfig:
    with_cuda: bool
    with_npu: bool
    cpu_isas: tuple[str, ...]
    debug: bool
    sanitize: tuple[str, ...]

    def optimisation(self, release: str) -> list[str]:
        """The optimisation level and the debug information of g++'s flags.

        Python's own CFLAGS carry -g, full debug information, which doubles the
        compile time of the files that include torch's headers (a glue file: 25 s
        with it, 14 s with -g1 on the 2-core machines). OP_EXT_DEBUG and the
        sanitizer builds keep it; the others take -g1 (it comes later, so it
        wins): line tables and function names, which is what backtraces and
        profilers read. nvcc takes them through nvcc_flags()."""
        if self.sanitize:
            # -O1: readable stacks at a tolerable speed (ASan's own advice); full
            # -g, so that reports name inlined functions (the self-test looks for
            # a kernel's name in one).
            return ["-O1", "-g"]
        return ["-O0", "-g"] if self.debug else [release, "-g1"]

    @staticmethod
    def nvcc_flags(opt: list[str]) -> list[str]:
        """optimisation()'s flags for nvcc, which has no -g1 (its host code gets it through -Xcompiler)."""
        return [f if f != "-g1" else "-Xcompiler=-g1" for f in opt]

    def sanitizer_flags(self) -> tuple[list[str], list[str]]:
        """(compile flags, link flags) for OP_EXT_SANITIZE."""
        if not self.sanitize:
            return [], []
        fsanitize = "-fsanitize=" + ",".join(self.sanitize)
        compile_flags = [fsanitize, "-fno-omit-frame-pointer"]
        if "undefined" in self.sanitize:
            # UBSan only prints and goes on by default: a report must fail the run.
            compile_flags.append("-fno-sanitize-recover=undefined")
            # Python's CFLAGS, which come first, hold -fwrapv: it defines signed
            # overflow and so turns UBSan's check for it off. nvcc and CANN's
            # compiler build these sources without it, so an overflow is a bug there.
            compile_flags.append("-fno-wrapv")
        return compile_flags, [fsanitize]


def build_config() -> BuildConfig:
    want_cuda = os.environ.get("OP_EXT_WITH_CUDA", "auto").lower()
    if want_cuda not in ("auto", "0", "1"):
        raise SystemExit(f"OP_EXT_WITH_CUDA must be auto, 0 or 1, got {want_cuda!r}")
    cuda_possible = torch.version.cuda is not None and CUDA_HOME is not None
    if want_cuda == "1" and not cuda_possible:
        raise SystemExit(
            "OP_EXT_WITH_CUDA=1 but torch was built without CUDA or nvcc was not found "
            f"(torch.version.cuda={torch.version.cuda}, CUDA_HOME={CUDA_HOME})"
        )
    has_cu_sources = any((CSRC / "kernel" / "cuda").glob("*.cu"))
    with_cuda = has_cu_sources and (want_cuda == "1" or (want_cuda == "auto" and cuda_possible))
    has_npu_sources = any((CSRC / "torch_ext" / "npu").glob("*.cpp"))
    with_npu = has_npu_sources and npu_build.npu_build_wanted(
        os.environ, npu_build.torch_npu_installed(), lambda: importlib.import_module("torch_npu")
    )
    if with_cuda and with_npu:
        raise SystemExit("op_extension builds for CUDA or for NPU, not both: set OP_EXT_WITH_CUDA=0 or OP_EXT_WITH_NPU=0")

    is_x86 = platform.machine().lower() in ("x86_64", "amd64")
    default_isas = "default,avx2,avx512" if is_x86 else "default"
    isas = tuple(s.strip() for s in os.environ.get("OP_EXT_CPU_ISAS", default_isas).split(",") if s)
    unknown = [s for s in isas if s not in ISA_PREAMBLES]
    if unknown or "default" not in isas:
        raise SystemExit(f"OP_EXT_CPU_ISAS must list 'default' and only {list(ISA_PREAMBLES)}")

    sanitize = tuple(s.strip() for s in os.environ.get("OP_EXT_SANITIZE", "").split(",") if s.strip())
    if any(s not in SANITIZERS for s in sanitize):
        raise SystemExit(f"OP_EXT_SANITIZE must list only {list(SANITIZERS)}, got {sanitize}")
    if sanitize and (with_cuda or with_npu):
        raise SystemExit("OP_EXT_SANITIZE is for CPU builds: set OP_EXT_WITH_CUDA=0 and OP_EXT_WITH_NPU=0")
    return BuildConfig(
        with_cuda=with_cuda,
        with_npu=with_npu,
        cpu_isas=isas,
        debug=os.environ.get("OP_EXT_DEBUG") == "1",
        sanitize=sanitize,
    )


def write_if_changed(path: Path, text: str) -> None:
    # Unchanged files keep their timestamps, so ninja rebuilds nothing.
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def cpp_gen():
    """op_extension/_cpp_gen.py, loaded once (the package itself is not importable
    before it is built)."""
    name = "_op_ext_cpp_gen"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "op_extension" / "_cpp_gen.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def include_from(generated: Path, source: Path) -> str:
    """The #include of `source` in the file `generated` (both relative to ROOT),
    by a path relative to the latter's folder: the same text in every copy of
    the tree, which the compiler cache needs (compiler_cache())."""
    return cpp_gen().include_line(ROOT / source, (ROOT / generated).parent)


def generate_sources() -> list[str]:
    """Writes what the prototypes determine into build/generated: the schemas and
    dtype lists, the typed handles, the registration of every op's glue and the
    derived autograd (op_extension/_cpp_gen.py). Returns the generated sources."""
    return [p.as_posix() for p in cpp_gen().generate_all(GENERATED, ROOT)]


def isa_variant_sources(isas: tuple[str, ...]) -> list[str]:
    """One wrapper per (kernel file, ISA), the DEFAULT variants first.

    Baseline headers are included before the target pragma, so the inline
    functions they define (and the linker may share across files) are built
    for the baseline; only code from the kernel file and at::vec gets the ISA.
    """
    kernels = sorted(
        p for p in (CSRC / "kernel" / "cpu").glob("*.cpp") if '"register_kernel.h"' in p.read_text()
    )
    sources = []
    for isa in isas:
        target, macros = ISA_PREAMBLES[isa]
        for kernel in kernels:
            lines = [
                f"// Generated by setup.py: the {isa} build of {kernel.as_posix()}.",
                "#include <algorithm>",
                "#include <array>",
                "#include <cmath>",
                "#include <cstdint>",
                "#include <limits>",
                "#include <tuple>",
                "#include <vector>",
                "#include <ATen/Parallel.h>",
                "#include <c10/util/BFloat16.h>",
                "#include <c10/util/Half.h>",
            ]
            if target:
                lines.append(f'#pragma GCC target("{target}")')
            lines += [f"#define {m}" for m in macros]
            out = GENERATED / "isa" / f"{kernel.stem}.{isa}.cpp"
            lines.append(include_from(out, kernel))
            write_if_changed(out, "\n".join(lines) + "\n")
            sources.append(out.as_posix())
    return sources


def extensions(config: BuildConfig):
    sources = generate_sources()
    # The torch glue, and the autograd of the ops whose derivative is written by hand.
    sources += sorted(p.as_posix() for p in (CSRC / "torch_ext").glob("*.cpp"))
    sources += sorted(p.as_posix() for p in (CSRC / "torch_ext" / "autograd").glob("*.cpp"))
    sources.append((CSRC / "kernel" / "cpu" / "dispatch.cpp").as_posix())
    sources += isa_variant_sources(config.cpu_isas)
    opt = config.optimisation("-O3")
    san_compile, san_link = config.sanitizer_flags()
    # -fopenmp: at::parallel_for is inline and runs on one thread without it.
    cxx_flags = opt + san_compile + HIDDEN + ["-fopenmp", "-fdiagnostics-color=always", "-Wall", "-Wno-unknown-pragmas"]
    include_dirs = [str(ROOT / GENERATED)]
    if config.with_npu:
        return [npu_extension(sources, include_dirs, cxx_flags)]
    if config.with_cuda:
        sources += sorted(p.as_posix() for p in (CSRC / "kernel" / "cuda").glob("*.cu"))
        sources += sorted(p.as_posix() for p in (CSRC / "torch_ext" / "cuda").glob("*.cpp"))
        return [
            CUDAExtension(
                "op_extension._C",
                sources,
                include_dirs=include_dirs,
                define_macros=[("OP_EXT_WITH_CUDA", "1")],
                # No --use_fast_math: its exp, division and denormal flushing cost
                # more float32 accuracy than the tests allow.
                extra_compile_args={"cxx": cxx_flags, "nvcc": config.nvcc_flags(opt) + [f"-Xcompiler={flag}" for flag in HIDDEN]},
                extra_link_args=["-fopenmp"],
            )
        ]
    return [
        CppExtension(
            "op_extension._C",
            sources,
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags},
            extra_link_args=["-fopenmp"] + san_link,
        )
    ]


def npu_extension(sources: list[str], include_dirs: list[str], cxx_flags: list[str]):
    # Importable only where torch_npu and CANN are: build_config() checked.
    from torch_npu.utils.cpp_extension import PYTORCH_NPU_INSTALL_PATH, NpuExtension

    ascend_home = os.environ["ASCEND_HOME_PATH"]
    return NpuExtension(
        "op_extension._C",
        # The shared npu glue, every op's (npu/ops/<op>.cpp) and their PrivateUse1
        # registration, generated from the prototypes.
        sources
        + sorted(p.as_posix() for p in (CSRC / "torch_ext" / "npu").glob("*.cpp"))
        + sorted(p.as_posix() for p in (CSRC / "torch_ext" / "npu" / "ops").glob("*.cpp"))
        + [(GENERATED / "op_ext_npu_registration.cpp").as_posix()],
        include_dirs=include_dirs + [str(ROOT / CSRC / "host" / "aclnn"), os.path.join(ascend_home, "include")],
        define_macros=[("OP_EXT_WITH_NPU", "1")],
        extra_compile_args={"cxx": cxx_flags},
        # The Ascend libraries' folder is added by BuildExt once CMake has built them.
        library_dirs=[os.path.join(ascend_home, "lib64")],
        libraries=list(npu_build.LINK_LIBRARIES),
        # libop_ext_ascend*.so are copied next to _C; libtorch_npu.so stays in torch_npu.
        extra_link_args=["-fopenmp", "-Wl,-rpath,$ORIGIN", f"-Wl,-rpath,{os.path.join(PYTORCH_NPU_INSTALL_PATH, 'lib')}"],
    )


def ascend_sim_extension(config: BuildConfig):
    """op_extension._ascend_sim: the Ascend aclnn entry points, tilings and Ascend C
    kernels compiled with g++ against the CPU simulator of the Ascend C API
    (csrc/ascendc_sim/include, -DOP_EXT_ASCEND_SIM), plus its torch binding and the
    simulator's misuse test kernels. Built in every configuration: it needs no NPU.
    Its per-op entries are generated from the prototypes (op_ext_ascend_sim_ops.h)."""
    generate_sources()
    sources = []
    for folder in ("ascendc_sim/binding", "ascendc_sim/misuse", "host/aclnn", "host/tiling", "kernel/ascendc"):
        sources += sorted(p.as_posix() for p in (CSRC / folder).glob("*.cpp"))
    # The aclnn entry points generated from the prototypes; each op's plan is in host/aclnn.
    sources.append((GENERATED / "op_ext_aclnn_entries.cpp").as_posix())
    opt = config.optimisation("-O2")
    san_compile, san_link = config.sanitizer_flags()
    return CppExtension(
        "op_extension._ascend_sim",
        sources,
        include_dirs=[str(ROOT / CSRC / d) for d in ("ascendc_sim/include", "host/aclnn", "host/tiling", "kernel/ascendc")]
        + [str(ROOT / GENERATED)],
        define_macros=[("OP_EXT_ASCEND_SIM", "1")],
        # The simulated Unified Buffer is a byte array read through typed pointers.
        extra_compile_args={"cxx": opt + san_compile + HIDDEN + ["-fno-strict-aliasing", "-fdiagnostics-color=always", "-Wall"]},
        extra_link_args=san_link,
    )


def cuda_sim_extension(config: BuildConfig):
    """op_extension._cuda_sim: the CUDA kernel files compiled as C++ by g++ against the
    CPU harness (csrc/cuda_sim/include stands in for the CUDA headers, -DOP_EXT_CUDA_SIM),
    the shared op glue, and the harness's misuse test kernels. Built in every
    configuration: it needs neither a GPU nor nvcc."""
    generate_sources()
    sources = []
    # One wrapper per .cu, so that g++ (not nvcc) compiles it: a new kernel file is
    # picked up without touching this file.
    for cu in sorted((CSRC / "kernel" / "cuda").glob("*.cu")):
        out = GENERATED / "cuda_sim" / f"{cu.stem}.cpp"
        write_if_changed(out, f"// Generated by setup.py: {cu.as_posix()} for the CPU harness.\n"
                              f"{include_from(out, cu)}\n")
        sources.append(out.as_posix())
    for folder in ("cuda_sim", "cuda_sim/binding", "cuda_sim/misuse", "cuda_sim/probes"):
        sources += sorted(p.as_posix() for p in (CSRC / folder).glob("*.cpp"))
    sources.append((CSRC / "torch_ext" / "checks.cpp").as_posix())
    opt = config.optimisation("-O2")
    san_compile, san_link = config.sanitizer_flags()
    return CppExtension(
        "op_extension._cuda_sim",
        sources,
        include_dirs=[str(ROOT / CSRC / "cuda_sim" / "include"), str(ROOT / GENERATED)],
        define_macros=[("OP_EXT_CUDA_SIM", "1")],
        # `#pragma unroll` is for nvcc.
        extra_compile_args={"cxx": opt + san_compile + HIDDEN + ["-Wno-unknown-pragmas", "-fdiagnostics-color=always", "-Wall"]},
        extra_link_args=san_link,
    )


def compiler_cache(environ: dict[str, str], python_bin: Path) -> None:
    """Sets `environ` up so that the compilers run through ccache, where it is
    installed and not turned off.

    torch's BuildExtension (2.13) puts ccache in front of every compiler when it
    finds ccache on PATH, and ccache is installed next to the venv's python, which an
    unactivated venv does not put on PATH: that folder goes first. The cache is
    build/ccache unless CCACHE_DIR names another. Two copies of this tree share
    it: ccache rewrites the paths under this tree's op_extension/ and build/ to
    paths relative to the compiler's working directory (build/temp.*), which are
    the same in every copy, and hashes no directory (-g1 would otherwise add the
    working directory to the hash). tests/test_add_an_op.py's scratch copy thus
    compiles only what adding an op changed. Paths outside the tree (torch's and
    Python's headers) stay absolute: the same environment gives the same ones."""
    if environ.get("OP_EXT_CCACHE", "1") == "0":
        environ["TORCH_NO_COMPILER_WRAPPER"] = "1"  # nor a ccache found on PATH
        return
    ccache = shutil.which("ccache", path=str(python_bin)) or shutil.which("ccache", path=environ.get("PATH"))
    if ccache is None:
        return
    environ["PATH"] = os.pathsep.join([str(Path(ccache).parent), environ.get("PATH", "")])
    environ.setdefault("CCACHE_DIR", str(ROOT / "build" / "ccache"))
    environ["CCACHE_BASEDIR"] = os.pathsep.join(str(ROOT / d) for d in ("op_extension", "build"))
    environ["CCACHE_NOHASHDIR"] = "1"


class BuildExt(BuildExtension.with_options(use_ninja=shutil.which("ninja") is not None)):
    """build_ext that builds its objects in build/temp.* also under `pip install -e`,
    and, for an NPU build, first builds the Ascend libraries with CANN."""

    def finalize_options(self):
        super().finalize_options()
        # pip's editable install (setuptools' editable_wheel) gives the build a new
        # temporary folder each time, so that ninja found no object of the last
        # build and `make build` compiled everything again (4 minutes on 2 cores).
        # The folder `setup.py build_ext --inplace` uses instead: ninja rebuilds
        # what changed, and the compiler's working directory is at the same place
        # in every copy of the tree (compiler_cache()).
        if "editable_wheel" in self.distribution.command_obj:
            self.build_temp = str(ROOT / "build" / f"temp.{sysconfig.get_platform()}-{sys.implementation.cache_tag}")

    def run(self):
        compiler_cache(os.environ, Path(sys.executable).parent)
        if config.with_npu:
            soc = npu_build.soc_version(os.environ, lambda: importlib.import_module("torch_npu").npu.get_device_name(0))
            jobs = int(os.environ.get("MAX_JOBS", os.cpu_count() or 1))
            lib_dir = npu_build.build_ascend_libraries(
                os.environ["ASCEND_HOME_PATH"], soc, Path(self.build_temp).resolve() / "ascend", jobs, config.debug
            )
            package_dir = Path(self.get_ext_fullpath("op_extension._C")).parent
            package_dir.mkdir(parents=True, exist_ok=True)
            for name in npu_build.BUILT_LIBRARIES:
                shutil.copy2(lib_dir / name, package_dir / name)
            for ext in self.extensions:
                if ext.name == "op_extension._C":
                    ext.library_dirs.append(str(lib_dir))
        super().run()


config = build_config()
if shutil.which("ninja") is None:
    print("op_extension: ninja not found; the build will be slow (pip install ninja)")



def selected_extensions(config: BuildConfig) -> list:
    builders = {"_C": extensions, "_ascend_sim": ascend_sim_extension, "_cuda_sim": cuda_sim_extension}
    wanted = [s.strip() for s in os.environ.get("OP_EXT_EXTENSIONS", ",".join(builders)).split(",") if s.strip()]
    unknown = [w for w in wanted if w not in builders]
    if unknown or not wanted:
        raise SystemExit(f"OP_EXT_EXTENSIONS must list some of {list(builders)}, got {wanted}")
    selected = []
    for name in builders:
        if name in wanted:
            built = builders[name](config)
            selected += built if isinstance(built, list) else [built]
    return selected


setup(
    packages=find_packages(include=["op_extension", "op_extension.*"]),
    ext_modules=selected_extensions(config),
    cmdclass={"build_ext": BuildExt},
)
