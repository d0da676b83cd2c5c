"""The op table (every op, direction, dtype and token count: ours against the
native op, the eager composite and its torch.compile, with the copy_ baseline)
and the dispatch-overhead section. The ops and their inputs come from the plan
(their BENCH); nothing here names one."""

from __future__ import annotations

import gc
import sys
import time

import torch

from ..bench_spec import randn
from .doubt import ROW_TRIES, CopyBaseline, section_doubt, time_row, until_quiet, with_doubt
from .harness import (Progress, RunConfig, check_close, compiled_composite, copy_bandwidth, error_text, make_step,
                      measure, sync, warm_up, with_grad)
from .plan import BASELINES, DTYPE_SHORT, PLAN, bytes_moved, formula_text, make_setup, reference_impl, row_hidden
from .traffic import row_models


def load_liger(device, benches=None):
    """The optional Liger-Kernel baseline: ({op: callable on the op's benchmark
    inputs}, None) for the ops whose BENCH names a Liger op that the installed
    release has, or ({}, why there is none). Liger's kernels are Triton, for
    CUDA only."""
    if device.type != "cuda":
        return {}, f"Liger-Kernel runs on CUDA only, not {device.type}"
    try:
        import liger_kernel  # noqa: F401
    except Exception as e:  # not installed, or broken against this torch/triton
        return {}, f"import liger_kernel failed ({error_text(e)})"
    impls, errors = {}, []
    for name, bench in (PLAN.benches if benches is None else benches).items():
        if bench.liger is None:
            continue
        try:
            impls[name] = bench.liger()
        except ImportError:  # an op of newer releases only
            pass
        except Exception as e:  # broken against this torch/triton
            errors.append(error_text(e))
    if not impls and errors:
        return {}, f"import liger_kernel failed ({errors[0]})"
    return impls, None


def row_setup(ops, name, direction, dtype, tokens, device, hidden=None):
    """(the row's OpSetup, the output gradients of its backward or None): the
    tensors every implementation of the row runs on (and the compile cache's
    workers compile on: bench/warm.py)."""
    setup = make_setup(ops, name, tokens, dtype, device, hidden)
    if direction != "fwd+bwd":
        return setup, None
    setup = with_grad(setup)
    return setup, [randn(shape, dtype, device) for shape in setup.output_shapes or [setup.shape] * setup.num_outputs]


def bench_cell(ops, name, direction, dtype, tokens, cfg: RunConfig, copy: CopyBaseline,
               progress: Progress):
    """Time ours / native / composite / compiled for one table row."""
    setup, grads = row_setup(ops, name, direction, dtype, tokens, cfg.device, row_hidden(name, cfg.hidden))

    elem = torch.empty((), dtype=dtype).element_size()
    nbytes = bytes_moved(name, direction, setup.numel, setup.weight_numel, elem)
    label = f"{name} {direction} {DTYPE_SHORT[dtype]} T={tokens}"
    row = {
        "op": name, "direction": direction, "dtype": str(dtype).replace("torch.", ""),
        "tokens": tokens, "shape": list(setup.shape), "bytes": nbytes,
        "bytes_formula": formula_text(name, direction), "impls": {}, "errors": {},
    }

    impls = dict(setup.impls)
    if cfg.compile and cfg.compile_filter(dtype, tokens):
        impls["compiled"] = compiled_composite(name, setup.impls["composite"])
    if cfg.liger and name in cfg.liger:
        impls["liger"] = cfg.liger[name]

    if direction == "fwd":
        # Sanity check: a fast wrong answer is not a result.
        ref = reference_impl(setup)
        try:
            err, ok = check_close(impls["ours"](*setup.inputs),
                                  impls[ref](*setup.inputs), dtype)
            row[f"max_abs_err_vs_{ref}"] = err
            if not ok:
                row["errors"]["check"] = f"ours differs from {ref} (max abs err {err:.3g})"
        except Exception as e:  # reported; the timings still run
            row["errors"]["check"] = error_text(e)

    # Warm every implementation up (and compile) before any timing starts.
    steps = {}
    for impl, fn in impls.items():
        progress.show(f"{label} [{'compile' if impl == 'compiled' else 'warm-up'} {impl}]")
        step = make_step(fn, setup, direction, grads)
        try:
            if impl == "compiled":
                # The first call traces and compiles the forward graph (and the
                # backward graph at the first backward): out of the timed region.
                t0 = time.perf_counter()
                step()
                sync(cfg.device)
                row["compile_s"] = time.perf_counter() - t0
            warm_up(step, cfg.device)
            steps[impl] = step
        except Exception as e:
            row["errors"][impl] = error_text(e)

    progress.show(f"{label} [timing {', '.join(steps)}]")
    fig, errors, others, attempts, doubt = time_row(
        lambda: measure(cfg.timer, steps), nbytes, copy, cfg.other_load)
    row["errors"].update(errors)
    row.update(fig)
    row.update(copy_gbps=copy.gbps, copy_others_cpu_busy=copy.others, copy_attempts=copy.attempts,
               others_cpu_busy=others, timing_attempts=attempts, in_doubt=doubt)
    for t_ in setup.inputs:
        t_.grad = None
    if cfg.traffic:
        # Prepared by a worker before any timing (bench/warm.py), else here.
        models = cfg.prepared.get((name, direction, dtype, tokens))
        if models is None:
            progress.show(f"{label} [traffic model]")
            models = row_models(ops, name, direction, dtype, tokens, row_hidden(name, cfg.hidden))
        row["errors"].update(models["errors"])
        row.update({k: v for k, v in models.items() if k != "errors"})
    progress.advance(with_doubt(f"{label}  {row_summary(row)}", row))
    return row


