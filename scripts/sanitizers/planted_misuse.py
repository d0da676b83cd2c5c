"""The self-test of scripts/check_sanitizers.sh: calls the planted mistakes of
planted.cpp (the library named by OP_EXT_PLANTED_LIB) from pytest, run the way the
real test run is (same preload, options and output capture), one test per process
(-k), since each mistake ends the process. Not part of the test suite."""

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


def test_heap_overflow(lib):
    lib.planted_heap_overflow(7)


def test_signed_overflow(lib):
    lib.planted_signed_overflow(2**31 - 1, 1)


def test_misaligned_load(lib):
    lib.planted_misaligned_load(1)
