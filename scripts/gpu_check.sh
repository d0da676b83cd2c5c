#!/usr/bin/env bash
# The GPU check: run from the repository root on a machine with an NVIDIA GPU and
# a CUDA build of torch already installed (never let pip pick torch here). Sized
# for a 15-minute GPU lease, machine start included (docs/cuda.md has each step's
# measured time and the plan):
#
#   bash scripts/gpu_check.sh               results in ./gpu_results
#   OUT=/some/dir bash scripts/gpu_check.sh
#
# 1. versions     nvidia-smi, nvcc, the C++ compiler, glibc, the kernel, torch,
#                 the device;
# 2. build        _C (CUDA), _cuda_sim and _ascend_sim side by side, one process
#                 each (setup.py build_ext --inplace, OP_EXT_EXTENSIONS), then
#                 scripts/check_symbols.py: no library exports or shares the
#                 project's symbols. The package is then importable from every
#                 process of the check (PYTHONPATH) and its entry points are
#                 visible (a generated .dist-info), as after `pip install -e .`,
#                 without building a fourth time;
# 3. probes       scripts/gpu_crash_probes.py: the calls that killed test workers
#                 on the first GPU run, each in a fresh interpreter; the first one
#                 that dies of a signal is rerun under cuda-gdb for its native
#                 backtrace and the libraries it loaded (crash.log);
# 4. bench        python -m op_extension.bench --device cuda, alone on the GPU, on
#                 16, 2048 and 8192 tokens (hidden 4096, 11008 for SwiGLU/GEGLU),
#                 torch.compile's baseline on every row (its graphs compiled, and
#                 the CUDA models of each row run, first, by 8 worker processes
#                 side by side, bench/warm.py; each finished row's figures are on
#                 its progress line, so a run cut off by BENCH_LIMIT keeps them);
#                 then the row ops on rows of 65536 (--hidden), whose backward
#                 norms take the long-row kernels (its table appended to
#                 bench.log, its JSON and plot not kept: $OUT returns 8 files at
#                 most); before the tests, so that a long test run cannot cost
#                 the timings;
# 5. tests and sanitizers, at once:
#    - the whole test suite under pytest-xdist (tests/test_cuda.py and the CUDA
#      case of every device-parametrised test included);
#    - compute-sanitizer memcheck, racecheck, synccheck and initcheck, each over
#      every forward and backward kernel (scripts/gpu_sanitize_ops.py: the test
#      samples' odd shapes, every dtype, strided and misaligned inputs), with
#      PyTorch's caching allocator off; each tool's error count is reported.
# Every step runs even if an earlier one failed; the exit code is the first
# failure's. At most 8 files are written to $OUT: summary.txt (versions, each
# step's exit code and seconds, each probe's exit, each sanitizer's error count),
# build.log, crash.log, bench.log, tests.log, sanitizers.log, and the
# benchmark's bench_cuda_<time>.json and speedup_cuda_<time>.png. Commit them
# under benchmarks/results/ with the date and the device (docs/cuda.md).
#
#   PYTHON=python        the interpreter with the CUDA torch
#   JOBS=$(nproc)        cores to use (compile jobs, test workers)
#   TEST_WORKERS=...     pytest-xdist workers (default: JOBS - 4, the sanitizers
#                        run beside them)
#   BENCH_ARGS=...       replaces the benchmark's options after --device cuda
#   BENCH_LIMIT=270      seconds the benchmark may take
#   LONG_BENCH_ARGS=...  the long-row benchmark's options after --device cuda
#                        (empty: skip it)
#   LONG_BENCH_LIMIT=60  seconds it may take
#   TESTS_LIMIT=300      seconds the tests (and the sanitizers) may take
#   STEPS="build probes bench tests"   the steps to run (versions always runs): a
#                        lease's 10-minute calls take two, STEPS="build bench" (at
#                        most about 7 minutes), then at once STEPS="build probes
#                        tests" (about 6; the build is kept on a warm machine: 8 s)
#   PYTEST_ARGS=...      extra pytest options
#   CUDA_BUILD=1         0: builds _C for the CPU, a dry run of the script itself on
#                        a machine without a GPU (the GPU steps then fail)
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
OUT=${OUT:-./gpu_results}
JOBS=${JOBS:-$(nproc)}
TEST_WORKERS=${TEST_WORKERS:-$((JOBS > 8 ? JOBS - 4 : JOBS))}
# Not --quick: it would build the compiled baseline for one row in 18 only; its
# short timing (0.1 s in 2 rounds per implementation) is asked for instead.
BENCH_ARGS=${BENCH_ARGS:---tokens 16,2048,8192 --min-run-time 0.1 --rounds 2 --no-hf --no-model --workers 8}
BENCH_LIMIT=${BENCH_LIMIT:-270}
LONG_BENCH_ARGS=${LONG_BENCH_ARGS-"--quick --ops rms_norm,fused_add_rms_norm,layer_norm,softmax --hidden 65536 --tokens 4,256 --no-compile --no-dispatch --no-hf --no-model"}
LONG_BENCH_LIMIT=${LONG_BENCH_LIMIT:-60}
TESTS_LIMIT=${TESTS_LIMIT:-300}
STEPS=${STEPS:-build probes bench tests}
wants() { [[ " $STEPS " == *" $1 "* ]]; }
# torch's ninja build compiles with $CXX (else `c++` on the PATH); setuptools links
# a C++ extension with $CXX (else the Python's sysconfig CXX).
sysconfig_cxx=$("$PYTHON" -c 'import sysconfig; print((sysconfig.get_config_var("CXX") or "c++").split()[0])')
compile_cxx=${CXX:-c++}
link_cxx=${CXX:-$sysconfig_cxx}
mkdir -p "$OUT" build
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
status=0
check_start=$SECONDS

