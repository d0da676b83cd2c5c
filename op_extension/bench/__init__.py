"""Benchmark of the custom operators in ``op_extension.ops``.

Run it as ``python -m op_extension.bench`` (or ``python op_extension/bench``);
``--help`` lists the options and ``benchmarks/README.md`` explains the method.

For every op, direction (forward, forward+backward), dtype and token count it
times four implementations in the same process, on the same tensors:

* ``ours``      -- ``op_extension.ops.<name>`` (the custom C++ op, with autograd)
* ``native``    -- the PyTorch built-in (``F.rms_norm``, ``F.gelu``, ...), where
  there is one
* ``composite`` -- the eager code models actually contain (e.g. HF LlamaRMSNorm)
* ``compiled``  -- ``torch.compile`` (Inductor, default mode, dynamic=False)
  of that same composite

plus an ``out.copy_(x)`` of the op's input bytes, which gives the memory
bandwidth these (memory-bound) ops can hope to reach on this machine.

Layout, loosely after Liger-Kernel's benchmark scripts: each op brings its own
setup factory, minimum-bytes formula and composite (``BENCH`` in
op_extension/op_defs/<op>.py, an op_extension.bench_spec.Bench), and this
package, which names no op, runs them on a shared harness:

=============  ===================================================================
``plan``       the ops with rows (prototypes x built x BENCH), dtypes, tokens
``harness``    timers (CPU, CUDA events), interleaved rounds, warm-up, copy_
               bandwidth, other processes' load, progress
``doubt``      figures in doubt: measured again, then marked '?'
``op_rows``    the op table and the dispatch-overhead section
``model``      the sections that combine ops: Hugging Face decoders, a Llama four ways
``report``     tables on stdout, the JSON record
``plot``       the speed-up PNG
``warm``       what each row needs besides its timing (compiled graphs, the CUDA models), prepared side by side first
``cli``        the options and a run (``main``)
=============  ===================================================================
"""

from ..bench_spec import GELU_APPROX, HIDDEN, INTERMEDIATE, LN_EPS, RMS_EPS, Bench, OpSetup
from . import cli, doubt, harness, model, op_rows, plan, plot, report, warm
from .cli import QUICK_HELP, main, parse_args
from .doubt import (COPY_TRIES, PCT_COPY_MAX, ROW_TRIES, SPEEDUP_MAX, SPEEDUP_MIN, CopyBaseline, doubt_note,
                    figures_in_doubt, implausible, is_busy, row_figures, section_doubt, time_row, timed_figures,
                    until_quiet)
from .harness import (CpuTimer, CudaTimer, OtherLoad, Progress, RunConfig, Timing, check_close, compiled_composite,
                      configure_dynamo, configure_host_allocator, copy_bandwidth, make_step, measure, sync, warm_up,
                      with_grad)
from .model import HF_BATCH, HF_FAMILIES, HF_SEQ, HF_SHAPE, MODEL_WAYS, hf_models, model_ways, print_hf, print_model_ways
from .op_rows import bench_cell, dispatch_overhead, load_liger, run_benchmarks
from .plan import (ALL_OPS, BASELINES, BYTE_FORMULAS, DEFAULT_TOKENS, DIRECTIONS, DTYPE_SHORT, DTYPES, IMPLS, PLAN,
                   QUICK_TOKENS, Plan, bytes_moved, formula_text, load_plan, make_setup, reference_impl)
from .plot import AXIS_TICKS, speedup_axis, speedup_figure, write_plot
from .report import machine_info, output_paths, print_dispatch, print_section_legend, print_table, record
