"""Tools to trust a kernel at run time: forced fallback, fallback on error,
autocompare, argument dumps and per-op statistics (docs/debugging.md).

Every switch is off by default. Environment variables are read once, when
op_extension is imported; configure() and the settings() context manager change
the same switches at run time:

    OP_EXT_FORCE_FALLBACK_OPS=rms_norm,softmax   configure(force_fallback="rms_norm,softmax")
    OP_EXT_FALLBACK_ON_ERROR=1                   configure(fallback_on_error=True)
    OP_EXT_AUTOCOMPARE=1 (or ops / regexes)      configure(autocompare=True)
    OP_EXT_DUMP_OP_ARGS=0|1|2|3                  configure(dump=2)
    OP_EXT_STATS=1                               configure(stats=True); stats(); reset_stats()
    OP_EXT_TUNE=1                                configure(tune=True) (op_extension.tune.tuning())

Where the hooks sit: while any switch is on, a Python kernel is registered for
every custom op at the dispatcher's BackendSelect key, which every call of a
real tensor passes on its way from the Autograd key to the device kernel (CPU,
CUDA or the npu's PrivateUse1). So one mechanism sees the eager fast path,
torch.ops.custom calls, autograd's backward calls and the graphs torch.compile
runs, on every device. When every switch is off the kernels are deregistered:
the dispatcher's table is then exactly what it is without this module, so the
switches cost nothing per call, not even a flag test.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator

import torch
from torch._C import DispatchKey, DispatchKeySet

from . import _reference
from ._fake import PROTOS

__all__ = ["OPS", "Settings", "configure", "current", "format_stats", "hooks_installed", "power", "reset_stats",
           "settings", "stats"]

# Every op and backward op of torch.ops.custom, from the prototypes the library
# holds as described (_built.BUILT).
OPS: tuple[str, ...] = tuple(sorted(PROTOS))

ENV_FORCE_FALLBACK = "OP_EXT_FORCE_FALLBACK_OPS"
ENV_FALLBACK_ON_ERROR = "OP_EXT_FALLBACK_ON_ERROR"
ENV_AUTOCOMPARE = "OP_EXT_AUTOCOMPARE"
ENV_DUMP = "OP_EXT_DUMP_OP_ARGS"
ENV_STATS = "OP_EXT_STATS"
ENV_TUNE = "OP_EXT_TUNE"


# ---------------------------------------------------------------------------
# Output: one logger, printed to the current sys.stderr
# ---------------------------------------------------------------------------


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the call (pytest's capsys
    and redirect_stderr replace it after this module was imported)."""

    def __init__(self):
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; the property decides
        pass


log = logging.getLogger("op_extension.debug")
log.setLevel(logging.INFO)
_handler = _StderrHandler()
_handler.setFormatter(logging.Formatter("[op_extension.debug] %(message)s"))
log.addHandler(_handler)
# The lines are this module's output, printed once: not again by a root handler.
log.propagate = False


# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    """The switches in effect. Op sets hold op names of torch.ops.custom."""

    force_fallback: frozenset[str] = frozenset()
    fallback_on_error: bool = False
    autocompare: frozenset[str] = frozenset()
    dump: int = 0
    stats: bool = False
    tune: bool = False

    def any_on(self) -> bool:
        return bool(self.force_fallback or self.fallback_on_error or self.autocompare or self.dump or self.stats
                    or self.tune)


_settings = Settings()
_KEEP = object()  # configure()'s "leave this switch as it is"
_TRUE_WORDS = {"1", "true", "yes", "on", "all"}
_FALSE_WORDS = {"", "0", "false", "no", "off", "none"}


def _op_set(value, switch: str) -> frozenset[str]:
    """Op names from True/False, a comma-separated string or an iterable of
    names; each name is a regular expression matched against the whole op name
    ('rms_norm', '.*_backward', '.*'), with or without the 'custom::' prefix."""
    if value is None or value is False:
        return frozenset()
    if value is True:
        return frozenset(OPS)
    if isinstance(value, str):
        if value.strip().lower() in _TRUE_WORDS:
            return frozenset(OPS)
        if value.strip().lower() in _FALSE_WORDS:
            return frozenset()
        items = value.split(",")
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        raise TypeError(f"op_extension.debug: {switch} takes a bool, op names or regexes, got {type(value).__name__}")
    selected = set()
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"op_extension.debug: {switch}: op names must be str, got {type(item).__name__}")
        pattern = item.strip().removeprefix("custom::")
        if not pattern:
            continue
        try:
            matched = {op for op in OPS if re.fullmatch(pattern, op)}
        except re.error as e:
            raise ValueError(f"op_extension.debug: {switch}: '{item}' is not a valid regular expression ({e})") from None
        if not matched:  # a typo would otherwise switch nothing on, silently
            raise ValueError(f"op_extension.debug: {switch}: '{item}' matches no op of torch.ops.custom "
                             f"(ops: {', '.join(OPS)})")
        selected |= matched
    return frozenset(selected)