note() { echo "$*" | tee -a "$SUMMARY"; }

# finished NAME RC START: records a step's exit code and time; remembers the first failure.
finished() {
  note "== $1: exit $2 in $((SECONDS - $3)) s"
  if [ "$2" -ne 0 ] && [ "$status" -eq 0 ]; then status=$2; fi
}

# ---- 1. versions ---------------------------------------------------------------
start=$SECONDS
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version | tail -n 1
  # The compiler the extensions get (sysconfig's, as setuptools picks it), glibc, the
  # kernel and the stack limit: what differed from the CPU machines when the
  # first GPU run's workers crashed.
  echo "compiles with: $(command -v "$compile_cxx") ($("$compile_cxx" --version 2>&1 | head -n 1))"
  echo "links with: $link_cxx ($("$link_cxx" --version 2>&1 | head -n 1))"
  echo "glibc: $(ldd --version 2>&1 | head -n 1); kernel $(uname -r); stack limit $(ulimit -s)"
  # The lent machines run under Firecracker (a Linux kernel of its own) or gVisor,
  # whose kernel reports 4.4.0: there compute-sanitizer refuses the device ("Device
  # not supported") and ncu cannot read counters (.library/device/KINDS.md).
  case "$(uname -r)" in
    4.4.0*) echo "runtime: gVisor (kernel 4.4.0): compute-sanitizer and ncu are not expected to work" ;;
    *) echo "runtime: $(uname -r | grep -q -- '-fc-' && echo Firecracker || echo 'not gVisor')" ;;
  esac
  "$PYTHON" -c '
import sys, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "cxx11 abi", torch.compiled_with_cxx11_abi())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
'
  echo "cores $(nproc), jobs $JOBS, test workers $TEST_WORKERS, commit $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%FT%TZ)"
} 2>&1 | tee -a "$SUMMARY"
finished versions "${PIPESTATUS[0]}" "$start"

# ---- 2. build --------------------------------------------------------------------
if wants build; then
# One process per extension, so that nvcc (_C) and g++ (the two simulators) run
# side by side; each has its own build folder (ninja's build file lives there).
# The generated sources are written once first, so that the three processes only
# read them.
start=$SECONDS
# A subshell, not a { } group: its `exit` must end the step, not the script.
(
  "$PYTHON" op_extension/_cpp_gen.py build/generated
  pids=()
  for ext in _C _cuda_sim _ascend_sim; do
    if [ "$ext" = _C ]; then jobs=$((JOBS / 2)); else jobs=$((JOBS / 4 > 0 ? JOBS / 4 : 1)); fi
    # OP_EXT_WITH_CUDA=1: fail loudly instead of quietly building the CPU-only _C.
    OP_EXT_WITH_CUDA=${CUDA_BUILD:-1} OP_EXT_EXTENSIONS=$ext MAX_JOBS=$jobs \
      "$PYTHON" setup.py build_ext --inplace --build-temp "build/gpu_check/$ext" >"build/gpu_check_$ext.log" 2>&1 &
    pids+=("$!")
  done
  rc=0
  for pid in "${pids[@]}"; do
    wait "$pid" || rc=1
  done
  for ext in _C _cuda_sim _ascend_sim; do
    echo "---- $ext"
    tail -n 40 "build/gpu_check_$ext.log"
  done
  [ "$rc" -eq 0 ] && "$PYTHON" scripts/check_symbols.py || rc=1
  exit "$rc"
) >"$OUT/build.log" 2>&1
rc=$?
tail -n 3 "$OUT/build.log"
finished build "$rc" "$start"
fi

