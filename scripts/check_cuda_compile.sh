#!/usr/bin/env bash
# CI check of the CUDA code on a machine without a GPU (and with a CPU build of
# torch, which never builds the CUDA extension):
#
# 1. every kernel file op_extension/csrc/kernel/cuda/*.cu compiles with plain
#    nvcc for sm_80 (A100) and sm_90 (H100/H200), every warning an error;
# 2. what ptxas and the machine code say about every kernel for sm_90
#    (scripts/cuda_kernel_check.py, which names the kernel and the rule):
#    - no kernel spills registers (ptxas -v: spill stores/loads must be 0 bytes);
#    - every kernel's registers fit its largest block on one SM: registers
#      (allocated 8 per thread at a time) x max threads <= 65536, the max threads
#      being those of __launch_bounds__, or 1024 for a kernel without it;
#    - the 128-bit path of the elementwise kernels (map_kernel and add_kernel
#      with 16 bytes per access, every dtype: add, gelu, swiglu, geglu, forward
#      and backward) uses 128-bit global loads (LDG.E.128 in `cuobjdump -sass`),
#      and a float32 one exists for each functor the .cu files pass to
#      launch_map and each add_kernel they launch (read from the sources, so a
#      new elementwise op is covered without an edit here);
#    a self-test first compiles planted mistakes (a kernel that spills, one
#    whose registers do not fit 1024 threads, a map_kernel<float, 4> with
#    scalar loads; a launch_map of a functor with no 128-bit kernel) and
#    requires each to be rejected by name, so a check that stopped seeing
#    anything fails here instead of passing;
# 3. the CUDA glue op_extension/csrc/torch_ext/cuda/*.cpp passes
#    `g++ -fsyntax-only` against the installed torch's headers and the CUDA
#    runtime headers. The CPU wheel ships c10/cuda and ATen/cuda headers but not
#    c10/cuda/impl/cuda_cmake_macros.h, which CMake generates for CUDA builds:
#    a one-line stand-in is written to a temporary folder for this check only.
#
# cuobjdump (and the nvdisasm it runs for -sass) are not in the nvcc-only
# toolkit of the CI machines: scripts/setup_env.sh installs them into the venv
# from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm); one on PATH or next
# to nvcc is used first.
#
# 4. the registers and static shared memory ptxas gives every kernel (and its
#    __launch_bounds__, from cuobjdump -elf), sm_80 and sm_90, match
#    op_extension/csrc/kernel/cuda/kernel_resources.json, which the occupancy
#    model reads (op_extension/cuda_occupancy.py); a table written by another
#    nvcc is not compared. After a kernel change:
#
#      bash scripts/check_cuda_compile.sh --write-resources   (then commit the table)
#
#   PYTHON=.venv/bin/python   the interpreter whose torch provides the headers
#   NVCC=<path>               default: nvcc on PATH, else /usr/local/cuda/bin/nvcc
#   CUOBJDUMP=<path>          default: see above
set -euo pipefail
cd "$(dirname "$0")/.."
resources_mode=--check
case "${1:-}" in
  "") ;;
  --write-resources) resources_mode=--write ;;
  *) echo "usage: bash scripts/check_cuda_compile.sh [--write-resources]" >&2; exit 2 ;;
esac
RESOURCES=op_extension/csrc/kernel/cuda/kernel_resources.json

PYTHON=${PYTHON:-.venv/bin/python}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
  echo "check_cuda_compile: nvcc not found (not on PATH, not at /usr/local/cuda/bin/nvcc);" \
       "install the CUDA toolkit's compiler or set NVCC=/path/to/nvcc" >&2
  exit 1
fi
# The toolkit root with the runtime headers (nvcc may be a wrapper script elsewhere).
cuda_home=""
for candidate in "${CUDA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$NVCC")")")" /usr/local/cuda; do
  if [ -n "$candidate" ] && [ -f "$candidate/include/cuda_runtime.h" ]; then
    cuda_home=$candidate
    break
  fi
done
if [ -z "$cuda_home" ]; then
  echo "check_cuda_compile: cuda_runtime.h not found (set CUDA_HOME to the toolkit root)" >&2
  exit 1
fi

# cuobjdump: $CUOBJDUMP, on PATH, next to nvcc (or in the toolkit root's bin; nvcc
# may be a wrapper script), or in $PYTHON's environment.
py_bin="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)/nvidia/cu13/bin"
tool_dirs=("$(dirname "$(readlink -f "$NVCC")")" "$cuda_home/bin" "$py_bin")
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || true)}
for dir in "${tool_dirs[@]}"; do
  if [ -z "$CUOBJDUMP" ] && [ -x "$dir/cuobjdump" ]; then CUOBJDUMP=$dir/cuobjdump; fi
