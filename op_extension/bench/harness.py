"""Timing: the CPU timer (torch.utils.benchmark) and CUDA events, the interleaved
rounds, warm-up, the timed statement, the copy_ bandwidth baseline, the load of
other processes, progress on stderr."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.utils.benchmark as benchmark

from ..bench_spec import OpSetup


@dataclass
class Timing:
    median_s: float
    iqr_s: float
    samples: int


class CpuTimer:
    """Per-call CPU times from torch.utils.benchmark.Timer (explicit threads).

    blocked_autorange runs the statement in blocks long enough that the timer's
    own overhead is negligible and returns the per-call time of each block.
    ``sample`` is called once per round (see ``measure``) with that round's
    share of the time budget.  With ``reps`` each round instead takes a fixed
    number of blocks of >= 1 ms.
    """

    def __init__(self, threads, min_run_time, reps=None, rounds=5):
        self.threads, self.min_run_time = threads, min_run_time
        self.reps, self.rounds = reps, rounds

    def prepare(self, fn):
        return {"timer": benchmark.Timer(stmt="fn()", globals={"fn": fn},
                                         num_threads=self.threads)}

    def sample(self, handle):
        timer = handle["timer"]
        if not self.reps:
            return list(timer.blocked_autorange(
                min_run_time=self.min_run_time / self.rounds).times)
        if "number" not in handle:
            per_call = max(timer.timeit(1).median, 1e-9)
            handle["number"] = max(1, int(math.ceil(1e-3 / per_call)))
        n_blocks = max(1, math.ceil(self.reps / self.rounds))
        return [timer.timeit(handle["number"]).median for _ in range(n_blocks)]


class CudaTimer:
    """CUDA events around each call, with the L2 cache flushed before each one.

    Writing a 256 MB buffer between reps evicts the inputs from L2 (50 MB on
    H100), so every rep reads from HBM as a real layer would, and the
    bandwidth figures are not inflated by cache hits.  The flush itself is
    outside the events.
    """

    FLUSH_BYTES = 256 * 1024 * 1024

    def __init__(self, min_run_time, reps=None, rounds=5):
        self.min_run_time, self.reps, self.rounds = min_run_time, reps, rounds
        self.flush_buf = torch.empty(self.FLUSH_BYTES, dtype=torch.int8, device="cuda")

    def prepare(self, fn):
        # Estimate one call (flush included) to choose the reps per round.
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            self.flush_buf.zero_()
            fn()
        torch.cuda.synchronize()
        est = (time.perf_counter() - t0) / 5
        total = self.reps or int(min(2000, max(20, self.min_run_time / max(est, 1e-6))))
        return {"fn": fn, "per_round": max(1, math.ceil(total / self.rounds))}

    def sample(self, handle):
        fn, n = handle["fn"], handle["per_round"]
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self.flush_buf.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


def measure(timer, fns: dict) -> tuple[dict, dict]:
    """Time several implementations of the same thing, interleaved.

    The budget is split into ``timer.rounds`` rounds; each round samples every
    implementation once, starting from a different one each round.  Slow drift
    of the machine (frequency, other tenants, allocator state) and any
    "who runs first" effect are thus shared by all implementations instead of
    landing on whichever was measured in the bad moment; on a 2-core VM this
    brought identical code measured twice from ~30 % apart to a few %.
    Returns ({name: Timing}, {name: error message}).
    """
    handles, errors = {}, {}
    for name, fn in fns.items():
        try:
            handles[name] = timer.prepare(fn)
        except Exception as e:
            errors[name] = error_text(e)
    samples = {name: [] for name in handles}
    names = list(handles)
    for r in range(timer.rounds):
        k = r % max(len(names), 1)
        for name in names[k:] + names[:k]:
            if name in errors:
                continue
            try:
                samples[name] += timer.sample(handles[name])
            except Exception as e:
                errors[name] = error_text(e)
    return ({n: _timing(s) for n, s in samples.items() if n not in errors and s},
            errors)


def error_text(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def _timing(times: Sequence[float]) -> Timing:
    times = sorted(times)
    if len(times) >= 4:
        q = statistics.quantiles(times, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = times[-1] - times[0]
    return Timing(statistics.median(times), iqr, len(times))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def warm_up(fn, device, min_calls=3, min_time=0.02):
    """Run fn a few times (first-call allocations, lazy init, compilation)."""
    t0 = time.perf_counter()
    calls = 0
    while calls < min_calls or time.perf_counter() - t0 < min_time:
        fn()
        calls += 1
    sync(device)


def make_step(fn, setup: OpSetup, direction, grads=None):
    """Build the zero-argument statement that is timed.

    Everything it touches (inputs, weights, output gradients) is allocated
    beforehand, so the only allocations inside are the ones the op itself makes.
    """
    inputs = setup.inputs
    if direction == "fwd":
        return lambda: fn(*inputs)

    leaves = [inputs[i] for i in setup.grad_inputs]
    # Reset .grad to None rather than accumulating: with .grad None the
    # AccumulateGrad node simply adopts the gradient the backward produced,
    # whereas accumulating would add a `grad += new` read-modify-write per leaf
    # on every rep -- work that is not part of the op and would dilute the
    # comparison.  Assigning None allocates nothing.
    if setup.num_outputs == 1:
        g = grads[0]

        def step():
            for t in leaves:
                t.grad = None
            fn(*inputs).backward(g)
    else:
        # Backward through every output at once; summing them first would add
        # ops that are not part of the operator.
        def step():
            for t in leaves:
                t.grad = None
            torch.autograd.backward(fn(*inputs), grads)
    return step


def with_grad(setup: OpSetup) -> OpSetup:
    """Same storage, but the gradient inputs are leaves requiring grad."""
    inputs = [t.detach().requires_grad_(i in setup.grad_inputs)
              for i, t in enumerate(setup.inputs)]
    return OpSetup(inputs, setup.grad_inputs, setup.impls, setup.num_outputs,
                   setup.shape, setup.numel, setup.weight_numel, setup.output_shapes)


_COMPILED: dict = {}


def compiled_composite(name, composite):
    """One torch.compile wrapper per op; it recompiles per shape/dtype/grad mode."""
    if name not in _COMPILED:
        _COMPILED[name] = torch.compile(composite, dynamic=False)
    return _COMPILED[name]


def configure_dynamo():
    # dynamic=False gives one graph per (tokens, dtype, requires_grad) for each
    # composite: up to 5 * 2 * 2 = 20 per code object, above the default limit
    # of 8, after which dynamo would silently fall back to eager.
    cfg = torch._dynamo.config
    for key, value in (("recompile_limit", 64), ("cache_size_limit", 64),
                       ("accumulated_recompile_limit", 1024),
                       ("accumulated_cache_size_limit", 1024)):
        if hasattr(cfg, key) and getattr(cfg, key) < value:
            setattr(cfg, key, value)


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def configure_host_allocator(mode):
    """Makes freed host memory reusable by the next allocation, or leaves glibc as is.

    glibc serves every allocation of 32 MiB or more (and smaller ones once its
    dynamic threshold says so) with a fresh mmap and returns it on free, so each
    call that allocates a large output pays a page fault per 4 KiB page of it.
    On this kind of VM that costs more than the kernel itself (an RMSNorm of
    2048 x 4096 float32 ran at ~10% of copy bandwidth, the rest page faults),
    and it hits every implementation alike, including the native and compiled
    baselines. "reuse" keeps large blocks on the heap and never trims it, which
    is what jemalloc/tcmalloc setups for CPU inference give; "system" measures
    the default. Returns a description recorded with the results.
    """
    if mode == "system":
        return "system (glibc defaults)"
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**30) == 1
    except (OSError, AttributeError):
        ok = False
    if not ok:
        return "system (mallopt unavailable: not glibc)"
    return "reuse (glibc mallopt: M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB)"


def copy_bandwidth(nbytes, dtype, device, timer):
    """GB/s of ``out.copy_(x)`` over nbytes (counted as read + write)."""
    elem = torch.empty((), dtype=dtype).element_size()
    numel = max(1, nbytes // elem)
    src = torch.randn(numel, device=device).to(dtype)
    dst = torch.empty_like(src)

    def fn():
        dst.copy_(src)

    warm_up(fn, src.device)
    timings, errors = measure(timer, {"copy": fn})
    if errors:
        raise RuntimeError(errors["copy"])
    t = timings["copy"]
    return 2 * numel * elem / t.median_s / 1e9, t


def check_close(ours, native, dtype):
    """Max abs difference ours vs native forward, and whether it is acceptable."""
    ours = ours if isinstance(ours, (tuple, list)) else (ours,)
    native = native if isinstance(native, (tuple, list)) else (native,)
    if len(ours) != len(native):
        return float("inf"), False
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    err, ok = 0.0, True
    for a, b in zip(ours, native):
        if a.shape != b.shape:
            return float("inf"), False
        a, b = a.detach().float(), b.detach().float()
        err = max(err, (a - b).abs().max().item())
        ok = ok and torch.allclose(a, b, rtol=tol, atol=tol)
    return err, ok


class OtherLoad:
    """How much CPU *other* processes used over an interval.

    /proc/stat gives the busy time of all CPUs; subtracting this process's own
    CPU time (os.times, threads and waited-for children such as the compiler
    Inductor runs) leaves what others took.  On a small machine that is the
    main source of garbage timings, so rows measured while others were busy
    are flagged.  Returns None where /proc/stat does not exist.
    """

    WARN_FRACTION = 0.2

    def __init__(self):
        try:
            self.tick = os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):
            self.tick = 100

    def snapshot(self):
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        total = sum(values[:8]) / self.tick         # user .. steal
        idle = (values[3] + values[4]) / self.tick  # idle + iowait
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        return total, idle, own

    @staticmethod
    def fraction(before, after):
        """Share of total CPU capacity used by other processes, in [0, 1]."""
        if before is None or after is None:
            return None
        total = after[0] - before[0]
        if total <= 0:
            return None
        busy = total - (after[1] - before[1])
        return min(1.0, max(0.0, (busy - (after[2] - before[2])) / total))

    def sample(self, seconds=0.5):
        before = self.snapshot()
        time.sleep(seconds)
        return self.fraction(before, self.snapshot())


class Progress:
    """Progress on stderr. On a terminal, one live bar that each stage (warm-up,
    compile, timing) rewrites in place. Anywhere else (a log file, a pipe) a bar
    cannot be rewritten, so stages print nothing and each finished row prints one
    line: a full run's log gets a line per row, not one per stage."""

    def __init__(self, total, width=28, stream=None):
        # sys.stderr looked up now, not at import: pytest's capture replaces it.
        self.stream = sys.stderr if stream is None else stream
        self.total, self.width = max(total, 1), width
        self.done = 0
        self.start = time.perf_counter()
        self.tty = self.stream.isatty()

    def _line(self, label):
        elapsed = time.perf_counter() - self.start
        count = f"{self.done:>{len(str(self.total))}}/{self.total}"
        if not self.tty:
            return f"[{count}] {elapsed:6.1f}s  {label}"
        filled = int(self.done / self.total * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return f"[{bar}] {count} {elapsed:6.1f}s  {label}"

    def show(self, label):
        """A stage within the current row: shown on a terminal only."""
        if self.tty:
            self.stream.write("\r" + self._line(label)[:150].ljust(150))
            self.stream.flush()

    def advance(self, label=""):
        """A row is finished."""
        self.done += 1
        if self.tty:
            self.show(label)
        else:
            self.stream.write(self._line(label) + "\n")
            self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()


@dataclass
class RunConfig:
    ops: list
    dtypes: list
    tokens: list
    device: torch.device
    threads: int
    directions: list
    compile: bool
    compile_filter: Callable  # (dtype, tokens) -> bool
    timer: object             # CpuTimer or CudaTimer: the op timings
    host_timer: object        # CpuTimer: dispatch overhead
    other_load: OtherLoad
    liger: dict | None = None  # op -> Liger-Kernel callable (load_liger), CUDA only
    traffic: bool = False      # the CUDA harness's bytes beside each row (bench/traffic.py)
    # Rows' model figures prepared before the timings (bench/warm.py), by (name, direction, dtype, tokens).
    prepared: dict = field(default_factory=dict)
    hidden: int | None = None  # --hidden: the last dim of the ops that take it (plan.row_hidden)