def _flag(value, switch: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise ValueError(f"op_extension.debug: {switch} must be 0 or 1 (or a bool), got {value!r}")


def _dump_level(value, switch: str) -> int:
    if isinstance(value, bool):
        return int(value)
    try:
        level = int(value)
    except (TypeError, ValueError):
        level = -1
    if level not in (0, 1, 2, 3):
        raise ValueError(f"op_extension.debug: {switch} must be 0 (off), 1 (op and kernel), "
                         f"2 (+ arguments) or 3 (+ values), got {value!r}")
    return level


def current() -> Settings:
    """The settings in effect."""
    return _settings


def configure(*, force_fallback=_KEEP, fallback_on_error=_KEEP, autocompare=_KEEP, dump=_KEEP,
              stats=_KEEP, tune=_KEEP) -> Settings:
    """Changes the given switches (the others stay as they are); returns the
    settings in effect before, which configure(**dataclasses.asdict(old)) restores.

    force_fallback: ops (names or regexes, comma-separated or a list; True: all)
        that run the reference instead of the device kernel.
    fallback_on_error: a device kernel that fails at run time (not on bad input)
        warns once and runs the reference.
    autocompare: ops whose every call also runs the reference and logs the comparison.
    dump: 0 off, 1 op and kernel, 2 also every argument, 3 also tensor values.
    stats: count calls and time them per op and device (stats()).
    tune: run each call key's fastest correct implementation, tuning new keys
        (op_extension.tune).
    """
    global _settings
    old = _settings
    changes = {}
    if force_fallback is not _KEEP:
        changes["force_fallback"] = _op_set(force_fallback, "force_fallback")
    if fallback_on_error is not _KEEP:
        changes["fallback_on_error"] = _flag(fallback_on_error, "fallback_on_error")
    if autocompare is not _KEEP:
        changes["autocompare"] = _op_set(autocompare, "autocompare")
    if dump is not _KEEP:
        changes["dump"] = _dump_level(dump, "dump")
    if stats is not _KEEP:
        changes["stats"] = _flag(stats, "stats")
    if tune is not _KEEP:
        changes["tune"] = _flag(tune, "tune")
    _settings = dataclasses.replace(old, **changes)
    _sync_hooks()
    return old


@contextlib.contextmanager
def settings(**switches) -> Iterator[Settings]:
    """configure(**switches) for the body of a with statement, then the settings before."""
    global _settings
    old = configure(**switches)
    try:
        yield _settings
    finally:
        _settings = old
        _sync_hooks()


def _configure_from_env() -> None:
    """Reads the OP_EXT_* switches (called once, when op_extension is imported)."""
    env = os.environ
    switches = {}
    if env.get(ENV_FORCE_FALLBACK):
        switches["force_fallback"] = _op_set(env[ENV_FORCE_FALLBACK], ENV_FORCE_FALLBACK)
    if env.get(ENV_FALLBACK_ON_ERROR):
        switches["fallback_on_error"] = _flag(env[ENV_FALLBACK_ON_ERROR], ENV_FALLBACK_ON_ERROR)
    if env.get(ENV_AUTOCOMPARE):
        switches["autocompare"] = _op_set(env[ENV_AUTOCOMPARE], ENV_AUTOCOMPARE)
    if env.get(ENV_DUMP):
        switches["dump"] = _dump_level(env[ENV_DUMP], ENV_DUMP)
    if env.get(ENV_STATS):
        switches["stats"] = _flag(env[ENV_STATS], ENV_STATS)
    if env.get(ENV_TUNE):
        switches["tune"] = _flag(env[ENV_TUNE], ENV_TUNE)
    if switches:
        configure(**switches)


# ---------------------------------------------------------------------------
# The hooks: a BackendSelect kernel per op, registered only while a switch is on
# ---------------------------------------------------------------------------

_library: torch.library.Library | None = None
# Test-only faults (see _plant_wrong_kernel and friends): {op: (kind, options)}.
_plants: dict[str, tuple[str, dict]] = {}
# op_extension.tune's dispatch, which it puts here when it is imported (it
# imports this module): the call's implementation while the tune switch is on.
_tuner = None


def _sync_hooks() -> None:
    global _library
    wanted = _settings.any_on() or bool(_plants)
    if wanted and _library is None:
        library = torch.library.Library("custom", "IMPL")
        for name in OPS:
            library.impl(name, _make_kernel(name), "BackendSelect", with_keyset=True)
        _library = library
    elif not wanted and _library is not None:
        _library._destroy()  # the dispatcher's table is as before: nothing left to test per call
        _library = None


def hooks_installed() -> bool:
    """Whether the debug kernels are registered (some switch is on)."""
    return _library is not None


def _make_kernel(name: str):
    op = getattr(torch.ops.custom, name).default

    def kernel(keyset, *args, **kwargs):
        return _debug_call(name, op, keyset, args, kwargs)

    kernel.__name__ = f"debug_{name}"
    return kernel


_CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_META_KEYS = DispatchKeySet(DispatchKey.Meta)


def _schema_args(op, args: tuple, kwargs: dict) -> list:
    """Every argument in schema order, defaults filled in (the dispatcher leaves
    out trailing arguments that equal their default)."""
    full = list(args)
    for arg in op._schema.arguments[len(args):]:
        full.append(kwargs[arg.name] if arg.name in kwargs else arg.default_value)
    return full


def _first_tensor(values) -> torch.Tensor | None:
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


def _debug_call(name: str, op, keyset, args: tuple, kwargs: dict):
    below = keyset.remove(DispatchKey.BackendSelect)
    first = _first_tensor(args)
    if first is None or first.device.type == "meta":  # shapes only: nothing to check or time
        return op.redispatch(below, *args, **kwargs)
    s = _settings
    device = first.device
    full = _schema_args(op, args, kwargs)
    forced = name in s.force_fallback
    # What this function does with the tensors must not be recorded by autograd
    # (the Autograd kernel above records the op itself).
    with torch._C._AutoDispatchBelowADInplaceOrView():
        if s.dump:
            _dump(name, op, full, device, s.dump, forced)
        compare = name in s.autocompare and not forced
        originals = _copies(full) if compare else None
        start = _start_timer(device) if s.stats else None
        if forced:
            error = _input_error(name, op, args, kwargs)
            if error is not None:
                raise error
            _log_once(("forced", name), f"custom::{name}: forced fallback: running the reference "
                                        f"({_reference_kind(device)}) instead of the {device.type} kernel")
            out = _reference_outputs(name, op, full, device)
        else:
            try:
                if s.tune and _tuner is not None:
                    out = _tuner(name, op, below, args, kwargs, full, device)
                else:
                    out = _device_kernel(name, op, below, args, kwargs)
            except Exception as e:
                if not s.fallback_on_error or _input_error(name, op, args, kwargs) is not None:
                    raise  # bad input keeps the op's own error
                _warn_once(name, device, e)
                out = _reference_outputs(name, op, full, device)
                compare = False  # the reference against itself says nothing
        if start is not None:
            _record_time(name, device, start)
        if compare:
            _autocompare(name, op, full, originals, out, device)
    return out


def _device_kernel(name: str, op, below, args: tuple, kwargs: dict):
    plant = _plants.get(name)
    out = op.redispatch(below, *args, **kwargs)
    if plant is not None:
        out = _apply_plant(name, plant, out, args)
    return out


def _input_error(name: str, op, args: tuple, kwargs: dict) -> Exception | None:
    """The error the op's input checks raise for these arguments, or None.

    The fake kernel (op_extension/_fake.py: the rules and messages of the C++
    checks) runs on meta copies -- same shapes, strides and dtypes, no data, no
    kernel -- after the one rule meta copies cannot show, that all tensors
    share a device. (FakeTensorMode would keep the devices but costs ~5 ms a call.)"""
    values = list(args) + list(kwargs.values())
    names = [a.name for a in op._schema.arguments[:len(args)]] + list(kwargs)
    tensors = [(n, v) for n, v in zip(names, values) if isinstance(v, torch.Tensor)]
    ref_name, ref = tensors[0]
    for arg_name, t in tensors[1:]:
        if t.device != ref.device:
            return RuntimeError(f"custom::{name}: {arg_name} is on {t.device} but {ref_name} is on {ref.device}; "
                                "all tensors must be on the same device")
    meta_args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    meta_kwargs = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    try:
        op.redispatch(_META_KEYS, *meta_args, **meta_kwargs)
    except Exception as e:  # noqa: BLE001  (any check failure is the answer)
        return e
    return None


_logged: set = set()
_warned: set = set()


def _log_once(key, message: str) -> None:
    if key not in _logged:
        _logged.add(key)
        log.info(message)


def _warn_once(name: str, device: torch.device, error: Exception) -> None:
    if name in _warned:
        return
    _warned.add(name)
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    warnings.warn(f"custom::{name}: the {device.type} kernel failed ({type(error).__name__}: {reason}); "
                  f"running the reference ({_reference_kind(device)}) instead "
                  f"(OP_EXT_FALLBACK_ON_ERROR; warned once per op)", RuntimeWarning, stacklevel=_caller_level())


_LIBRARY_DIRS = (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.abspath(torch.__file__)))


