#!/usr/bin/env bash
# The GPU check: run from the repository root on a machine with an NVIDIA GPU
# and a CUDA build of torch already installed (never let pip pick torch here).
#
#   bash scripts/gpu_check.sh            results under ./gpu_results
#   OUT=/some/dir bash scripts/gpu_check.sh
#
# 1. prints the versions (nvidia-smi, nvcc, torch),
# 2. builds the package with its CUDA extension (pip install --no-build-isolation -e .),
# 3. runs the whole test suite (the CUDA cases included; tests/test_cuda.py),
# 4. runs the benchmark on the GPU: python -m op_extension.bench --device cuda.
# Every step runs even if an earlier one failed; the exit code is the first failure's.
#
#   PYTHON=python       the interpreter with the CUDA torch
#   MAX_JOBS=16         parallel compile jobs
#   BENCH_ARGS=...      extra benchmark options (e.g. --quick)
#   PYTEST_ARGS=...     extra pytest options
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
OUT=${OUT:-./gpu_results}
export MAX_JOBS=${MAX_JOBS:-16}
mkdir -p "$OUT"
status=0
step() {  # step NAME CMD...: runs CMD, logs to $OUT/NAME.log, remembers the first failure
  local name=$1
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc"
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
  return 0
}

step versions bash -c "nvidia-smi; command -v nvcc && nvcc --version; $PYTHON -c '
import torch
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"available\", torch.cuda.is_available())
if torch.cuda.is_available():
    print(\"device\", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
'"

# OP_EXT_WITH_CUDA=1: fail loudly instead of quietly building the CPU-only package.
step build env OP_EXT_WITH_CUDA=1 "$PYTHON" -m pip install --no-build-isolation --no-deps -v -e .

step import "$PYTHON" -c '
import torch, op_extension
x = torch.randn(4, 64, device="cuda")
y = op_extension.ops.rms_norm(x, [64])
torch.cuda.synchronize()
print("custom::rms_norm on", y.device, "ok")
'

# shellcheck disable=SC2086
step tests "$PYTHON" -m pytest -q --durations=15 -p no:cacheprovider ${PYTEST_ARGS:-} tests

# shellcheck disable=SC2086
step bench "$PYTHON" -m op_extension.bench --device cuda --out "$OUT/bench_cuda" ${BENCH_ARGS:-}

echo "== gpu_check: logs and benchmark results in $OUT (exit $status)"
exit "$status"
