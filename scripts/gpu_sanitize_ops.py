"""Every forward and backward op, once per test sample, dtype and alignment, for
compute-sanitizer to watch (scripts/gpu_check.sh runs it under memcheck,
racecheck, synccheck and initcheck, with PyTorch's caching allocator off so that
memcheck sees each tensor's own bounds):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \\
        python scripts/gpu_sanitize_ops.py --device cuda

The calls are the shared test samples (tests/op_cases/<op>.py SAMPLES: odd sizes,
one-element and empty rows, transposed, strided and row-strided inputs, rows of
5125), in float32, float16, bfloat16 and float64, each twice: as built, and with
every tensor moved one element off its allocation (no longer 16-byte aligned:
the kernels' scalar paths). Each forward op is followed by its backward op on the
same inputs (tests/reference.py's backward_args), so every backward kernel runs
too. Prints one line per op with the number of calls; exits non-zero if a call
raises. `--device cpu` runs the same calls on the CPU kernels (a dry run of this
script on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(1, str(ROOT))  # the package itself, where it is built in place and not installed

import reference  # noqa: E402  (tests/: the samples, Maker and backward_args)
from op_cases import Maker, Missing  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def misaligned(t):
    """`t`'s values in a tensor of its strides that starts one element into its
    allocation: no longer 16-byte aligned."""
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return t
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    storage = torch.empty(span + 1, dtype=t.dtype, device=t.device)
    out = storage.as_strided(t.shape, t.stride(), 1)
    out.copy_(t.detach())
    return out


def run(op: str, device: str) -> int:
    samples = reference.SAMPLES[op]
    if isinstance(samples, Missing):
        raise SystemExit(f"gpu_sanitize_ops: {op} has no SAMPLES in tests/op_cases/{op}.py")
    forward = getattr(torch.ops.custom, op)
    calls = 0
    for sample in samples:
        for dtype in DTYPES:
            for shift in (False, True):
                args, kwargs = sample.build(Maker(dtype, False, device))
                if shift:
                    args = tuple(misaligned(a) for a in args)
                    kwargs = {k: misaligned(v) for k, v in kwargs.items()}
                forward(*args, **kwargs)
                name, backward_args = reference.backward_args(op, args, kwargs)
                getattr(torch.ops.custom, name)(*backward_args)
                calls += 2
    if device == "cuda":
        torch.cuda.synchronize()
    return calls


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--ops", default=",".join(reference.FORWARD_OPS),
                        help="comma-separated forward ops (default: all)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_sanitize_ops: no CUDA device")
    torch.manual_seed(0)
    total = 0
    for op in args.ops.split(","):
        start = time.perf_counter()
        calls = run(op, args.device)
        total += calls
        print(f"gpu_sanitize_ops: {op}: {calls} calls (forward and backward) in {time.perf_counter() - start:.1f} s",
              flush=True)
    print(f"gpu_sanitize_ops: {total} calls on {args.device}, none raised")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