def _caller_level() -> int:
    """warnings.warn's stacklevel of the first frame outside op_extension and
    torch: the user's line that called the op (the path there varies: the fast
    path, torch.ops, autograd's backward, a compiled graph)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame, level = frame.f_back, level + 1
    return level


# ---------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------


def _reference_kind(device: torch.device) -> str:
    return "ATen composite" if device.type == "cpu" else "CPU kernel"


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _reference_outputs(name: str, op, full: list, device: torch.device):
    """The reference's outputs, shaped as the op returns them: on the CPU the
    ATen composite form (op_extension/_reference.py); on another device the CPU
    kernel on CPU copies of the inputs, its outputs copied back."""
    with torch.profiler.record_function(f"custom::{name} (reference)"):
        if device.type == "cpu":
            outs = _reference.run_reference(name, full)
        else:
            cpu_args = [a.detach().cpu() if isinstance(a, torch.Tensor) else a for a in full]
            outs = tuple(o.to(device) for o in _as_tuple(op.redispatch(_CPU_KEYS, *cpu_args)))
    return outs if len(op._schema.returns) > 1 else outs[0]


def _copies(full: list) -> list:
    return [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in full]


# ---------------------------------------------------------------------------
# Autocompare
# ---------------------------------------------------------------------------


def _describe(t: torch.Tensor) -> str:
    return f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')} {t.device}"


def _tolerance_key(name: str, output_name: str) -> tuple[str, str]:
    base, kind = (name.removesuffix("_backward"), "backward") if name.endswith("_backward") else (name, "forward")
    # The norms' weight and bias gradients are sums over all rows.
    if kind == "backward" and output_name in ("grad_weight", "grad_bias"):
        return "row_sum", "backward"
    return base, kind


def _coords(flat: int, shape) -> tuple[int, ...]:
    coords = []
    for size in reversed(list(shape)):
        coords.append(flat % size)
        flat //= size
    return tuple(reversed(coords))


def _difference(actual: torch.Tensor, expected: torch.Tensor):
    """(abs error, rel error) in float64, NaN in both counted as equal, NaN in one as infinitely far."""
    a = actual.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    both_nan = a.isnan() & e.isnan()
    diff = (a - e).abs()
    diff = torch.where(both_nan, torch.zeros_like(diff), diff)
    diff = torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)
    rel = diff / e.abs()
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    return diff, rel, e


def _compare_output(name: str, output_name: str, actual: torch.Tensor, want: torch.Tensor) -> tuple[bool, str]:
    """(close, what autocompare says of it) for one output of custom::<name>
    against the reference's, at the op's tolerance."""
    if actual.shape != want.shape:
        return False, f"MISMATCH: shape {list(actual.shape)}, reference {list(want.shape)}"
    if actual.numel() == 0:
        return True, "allclose (empty)"
    tol = _reference.tolerance(actual.dtype, *_tolerance_key(name, output_name)) \
        if actual.dtype in _reference.TOLERANCES else {"atol": 0.0, "rtol": 0.0}
    diff, rel, e = _difference(actual, want)
    bad = diff > tol["atol"] + tol["rtol"] * e.abs()
    abs_at = int(diff.reshape(-1).argmax())
    max_abs = float(diff.reshape(-1)[abs_at])
    if not bool(bad.any()):
        return True, f"allclose (max abs err {max_abs:.3g}; atol {tol['atol']:g}, rtol {tol['rtol']:g})"
    rel_at = int(rel.reshape(-1).argmax())
    return False, (f"MISMATCH in {int(bad.sum())} of {actual.numel()} elements: "
                   f"max abs err {max_abs:.3g} at index {_coords(abs_at, actual.shape)}, "
                   f"max rel err {float(rel.reshape(-1)[rel_at]):.3g} at index {_coords(rel_at, actual.shape)} "
                   f"(atol {tol['atol']:g}, rtol {tol['rtol']:g})")


def _outputs_compared(name: str, op, out, expected) -> list[tuple[str, bool, str]]:
    """[(output name and description, close, what is said of it)] per output."""
    returns = op._schema.returns
    found = []
    for i, (actual, want) in enumerate(zip(_as_tuple(out), _as_tuple(expected))):
        output_name = returns[i].name or "output"
        close, said = _compare_output(name, output_name, actual, want)
        found.append((f"{output_name} {_describe(actual)}", close, said))
    return found


def _mismatches(name: str, op, out, expected) -> list[str]:
    """How the outputs of custom::<name> differ from the reference's beyond the
    op's tolerance (empty: all close): the tuner rejects an implementation with any."""
    return [f"{what}: {said}" for what, close, said in _outputs_compared(name, op, out, expected) if not close]


