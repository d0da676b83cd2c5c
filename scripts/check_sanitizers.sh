#!/usr/bin/env bash
# Builds op_extension._C, op_extension._ascend_sim and op_extension._cuda_sim with
# AddressSanitizer and UndefinedBehaviorSanitizer (OP_EXT_SANITIZE=address,undefined,
# see setup.py) and runs a subset of the test suite on them; fails on any sanitizer
# report. For the CUDA kernels on the CPU harness this is what checks global
# memory: the harness watches shared memory itself, ASan sees every global
# (tensor) access out of bounds.
#
# The build goes into a copy of the working tree ($OP_EXT_SANITIZE_DIR/tree, default
# build/sanitize/tree; ninja's objects are kept there, so a second run only rebuilds
# what changed): the normal editable build in the repository is never touched. The
# tests run from that copy; a pytest plugin (scripts/sanitizers/) checks that the
# extensions are imported from it and that the ASan runtime is loaded.
#
# Python and torch are not sanitized, so the ASan runtime is preloaded into the
# interpreter (LD_PRELOAD); the options below say why each is set. Besides the exit
# status, the output and ASan's report files (log_path) are scanned for reports:
# a report from a worker thread, or one printed by a check that recovers, is found
# even where the exit status would not show it.
#
# Tests run: test_ops.py, test_bad_input.py, test_modules.py (every op against its
# reference in every dtype and CPU kernel variant, gradients, opcheck, every
# bad-input case, the modules), test_ascend_sim*.py and test_ascend_tiling*.py (the
# Ascend C kernels, tilings and aclnn entry points on the simulator),
# test_cuda_sim*.py, whole (the CUDA kernels on the CPU harness: ASan sees their
# global-memory accesses, torch's tensors having redzones, and the harness checks
# their shared-memory accesses in its helpers, as unsanitized), and test_fuzz.py and
# test_edge_regressions.py when they exist. The harness announces each switch
# between fiber stacks to ASan (csrc/cuda_sim/harness.cpp), which is what it needs
# whichever switch runs (its own, or swapcontext, whose ASan warns once per process
# that it does not fully support it).
# Excluded:
# - test_compile.py (torch.compile / torch.export), and any test marked `compile`:
#   the C++ Inductor generates is compiled without sanitizers, and what of ours runs
#   inside a compiled graph is the same op kernels the eager tests run here; they
#   are also the slowest tests even unsanitized (minutes of Inductor compiles);
# - test_npu_glue.py / test_npu_sim_device.py: they build their own libraries
#   (a separate g++ build, not these extensions); test_protos.py: no native code;
# - test_cuda.py: no GPU.
#
# Between the build and the tests, a self-test runs planted mistakes
# (scripts/sanitizers/planted.cpp, compiled with the build's own flags taken from
# its build.ninja: a heap-buffer-overflow in a worker thread, a signed overflow, a
# misaligned load; and a CUDA kernel of the harness's misuse set reading one float
# past a global buffer) through pytest exactly as the tests run, and requires the
# detection below to report each one, and a clean control (which also runs the
# harness and its own shared-memory fault handling under ASan) to report nothing.
#
#   PY=.venv/bin/python           the interpreter (and torch) to build and test with
#   MAX_JOBS=2                    parallel compile jobs
#   OP_EXT_SANITIZE_DIR=build/sanitize
#   OP_EXT_SKIP_SANITIZER_CHECK=1 skips the whole check and says so
#   PYTEST_ARGS=...               extra pytest arguments (e.g. -x, -k rms_norm)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${OP_EXT_SKIP_SANITIZER_CHECK:-0}" = "1" ]; then
  echo "sanitizer check: SKIPPED (OP_EXT_SKIP_SANITIZER_CHECK=1)"
  exit 0
fi

# -s: a venv's python is a symlink to the base interpreter, which lacks torch.
PY=$(realpath -s "${PY:-.venv/bin/python}")
CXX=${CXX:-g++}
export MAX_JOBS=${MAX_JOBS:-2}
SAN_DIR=$(realpath -m "${OP_EXT_SANITIZE_DIR:-build/sanitize}")
TREE=$SAN_DIR/tree
SANITIZE=address,undefined

start=$(date +%s)
phase_start=$start
phase() {
  local now
  now=$(date +%s)
  echo "sanitizer check: $1 took $((now - phase_start)) s"
  phase_start=$now
}

# --- runtime and options -----------------------------------------------------

libasan=$("$CXX" -print-file-name=libasan.so)
libubsan=$("$CXX" -print-file-name=libubsan.so)
for lib in "$libasan" "$libubsan"; do
  if [ ! -e "$lib" ]; then
    echo "sanitizer check: FAILED: $CXX has no $(basename "$lib") (install its sanitizer runtimes)" >&2
    exit 1
  fi
done

