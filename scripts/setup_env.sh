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

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing $TORCH_SPEC"
  "$PY" -m pip install --quiet "$TORCH_SPEC"
fi
echo "setup: torch $("$PY" -c 'import torch; print(torch.__version__)')"

# Build tools and test/bench dependencies; none of them depends on torch, so
# none can replace the torch installed above. transformers (pinned: its class
# names are what op_extension.transformers recognises) is for the Hugging Face
# tests and benchmark; op_extension itself never imports it. cuobjdump and
# nvdisasm (CUDA 13 binaries, no dependencies) are for
# scripts/check_cuda_compile.sh's SASS check: the machines' nvcc comes without them.
"$PY" -m pip install --quiet ninja numpy pytest expecttest hypothesis matplotlib "transformers==5.23.0" \
  "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14"
