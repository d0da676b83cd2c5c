"""The compiled baseline's graphs compiled side by side before any timing.

The benchmark compiles the composite once per row (torch.compile, dynamic=False:
one graph per op, direction, dtype and token count), in the row, one after the
other. A cold Inductor compile costs seconds (about 10 s for an RMSNorm forward
and backward on a 2-core CPU), so on a GPU lease, where the benchmark's time is
counted against a few minutes, the compiles were most of it. Here worker
processes (a spawn pool) each build rows' tensors exactly as the row will
(op_rows.row_setup) and call the compiled composite once, forward and backward
as the row does: Inductor writes each graph to its on-disk caches (the FX graph
cache and AOTAutograd's, under TORCHINDUCTOR_CACHE_DIR, which every process of
the user shares), and the row's own compile then loads it (1.5 s instead of 10 s
in the example above). Nothing is timed in the workers, and they are gone before
the first timing starts. A worker that fails leaves its rows to compile cold, as
before; the failures are reported.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import time

import torch


def _compile_row(name, direction, dtype_name, tokens, device, threads, hidden):
    """In a worker: the row's compiled composite, called once."""
    from op_extension import ops

    from .harness import compiled_composite, configure_dynamo, make_step, sync
    from .op_rows import row_setup

    torch.set_num_threads(threads)  # Inductor's CPU code depends on it
    configure_dynamo()
    setup, grads = row_setup(ops, name, direction, getattr(torch, dtype_name), tokens, torch.device(device), hidden)
    make_step(compiled_composite(name, setup.impls["composite"]), setup, direction, grads)()
    sync(torch.device(device))


def warm_compile_cache(rows, device, threads, workers, hidden=None):
    """Compiles the composite of each (name, direction, dtype, tokens) in `rows`
    in `workers` processes; returns (rows compiled, [(row, error text)], seconds).
    `hidden` as the benchmark's --hidden (per op: plan.row_hidden)."""
    from .harness import error_text
    from .plan import row_hidden

    start = time.perf_counter()
    failed = []
    if not rows or workers < 1:
        return 0, failed, 0.0
    context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(workers, len(rows)), mp_context=context) as pool:
        futures = {pool.submit(_compile_row, name, direction, str(dtype).removeprefix("torch."), tokens,
                               str(device), threads, row_hidden(name, hidden)): (name, direction, dtype, tokens)
                   for name, direction, dtype, tokens in rows}
        for future in concurrent.futures.as_completed(futures):
            try:
                future.result()
            except Exception as e:  # reported; the row compiles cold
                failed.append((futures[future], error_text(e)))
    return len(rows) - len(failed), failed, time.perf_counter() - start
