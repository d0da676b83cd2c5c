"""python -m op_extension.bench: the options, and a run from them."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from .harness import CpuTimer, CudaTimer, OtherLoad, Progress, RunConfig, configure_dynamo, configure_host_allocator
from .model import HF_BATCH, HF_FAMILIES, HF_SEQ, HF_SHAPE, hf_models, model_ways, print_hf, print_model_ways
from .op_rows import dispatch_overhead, load_liger, run_benchmarks
from ..bench_spec import HIDDEN
from .plan import ALL_OPS, DEFAULT_TOKENS, DIRECTIONS, DTYPE_SHORT, DTYPES, PLAN, QUICK_TOKENS, shapes_text
from .plot import write_plot
from .report import loadavg, machine_info, output_paths, print_dispatch, print_table, record
from .warm import prepare_rows

QUICK_HELP = (
    "quick smoke run (< 2 min on a 2-core CPU, torch.compile included): tokens "
    f"{','.join(map(str, QUICK_TOKENS))}, both dtypes, all ops, fwd and fwd+bwd, "
    "min-run-time 0.1 s in 2 rounds; the compiled composite is built only for float32 at the "
    "largest token count (compiling every graph would take minutes), other rows "
    "show '-' in the 'x compiled' column. Explicit --tokens/--dtypes/--ops/"
    "--min-run-time still apply.")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m op_extension.bench",
        description="Time op_extension.ops against native PyTorch, the eager "
                    "composite models use, and torch.compile of that composite. "
                    "Prints a table, writes <out>/bench_<device>_<timestamp>.json "
                    "and <out>/speedup_<device>_<timestamp>.png.",
        epilog="See benchmarks/README.md for the method.")
    p.add_argument("--ops", default=",".join(ALL_OPS),
                   help="comma-separated ops to run [default: all: "
                        f"{','.join(ALL_OPS)}]")
    p.add_argument("--dtypes", default=None,
                   help="comma-separated dtypes (float32,bfloat16,float16) "
                        "[default: float32,bfloat16]")
    p.add_argument("--tokens", default=None,
                   help=f"comma-separated token counts (rows); {shapes_text(PLAN.benches)} [default: "
                        f"{','.join(map(str, DEFAULT_TOKENS))}]")
    p.add_argument("--hidden", type=int, default=None,
                   help=f"the last dim of the rows of the ops whose rows are [tokens, {HIDDEN}] "
                        "(add, gelu, the norms, softmax); the others keep their shapes. Past 8192 "
                        "the CUDA backward norms take their long-row kernels [default: "
                        f"{HIDDEN}]")
    p.add_argument("--device", default="cpu", help="cpu or cuda [default: cpu]")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="intra-op threads for every measurement "
                        "[default: torch.get_num_threads(), here "
                        f"{torch.get_num_threads()}]")
    p.add_argument("--min-run-time", type=float, default=None,
                   help="seconds of timed runs per implementation and row, "
                        "split over --rounds [default: 0.5, 0.1 with --quick]")
    p.add_argument("--reps", type=int, default=None,
                   help="take this many timed samples per implementation and "
                        "row (split over --rounds) instead of filling "
                        "--min-run-time")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds: every implementation of a row is "
                        "sampled once per round, in rotating order [default: 5, "
                        "2 with --quick]")
    p.add_argument("--no-backward", action="store_true",
                   help="forward only")
    p.add_argument("--no-compile", action="store_true",
                   help="skip the torch.compile baseline")
    p.add_argument("--workers", type=int, default=None,
                   help="processes that prepare the rows side by side before any timing (bench/warm.py): "
                        "they compile the torch.compile baseline's graphs into Inductor's on-disk caches, "
                        "so that each row's own compile loads its graph, and run the CUDA models of "
                        "--traffic; 0: each row does both in turn [default: min(8, cores)]")
    p.add_argument("--no-dispatch", action="store_true",
                   help="skip the dispatch-overhead section")
    p.add_argument("--no-hf", action="store_true",
                   help="skip the Hugging Face model section (patched vs unpatched small "
                        "Llama, Qwen3, Gemma3, Phi-3 decoders, forward+backward; needs transformers)")
    p.add_argument("--no-model", action="store_true",
                   help="skip the model section (a Llama decoder eager vs torch.compile vs "
                        "backend='op_extension' vs patched; compiles twice, a few minutes on 2 cores)")
    p.add_argument("--allocator", choices=("reuse", "system"), default="reuse",
                   help="host allocator policy: reuse freed large blocks (no page faults "
                        "per call, as with jemalloc/tcmalloc) or glibc's defaults "
                        "[default: reuse]")
    p.add_argument("--out", default="bench_results",
                   help="output folder for the JSON and PNG "
                        "[default: bench_results/]")
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p.add_argument("--traffic", action=argparse.BooleanOptionalAction, default=None,
                   help="beside each row, the CUDA traffic model's bytes moved over the minimum and "
                        "launches, from the kernels on the CPU harness at 16 tokens (op_extension.cuda_sim) "
                        "[default: on with --device cuda]")
    args = p.parse_args(argv)

    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    skipped = [o for o in args.ops if o in PLAN.skipped]
    if skipped:
        p.error("; ".join(f"{o} has no rows: {PLAN.skipped[o]}" for o in skipped))
    unknown = [o for o in args.ops if o not in PLAN.benches]
    if unknown:
        p.error(f"unknown op(s) {unknown}; choose from {', '.join(ALL_OPS)}")
    dtypes = args.dtypes or "float32,bfloat16"
    try:
        args.dtypes = [DTYPES[d.strip()] for d in dtypes.split(",") if d.strip()]
    except KeyError as e:
        p.error(f"unknown dtype {e}; choose from {', '.join(DTYPES)}")
    if args.tokens:
        args.tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    else:
        args.tokens = list(QUICK_TOKENS if args.quick else DEFAULT_TOKENS)
    if args.min_run_time is None:
        args.min_run_time = 0.1 if args.quick else 0.5
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    if args.rounds < 1 or (args.reps is not None and args.reps < 1):
        p.error("--rounds and --reps must be >= 1")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.hidden is not None and args.hidden < 1:
        p.error("--hidden must be >= 1")
    if args.workers is None:
        args.workers = min(8, os.cpu_count() or 1)
    if args.workers < 0:
        p.error("--workers must be >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda requested but torch.cuda.is_available() is False")

    from .. import ops

    if not args.ops:  # no built op has a BENCH: the skipped ones say why
        sys.exit("no op to benchmark: " + "; ".join(f"{n}: {why}" for n, why in PLAN.skipped.items()))
    missing = [o for o in args.ops if not callable(getattr(ops, o, None))]
    if missing:
        sys.exit(f"op_extension.ops is missing: {', '.join(missing)} "
                 "(use --ops to benchmark the others)")

    # Fix the thread count for everything, compilation included: Inductor's
    # CPU kernels bake the OpenMP thread count in at code-generation time.
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    host_allocator = configure_host_allocator(args.allocator)
    configure_dynamo()

    host_timer = CpuTimer(args.threads, args.min_run_time, args.reps, args.rounds)
    if device.type == "cuda":
        timer = CudaTimer(args.min_run_time, args.reps, args.rounds)
    else:
        timer = host_timer

    largest = max(args.tokens)

    def compile_filter(dtype, tokens):
        # Quick mode compiles only float32 at the largest token count: a cold
        # Inductor compile costs seconds per graph on a small CPU.
        return not args.quick or (dtype == torch.float32 and tokens == largest)
    cfg = RunConfig(ops=args.ops, dtypes=args.dtypes, tokens=args.tokens,
                    device=device, threads=args.threads,
                    directions=["fwd"] if args.no_backward else list(DIRECTIONS),
                    compile=not args.no_compile, compile_filter=compile_filter,
                    timer=timer, host_timer=host_timer, other_load=OtherLoad())
    cfg.traffic = args.traffic if args.traffic is not None else device.type == "cuda"
    cfg.hidden = args.hidden
    for name, why in PLAN.skipped.items():
        print(f"bench: {name} skipped: {why}", file=sys.stderr)
    cfg.liger, no_liger = load_liger(device)
    if no_liger:
        print(f"liger baseline: skipped: {no_liger}", file=sys.stderr)

    busy_before = cfg.other_load.sample()
    if busy_before is not None and busy_before > OtherLoad.WARN_FRACTION:
        print(f"warning: other processes use {100 * busy_before:.0f}% of the CPUs: "
              "they compete for the cores and distort timings (on a small VM a "
              "preempted thread turns into ms-sized outliers)", file=sys.stderr)
    run_start = cfg.other_load.snapshot()

    n_cells = len(cfg.ops) * len(cfg.dtypes) * len(cfg.tokens) * len(cfg.directions)
    run_hf = not args.no_hf and device.type == "cpu"
    if run_hf:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("hf section: skipped: transformers is not installed (scripts/setup_env.sh installs it)",
                  file=sys.stderr)
            run_hf = False
    run_model = run_hf and not args.no_model
    progress = Progress(n_cells + (0 if args.no_dispatch else len(cfg.ops))
                        + (len(HF_FAMILIES) * len(cfg.dtypes) if run_hf else 0)
                        + (len(cfg.dtypes) if run_model else 0))
    t_start = time.perf_counter()
    wanted = {(name, direction, dtype, tokens): (cfg.compile and compile_filter(dtype, tokens), cfg.traffic)
              for name in cfg.ops for dtype in cfg.dtypes for tokens in cfg.tokens for direction in cfg.directions}
    cfg.prepared, failed, seconds = prepare_rows(wanted, device, args.threads, args.workers, args.hidden)
    if seconds:
        not_done = {row for row, _ in failed}
        print(f"prepared: {sum(1 for row, (c, _) in wanted.items() if c and row not in not_done)} compiled graphs"
              + (f" and {len(cfg.prepared)} rows' CUDA models" if cfg.traffic else "")
              + f" by {args.workers} workers in {seconds:.0f} s", file=sys.stderr)
    for (name, direction, dtype, tokens), why in failed:
        print(f"prepared: not {name} {direction} {DTYPE_SHORT[dtype]} T={tokens} (the row does it itself): {why}",
              file=sys.stderr)
    try:
        rows = run_benchmarks(ops, cfg, progress)
        dispatch = [] if args.no_dispatch else dispatch_overhead(ops, cfg, progress)
        hf_rows = hf_models(cfg, progress) if run_hf else []
        model_rows = model_ways(cfg, progress) if run_model else []
    finally:
        progress.close()
    elapsed = time.perf_counter() - t_start

    info = machine_info(device, args.threads)
    busy_during = cfg.other_load.fraction(run_start, cfg.other_load.snapshot())
    info["others_cpu_busy_before"] = busy_before
    info["others_cpu_busy_during"] = busy_during
    info["loadavg_1min_after"] = loadavg()
    info["host_allocator"] = host_allocator
    print(f"\n# op_extension benchmark - {info['device_name']}, {args.threads} "
          f"thread(s), torch {torch.__version__}, host allocator {host_allocator}")
    if device.type == "cpu":
        print(f"# instruction sets: ours {info['kernel_isa']}, ATen {info['aten_cpu_capability']}, "
              f"Inductor -march={info['inductor_march']}")
    print("# speed-up = baseline time / our time (>1: ours is faster); "
          "GB/s from minimum bytes moved; %copy = our GB/s / copy_ GB/s\n")
    print_table(rows)
    flagged = sum(1 for r in rows if r.get("in_doubt"))
    if flagged:
        print(f"# warning: {flagged} of {len(rows)} row(s) have figures in doubt (see 'note')")
    if dispatch:
        print("\n# dispatch overhead: one eager call on a [1, 8] float32 tensor, "
              "grad mode on\n")
        print_dispatch(dispatch)
    if hf_rows:
        print(f"\n# Hugging Face models: forward+backward of a causal-LM loss, batch {HF_BATCH} x "
              f"{HF_SEQ} tokens, {HF_SHAPE['num_hidden_layers']} layers of hidden {HF_SHAPE['hidden_size']}; "
              "unpatched vs op_extension.transformers.patch (same run, interleaved)\n")
        print_hf(hf_rows)
    if model_rows:
        print(f"\n# a Llama decoder ({HF_SHAPE['num_hidden_layers']} layers of hidden {HF_SHAPE['hidden_size']}, "
              f"batch {HF_BATCH} x {HF_SEQ}), forward+backward: eager vs torch.compile (Inductor) vs "
              "torch.compile(backend='op_extension') vs op_extension.transformers.patch; x = eager ms / ms\n")
        print_model_ways(model_rows)

    os.makedirs(args.out, exist_ok=True)
    json_path, png_path = output_paths(args.out, device.type, time.strftime("%Y%m%d-%H%M%S"))
    report = record(info, cfg, args, type(timer).__name__, elapsed,
                    sorted(cfg.liger) if cfg.liger else f"skipped: {no_liger}",
                    rows, dispatch, hf_rows, model_rows)
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    png = write_plot(rows, png_path, f"{info['device_name']}, {args.threads} thr")
    print(f"\nwrote {json_path}" + (f" and {png}" if png else "")
          + f" ({elapsed:.0f} s)")
    return 0
