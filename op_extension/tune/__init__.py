"""Several implementations of an op side by side, and a tuner that runs the
fastest correct one per call key (docs/tuning.md).

    with op_extension.tune.tuning():        # or OP_EXT_TUNE=1 in the environment
        model(x)                            # each new key: every implementation timed, the fastest correct one kept
    python -m op_extension.tune --report    # the A/B report of the tuning cache; --clear empties it

An op's implementations on a device (implementations(op, device)):
  kernel      the op's own kernel for the device (what runs with tuning off)
  <version>   kernels registered beside it under a version name (register())
  native      torch's own op in the inputs' dtype, where the op module names one
              (its NATIVE piece)
  composite   the eager composite the references hold (op_extension/_reference.py):
              ATen ops computing in float32 for 16-bit inputs, on the device
  liger       Liger-Kernel's kernel, on CUDA where liger_kernel is installed

A call key is the op, the inputs' dtype, each tensor's shape bucket (its rows
rounded up to a power of two, its last dimension as it is) and the arguments
that change which code runs (dim, approximate; not eps or alpha). The backward
op has keys of its own: a training step tunes the forward op and the backward
op, each for its key.

Tuning a key runs every implementation once on copies of the call's inputs and
compares its outputs with the reference at the op's tolerance (debug's
autocompare check): a wrong one is reported and never chosen. The correct ones
are timed as the benchmark times them (op_extension.bench.harness.measure:
interleaved rounds; the CPU timer or CUDA events), and the fastest is
dispatched for that key from then on. Tuning never happens inside a
torch.compile trace or a CUDA graph capture: those calls take the choice made
already, else the kernel; compiled code reaches the op through the dispatcher
at run time, so it uses every choice made before or after it was compiled.

The choices persist in a JSON file per device, torch version and op_extension
version under the tuning cache folder ($OP_EXT_TUNE_CACHE, else the tests'
cache folder rule: $OP_EXT_CACHE_DIR, $XDG_CACHE_HOME/op_extension or
~/.cache/op_extension, plus /tuning). A later process in tuning mode reads them
and times nothing again; a file that does not parse, or that names another
device or version, is ignored with a warning. With tuning off nothing of this
runs: the dispatch hook is op_extension.debug's, registered only while one of
its switches is on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import platform
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from .. import _reference, debug, op_defs
from .._fake import PROTOS

__all__ = ["Choice", "Implementation", "cache_file", "choices", "clear", "implementations", "register",
           "report", "tuning", "unregister"]

ENV_TUNE = "OP_EXT_TUNE"
ENV_CACHE = "OP_EXT_TUNE_CACHE"
ENV_BUDGET = "OP_EXT_TUNE_BUDGET_MS"
_FORMAT = 1


# ---------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One way to compute custom::<op>: run(*schema_args) returns what the op
    returns (a tensor, or a tuple for several outputs)."""

    name: str
    kind: str  # "kernel", "version", "native", "composite", "external"
    description: str
    run: Callable


# {op: {version name: (fn, device types)}}
_versions: dict[str, dict[str, tuple[Callable, frozenset[str]]]] = {}
_RESERVED = ("kernel", "native", "composite", "liger")


def register(op: str, name: str, fn: Callable, *, devices=("cpu", "cuda", "npu")) -> None:
    """Registers fn(*schema_args) as implementation `name` of custom::<op> on
    `devices`: a kernel version being rewritten, a Triton kernel, a library's.
    The tuner checks it against the reference like any other."""
    _check_op(op)
    if not re.fullmatch(r"[A-Za-z_][\w.-]*", name) or name in _RESERVED:
        raise ValueError(f"op_extension.tune: custom::{op}: {name!r} cannot name a version (a word; not one of "
                         f"{', '.join(_RESERVED)})")
    _versions.setdefault(op, {})[name] = (fn, frozenset(devices))
    _forget_choices(op)