done
if [ -z "$CUOBJDUMP" ] || [ ! -x "$CUOBJDUMP" ]; then
  echo "check_cuda_compile: cuobjdump not found (not on PATH, not in ${tool_dirs[*]}): install it with" \
       "'$PYTHON -m pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm' (scripts/setup_env.sh does)" \
       "or set CUOBJDUMP=/path/to/cuobjdump" >&2
  exit 1
fi
# cuobjdump -sass runs nvdisasm, which it looks for on PATH.
if ! command -v nvdisasm >/dev/null; then
  for dir in "$(dirname "$CUOBJDUMP")" "${tool_dirs[@]}"; do
    if [ -x "$dir/nvdisasm" ]; then
      export PATH="$dir:$PATH"
      break
    fi
  done
fi
if ! command -v nvdisasm >/dev/null; then
  echo "check_cuda_compile: nvdisasm not found (cuobjdump -sass needs it): install it with" \
       "'$PYTHON -m pip install nvidia-cuda-nvdisasm' (scripts/setup_env.sh does)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# $1: a .cu file, $2: the output folder. Writes <name>.o and, for sm_90, the
# ptxas report (<name>.ptxas), the ELF attributes (<name>.elf) and the SASS
# (<name>.sass). The half/bfloat16 macros are those torch's CUDAExtension
# passes: no implicit conversions or operators, so the kernels must use the
# explicit intrinsics.
compile_cu() {
  local cu=$1 out=$2 name
  name=$(basename "$cu" .cu)
  if ! "$NVCC" -std=c++17 -O3 \
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ \
    -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr \
    -Werror all-warnings -Xcompiler -Wall,-Werror -Xptxas -v \
    -c "$cu" -o "$out/$name.o" 2>"$out/$name.ptxas"; then
    # The compiler's messages, without ptxas's resource report.
    grep -v -E '^ptxas info|^    [0-9]+ bytes stack frame' "$out/$name.ptxas" >&2 || true
    echo "check_cuda_compile: nvcc failed on $cu" >&2
    return 1
  fi
  "$CUOBJDUMP" -elf -arch sm_90 "$out/$name.o" >"$out/$name.elf"
  "$CUOBJDUMP" -sass -arch sm_90 "$out/$name.o" >"$out/$name.sass"
}