def _modified_inputs(name: str, op, now: list, before: list) -> list[str]:
    """Each input of custom::<name> that a call changed (now vs a copy from before it)."""
    found = []
    schema_args = op._schema.arguments
    for i, (value, copy) in enumerate(zip(now, before)):
        if not isinstance(value, torch.Tensor) or value.numel() == 0:
            continue
        diff, _, _ = _difference(value, copy)
        if bool((diff != 0).any()):
            at = int(diff.reshape(-1).argmax())
            found.append(f"the op MODIFIED its input '{schema_args[i].name}' {_describe(value)}: "
                         f"{int((diff != 0).sum())} elements changed, max abs change "
                         f"{float(diff.reshape(-1)[at]):.3g} at index {_coords(at, value.shape)}")
    return found


def _autocompare(name: str, op, full: list, originals: list, out, device: torch.device) -> None:
    inputs = ", ".join(_describe(a) for a in full if isinstance(a, torch.Tensor))
    expected = _reference_outputs(name, op, originals, device)
    for what, _, said in _outputs_compared(name, op, out, expected):
        log.info(f"autocompare custom::{name}({inputs}) {what}: {said}")
    for line in _modified_inputs(name, op, full, originals):
        log.info(f"autocompare custom::{name}: {line}")


# ---------------------------------------------------------------------------
# Dumps
# ---------------------------------------------------------------------------


