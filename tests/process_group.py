"""Worker processes for the tests that need a process group (DDP, DTensor).

Plain subprocesses, not multiprocessing: nothing of pytest's process is
inherited. They meet through a file store in the test's tmp_path, not a TCP
port (no free-port race), and gloo talks over loopback (GLOO_SOCKET_IFNAME=lo)
whatever the host name resolves to. Every wait is bounded:

- each worker writes its output to a file of its own, never to a pipe: a pipe
  read one worker at a time (communicate() on each in turn) leaves the other
  worker blocked on a full pipe while the one being read waits for it in a
  collective, and communicate() after a kill still waits for the pipe's end,
  which any child of the worker holds open;
- the workers are waited for together, against one deadline; when one fails,
  the others (waiting for it in a collective until gloo's timeout) are ended
  at once, each with its own process group (start_new_session), children
  included;
- init() gives gloo a timeout well below the deadline, one thread per worker
  (2 cores, several workers), and the store a file of its own.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def init(rank: int, world: int, store: str, timeout_s: float = 60):
    """In a worker: one thread, the gloo process group over the file store."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def run(module: str, function: str, world: int, folder: Path, *args: str, deadline_s: float = 240):
    """Runs tests/<module>.py's function(rank, world, store, *args) in `world`
    processes; returns each worker's (exit code, output). A worker still
    running at the deadline is killed (exit code None)."""
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / "store"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    # After the function returns (its results written, the group destroyed),
    # the worker leaves at once: torch's teardown of gloo at interpreter exit
    # now and then aborts ("terminate called without an active exception", seen
    # in CI on rank 1 of the TP + FSDP2 test after rank 0 had passed the final
    # barrier), which would fail a run whose work was done. An exception in the
    # function still exits 1 with its traceback.
    code = (f"import os, sys; sys.path.insert(0, sys.argv[1]); import {module} as m; "
            f"m.{function}(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], *sys.argv[5:]); "
            f"sys.stdout.flush(); sys.stderr.flush(); os._exit(0)")
    logs = [folder / f"rank{rank}.log" for rank in range(world)]
    workers = []
    for rank in range(world):
        with open(logs[rank], "w") as log:
            workers.append(subprocess.Popen(
                [sys.executable, "-c", code, str(HERE), str(rank), str(world), str(store), *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    end = time.monotonic() + deadline_s
    try:
        while any(w.poll() is None for w in workers):
            if time.monotonic() > end or any(w.returncode not in (None, 0) for w in workers):
                break
            time.sleep(0.05)
    finally:
        codes = []
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
                codes.append(None)
            else:
                codes.append(w.returncode)
    return [(c, log.read_text(errors="replace")) for c, log in zip(codes, logs)]


def report(results) -> str:
    """Each worker's exit code (None: killed at the deadline) and the end of its output."""
    return "\n".join(f"--- rank {rank} (exit {code}):\n{out[-3000:]}" for rank, (code, out) in enumerate(results))


def all_passed(results) -> bool:
    return all(code == 0 for code, _ in results)
