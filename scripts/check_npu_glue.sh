#!/usr/bin/env bash
# Checks that the torch_npu glue compiles, on a machine without torch_npu or CANN:
# g++ -fsyntax-only on op_extension/csrc/torch_ext/npu/*.cpp (or the files given
# as arguments) against the installed torch's headers and the headers inside the
# torch_npu wheel made for that torch version.
#
# The wheel is fetched with `pip download --no-deps` (never installed: torch_npu
# in an environment without CANN breaks `import torch`), and only its
# torch_npu/include/ folder is kept, in a cache that survives between runs:
#   $OP_EXT_CACHE_DIR/torch_npu/<version>/include   (default ~/.cache/op_extension)
# The wheel lacks one CANN header the glue needs, aclnn/acl_meta.h; a
# declaration-only stand-in in scripts/npu_glue_check/include/ replaces it here
# and nowhere else (docs: "torch_npu registration").
#
# A wheel that cannot be fetched (no network, no matching version) is an error,
# not a pass. OP_EXT_SKIP_NPU_GLUE_CHECK=1 skips the check and says so.
#
#   PY=.venv/bin/python   the interpreter whose torch the glue is checked against
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${OP_EXT_SKIP_NPU_GLUE_CHECK:-0}" = "1" ]; then
  echo "npu glue check: SKIPPED (OP_EXT_SKIP_NPU_GLUE_CHECK=1)"
  exit 0
fi

PY=${PY:-.venv/bin/python}
CXX=${CXX:-g++}
CACHE_DIR=${OP_EXT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/op_extension}
STAND_INS=scripts/npu_glue_check/include

if [ "$#" -gt 0 ]; then
  sources=("$@")
else
  sources=(op_extension/csrc/torch_ext/npu/*.cpp)
fi
for src in "${sources[@]}"; do
  [ -f "$src" ] || { echo "npu glue check: no such source: $src" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

torch_version=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
marker="$CACHE_DIR/torch_npu/for-torch-$torch_version"

fetch_headers() {
  # Newest torch_npu release of torch's exact version (post releases included),
  # else the newest one not newer than torch: the closest we can get.
  local spec
  for spec in "==$torch_version.*" "<=$torch_version"; do
    if "$PY" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
        -d "$tmp/wheel" "torch_npu$spec" >"$tmp/pip.log" 2>&1; then
      break
    fi
    echo "npu glue check: pip download 'torch_npu$spec' failed:" >&2
    tail -n 5 "$tmp/pip.log" | sed 's/^/  /' >&2
  done
  local wheel
  wheel=$(ls "$tmp"/wheel/torch_npu-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    echo "npu glue check: FAILED: no torch_npu wheel for torch $torch_version could be downloaded." >&2
    echo "  Without network access, set OP_EXT_SKIP_NPU_GLUE_CHECK=1 to skip this check." >&2
    exit 1
  fi
  local version
  version=$(basename "$wheel" | cut -d- -f2)
  if [ "${version%%.post*}" != "$torch_version" ]; then
    echo "npu glue check: no torch_npu release for torch $torch_version; using the closest, $version"
  fi
  "$PY" - "$wheel" "$tmp/unpacked" <<'EOF'
import sys
import zipfile

wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith("torch_npu/include/")]
    if not members:
        sys.exit(f"npu glue check: {wheel} has no torch_npu/include/")
    z.extractall(dest, members)
EOF
  mkdir -p "$CACHE_DIR/torch_npu"
  rm -rf "$CACHE_DIR/torch_npu/$version"
  mv "$tmp/unpacked/torch_npu" "$CACHE_DIR/torch_npu/$version"
  echo "$version" >"$marker.tmp"
  mv "$marker.tmp" "$marker"
}

if [ -f "$marker" ] && [ -d "$CACHE_DIR/torch_npu/$(cat "$marker")/include" ]; then
  echo "npu glue check: torch_npu $(cat "$marker") headers from $CACHE_DIR (cached)"
else
  fetch_headers
  echo "npu glue check: torch_npu $(cat "$marker") headers unpacked to $CACHE_DIR"
fi
npu_include="$CACHE_DIR/torch_npu/$(cat "$marker")/include"

# The generated schema header, as setup.py writes it (op_extension/_protos.py
# imports only the standard library).
mkdir -p "$tmp/generated"
"$PY" - "$tmp/generated/op_ext_schemas.h" <<'EOF'
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("_op_ext_protos", "op_extension/_protos.py")
protos = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = protos
spec.loader.exec_module(protos)
with open(sys.argv[1], "w") as f:
    f.write(protos.generate_cpp_header(protos.load_protos()))
EOF

# torch's include paths and the C++ standard its BuildExtension compiles with.
mapfile -t torch_flags < <("$PY" - <<'EOF'
import inspect
import sysconfig

import torch.utils.cpp_extension as ext

std = "-std=c++20" if "-std=c++20" in inspect.getsource(ext) else "-std=c++17"
print(std)
for path in ext.include_paths() + [sysconfig.get_paths()["include"]]:
    print(f"-isystem{path}")
EOF
)

# Our own code gets -Wall -Werror; torch's and torch_npu's headers are system
# headers (-isystem) so that their warnings are theirs. The stand-ins come last:
# a header the wheel does ship always wins.
flags=(
  -fsyntax-only -Wall -Werror -Wno-unknown-pragmas
  "${torch_flags[@]}"
  -isystem "$npu_include"
  -isystem "$npu_include/third_party/hccl/inc"
  -isystem "$STAND_INS"
  -I "$tmp/generated"
  -I op_extension/csrc/host/aclnn
  -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C -DOP_EXT_WITH_NPU=1
)

status=0
for src in "${sources[@]}"; do
  start=$(date +%s)
  if "$CXX" "${flags[@]}" "$src"; then
    echo "npu glue check: $src compiles ($(($(date +%s) - start)) s)"
  else
    echo "npu glue check: FAILED: $src does not compile against torch_npu $(cat "$marker")" >&2
    status=1
  fi
done
exit "$status"