def unregister(op: str, name: str) -> None:
    _check_op(op)
    if name not in _versions.get(op, {}):
        raise ValueError(f"op_extension.tune: custom::{op} has no version {name!r}")
    del _versions[op][name]
    _forget_choices(op)


def _check_op(op: str) -> None:
    if op not in PROTOS:
        raise ValueError(f"op_extension.tune: no op custom::{op} (ops: {', '.join(sorted(PROTOS))})")


def _device_keys(device: torch.device) -> torch._C.DispatchKeySet:
    key = {"cpu": torch._C.DispatchKey.CPU, "cuda": torch._C.DispatchKey.CUDA}.get(
        device.type, torch._C.DispatchKey.PrivateUse1)
    return torch._C.DispatchKeySet(key)


def _kernel(op: str, device: torch.device) -> Implementation:
    overload = getattr(torch.ops.custom, op).default
    keys = _device_keys(device)
    return Implementation("kernel", "kernel", f"op_extension's {device.type} kernel",
                          lambda *args: overload.redispatch(keys, *args))


def _composite(op: str) -> Implementation:
    overload = getattr(torch.ops.custom, op).default

    def run(*args):
        outs = _reference.run_reference(op, args)
        return outs if len(overload._schema.returns) > 1 else outs[0]

    return Implementation("composite", "composite", "the eager composite of the references (float32 for 16-bit)",
                          run)


def _native(op: str) -> Implementation | None:
    fn = op_defs.piece(PROTOS[op], "NATIVE")
    if fn is None:
        return None

    def run(*args):
        dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
        with torch.no_grad():
            return fn(*args, dtype=dtype)

    return Implementation("native", "native", "torch's own op, in the inputs' dtype", run)


def _liger(op: str, device: torch.device) -> Implementation | None:
    """Liger-Kernel's Triton kernel where its function computes what the op does."""
    if device.type != "cuda" or op not in _LIGER:
        return None
    try:
        fn = _LIGER[op]()
    except ImportError:
        return None
    return Implementation("liger", "external", "Liger-Kernel's Triton kernel", fn)


def _liger_rms_norm():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    def run(input, normalized_shape, weight=None, eps=None):
        if weight is None or len(normalized_shape) != 1:
            raise NotImplementedError("Liger's RMSNorm takes one normalized dim and a weight")
        eps = torch.finfo(input.dtype).eps if eps is None else eps
        return LigerRMSNormFunction.apply(input, weight, eps, 0.0, "llama")

    return run


def _liger_swiglu():
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    return lambda gate, up: LigerSiLUMulFunction.apply(gate, up)


_LIGER = {"rms_norm": _liger_rms_norm, "swiglu": _liger_swiglu}


def _version(op: str, name: str, device: torch.device) -> Implementation | None:
    fn, devices = _versions.get(op, {}).get(name, (None, ()))
    if device.type not in devices:
        return None
    return Implementation(name, "version", f"version {name!r} (op_extension.tune.register)", fn)


def implementations(op: str, device="cpu") -> list[Implementation]:
    """Every implementation of custom::<op> on `device`, the kernel first."""
    _check_op(op)
    device = torch.device(device)
    found = [_kernel(op, device)] + [_version(op, name, device) for name in _versions.get(op, {})]
    found += [_native(op), _composite(op), _liger(op, device)]
    return [impl for impl in found if impl is not None]


def _implementation(op: str, name: str, device: torch.device) -> Implementation | None:
    """The implementation `name` of custom::<op> on `device` alone (None where it is
    gone): a call dispatched to a choice builds only it, not every other one (Liger's
    import would be attempted again on every call where it is not installed)."""
    make = {"kernel": lambda: _kernel(op, device), "native": lambda: _native(op),
            "composite": lambda: _composite(op), "liger": lambda: _liger(op, device)}.get(name)
    return make() if make is not None else _version(op, name, device)