# $1: a folder compile_cu wrote to; the rest: cuda_kernel_check.py's options.
check_kernels() {
  local out=$1
  shift
  "$PYTHON" scripts/cuda_kernel_check.py --ptxas "$out"/*.ptxas --elf "$out"/*.elf --sass "$out"/*.sass "$@"
}

echo "== nvcc: $("$NVCC" --version | tail -1); cuobjdump: $("$CUOBJDUMP" --version | tail -1)"

# --- self-test: planted mistakes the kernel checks must reject ----------------

mkdir -p "$tmp/planted"
cat >"$tmp/planted/planted.cu" <<'CU'
// Planted mistakes for scripts/cuda_kernel_check.py (check_cuda_compile.sh).
#include <cstdint>

namespace planted {

// 96 floats live at once (volatile loads keep their order, so every one is
// loaded before the first product) in a 64-register budget: ptxas must spill.
__global__ void __launch_bounds__(1024) spilling_kernel(const volatile float* in, float* out) {
  float v[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) v[i] = in[threadIdx.x + i * 1024];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 96; ++i) s += v[i] * v[95 - i];
  out[threadIdx.x] = s;
}

// The same without __launch_bounds__: no spill, about 100 registers, which a
// block of 1024 threads cannot have.
__global__ void register_hungry_kernel(const volatile float* in, float* out) {
  float v[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) v[i] = in[threadIdx.x + i * 1024];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 96; ++i) s += v[i] * v[95 - i];
  out[threadIdx.x] = s;
}

// Named like the elementwise 128-bit path, but reading one float at a time.
template <typename T, int kVec>
__global__ void __launch_bounds__(256) map_kernel(const T* in, T* out, int64_t n) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    if (i + e < n) out[i + e] = in[i + e] * 2.0f;
  }
}
template __global__ void map_kernel<float, 4>(const float*, float*, int64_t);

}  // namespace planted
CU
# Read as a kernel source only (the expected 128-bit kernels come from the
# launch_map calls): it names a functor with no float32 128-bit map_kernel.
cat >"$tmp/planted/launches.txt" <<'CU'
  launch_map(p, n, PlantedFunctor<acc_t<T>>{a.approximate}, stream);
CU
echo "   self-test: a planted spill, register overflow, scalar-load map_kernel and missing 128-bit functor" \
     "must be rejected"
compile_cu "$tmp/planted/planted.cu" "$tmp/planted"
planted_rc=0
check_kernels "$tmp/planted" --expect-vector-from "$tmp/planted/launches.txt" >"$tmp/planted/check.txt" ||
  planted_rc=$?
# Each line the check must print: the kernel's name, then the rule it breaks.
missed=()
while IFS='|' read -r kernel rule; do
  grep -F -- "$kernel" "$tmp/planted/check.txt" | grep -qF -- "$rule" || missed+=("'$kernel ... $rule'")
done <<'EXPECT'
planted::spilling_kernel(float const volatile*, float*) (sm_90): |spills registers
planted::register_hungry_kernel(float const volatile*, float*) (sm_90): |x 1024 threads (no __launch_bounds__
planted::map_kernel<float, 4>(float const*, float*, long) (sm_90): |no 128-bit global load
for 'PlantedFunctor' in the SASS|no float32 128-bit elementwise kernel
EXPECT
if [ "$planted_rc" -eq 0 ] || [ ${#missed[@]} -ne 0 ]; then
  echo "check_cuda_compile: FAILED: the kernel checks are broken: exit $planted_rc on the planted kernels;" \
       "not rejected as expected: ${missed[*]:-none}. Their output:" >&2
  cat "$tmp/planted/check.txt" >&2
  exit 1
fi

# --- the kernels ------------------------------------------------------------------

shopt -s nullglob
kernels=(op_extension/csrc/kernel/cuda/*.cu)
if [ ${#kernels[@]} -eq 0 ]; then
  echo "check_cuda_compile: no .cu files under op_extension/csrc/kernel/cuda" >&2
  exit 1
fi
mkdir -p "$tmp/kernels"
for cu in "${kernels[@]}"; do
  echo "   nvcc sm_80 + sm_90: $cu"
  compile_cu "$cu" "$tmp/kernels"
done
echo "   sm_90 kernels: spills, registers x launch bound, 128-bit loads on the elementwise 128-bit path"
# A float32 128-bit kernel must exist for each elementwise op, forward and backward:
# for each functor the sources give launch_map and each add_kernel they launch.
if ! check_kernels "$tmp/kernels" --expect-vector-from "${kernels[@]}"; then
  echo "check_cuda_compile: FAILED: the kernel checks above" >&2
  exit 1
fi
echo "   sm_80 + sm_90 kernels: registers, static shared memory and launch bounds against $RESOURCES"
if ! "$PYTHON" scripts/cuda_kernel_resources.py --ptxas "$tmp"/kernels/*.ptxas --elf "$tmp"/kernels/*.elf \
  --nvcc "$("$NVCC" --version | grep -Eo 'V[0-9.]+' | tail -n 1)" "$resources_mode" "$RESOURCES"; then
  echo "check_cuda_compile: FAILED: the kernel resources above" >&2
  exit 1
fi

glue=(op_extension/csrc/torch_ext/cuda/*.cpp)
if [ ${#glue[@]} -eq 0 ]; then
  echo "check_cuda_compile: no CUDA glue under op_extension/csrc/torch_ext/cuda" >&2
  exit 1
fi
read -r torch_include torch_std < <("$PYTHON" - <<'EOF'
import torch
from torch.utils.cpp_extension import include_paths
# torch 2.13 is built as C++20, 2.11 as C++17: compile the glue as torch would.
major, minor = (int(v) for v in torch.__version__.split(".")[:2])
print(include_paths()[0], "c++20" if (major, minor) >= (2, 12) else "c++17")
EOF
)
mkdir -p "$tmp/stub/c10/cuda/impl" "$tmp/generated"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$tmp/stub/c10/cuda/impl/cuda_cmake_macros.h"
# What setup.py generates from the prototypes (schemas, handles, every op's glue).
"$PYTHON" op_extension/_cpp_gen.py "$tmp/generated"
for cpp in "${glue[@]}"; do
  echo "   g++ -fsyntax-only ($torch_std, torch headers + CUDA runtime): $cpp"
  g++ -std="$torch_std" -fsyntax-only -Wall -Werror -Wno-unknown-pragmas \
    -DOP_EXT_WITH_CUDA=1 -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C \
    -I"$torch_include" -I"$torch_include/torch/csrc/api/include" -I"$tmp/stub" \
    -I"$cuda_home/include" -I"$tmp/generated" "$cpp"
done
echo "== CUDA kernels and glue compile; the sm_90 kernels pass the ptxas and SASS checks"