def _kernel_description(device: torch.device, forced: bool) -> str:
    if forced:
        return f"reference ({_reference_kind(device)}, forced fallback)"
    if device.type == "cpu":
        from . import _C

        return f"cpu kernel ({_C.cpu_isa()})"
    if device.type == "cuda":
        return f"cuda kernel ({torch.cuda.get_device_name(device)})"
    module = getattr(torch, device.type, None)
    get_name = getattr(module, "get_device_name", None)
    if device.type == "npu":  # torch_npu (or the simulated npu device) names the Ascend SoC
        soc = get_name() if get_name is not None else "SoC unknown"
        return f"npu kernel via aclnn ({soc})"
    return f"{device.type} kernel"


def _dump(name: str, op, full: list, device: torch.device, level: int, forced: bool) -> None:
    lines = [f"custom::{name} -> {_kernel_description(device, forced)}"]
    if level >= 2:
        for arg, value in zip(op._schema.arguments, full):
            if isinstance(value, torch.Tensor):
                lines.append(f"    {arg.name}: Tensor shape={list(value.shape)} stride={list(value.stride())} "
                             f"dtype={str(value.dtype).removeprefix('torch.')} device={value.device} "
                             f"storage_offset={value.storage_offset()}")
                if level >= 3:
                    values = repr(value.detach().cpu())  # summarised as torch prints it
                    lines.extend(f"        {line}" for line in values.splitlines())
            else:
                lines.append(f"    {arg.name}: {value!r}")
    log.info("\n".join(lines))


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------

# The latest calls' times kept per op and device, for the percentiles.
PERCENTILE_WINDOW = 65536