# ---------------------------------------------------------------------------
# Keys and choices
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Choice:
    """What tuning a key found: the chosen implementation, each correct one's
    median time (seconds), and why each other one was not a candidate."""

    chosen: str
    times_s: dict[str, float]
    rejected: dict[str, str] = dataclasses.field(default_factory=dict)

    def margin(self) -> float:
        """The runner-up's time over the chosen one's (inf with no runner-up)."""
        others = sorted(t for name, t in self.times_s.items() if name != self.chosen)
        best = self.times_s.get(self.chosen, 0.0)
        return others[0] / best if others and best > 0 else math.inf


def _bucket(shape) -> str:
    if len(shape) == 0:
        return "scalar"
    rows = math.prod(shape[:-1])
    return f"{1 << max(rows - 1, 0).bit_length()}x{shape[-1]}"


def call_key(op: str, args) -> str:
    """op|dtype|buckets|arguments (see the module docstring)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    dtype = str(tensors[0].dtype).removeprefix("torch.") if tensors else "-"
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(_bucket(a.shape))
        elif a is None:
            parts.append("-")
        elif isinstance(a, (str, bool, int)):
            parts.append(repr(a))
        elif isinstance(a, (list, tuple)):
            parts.append("x".join(str(int(v)) for v in a))
    return f"{op}|{dtype}|{','.join(parts)}"


_lock = threading.RLock()
# {cache file: {call key: Choice}}: a device's choices, read from its file once.
_tables: dict[Path, dict[str, Choice]] = {}
_local = threading.local()


def choices(device="cpu") -> dict[str, Choice]:
    """The choices in effect on `device`, by call key (those read from the cache included)."""
    return dict(_table(device)[1])


def _forget_choices(op: str) -> None:
    with _lock:
        for table in _tables.values():
            for key in [k for k in table if k.split("|", 1)[0] == op]:
                del table[key]


# ---------------------------------------------------------------------------
# The cache on disk
# ---------------------------------------------------------------------------


def default_cache_dir(environ=None) -> Path:
    """$OP_EXT_CACHE_DIR, else $XDG_CACHE_HOME/op_extension, else ~/.cache/op_extension
    (an empty variable counts as unset)."""
    environ = os.environ if environ is None else environ
    if environ.get("OP_EXT_CACHE_DIR"):
        return Path(environ["OP_EXT_CACHE_DIR"])
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "op_extension"
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    return home / ".cache" / "op_extension"


def device_name(device="cpu") -> str:
    """The device as the cache names it: the GPU's name, or the CPU's model and the kernels' ISA."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type != "cpu":
        get_name = getattr(getattr(torch, device.type, None), "get_device_name", None)
        return get_name() if get_name is not None else device.type
    from .. import _C

    return f"{_cpu_model()} ({_C.cpu_isa()})"


@functools.cache
def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


_package_version: str | None = None


def _versions_header(device) -> dict[str, str]:
    global _package_version
    if _package_version is None:
        from importlib import metadata

        try:
            _package_version = metadata.version("op_extension")
        except metadata.PackageNotFoundError:  # run from a checkout that was built in place only
            _package_version = "unknown"
    return {"device": device_name(device), "torch": torch.__version__, "op_extension": _package_version}


def cache_file(device="cpu") -> Path:
    """The tuning cache file of `device` under this torch and op_extension."""
    header = _versions_header(device)
    folder = Path(os.environ[ENV_CACHE]) if os.environ.get(ENV_CACHE) else default_cache_dir() / "tuning"
    slug = re.sub(r"[^\w.+-]+", "_", f"{header['device']}__torch-{header['torch']}__"
                                     f"op_extension-{header['op_extension']}")
    return folder / f"{slug}.json"


