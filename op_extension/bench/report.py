"""Reporting: the machine's description, the tables on stdout (the op table,
dispatch overhead; the model sections' are in model.py), with '?' on figures in
doubt, and the JSON record of a run."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys

import torch

from ..bench_spec import GELU_APPROX, HIDDEN, INTERMEDIATE, LN_EPS, RMS_EPS
from .doubt import PCT_COPY_MAX, SPEEDUP_MAX, SPEEDUP_MIN, doubt_note
from .harness import OtherLoad
from .plan import BASELINES, DTYPE_SHORT, PLAN, byte_legend, formula_text
from .traffic import launch_breakdown


def machine_info(device, threads):
    cpu_model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "torch": torch.__version__,
        "threads": threads,
        "device": str(device),
        "device_name": cpu_model,
    }
    if device.type == "cpu":
        info.update(cpu_instruction_sets())
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def cpu_instruction_sets():
    """What each side of a CPU row runs: our kernels' variant
    (OP_EXT_CPU_ISA lowers it), ATen's (ATEN_CPU_CAPABILITY) and the -march of
    Inductor's generated C++ (TORCHINDUCTOR_CPP_MARCH; unset it is native, which
    on an AVX-512 CPU lets even Inductor's AVX2 code use AVX-512's 32
    registers). README "On AVX2 CPUs" sets all three to measure an AVX2 CPU."""
    from torch._inductor import config as inductor_config

    from .. import _C

    return {
        "kernel_isa": _C.cpu_isa(),
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "inductor_march": inductor_config.cpp.march or "native",
    }


def loadavg():
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _fmt(v, spec, suffix=""):
    return "-" if v is None else format(v, spec) + suffix


def fmt_marked(row, key, spec, suffix="", value=None):
    """row[key] (or value) formatted; a figure in doubt keeps its value, marked '?'."""
    value = row.get(key) if value is None else value
    text = _fmt(value, spec, suffix)
    return text + "?" if value is not None and key in row.get("in_doubt", {}) else text


def print_table(rows, file=sys.stdout):
    header = ("op", "dir", "dtype", "tokens", "ours us", "GB/s", "%copy",
              "x native", "x compos.", "x compiled", "note")
    with_liger = any("speedup_vs_liger" in r for r in rows)
    if with_liger:
        header = header[:-1] + ("x liger", "note")
    # The traffic model (--traffic): bytes moved / minimum and launches on the harness.
    with_model = any(r.get("harness") for r in rows)
    if with_model:
        header = header[:7] + ("model", "launch", "warps/SM") + header[7:]
    table = []
    for r in rows:
        ours = r["impls"].get("ours", {})
        notes = [f"{k}: {v}" for k, v in r["errors"].items()] + ([doubt_note(r)] if r.get("in_doubt") else [])
        table.append((
            r["op"], r["direction"], DTYPE_SHORT[getattr(torch, r["dtype"])],
            str(r["tokens"]),
            fmt_marked(r, "ours_us", ".1f", value=ours.get("median_us")),
            fmt_marked(r, "gbps", ".1f"),
            fmt_marked(r, "pct_copy_bw", ".0f", "%"),
        ) + (_model_cells(r.get("harness"), r.get("occupancy")) if with_model else ()) + tuple(fmt_marked(r, f"speedup_vs_{b}", ".2f", "x")
                  for b in BASELINES + (("liger",) if with_liger else ()))
          + ("; ".join(notes)[:120],))
    print_aligned(header, table, file, right=range(3, len(header) - 1))
    if with_model:
        print("\n# model: the row's CUDA kernels on the CPU harness (op_extension.cuda_sim, at 16 tokens): "
              "global bytes moved over the minimum (each input read once, each output written once), 1.00x "
              "at best; launch: kernel launches. Far above 1.00x: the kernel is off its bytes; at 1.00x "
              "but a low %copy on a GPU: off its bandwidth. warps/SM: the occupancy model "
              "(op_extension.cuda_occupancy, at the row's own shape): the fewest warps any of the row's launches "
              "keeps resident on an SM (of 64), and 'on N SMs' where one reaches only N of the GPU's; few warps "
              "in flight is the usual reason for a low %copy at 1.00x.", file=file)
        print_launch_breakdown(rows, file)
    if any(r.get("in_doubt") for r in rows):
        print(f"\n# ?: in doubt, not a result, even after measuring again: timed while other processes used "
              f"more than {100 * OtherLoad.WARN_FRACTION:.0f}% of the CPUs ('busy'; %copy also when its copy_ "
              f"baseline was: 'copy busy'), or outside the plausibility bounds (%copy above {PCT_COPY_MAX:.0f}%, "
              f"speed-up outside {SPEEDUP_MIN:g}x-{SPEEDUP_MAX:g}x). 'timed Nx', 'copy Nx': how often the row "
              "and its copy baseline were measured. Rerun on an idle machine.", file=file)


def print_launch_breakdown(rows, file=sys.stdout):
    """Per op, direction and dtype with more than one launch: each launch's share of
    the bytes the row moves on the harness (the model is taken at 16 tokens, so one
    line stands for every token count)."""
    lines, seen = [], set()
    for r in rows:
        harness = r.get("harness")
        key = (r["op"], r["direction"], r["dtype"])
        if not harness or harness["launches"] < 2 or key in seen or "per_launch" not in harness:
            continue
        seen.add(key)
        lines.append(f"#   {r['op']} {r['direction']} {DTYPE_SHORT[getattr(torch, r['dtype'])]}: "
                     f"{launch_breakdown(harness)}")
    if lines:
        print("\n# launches: each kernel's share of the bytes its row moves on the harness", file=file)
        print("\n".join(lines), file=file)


def _model_cells(harness, occupancy=None):
    warps = "-"
    if occupancy:
        warps = f"{occupancy['warps_per_sm']:.0f}"
        if occupancy["active_sms"] < occupancy["sms"]:
            warps += f" on {occupancy['active_sms']} SMs"
    if not harness:
        return ("-", "-", warps)
    return (f"{harness['model']:.2f}x", str(harness["launches"]), warps)


def print_dispatch(rows, file=sys.stdout):
    header = ("op", "ours us", "native us", "ours/native", "note")
    table = [(r["op"], fmt_marked(r, "ours_us", ".2f"), fmt_marked(r, "native_us", ".2f"),
              fmt_marked(r, "ratio_ours_over_native", ".2f", "x"),
              "; ".join(n for n in (r.get("note"), doubt_note(r) if r.get("in_doubt") else None) if n))
             for r in rows]
    print_aligned(header, table, file, right=range(1, 4))
    print_section_legend(rows, file)


def print_section_legend(rows, file):
    if any(r.get("in_doubt") for r in rows):
        print(f"\n# ?: in doubt, not a result: timed while other processes used more than "
              f"{100 * OtherLoad.WARN_FRACTION:.0f}% of the CPUs, even after timing again, or a ratio "
              f"outside {SPEEDUP_MIN:g}x-{SPEEDUP_MAX:g}x.", file=file)


def print_aligned(header, table, file, right):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    right = set(right)

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(header), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for cells in table:
        print(line(cells), file=file)


def output_paths(out, device_type, stamp):
    """The JSON and the plot of one run, named alike: a run's plot is not
    overwritten by the next run's, and the two are found together."""
    return (os.path.join(out, f"bench_{device_type}_{stamp}.json"),
            os.path.join(out, f"speedup_{device_type}_{stamp}.png"))