def row_summary(row) -> str:
    """A finished row's figures on its progress line ('17.5 us, 64% copy, 1.07x
    native, ...'): a run that a time limit cuts off (a GPU lease's) keeps the
    result of every row it finished, in its log, though the table comes at the end."""
    ours = row["impls"].get("ours", {}).get("median_us")
    parts = [f"{ours:.1f} us" if ours is not None else "ours not timed"]
    if row.get("pct_copy_bw") is not None:
        parts.append(f"{row['pct_copy_bw']:.0f}% copy")
    parts += [f"{row[f'speedup_vs_{b}']:.2f}x {b}" for b in BASELINES if row.get(f"speedup_vs_{b}") is not None]
    if row.get("harness"):
        parts.append(f"model {row['harness']['model']:.2f}x")
    if row.get("occupancy"):
        parts.append(f"{row['occupancy']['warps_per_sm']:.0f} warps/SM")
    if row["errors"]:
        parts.append("errors: " + ", ".join(row["errors"]))
    return ", ".join(parts)


def run_benchmarks(ops, cfg: RunConfig, progress: Progress):
    rows = []
    for name in cfg.ops:
        for dtype in cfg.dtypes:
            for tokens in cfg.tokens:
                # Copy bandwidth reference: same bytes as the op's inputs,
                # measured right next to the op so both see the same machine
                # state (threads, frequency, which cache level the data fits).
                progress.show(f"{name} {DTYPE_SHORT[dtype]} T={tokens} [copy]")
                probe = make_setup(ops, name, tokens, dtype, cfg.device, row_hidden(name, cfg.hidden))
                in_bytes = sum(t.numel() * t.element_size() for t in probe.inputs)
                del probe
                copy = CopyBaseline(
                    lambda: copy_bandwidth(in_bytes, dtype, cfg.device, cfg.timer)[0],
                    cfg.other_load).measure()
                if copy.error:
                    print(f"\ncopy bandwidth failed: {copy.error}", file=sys.stderr)
                for direction in cfg.directions:
                    rows.append(bench_cell(ops, name, direction, dtype, tokens, cfg,
                                           copy, progress))
                    gc.collect()
    return rows


def dispatch_overhead(ops, cfg: RunConfig, progress: Progress):
    """Per-call cost on a [1, 8] tensor: ours vs native, eager, grad mode on.

    At this size the kernel does nothing, so the time is the Python wrapper +
    dispatcher (+ autograd checks) -- what a model with many small calls pays.
    The op's setup is called with hidden=8. An op without a native form is
    timed alone: its composite is many ops, not a dispatch cost.
    Inputs do not require grad, so no graph is recorded.  Timed with the host
    timer even on CUDA (torch's Timer synchronises per block, so per call this
    is the launch-bound wall time), since CUDA events would time the kernel.
    """
    rows = []
    for name in cfg.ops:
        progress.show(f"dispatch {name}")
        s = make_setup(ops, name, 1, torch.float32, cfg.device, hidden=8)
        row = {"op": name, "shape": list(s.shape)}
        if "native" not in s.impls:
            row["note"] = "no native op"
        steps = {}
        with torch.enable_grad():
            for impl in ("ours", "native") if "native" in s.impls else ("ours",):
                fn, inputs = s.impls[impl], s.inputs
                step = (lambda fn=fn, inputs=inputs: fn(*inputs))
                try:
                    warm_up(step, cfg.device, min_calls=20)
                    steps[impl] = step
                except Exception as e:
                    row[f"{impl}_error"] = error_text(e)
            # No copy baseline or plausibility re-measure here: timed again only when busy.
            (timings, errors), others, attempts = until_quiet(
                lambda: measure(cfg.host_timer, steps), cfg.other_load, ROW_TRIES)
        for impl, t in timings.items():
            row[f"{impl}_us"] = t.median_s * 1e6
        for impl, e in errors.items():
            row[f"{impl}_error"] = e
        if "ours_us" in row and "native_us" in row:
            row["ratio_ours_over_native"] = row["ours_us"] / row["native_us"]
        row.update(others_cpu_busy=others, timing_attempts=attempts,
                   in_doubt=section_doubt(row, others, ("ours_us", "native_us"), "ratio_ours_over_native"))
        rows.append(row)
        progress.advance(with_doubt(f"dispatch {name}", row))
    return rows