def _read(path: Path, header: dict[str, str]) -> dict[str, Choice]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"format {data.get('format') if isinstance(data, dict) else type(data).__name__!r}, "
                             f"expected {_FORMAT}")
        foreign = {k: data.get(k) for k in header if data.get(k) != header[k]}
        if foreign:
            raise ValueError("written for " + ", ".join(f"{k} {v!r}" for k, v in foreign.items())
                             + " (this process: " + ", ".join(f"{k} {header[k]!r}" for k in foreign) + ")")
        table = {}
        for key, entry in data["choices"].items():
            choice = Choice(str(entry["chosen"]), {str(k): float(v) for k, v in entry["times_s"].items()},
                            {str(k): str(v) for k, v in entry.get("rejected", {}).items()})
            if choice.chosen not in choice.times_s:
                raise ValueError(f"{key}: the chosen {choice.chosen!r} has no time")
            table[str(key)] = choice
        return table
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        warnings.warn(f"op_extension.tune: ignoring the tuning cache {path}: {e}", RuntimeWarning, stacklevel=2)
        return {}


def _write(path: Path, header: dict[str, str], table: dict[str, Choice]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": _FORMAT, **header,
            "choices": {k: dataclasses.asdict(c) for k, c in sorted(table.items())}}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)  # a reader sees the old file or the new one, never half of one


def _table(device="cpu") -> tuple[Path, dict[str, Choice]]:
    """The cache file of `device` and its choices, read on first use."""
    path = cache_file(device)
    with _lock:
        table = _tables.get(path)
        if table is None:
            table = _tables[path] = _read(path, _versions_header(device))
    return path, table


def clear(device="cpu") -> Path:
    """Empties the tuning cache of `device` (the file and the choices in effect)."""
    path, table = _table(device)
    with _lock:
        table.clear()
        path.unlink(missing_ok=True)
    return path


# ---------------------------------------------------------------------------
# Tuning a key
# ---------------------------------------------------------------------------


def _budget_s() -> float:
    value = os.environ.get(ENV_BUDGET, "")
    try:
        return max(float(value), 1.0) / 1e3 if value else 0.1
    except ValueError:
        raise ValueError(f"op_extension.tune: {ENV_BUDGET} must be a number of milliseconds, got {value!r}") from None


def _default_timer(fns: dict[str, Callable], device: torch.device) -> tuple[dict[str, float], dict[str, str]]:
    """The benchmark's timing: interleaved rounds, the CPU timer or CUDA events."""
    from ..bench import harness

    budget = _budget_s() * max(len(fns), 1)
    if device.type == "cuda":
        timer = harness.CudaTimer(min_run_time=budget)
    else:
        timer = harness.CpuTimer(threads=torch.get_num_threads(), min_run_time=budget)
    for fn in fns.values():
        harness.warm_up(fn, device)
    timings, errors = harness.measure(timer, fns)
    return {name: t.median_s for name, t in timings.items()}, errors


# fn(fns, device) -> ({name: seconds}, {name: error}); tests put a clock of their own here.
_timer: Callable = _default_timer


def _clone_args(args) -> list:
    return [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]


def _conform(out, like):
    """out with the strides of `like` (the op's fake kernel's outputs), which
    compiled graphs rely on: torch's own ops may lay an output out otherwise."""
    if isinstance(out, (tuple, list)):
        return tuple(_conform(o, m) for o, m in zip(out, like))
    if out.stride() == like.stride() or out.numel() <= 1:
        return out
    return torch.empty_strided(like.shape, like.stride(), dtype=out.dtype, device=out.device).copy_(out)


def _meta_outputs(op: str, args):
    meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    return getattr(torch.ops.custom, op).default.redispatch(debug._META_KEYS, *meta)


