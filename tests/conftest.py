"""Shared fixtures: seeded RNG, CPU ISA iteration, thread-count restore."""

from __future__ import annotations

import os
import sys

import pytest
import torch

# tests/ on sys.path, whatever pytest's import mode, so `import reference` works.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import op_extension  # noqa: E402  (registers torch.ops.custom.*)
from reference import supported_isas  # noqa: E402

SUPPORTED_ISAS = supported_isas()


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


@pytest.fixture
def num_threads():
    """Calls torch.set_num_threads(n) for the test; restored by restore_threads."""

    def set_threads(n: int) -> None:
        torch.set_num_threads(n)
        assert torch.get_num_threads() == n

    return set_threads