@dataclasses.dataclass
class _OpStats:
    calls: int = 0
    total_ns: int = 0
    recent_ns: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=PERCENTILE_WINDOW))
    peak_bytes: int | None = None  # CUDA: the most memory one call allocated above what was allocated before it


# {(op, device type): _OpStats}
_stats: dict[tuple[str, str], _OpStats] = {}
_stats_lock = threading.Lock()


def _synchronize(device: torch.device) -> None:
    # Device kernels run asynchronously: wait for them so that the time is the kernel's.
    if device.type == "cpu":
        return
    module = getattr(torch, device.type, None)
    sync = getattr(module, "synchronize", None)
    if sync is not None:
        sync()


@dataclasses.dataclass
class _Timer:
    start_ns: int
    allocated: int | None  # CUDA: memory allocated when the call began


def _start_timer(device: torch.device) -> _Timer:
    _synchronize(device)
    allocated = None
    if device.type == "cuda":
        # The peak since here is the call's (this resets the caching
        # allocator's peak statistics that torch.cuda.max_memory_allocated reports).
        allocated = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        _power.start(device)
    return _Timer(time.perf_counter_ns(), allocated)


def _record_time(name: str, device: torch.device, timer: _Timer) -> None:
    _synchronize(device)
    elapsed = time.perf_counter_ns() - timer.start_ns
    peak = torch.cuda.max_memory_allocated(device) - timer.allocated if timer.allocated is not None else None
    with _stats_lock:  # autograd runs a device's backward ops on a thread of its own
        entry = _stats.setdefault((name, device.type), _OpStats())
        entry.calls += 1
        entry.total_ns += elapsed
        entry.recent_ns.append(elapsed)
        if peak is not None:
            entry.peak_bytes = max(entry.peak_bytes or 0, peak)


def _percentile(sorted_ns: list[int], q: float) -> float:
    """The q-th percentile (0..100), linearly interpolated, in ms."""
    if len(sorted_ns) == 1:
        return sorted_ns[0] / 1e6
    pos = (len(sorted_ns) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_ns) - 1)
    return (sorted_ns[lo] + (sorted_ns[hi] - sorted_ns[lo]) * (pos - lo)) / 1e6


def stats() -> dict[str, dict[str, dict[str, float]]]:
    """{op: {device type: {"calls", "total_ms", "mean_ms", "p50_ms", "p90_ms",
    "p99_ms", "peak_alloc_bytes" (CUDA only)}}} since the last reset_stats(),
    for the calls made while stats were on. The time is the kernel's (or the
    reference's, where it ran), device work waited for; the percentiles are over
    the latest PERCENTILE_WINDOW calls."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    with _stats_lock:
        items = sorted((k, (v.calls, v.total_ns, sorted(v.recent_ns), v.peak_bytes)) for k, v in _stats.items())
    for (name, device), (calls, total_ns, recent, peak) in items:
        entry = {"calls": calls, "total_ms": total_ns / 1e6, "mean_ms": total_ns / 1e6 / calls,
                 "p50_ms": _percentile(recent, 50), "p90_ms": _percentile(recent, 90),
                 "p99_ms": _percentile(recent, 99)}
        if peak is not None:
            entry["peak_alloc_bytes"] = peak
        out.setdefault(name, {})[device] = entry
    return out


def power() -> dict[str, dict[str, float]]:
    """{device: {"mean_w", "max_w", "samples"}}: the board power NVML reported,
    sampled every POWER_PERIOD_S while stats were on and CUDA ops ran (empty
    without a GPU or without the nvidia-ml-py package)."""
    return _power.summary()


def reset_stats() -> None:
    with _stats_lock:
        _stats.clear()
    _power.reset()


def format_stats() -> str:
    """stats() as a table, one row per op and device; power() under it where sampled."""
    header = ("op", "device", "calls", "total ms", "mean ms", "p50 ms", "p90 ms", "p99 ms", "peak alloc")
    rows = [header]
    for name, devices in stats().items():
        for device, s in devices.items():
            peak = s.get("peak_alloc_bytes")
            rows.append((f"custom::{name}", device, str(s["calls"]), f"{s['total_ms']:.3f}", f"{s['mean_ms']:.4f}",
                         f"{s['p50_ms']:.4f}", f"{s['p90_ms']:.4f}", f"{s['p99_ms']:.4f}",
                         "-" if peak is None else f"{peak / 2**20:.1f} MiB"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    for device, p in power().items():
        lines.append(f"power {device}: mean {p['mean_w']:.1f} W, max {p['max_w']:.1f} W ({p['samples']} samples)")
    return "\n".join(lines)


POWER_PERIOD_S = 0.05


class _PowerSampler:
    """Samples a GPU's board power on a thread while stats are on. `reader(device)`
    gives a function returning watts (None where power cannot be read); tests
    put one of their own in place of NVML's."""

    def __init__(self, reader):
        self.reader = reader
        self.lock = threading.Lock()
        self.samples: dict[str, list[float]] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.stop_event = threading.Event()

    def start(self, device: torch.device) -> None:
        key = str(device)
        if key in self.threads:
            return
        read = self.reader(device)
        if read is None:
            self.threads[key] = None  # no power to read here: do not ask again
            return
        thread = threading.Thread(target=self._run, args=(key, read), name=f"op_extension power {key}", daemon=True)
        self.threads[key] = thread
        thread.start()

    def _run(self, key: str, read) -> None:
        while not self.stop_event.is_set():
            if _settings.stats:
                watts = read()
                if watts is not None:
                    with self.lock:
                        self.samples.setdefault(key, []).append(float(watts))
            self.stop_event.wait(POWER_PERIOD_S)

    def summary(self) -> dict[str, dict[str, float]]:
        with self.lock:
            return {k: {"mean_w": sum(v) / len(v), "max_w": max(v), "samples": len(v)}
                    for k, v in sorted(self.samples.items()) if v}

    def reset(self) -> None:
        with self.lock:
            self.samples.clear()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads.values():
            if thread is not None:
                thread.join()
        self.threads.clear()
        self.stop_event.clear()