# ASan must be the first library of the process (it replaces malloc for everyone,
# torch included: tensors get redzones too, so a kernel reading past one is
# caught). libubsan is preloaded as well for the libstdc++ it depends on: Python
# does not link libstdc++, and when torch loads it later ASan's __cxa_throw
# interceptor has no real __cxa_throw to call, so the first C++ exception (any
# torch error) dies with "AddressSanitizer: CHECK failed ... real___cxa_throw"
# (the self-test's clean control throws one to keep this checked).
SAN_PRELOAD="$(realpath "$libasan") $(realpath "$libubsan")"
# detect_leaks=0: CPython and torch keep allocations alive until exit by design
#   (interned objects, registries, thread pools); LeakSanitizer would report them
#   all, none of them ours.
# log_path: every report also goes to a file per process, which the scan reads.
# allow_user_segv_handler=1: the CUDA harness watches shared memory through
#   PROT_NONE pages and its own SIGSEGV handler (csrc/cuda_sim/harness.cpp), installed
#   for each launch. ASan installs its SEGV handler first (handle_segv=1, kept: a real
#   crash must still be an ASan report); without this flag its sigaction interceptor
#   may ignore the harness's handler, and every shared-memory access would be
#   reported as a crash. The harness hands faults that are not its own back to the
#   handler it replaced (ASan's). Set explicitly: runtimes differ in the default.
# Otherwise ASan's defaults: the whole suite runs clean with them (torch's
# allocations included), and they make a report end the process with exit status 1.
asan_options() { echo "detect_leaks=0:allow_user_segv_handler=1:handle_segv=1:log_path=$1/asan"; }
# print_stacktrace=1: UBSan prints only the source line otherwise.
# halt_on_error=1: also stop on a check built without -fno-sanitize-recover.
# log_path: GCC's UBSan next to ASan ignores it and writes to stderr (the
#   self-test shows it), hence --capture=sys below; kept in case a runtime honours it.
ubsan_options() { echo "print_stacktrace=1:halt_on_error=1:log_path=$1/ubsan"; }

# pytest in the sanitized tree under the sanitizers; $1: the folder for report files.
# --capture=sys: pytest captures what Python writes, not file descriptor 2, so a
# report written by native code reaches the output even when it kills the
# process (with fd capture it would die in pytest's temporary file).
sanitized_pytest() {
  local logs=$1
  shift
  (
    cd "$TREE"
    env LD_PRELOAD="$SAN_PRELOAD" ASAN_OPTIONS="$(asan_options "$logs")" UBSAN_OPTIONS="$(ubsan_options "$logs")" \
      OP_EXT_SANITIZED_TREE="$TREE" PYTHONPATH="$TREE:$TREE/scripts/sanitizers" \
      "$PY" -m pytest -p sanitized_build_guard -p no:cacheprovider --capture=sys -q "$@"
  )
}

# Every sanitizer report line we know of. Scanned in the run's output and in the
# report files: the exit status alone misses reports that did not end the process.
REPORT_PATTERN='ERROR: AddressSanitizer|AddressSanitizer:DEADLYSIGNAL|ERROR: LeakSanitizer|runtime error:|ERROR: UndefinedBehaviorSanitizer|SUMMARY: (AddressSanitizer|UndefinedBehaviorSanitizer)|Sanitizer: CHECK failed'

# Prints the report lines found in the files given ($@: the run's output, the log folder).
find_reports() {
  grep -rhE "$REPORT_PATTERN" "$@" 2>/dev/null || true
}

# --- build into the copy -------------------------------------------------------

# The working tree's files (tracked and untracked, not ignored) replace the copy's,
# keeping their timestamps; the copy's build/ (ninja's objects) stays.
mkdir -p "$TREE"
find "$TREE" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
# (--ignore-failed-read: a file deleted but not yet staged is listed, and skipped.)
git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - |
  tar -xf - -C "$TREE"
echo "sanitizer check: building with OP_EXT_SANITIZE=$SANITIZE in $TREE (MAX_JOBS=$MAX_JOBS)"
(
  cd "$TREE"
  # Every CPU kernel variant (setup.py's default): the tests run each one the CPU
  # supports, and a variant not built would silently run the default one instead.
  env -u OP_EXT_CPU_ISAS -u OP_EXT_DEBUG OP_EXT_SANITIZE=$SANITIZE OP_EXT_WITH_CUDA=0 OP_EXT_WITH_NPU=0 \
    "$PY" setup.py --quiet build_ext --inplace >"$SAN_DIR/build.log" 2>&1
) || {
  echo "sanitizer check: FAILED: the sanitized build failed; last lines of $SAN_DIR/build.log:" >&2
  tail -n 40 "$SAN_DIR/build.log" >&2
  exit 1
}
# Instrumented, and with UBSan's aborting handlers (-fno-sanitize-recover): a
# build that lost its flags fails here rather than running the tests unsanitized.
for so in "$TREE"/op_extension/_C*.so "$TREE"/op_extension/_ascend_sim*.so "$TREE"/op_extension/_cuda_sim*.so; do
  symbols=$(nm -D --undefined-only "$so")
  if ! grep -q '__asan_report_' <<<"$symbols" || ! grep -q '__ubsan_handle_.*_abort' <<<"$symbols"; then
    echo "sanitizer check: FAILED: $so is not built with ASan and aborting UBSan" >&2
    exit 1
  fi