# The package as `pip install -e .` would leave it, without a fourth build: the
# checkout on PYTHONPATH (the docs' snippets and other subprocesses import it),
# and a .dist-info holding pyproject's entry points (torch.compile(backend=
# "op_extension") finds the backend through them).
site=build/gpu_check/site
rm -rf "$site" && mkdir -p "$site"
"$PYTHON" - "$site" <<'PY'
import sys, tomllib
from pathlib import Path

project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
info = Path(sys.argv[1]) / f"{project['name']}-{project['version']}.dist-info"
info.mkdir()
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
lines = []
for group, entries in project.get("entry-points", {}).items():
    lines.append(f"[{group}]")
    lines += [f"{name} = {target}" for name, target in entries.items()]
(info / "entry_points.txt").write_text("\n".join(lines) + "\n")
PY
export PYTHONPATH="$PWD:$PWD/$site${PYTHONPATH:+:$PYTHONPATH}"

# ---- 3. probes: the calls that crashed workers, one fresh interpreter each --------
if wants probes; then
start=$SECONDS
: >"$OUT/crash.log"
probe_rc=0
crashed=""
for probe in $("$PYTHON" scripts/gpu_crash_probes.py --list); do
  echo "==== probe $probe" >>"$OUT/crash.log"
  timeout 120 "$PYTHON" -X faulthandler scripts/gpu_crash_probes.py "$probe" >>"$OUT/crash.log" 2>&1
  rc=$?
  note "== probe $probe: exit $rc"
  if [ "$rc" -ne 0 ]; then
    probe_rc=1
    # 128 + signal from bash (139: SIGSEGV), 124: the timeout.
    if [ "$rc" -gt 128 ] && [ -z "$crashed" ]; then crashed=$probe; fi
  fi
done
if [ -n "$crashed" ]; then
  debugger=$(command -v cuda-gdb || command -v gdb || true)
  {
    echo "==== native backtrace of probe $crashed (${debugger:-no debugger on this machine})"
    for lib in op_extension/_ascend_sim.*.so op_extension/_C.*.so; do echo "-- ldd $lib"; ldd "$lib"; done
    if [ -n "$debugger" ]; then
      timeout 120 "$debugger" -q -batch -ex "set pagination off" -ex "handle SIGPIPE nostop noprint" -ex run \
        -ex "bt 40" -ex "x/6i \$pc" -ex "info registers rip rsp" -ex "info sharedlibrary" \
        --args "$PYTHON" scripts/gpu_crash_probes.py "$crashed" 2>&1 | grep -v "^\[New Thread\|^\[Thread .* exited"
    fi
  } >>"$OUT/crash.log" 2>&1
fi
# Is it the compiler? If _ascend_sim crashed alone, build it again with one compiler
# for both compiling and linking, each candidate in turn, and rerun that probe on it.
if grep -q "^== probe ascend_sim_alone: exit 1[3-9][0-9]" "$SUMMARY"; then
  n=0
  for cand in $(printf '%s\n' /usr/bin/g++ "$(command -v c++)" "$sysconfig_cxx" | while read -r c; do [ -n "$c" ] && command -v "$c" >/dev/null && readlink -f "$(command -v "$c")"; done | awk '!seen[$0]++'); do
    n=$((n + 1))
    alt=build/gpu_check/alt$n
    CXX=$cand LDSHARED="$cand -shared" OP_EXT_WITH_CUDA=0 OP_EXT_EXTENSIONS=_ascend_sim MAX_JOBS=$JOBS \
      "$PYTHON" setup.py build_ext --build-temp "$alt/temp" --build-lib "$alt/lib" >"$alt.log" 2>&1 ||
      { note "== probe ascend_sim_alone with $cand: build failed ($alt.log)"; continue; }
    OP_EXT_PROBE_DIR=$alt/lib/op_extension timeout 120 "$PYTHON" -X faulthandler scripts/gpu_crash_probes.py \
      ascend_sim_alone >>"$OUT/crash.log" 2>&1
    rc=$?
    note "== probe ascend_sim_alone with _ascend_sim built by $cand ($("$cand" --version | head -n 1)): exit $rc"
  done
