"""Shared fixtures: seeded RNG, CPU ISA and device iteration, thread-count restore."""

from __future__ import annotations

import os
import sys

import pytest
import torch

# tests/ on sys.path, whatever pytest's import mode, so `import reference` works.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import op_extension  # noqa: E402  (registers torch.ops.custom.*)
from reference import DEVICES, HAS_CUDA, KERNEL_TARGETS, supported_isas  # noqa: E402

SUPPORTED_ISAS = supported_isas()

# Without a GPU the CUDA-only tests are not collected (nor reported as skipped).
collect_ignore = [] if HAS_CUDA else ["test_cuda.py"]


@pytest.fixture(autouse=True)
def seeded_rng():
    """Every test starts from the same RNG state, so failures reproduce."""
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def restore_threads():
    """Tests may change torch's thread count; put it back afterwards."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def restore_isa():
    """Whatever a test did, the next one starts on the best CPU kernels."""
    yield
    op_extension._C.set_cpu_isa(op_extension._C.best_cpu_isa())


@pytest.fixture(params=SUPPORTED_ISAS)
def cpu_isa(request):
    """Runs the test once per CPU kernel variant this machine supports
    ("default" always; "avx2"/"avx512" when the CPU has them)."""
    op_extension._C.set_cpu_isa(request.param)
    assert op_extension._C.cpu_isa() == request.param
    yield request.param
    op_extension._C.set_cpu_isa(op_extension._C.best_cpu_isa())


@pytest.fixture(params=DEVICES)
def device(request):
    """Runs the test once per device (DEVICES); the value is the device string."""
    return request.param


@pytest.fixture(params=[t[1:] for t in KERNEL_TARGETS], ids=[t[0] for t in KERNEL_TARGETS])
def kernel_device(request):
    """Runs the test once per CPU kernel variant (ids "default", "avx2", "avx512",
    as for cpu_isa) and once per other device ("cuda"); the value is the device
    string to put the tensors on."""
    device, isa = request.param
    if isa is not None:
        op_extension._C.set_cpu_isa(isa)
        assert op_extension._C.cpu_isa() == isa
    yield device
    op_extension._C.set_cpu_isa(op_extension._C.best_cpu_isa())


@pytest.fixture
def num_threads():
    """Calls torch.set_num_threads(n) for the test; restored by restore_threads."""

    def set_threads(n: int) -> None:
        torch.set_num_threads(n)
        assert torch.get_num_threads() == n

    return set_threads


# ---- the order of the files ---------------------------------------------------------------------
# `make test` runs whole files on two pytest-xdist workers (--dist loadfile). xdist
# hands the files out in collection order as workers free up; by default it first
# sorts them by their number of tests, which put the few long end-to-end files
# (the add-an-op walkthrough: 5 tests, 6 minutes) last, alone on one worker, for
# the suite's last 6 minutes. The Makefile turns that sort off
# (--no-loadscope-reorder) and this hook starts the longest files first, so the
# many short ones fill in around them (longest-processing-time-first). Seconds
# of each, from a fresh clone on the 2-core VM (2026-11-28/29); a file missing here
# runs after these, in pytest's order. A stale list costs time, never a result.
LONGEST_FILES_FIRST = (
    "test_add_an_op.py",        # 360 (160 alone): a scratch tree's two builds, the first from ccache, and its shared tests
    "test_npu_sim_device.py",   # 130 the first time (65 alone): builds the simulated npu device (test_debug reuses it)
    "test_fuzz.py",             # 150: long rows on the CUDA harness
    "test_transformers.py",     # 105
    "test_compiler.py",         # 105
    "test_scaffold.py",         # 90
    "test_npu_glue.py",         # 85
    "test_docs.py",             # 85
    "test_cuda_occupancy.py",   # 80
    "test_ops.py",              # 60
    "test_distributed.py",      # 55
    "test_compile.py",          # 45
    "test_bench_harness.py",    # 40
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
    # A stable sort: each file's tests keep their order (and stay together, so a
    # module-scoped fixture is set up once per worker).
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