done
phase "build"

# --- self-test: planted mistakes must be reported -----------------------------

# The code-generation flags (-f*, -O*, -g*) of the sanitized build, as ninja ran
# them (Python's own CFLAGS first, then setup.py's; the link adds only the same
# -fsanitize): the planted mistakes are compiled exactly like the extensions.
ninja_file=$(ls "$TREE"/build/temp.*/build.ninja | head -n 1)
read -r -a codegen_flags <<<"$(sed -n -E 's/^(cflags|post_cflags) = //p' "$ninja_file" | tr ' ' '\n' | grep -E '^-(f|O|g)' | tr '\n' ' ')"
if [[ " ${codegen_flags[*]} " != *" -fsanitize=$SANITIZE "* ]]; then
  echo "sanitizer check: FAILED: $ninja_file does not compile with -fsanitize=$SANITIZE: ${codegen_flags[*]}" >&2
  exit 1
fi
selftest=$SAN_DIR/selftest
rm -rf "$selftest"
mkdir -p "$selftest"
"$CXX" "${codegen_flags[@]}" -shared -o "$selftest/libplanted.so" scripts/sanitizers/planted.cpp -pthread

# $1: the test of planted_misuse.py, $2: the report text it must cause ("" for
# the clean control, which must pass with no report), $3...: more text the report
# must hold (where the mistake is).
planted() {
  local name=$1 expect=$2 logs="$selftest/$1" rc=0 also
  shift 2
  mkdir -p "$logs"
  OP_EXT_PLANTED_LIB="$selftest/libplanted.so" \
    sanitized_pytest "$logs" "$TREE/scripts/sanitizers/planted_misuse.py" -k "test_$name" >"$logs/output.txt" 2>&1 || rc=$?
  local reports
  reports=$(find_reports "$logs")
  if [ -z "$expect" ]; then
    if [ "$rc" -ne 0 ] || [ -n "$reports" ]; then
      echo "sanitizer check: FAILED: self-test '$name' (no mistake) exited $rc or reported:" >&2
      cat "$logs"/* >&2
      exit 1
    fi
  elif [ "$rc" -eq 0 ] || [ -z "$reports" ] || ! grep -rqF "$expect" "$logs"; then
    echo "sanitizer check: FAILED: the planted $name was not detected (exit $rc, expected '$expect')." >&2
    echo "  The sanitizer setup is broken; its output:" >&2
    cat "$logs"/* >&2
    exit 1
  fi
  for also in "$@"; do
    if ! grep -rqF "$also" "$logs"; then
      echo "sanitizer check: FAILED: the report of the planted $name does not say '$also'; its output:" >&2
      cat "$logs"/* >&2
      exit 1
    fi
  done
}
planted clean ""
planted heap_overflow "heap-buffer-overflow"
planted signed_overflow "signed integer overflow"
planted misaligned_load "misaligned address"
planted cuda_sim_global_out_of_bounds "heap-buffer-overflow" "READ of size 4" "global_out_of_bounds_kernel"
echo "sanitizer check: self-test passed (heap-buffer-overflow in a thread, signed overflow, misaligned load," \
  "a CUDA kernel reading past a global buffer on the harness: each detected)"
phase "self-test"

# --- the tests -----------------------------------------------------------------

tests=(tests/test_ops.py tests/test_bad_input.py tests/test_modules.py
  tests/test_ascend_sim*.py tests/test_ascend_tiling*.py tests/test_cuda_sim*.py)
# Added on main since: run them when present.
for optional in tests/test_fuzz.py tests/test_edge_regressions.py; do
  if [ -f "$TREE/$optional" ]; then
    tests+=("$optional")
  fi
done
logs=$SAN_DIR/logs
rm -rf "$logs"
mkdir -p "$logs"
echo "sanitizer check: running ${tests[*]}"
set +e
sanitized_pytest "$logs" -m "not compile" --durations=10 ${PYTEST_ARGS:-} "${tests[@]}" 2>&1 | tee "$logs/pytest.txt"
rc=${PIPESTATUS[0]}
set -e
phase "tests"

# Whatever the outcome, any report file is shown (a runtime failure that no
# pattern knows still leaves one).
for f in "$logs"/asan.* "$logs"/ubsan.*; do
  [ -e "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }
done
reports=$(find_reports "$logs")
if [ -n "$reports" ]; then
  echo "sanitizer check: FAILED: sanitizer reports (full text above and in $logs):" >&2
  grep -hE "$REPORT_PATTERN" "$logs/pytest.txt" >&2 || true
  exit 1
fi
if [ "$rc" -eq 5 ]; then
  echo "sanitizer check: FAILED: pytest collected no tests" >&2
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "sanitizer check: FAILED: pytest exited $rc (no sanitizer report found; see the output above)" >&2
  exit "$rc"
fi
echo "sanitizer check: passed, no sanitizer report ($(( $(date +%s) - start )) s in all)"