def record(info, cfg, args, timer, elapsed, liger, rows, dispatch, hf_rows, model_rows, plan=PLAN):
    """The JSON record of a run: the machine, the configuration (with what each
    op's BENCH adds to it), the byte formulas and every section's rows."""
    config = {"ops": cfg.ops, "dtypes": [str(d).replace("torch.", "") for d in cfg.dtypes],
              "tokens": cfg.tokens, "hidden": cfg.hidden or HIDDEN, "intermediate": INTERMEDIATE}
    for bench in plan.benches.values():
        config.update(bench.config)
    config.update({
        "directions": cfg.directions, "compile": cfg.compile, "workers": args.workers,
        "quick": args.quick,
        "min_run_time_s": args.min_run_time, "reps": args.reps,
        "rounds": args.rounds,
        "rms_eps": RMS_EPS, "ln_eps": LN_EPS, "gelu_approximate": GELU_APPROX,
        "timer": timer, "elapsed_s": elapsed,
        "liger": liger,
    })
    if plan.skipped:
        config["skipped"] = dict(plan.skipped)
    return {
        "metadata": info,
        "config": config,
        "byte_formulas": {
            "legend": byte_legend(plan.benches),
            **{k: {"fwd": formula_text(k, "fwd"), "fwd+bwd": formula_text(k, "fwd+bwd")} for k in plan.benches},
        },
        "results": rows,
        "dispatch_overhead": dispatch,
        "hf_models": hf_rows,
        "model_ways": model_rows,
    }
