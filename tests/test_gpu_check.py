"""scripts/gpu_check.sh and the kernel driver it hands to compute-sanitizer stay
runnable between the rare sessions that have a GPU: the driver runs here on the
CPU kernels, and the script parses and writes at most 8 result files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_sanitize_ops  # noqa: E402


def test_the_sanitizer_driver_runs_every_forward_and_backward_op(capsys):
    assert gpu_sanitize_ops.main(["--device", "cpu"]) == 0
    out = capsys.readouterr().out
    ops = re.findall(r"^gpu_sanitize_ops: (\w+): (\d+) calls", out, re.M)
    import reference

    assert [op for op, _ in ops] == list(reference.FORWARD_OPS)
    for op, calls in ops:
        # Every sample, in four dtypes, aligned and misaligned, forward and backward.
        assert int(calls) == len(reference.SAMPLES[op]) * 4 * 2 * 2, op


def test_misaligned_copies_keep_values_and_strides_but_not_the_alignment():
    t = torch.randn(5, 9).t()
    m = gpu_sanitize_ops.misaligned(t)
    assert torch.equal(m, t) and m.stride() == t.stride() and m.storage_offset() == 1
    assert m.data_ptr() % 16 != 0


def test_the_gpu_check_parses_and_writes_at_most_8_files():
    script = ROOT / "scripts" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    written = set(re.findall(r'"\$OUT/([\w.]+)"', text)) | {"summary.txt"}
    # The benchmark writes its JSON and its plot into $OUT too.
    assert "--out \"$OUT\"" in text
    assert len(written) + 2 <= 8, sorted(written)
