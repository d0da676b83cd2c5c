"""The self-test of scripts/check_sanitizers.sh: calls the planted mistakes of
planted.cpp (the library named by OP_EXT_PLANTED_LIB) and of the CUDA harness's
misuse kernels (op_extension._cuda_sim of the sanitized build) from pytest, run the
way the real test run is (same preload, options and output capture), one test per
process (-k), since each mistake ends the process. Not part of the test suite."""

from __future__ import annotations

import ctypes
import os

import pytest


@pytest.fixture(scope="module")
def lib():
    planted = ctypes.CDLL(os.environ["OP_EXT_PLANTED_LIB"])
    planted.planted_misaligned_load.restype = ctypes.c_float
    return planted


def test_clean(lib):
    assert lib.planted_signed_overflow(1, 2) == 3
    assert lib.planted_misaligned_load(4) == 0.0
    assert lib.planted_throw_and_catch(5) == 5
    # The CUDA harness under ASan: fibers, barriers and shuffles run clean, and
    # its own SIGSEGV handling of shared memory still works (ASan must not take
    # the fault as a crash): an out-of-bounds shared access is the harness's
    # report, an exception, not ASan's.
    from op_extension import cuda_sim

    cuda_sim._run_misuse("clean")
    with pytest.raises(RuntimeError, match="dynamic shared memory write out of bounds"):
        cuda_sim._run_misuse("shared_out_of_bounds")
    with pytest.raises(RuntimeError, match="static __shared__ .*::first write out of bounds"):
        cuda_sim._run_misuse("static_shared_past_end")
    cuda_sim._run_misuse("clean")


def test_heap_overflow(lib):
    lib.planted_heap_overflow(7)


def test_signed_overflow(lib):
    lib.planted_signed_overflow(2**31 - 1, 1)


def test_misaligned_load(lib):
    lib.planted_misaligned_load(1)


def test_cuda_sim_global_out_of_bounds():
    """A CUDA kernel on the harness reads one float past a global (heap) buffer:
    the harness does not watch global memory, ASan does."""
    from op_extension import cuda_sim

    cuda_sim._run_misuse("global_out_of_bounds")