fi
finished probes "$probe_rc" "$start"
fi

# ---- 4. benchmark, alone on the GPU ----------------------------------------------
if wants bench; then
start=$SECONDS
# shellcheck disable=SC2086
timeout "$BENCH_LIMIT" "$PYTHON" -m op_extension.bench --device cuda --out "$OUT" $BENCH_ARGS >"$OUT/bench.log" 2>&1
rc=$?
tail -n 5 "$OUT/bench.log"
finished bench "$rc" "$start"
if [[ -n "$LONG_BENCH_ARGS" ]]; then
  start=$SECONDS
  echo "== the row ops on rows of 65536: $LONG_BENCH_ARGS" >>"$OUT/bench.log"
  # shellcheck disable=SC2086
  timeout "$LONG_BENCH_LIMIT" "$PYTHON" -m op_extension.bench --device cuda --out "$(mktemp -d)" $LONG_BENCH_ARGS \
    >>"$OUT/bench.log" 2>&1
  rc=$?
  tail -n 5 "$OUT/bench.log"
  finished bench_long "$rc" "$start"
fi
fi

# ---- 5. tests and sanitizers, side by side ---------------------------------------
if wants tests; then
# The sanitizers need few cores; the tests take the rest. Both on the GPU at once is
# fine for correctness (nothing here is timed). worksteal, where this xdist has it:
# a worker that ran out of tests takes half of another's.
start=$SECONDS
dist=()
"$PYTHON" -c 'import xdist, sys; sys.exit(tuple(map(int, xdist.__version__.split(".")[:2])) < (3, 2))' 2>/dev/null &&
  dist=(--dist worksteal)
(
  # shellcheck disable=SC2086
  timeout "$TESTS_LIMIT" "$PYTHON" -m pytest -q -p no:cacheprovider -n "$TEST_WORKERS" "${dist[@]}" --durations=15 \
    ${PYTEST_ARGS:-} tests >"$OUT/tests.log" 2>&1
) &
tests_pid=$!

sanitize() {  # sanitize TOOL: one compute-sanitizer run over every kernel; prints its log
  local extra=()
  # initcheck reports reads of memory nothing wrote; the caching allocator's reuse
  # would hide them. racecheck and synccheck watch shared memory and barriers.
  [ "$1" = racecheck ] && extra=(--racecheck-report all)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$TESTS_LIMIT" compute-sanitizer --tool "$1" "${extra[@]}" --error-exitcode 99 \
    --print-limit 20 "$PYTHON" scripts/gpu_sanitize_ops.py --device cuda 2>&1
}
tools=(memcheck racecheck synccheck initcheck)
declare -A sanitizer_pid
: >"$OUT/sanitizers.log"
for tool in "${tools[@]}"; do
  sanitize "$tool" >"build/gpu_check_sanitizer_$tool.log" 2>&1 &
  sanitizer_pid[$tool]=$!
done
sanitizer_rc=0
for tool in "${tools[@]}"; do
  wait "${sanitizer_pid[$tool]}"
  tool_rc=$?
  log="build/gpu_check_sanitizer_$tool.log"
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+$')
  refused=""
  grep -q "Device not supported" "$log" && refused=" (compute-sanitizer refused the device: gVisor?)"
  note "== sanitizer $tool: ${errors:-no ERROR SUMMARY line (did it run?)} errors, exit $tool_rc$refused"
  if [ "$tool_rc" -ne 0 ] || [ "${errors:-x}" != 0 ]; then sanitizer_rc=1; fi
  { echo "==== compute-sanitizer --tool $tool"; cat "$log"; } >>"$OUT/sanitizers.log"
done
finished sanitizers "$sanitizer_rc" "$start"

wait "$tests_pid"
rc=$?
tail -n 1 "$OUT/tests.log" | tee -a "$SUMMARY"
finished tests "$rc" "$start"
fi

note "== gpu_check: $((SECONDS - check_start)) s in all, exit $status; results in $OUT"
exit "$status"