def tune_key(op: str, args, device: torch.device) -> Choice:
    """Times and checks every implementation of custom::<op> on these
    (schema-ordered, defaults filled) arguments; returns the choice."""
    overload = getattr(torch.ops.custom, op).default
    originals = _clone_args(args)
    expected = debug._reference_outputs(op, overload, _clone_args(originals), device)
    like = _meta_outputs(op, originals)
    candidates, rejected = {}, {}
    for impl in implementations(op, device):
        try:
            inputs = _clone_args(originals)
            out = _conform(impl.run(*inputs), like)
            problems = debug._mismatches(op, overload, out, expected)
            problems += debug._modified_inputs(op, overload, inputs, originals)
        except Exception as e:  # noqa: BLE001  (a failing implementation is reported, never chosen)
            problems = [f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"]
        if problems:
            rejected[impl.name] = "; ".join(problems)
            debug.log.info(f"tune custom::{op}: {impl.name} REJECTED: {rejected[impl.name]}")
        else:
            candidates[impl.name] = (lambda impl=impl, inputs=_clone_args(originals): impl.run(*inputs))
    times, errors = _timer(candidates, device) if candidates else ({}, {})
    rejected.update({name: f"timing failed: {error}" for name, error in errors.items()})
    if not times:
        raise RuntimeError(f"op_extension.tune: custom::{op}: no implementation ran correctly: {rejected}")
    chosen = min(times, key=times.get)
    return Choice(chosen, times, rejected)


def _in_trace() -> bool:
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def dispatch(name: str, op, below, args: tuple, kwargs: dict, full: list, device: torch.device):
    """debug's hook, tuning on: the call runs the implementation chosen for its key
    (tuning the key first where it has none and this is no trace)."""
    if getattr(_local, "busy", False):  # an implementation calling custom ops: their kernels
        return op.redispatch(below, *args, **kwargs)
    path, table = _table(device)
    key = call_key(name, full)
    choice = table.get(key)
    if choice is None and not _in_trace():
        _local.busy = True
        try:
            choice = tune_key(name, full, device)
        finally:
            _local.busy = False
        with _lock:
            table[key] = choice
            _write(path, _versions_header(device), table)
        debug.log.info(f"tune {key}: " + ", ".join(f"{n} {t * 1e6:.1f} us" for n, t in sorted(
            choice.times_s.items(), key=lambda item: item[1])) + f" -> {choice.chosen} ({choice.margin():.2f}x)")
    if choice is None or choice.chosen == "kernel":
        return op.redispatch(below, *args, **kwargs)
    impl = _implementation(name, choice.chosen, device)
    if impl is None:  # a version unregistered since: the kernel, until the key is tuned again
        return op.redispatch(below, *args, **kwargs)
    _local.busy = True
    try:
        return _conform(impl.run(*full), _meta_outputs(name, full))
    finally:
        _local.busy = False


@contextlib.contextmanager
def tuning(on: bool = True) -> Iterator[None]:
    """Tuning mode for the body of a with statement (OP_EXT_TUNE=1 for a whole process)."""
    with debug.settings(tune=on):
        yield


# ---------------------------------------------------------------------------
# The A/B report
# ---------------------------------------------------------------------------


def report(device="cpu") -> str:
    """Per op and key, every implementation's time, the chosen one and its margin."""
    path, table = _table(device)
    lines = [f"tuning cache: {path}"]
    if not table:
        return "\n".join(lines + ["(empty: run with OP_EXT_TUNE=1 or inside op_extension.tune.tuning())"])
    rows = [("key", "implementation", "time us", "")]
    for key, choice in sorted(table.items()):
        for name, t in sorted(choice.times_s.items(), key=lambda item: item[1]):
            mark = f"chosen, {choice.margin():.2f}x ahead" if name == choice.chosen else ""
            rows.append((key, name, f"{t * 1e6:.2f}", mark))
            key = ""
        for name, why in sorted(choice.rejected.items()):
            rows.append((key, name, "-", f"rejected: {why}"))
            key = ""
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += ["  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].rjust(widths[2]), r[3]]).rstrip()
              for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m op_extension.tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", action="store_true", help="print the A/B report of the tuning cache")
    parser.add_argument("--clear", action="store_true", help="empty the tuning cache")
    parser.add_argument("--device", default="cpu", help="the device whose cache (default: cpu)")
    args = parser.parse_args(argv)
    if not (args.report or args.clear):
        parser.error("say --report or --clear")
    if args.report:
        print(report(args.device))
    if args.clear:
        print(f"cleared {clear(args.device)}")
    return 0


debug._tuner = dispatch
