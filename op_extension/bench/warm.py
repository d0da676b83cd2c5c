"""What each row needs besides its timing, prepared side by side before any timing.

Two things in a row cost seconds of CPU and no GPU:
* the compiled baseline: the benchmark compiles the composite once per row
  (torch.compile, dynamic=False: one graph per op, direction, dtype and token
  count). A cold Inductor compile costs seconds (about 10 s for an RMSNorm
  forward and backward on a 2-core CPU);
* the CUDA models beside the row (--traffic): the traffic model runs the row's
  kernels on the CPU harness at 16 tokens, and the occupancy model records the
  row's op calls at its full shape on the CPU (up to 4 s a row of 8192 x 11008
  on 2 cores).
On a GPU lease, where the benchmark's time is counted against a few minutes,
these were most of it, one row after the other. Here worker processes (a spawn
pool) do them first: each builds a row's tensors exactly as the row will
(op_rows.row_setup) and calls the compiled composite once, forward and backward
as the row does, so Inductor writes the graph to its on-disk caches (the FX
graph cache and AOTAutograd's, under TORCHINDUCTOR_CACHE_DIR, which every
process of the user shares) and the row's own compile loads it (1.5 s instead
of 10 s above); and each returns the row's model figures, which the row then
reports. Nothing is timed in the workers, and they are gone before the first
timing starts. What a worker fails at, the row does itself, as before; the
failures are reported.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import time

import torch


def _prepare_row(name, direction, dtype_name, tokens, device, threads, hidden, compile_graph, models):
    """In a worker: the row's compiled composite called once (compile_graph), and
    its models' figures (models: traffic.row_models's, else None)."""
    from op_extension import ops

    from .harness import compiled_composite, configure_dynamo, make_step, sync
    from .op_rows import row_setup
    from .traffic import row_models

    torch.set_num_threads(threads)  # Inductor's CPU code depends on it
    dtype = getattr(torch, dtype_name)
    prepared = row_models(ops, name, direction, dtype, tokens, hidden) if models else None
    if compile_graph:
        configure_dynamo()
        setup, grads = row_setup(ops, name, direction, dtype, tokens, torch.device(device), hidden)
        make_step(compiled_composite(name, setup.impls["composite"]), setup, direction, grads)()
        sync(torch.device(device))
    return prepared


def prepare_rows(rows, device, threads, workers, hidden=None):
    """Prepares each row of `rows`, {(name, direction, dtype, tokens): (compile its
    graph, compute its models)}, in `workers` processes. Returns ({row: its
    models' figures, for the rows that asked for them}, [(row, error text)] of
    the rows whose preparation failed, seconds). `hidden` as the benchmark's
    --hidden (per op: plan.row_hidden)."""
    from .harness import error_text
    from .plan import row_hidden

    start = time.perf_counter()
    prepared, failed = {}, []
    wanted = {row: what for row, what in rows.items() if any(what)}
    if not wanted or workers < 1:
        return prepared, failed, 0.0
    context = multiprocessing.get_context("spawn")  # a forked CUDA context is unusable
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(workers, len(wanted)), mp_context=context) as pool:
        futures = {pool.submit(_prepare_row, name, direction, str(dtype).removeprefix("torch."), tokens,
                               str(device), threads, row_hidden(name, hidden), compile_graph, models):
                   (name, direction, dtype, tokens)
                   for (name, direction, dtype, tokens), (compile_graph, models) in wanted.items()}
        for future in concurrent.futures.as_completed(futures):
            row = futures[future]
            try:
                result = future.result()
            except Exception as e:  # the row compiles and models itself
                failed.append((row, error_text(e)))
                continue
            if wanted[row][1]:
                prepared[row] = result
    return prepared, failed, time.perf_counter() - start
