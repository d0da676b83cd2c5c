"""Streaming stores of the CPU kernels (kernel/cpu/cpu_kernels.h).

A call that moves more bytes than `op_extension._C.cpu_streaming_store_bytes()`
(the last-level cache) writes its outputs with non-temporal stores, which skip the
read of every line written. Only where the store goes changes, never a value:

- every op, forward and backward op, over its SAMPLES (odd rows, tails,
  broadcasts, strided and empty inputs) and TRAFFIC calls (aligned LLM rows) of
  tests/op_cases, in every dtype and on every CPU variant, gives the same bits
  with streaming forced on every call as with it off;
- the AVX2 and AVX512 variants take the streaming path for every kernel that
  writes an output as large as its input (the count of streamed calls grows),
  the portable variant never does, nor any variant with streaming off;
- the elementwise kernels' tasks that start between two aligned addresses
  (several threads over an odd length) peel their head and stream the rest;
- the threshold comes from the cache size (sysfs) or OP_EXT_CPU_STREAM_BYTES.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import op_extension
from reference import DTYPE_IDS, FORWARD_OPS, bits, sample_calls, streaming, tensor_outputs

C = op_extension._C
custom = torch.ops.custom
NEVER = -1
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def _run(name: str, args) -> list[torch.Tensor]:
    return tensor_outputs(getattr(custom, name)(*args))


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_streamed_outputs_are_the_same_bits(op, cpu_isa):
    streams = cpu_isa != "default"
    forward_streamed = backward_streamed = 0
    for dtype in DTYPES:
        for what, name, args in sample_calls(op, dtype):
            with streaming(NEVER):
                before = C._cpu_streamed_calls()
                plain = _run(name, args)
                assert C._cpu_streamed_calls() == before, f"{what}: streamed with streaming off"
            with streaming(0):
                before = C._cpu_streamed_calls()
                streamed = _run(name, args)
                count = C._cpu_streamed_calls() - before
            if name == op:
                forward_streamed += count
            else:
                backward_streamed += count
            assert len(plain) == len(streamed), what
            for k, (a, b) in enumerate(zip(plain, streamed)):
                where = f"{what} {DTYPE_IDS[dtype]} on {cpu_isa}, output {k}"
                assert a.shape == b.shape and a.dtype == b.dtype, where
                assert torch.equal(bits(a), bits(b)), f"{where}: streaming changed the values"
    # add_backward streams through reduce_to's copy: the same-shape samples
    # reduce nothing.
    how = ("its CPU kernel writes no output with streaming stores: write it with vec_map, or pass "
           "store_slice the streams_outputs() choice (kernel/cpu/vec_utils.h)")
    if streams:
        assert forward_streamed > 0, f"{op}: no forward call took the streaming path on {cpu_isa}; {how}"
        assert backward_streamed > 0, f"{op}: no backward call took the streaming path on {cpu_isa}; {how}"
    else:
        assert forward_streamed == backward_streamed == 0, f"{op}: the {cpu_isa} variant cannot stream"


@pytest.fixture
def two_threads():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_tasks_that_start_unaligned_peel_their_head(dtype, cpu_isa, two_threads):
    """65542 elements over two tasks: the second starts at element 32771, 12 or
    6 bytes past an aligned address; the elementwise kernels (vec_map, add's
    runs, reduce_to's copy) store up to the next aligned element, then stream."""
    torch.manual_seed(0)
    n = 2 * 32768 + 6
    x, y, z = (torch.randn(n, dtype=dtype) for _ in range(3))
    gelu = torch.ops.custom.gelu
    calls = {
        "gelu": lambda: [gelu(x, "tanh")],
        "gelu_backward": lambda: [custom.gelu_backward(y, x, "tanh")],
        "swiglu_backward": lambda: tensor_outputs(custom.swiglu_backward(z, x, y)),
        "add": lambda: [custom.add(x, y, 0.5)],
        "add_backward (no reduction)": lambda: [custom.add_backward(z, [n], 2.0)],
    }
    for what, call in calls.items():
        with streaming(NEVER):
            plain = call()
        with streaming(0):
            before = C._cpu_streamed_calls()
            streamed = call()
            took = C._cpu_streamed_calls() - before
        assert took == (0 if cpu_isa == "default" else 1), f"{what} on {cpu_isa}: {took} streamed calls"
        for a, b in zip(plain, streamed):
            assert torch.equal(bits(a), bits(b)), f"{what} on {cpu_isa}: streaming changed the values"


def test_threshold_setting_and_default():
    default = C.cpu_streaming_store_bytes()
    assert default > 0
    with streaming(1234):
        assert C.cpu_streaming_store_bytes() == 1234
        with streaming(NEVER):
            assert C.cpu_streaming_store_bytes() == 2**63 - 1
        assert C.cpu_streaming_store_bytes() == 1234
    assert C.cpu_streaming_store_bytes() == default
    with pytest.raises(TypeError):
        C.set_cpu_streaming_store_bytes("big")
    assert C.cpu_streaming_store_bytes() == default


def _sysfs_last_level_cache() -> int | None:
    best = (0, None)
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1], 1)
        value = int(size.rstrip("KMG")) * scale
        if level > best[0]:
            best = (level, value)
    return best[1]


def _threshold_in_a_fresh_process(env_value: str | None) -> int:
    env = dict(os.environ)
    env.pop("OP_EXT_CPU_STREAM_BYTES", None)
    if env_value is not None:
        env["OP_EXT_CPU_STREAM_BYTES"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", "import op_extension; print(op_extension._C.cpu_streaming_store_bytes())"],
        env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_the_threshold_is_the_last_level_cache_unless_the_environment_says():
    cache = _sysfs_last_level_cache()
    default = _threshold_in_a_fresh_process(None)
    assert default == (cache if cache else 32 << 20)
    assert _threshold_in_a_fresh_process("123456") == 123456
    assert _threshold_in_a_fresh_process("never") == 2**63 - 1
    # Not a byte count: the default, not whatever a typo parses to.
    assert _threshold_in_a_fresh_process("12MB") == default