def _nvml_reader(device: torch.device):
    """NVML's power reading of a CUDA device, or None (no nvidia-ml-py, no GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetPowerUsage(handle)  # fails here where the board does not report power
    except Exception:  # noqa: BLE001  (any failure: power is not reported)
        return None
    return lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3  # milliwatts


_power = _PowerSampler(_nvml_reader)


# ---------------------------------------------------------------------------
# Test-only faults. They sit where the device kernel is called, so every
# switch sees them as it would see a faulty kernel; nothing in the library
# calls them. Each installs the hooks while planted.
# ---------------------------------------------------------------------------


def _plant_wrong_kernel(op: str, amount: float = 1.0, index: int = 0) -> None:
    """TEST ONLY: custom::<op>'s device kernel adds `amount` to element `index`
    (row-major) of its first output."""
    _plant(op, "wrong", amount=amount, index=index)


def _plant_failing_kernel(op: str) -> None:
    """TEST ONLY: custom::<op>'s device kernel checks its inputs, then fails
    with a RuntimeError, as a kernel launch or an aclnn entry failing does."""
    _plant(op, "fail")


def _plant_input_write(op: str, amount: float = 1.0) -> None:
    """TEST ONLY: custom::<op>'s device kernel adds `amount` to the first element of its first input."""
    _plant(op, "write_input", amount=amount)


def _remove_plants() -> None:
    _plants.clear()
    _sync_hooks()


def _reset_for_tests() -> None:
    """Test helper: every switch off, no plant, no stats, and the once-per-op
    messages not yet given."""
    configure(force_fallback=False, fallback_on_error=False, autocompare=False, dump=0, stats=False)
    _remove_plants()
    reset_stats()
    _logged.clear()
    _warned.clear()


def _plant(op: str, kind: str, **options) -> None:
    if op not in OPS:
        raise ValueError(f"op_extension.debug: no op custom::{op} (ops: {', '.join(OPS)})")
    _plants[op] = (kind, options)
    _sync_hooks()


def _apply_plant(name: str, plant: tuple[str, dict], out, args: tuple):
    kind, options = plant
    if kind == "fail":
        raise RuntimeError(f"custom::{name}: kernel launch failed (planted by op_extension.debug._plant_failing_kernel)")
    if kind == "write_input":
        target = args[0]
        host = target.detach().cpu().clone()
        host[(0,) * host.dim()] += options["amount"]
        target.detach().copy_(host)
        return out
    outs = list(_as_tuple(out))
    wrong = outs[0].detach().cpu().clone()
    wrong[_coords(options["index"], wrong.shape)] += options["amount"]
    outs[0] = wrong.to(outs[0].device)
    return tuple(outs) if isinstance(out, tuple) else outs[0]


_configure_from_env()
