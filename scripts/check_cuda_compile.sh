#!/usr/bin/env bash
# CI check of the CUDA code on a machine without a GPU (and with a CPU build of
# torch, which never builds the CUDA extension):
#
# 1. every kernel file op_extension/csrc/kernel/cuda/*.cu compiles with plain
#    nvcc for sm_80 (A100) and sm_90 (H100/H200), every warning an error;
# 2. the CUDA glue op_extension/csrc/torch_ext/cuda/*.cpp passes
#    `g++ -fsyntax-only` against the installed torch's headers and the CUDA
#    runtime headers. The CPU wheel ships c10/cuda and ATen/cuda headers but not
#    c10/cuda/impl/cuda_cmake_macros.h, which CMake generates for CUDA builds:
#    a one-line stand-in is written to a temporary folder for this check only.
#
#   PYTHON=.venv/bin/python   the interpreter whose torch provides the headers
#   NVCC=<path>               default: nvcc on PATH, else /usr/local/cuda/bin/nvcc
set -euo pipefail
cd "$(dirname "$0")/.."

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

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== nvcc: $("$NVCC" --version | tail -1)"
shopt -s nullglob
kernels=(op_extension/csrc/kernel/cuda/*.cu)
if [ ${#kernels[@]} -eq 0 ]; then
  echo "check_cuda_compile: no .cu files under op_extension/csrc/kernel/cuda" >&2
  exit 1
fi
for cu in "${kernels[@]}"; do
  echo "   nvcc sm_80 + sm_90: $cu"
  # The half/bfloat16 macros are those torch's CUDAExtension passes: no implicit
  # conversions or operators, so the kernels must use the explicit intrinsics.
  "$NVCC" -std=c++17 -O3 \
    -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
    -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ \
    -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr \
    -Werror all-warnings -Xcompiler -Wall,-Werror \
    -c "$cu" -o "$tmp/$(basename "$cu").o"
done

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
# The schema header setup.py generates from the prototypes.
"$PYTHON" - "$tmp/generated/op_ext_schemas.h" <<'EOF'
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("_op_ext_protos", "op_extension/_protos.py")
protos = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = protos
spec.loader.exec_module(protos)
Path(sys.argv[1]).write_text(protos.generate_cpp_header(protos.load_protos(Path("op_protos"))))
EOF
for cpp in "${glue[@]}"; do
  echo "   g++ -fsyntax-only ($torch_std, torch headers + CUDA runtime): $cpp"
  g++ -std="$torch_std" -fsyntax-only -Wall -Werror -Wno-unknown-pragmas \
    -DOP_EXT_WITH_CUDA=1 -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C \
    -I"$torch_include" -I"$torch_include/torch/csrc/api/include" -I"$tmp/stub" \
    -I"$cuda_home/include" -I"$tmp/generated" "$cpp"
done
echo "== CUDA kernels and glue compile"
