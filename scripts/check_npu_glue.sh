#!/usr/bin/env bash
# Checks that the torch_npu glue compiles, on a machine without torch_npu or CANN:
# each of op_extension/csrc/torch_ext/npu/*.cpp, npu/ops/*.cpp and the generated
# op_ext_npu_registration.cpp (or the files given as arguments)
# is compiled (g++ -c -O0; -fsyntax-only would miss the next point) against the
# installed torch's headers and the headers inside the torch_npu wheel made for
# that torch version; then every torch_npu symbol the object needs (c10_npu::,
# at_npu::, torch_npu::) must be exported by the wheel's libtorch_npu.so, or the
# real build would fail to link (torch_npu hides much of what its headers show).
#
# The wheel is fetched with `pip download --no-deps` (never installed: torch_npu
# in an environment without CANN breaks `import torch`). Only its headers and the
# list of libtorch_npu.so's exported symbols are kept, in a cache that survives
# between runs (default ~/.cache/op_extension):
#   $OP_EXT_CACHE_DIR/torch_npu/<version>/include/
#   $OP_EXT_CACHE_DIR/torch_npu/<version>/libtorch_npu.exports
# The wheel lacks one CANN header the glue needs, aclnn/acl_meta.h; a
# declaration-only stand-in in scripts/npu_glue_check/include/ replaces it here
# and nowhere else (docs: "torch_npu registration").
#
# A wheel that cannot be fetched (no network, no matching version) is an error,
# not a pass. OP_EXT_SKIP_NPU_GLUE_CHECK=1 skips the check and says so.
#
#   PY=.venv/bin/python   the interpreter whose torch the glue is checked against
#   OP_EXT_SOURCE_ROOT=.  the source tree to check
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${OP_EXT_SKIP_NPU_GLUE_CHECK:-0}" = "1" ]; then
  echo "npu glue check: SKIPPED (OP_EXT_SKIP_NPU_GLUE_CHECK=1)"
  exit 0
fi

PY=${PY:-.venv/bin/python}
# The source tree whose glue is checked (default: this one); the tests point it
# at a copy with a scaffolded op added.
SOURCE_ROOT=${OP_EXT_SOURCE_ROOT:-.}
# Its paths as this tree's are printed: relative, without ./
in_root() { if [ "$SOURCE_ROOT" = "." ]; then echo "$1"; else echo "$SOURCE_ROOT/$1"; fi; }
CXX=${CXX:-g++}
CACHE_DIR=${OP_EXT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/op_extension}
STAND_INS=scripts/npu_glue_check/include

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# What setup.py generates from the prototypes (schemas, handles, every op's glue,
# the npu registration; op_extension/_cpp_gen.py imports only the standard library).
mkdir -p "$tmp/generated"
"$PY" op_extension/_cpp_gen.py "$tmp/generated" "$SOURCE_ROOT"

if [ "$#" -gt 0 ]; then
  sources=("$@")
else
  # The shared glue, every op's glue, and the registration derived from the prototypes.
  npu_glue=$(in_root op_extension/csrc/torch_ext/npu)
  sources=("$npu_glue"/*.cpp "$npu_glue"/ops/*.cpp "$tmp/generated/op_ext_npu_registration.cpp")
fi
for src in "${sources[@]}"; do
  [ -f "$src" ] || { echo "npu glue check: no such source: $src" >&2; exit 1; }
done

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
    members.append("torch_npu/lib/libtorch_npu.so")
    if len(members) == 1 or members[-1] not in z.namelist():
        sys.exit(f"npu glue check: {wheel} lacks torch_npu/include/ or torch_npu/lib/libtorch_npu.so")
    z.extractall(dest, members)
EOF
  # The library itself (~100 MB) is not kept: its exported (mangled) names are enough.
  nm -D --defined-only "$tmp/unpacked/torch_npu/lib/libtorch_npu.so" | awk '{print $NF}' | sort -u \
    >"$tmp/unpacked/torch_npu/libtorch_npu.exports"
  rm -r "$tmp/unpacked/torch_npu/lib"
  mkdir -p "$CACHE_DIR/torch_npu"
  rm -rf "$CACHE_DIR/torch_npu/$version"
  mv "$tmp/unpacked/torch_npu" "$CACHE_DIR/torch_npu/$version"
  echo "$version" >"$marker.tmp"
  mv "$marker.tmp" "$marker"
}

cached() {
  [ -f "$marker" ] && [ -d "$CACHE_DIR/torch_npu/$(cat "$marker")/include" ] &&
    [ -s "$CACHE_DIR/torch_npu/$(cat "$marker")/libtorch_npu.exports" ]
}
if cached; then
  echo "npu glue check: torch_npu $(cat "$marker") headers from $CACHE_DIR (cached)"
else
  fetch_headers
  echo "npu glue check: torch_npu $(cat "$marker") headers unpacked to $CACHE_DIR"
fi
npu_include="$CACHE_DIR/torch_npu/$(cat "$marker")/include"
npu_exports="$CACHE_DIR/torch_npu/$(cat "$marker")/libtorch_npu.exports"

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
  -c -O0 -Wall -Werror -Wno-unknown-pragmas
  "${torch_flags[@]}"
  -isystem "$npu_include"
  -isystem "$npu_include/third_party/hccl/inc"
  -isystem "$STAND_INS"
  -I "$tmp/generated"
  -I "$(in_root op_extension/csrc/host/aclnn)"
  -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C -DOP_EXT_WITH_NPU=1
)

# The torch_npu symbols an object file needs that libtorch_npu.so does not export.
unexported_torch_npu_symbols() {
  nm -u "$1" | awk '{print $NF}' | sort -u >"$tmp/undefined"
  paste "$tmp/undefined" <(c++filt <"$tmp/undefined") |
    grep -E $'\t((vtable|typeinfo|typeinfo name|VTT|guard variable) for )?(c10_npu|at_npu|torch_npu)::' |
    cut -f1 | sort >"$tmp/needed" || true
  comm -23 "$tmp/needed" "$npu_exports" | c++filt
}

status=0
for src in "${sources[@]}"; do
  start=$(date +%s)
  object="$tmp/$(basename "$src").o"
  if ! "$CXX" "${flags[@]}" "$src" -o "$object"; then
    echo "npu glue check: FAILED: $src does not compile against torch_npu $(cat "$marker")" >&2
    status=1
    continue
  fi
  missing=$(unexported_torch_npu_symbols "$object")
  if [ -n "$missing" ]; then
    echo "npu glue check: FAILED: $src needs torch_npu symbols that libtorch_npu.so does not export:" >&2
    echo "$missing" | sed 's/^/  /' >&2
    status=1
    continue
  fi
  echo "npu glue check: $src compiles, and links against torch_npu's exports ($(($(date +%s) - start)) s)"
done
exit "$status"
