"""The CPU kernels' own numerics (kernel/cpu/vec_utils.h), checked over every
float by C++ loops (kernel/cpu/numerics_check.h).

float -> bfloat16 rounding (narrow). On a CPU with AVX512-BF16 (Zen 4, Sapphire
Rapids and later) the AVX512 kernels round with VCVTNE2PS2BF16, 32 values an
instruction, instead of at::vec's integer arithmetic, unless a pair of vectors
holds a NaN or a denormal, which the instruction treats otherwise. The bits
must be those of at::vec either way:

- for every one of the 2**32 floats (bf16_narrowing_check, in C++: 2 s),
  once beside its neighbours and once beside floats of other signs and
  exponents (a value in the wrong lane shows), the instruction taking every pair
  but those holding a NaN or a denormal;
- for every op, forward and backward, over its SAMPLES and TRAFFIC calls in
  bfloat16, with ordinary and with streaming stores.

Planted misuse, run by hand when this was written: the two sources of the
instruction swapped (the halves of each 32 exchanged), or the pairs holding a
NaN or a denormal not sent to at::vec, each make the first test fail.

exp (exp_fast), which softmax, sigmoid/silu and the 16-bit GELUs use: within
5e-7 relative (4.0e-7 measured over every float) of the exact exponential over |x| <= 87.3 (every 13th float, both
signs: down to the smallest normal float, e^-87.34), and 0 for -inf and -1000,
inf for 1000 and +inf, on each CPU variant (2^n by VSCALEFPS on AVX512, in the
exponent field on AVX2). Planted misuse, by hand (the same loop outside the
test): Taylor's coefficients in place of the fitted ones, 3.5e-6; on AVX2, the lower clamp at
-89 instead of -88 (2^n wraps to -inf below 2^-127), and the shifter without
its 127 (every 2^n off by 2^127), each fail.

exp_precise, which GELU's float32 outputs use (tanh and erf forms): within
0.95 ulp of the exact exponential for every 7th float of |x| <= 104, both
signs, denormal results included, and within 8e-8 relative over the normal
ones; NaN for NaN besides the ends above. Planted misuse, by hand: ln2 in one
part (4.6 ulp), Taylor's coefficients in place of the fitted ones (2.7 ulp), and on AVX2 2^n
as one factor (denormal results flushed to 0) each fail; VRANGEPS as exp_fast's
clamp failed it when it was written (it turns NaN into 104).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

import op_extension
from reference import FORWARD_OPS, bits, sample_calls, streaming, supported_isas, tensor_outputs

C = op_extension._C

needs_instruction = pytest.mark.skipif(
    not (C.best_cpu_isa() == "avx512" and C.cpu_native_bf16_narrowing()),
    reason="this CPU has no AVX512-BF16: its kernels round with at::vec only")


@contextmanager
def native_narrowing(on: bool):
    old = C.cpu_native_bf16_narrowing()
    C.set_cpu_native_bf16_narrowing(on)
    try:
        yield
    finally:
        C.set_cpu_native_bf16_narrowing(old)


@pytest.fixture
def avx512():
    old = C.cpu_isa()
    C.set_cpu_isa("avx512")
    yield
    C.set_cpu_isa(old)


# Pairs (of 32 lanes) that at::vec converts because they hold a NaN or a denormal:
# - consecutive patterns: those of 0x00000000-0x007fffff and 0x7f800000-0x7fffffff
#   and their negatives, 2**23 / 32 pairs each;
# - spread (lane k holds (k << 27) | p): p in [1, 2**23) puts a denormal in lane
#   0 (and 16), p in (0x07800000, 2**27) a NaN in lane 15 (and 31).
AT_VEC_PAIRS = {False: 4 * (1 << 23) // 32, True: 2 * ((1 << 23) - 1)}


@needs_instruction
@pytest.mark.parametrize("spread", [False, True], ids=["consecutive", "spread"])
def test_every_float_rounds_to_the_bits_of_at_vec(spread, avx512):
    with native_narrowing(True):
        mismatches, first, native, pairs = C._cpu_bf16_narrowing_check(spread)
    assert mismatches == 0, (
        f"{mismatches} floats round to other bfloat16 bits natively than through at::vec, "
        f"the first 0x{first:08x}")
    assert pairs == (1 << 32) // 32
    assert native == pairs - AT_VEC_PAIRS[spread], f"{native} of {pairs} pairs took the native path"
    with native_narrowing(False):
        mismatches, _, native, _ = C._cpu_bf16_narrowing_check(spread)
    assert (mismatches, native) == (0, 0)


@needs_instruction
@pytest.mark.parametrize("op", FORWARD_OPS)
def test_ops_give_the_same_bits_either_way(op, avx512):
    calls = 0
    for what, name, args in sample_calls(op, torch.bfloat16):
        run = getattr(torch.ops.custom, name)
        with native_narrowing(False):
            expected = tensor_outputs(run(*args))
        for threshold in (-1, 0):  # ordinary stores; streaming stores on every call
            with streaming(threshold), native_narrowing(True):
                got = tensor_outputs(run(*args))
            for k, (a, b) in enumerate(zip(expected, got)):
                where = f"{what} bf16, output {k}, {'streaming' if threshold == 0 else 'ordinary'} stores"
                assert a.shape == b.shape and a.dtype == b.dtype, where
                assert torch.equal(bits(a), bits(b)), f"{where}: native rounding changed the bits"
        calls += 1
    assert calls > 0


def test_the_switch_follows_the_cpu():
    """Switched on where the CPU has AVX512-BF16 (and off again); refused, naming
    the instruction set, where it does not."""
    was = C.cpu_native_bf16_narrowing()
    try:
        C.set_cpu_native_bf16_narrowing(True)
    except ValueError as e:
        assert "AVX512-BF16" in str(e)
        assert was is False and C.cpu_native_bf16_narrowing() is False
        return
    try:
        assert C.cpu_native_bf16_narrowing() is True
        C.set_cpu_native_bf16_narrowing(False)
        assert C.cpu_native_bf16_narrowing() is False
    finally:
        C.set_cpu_native_bf16_narrowing(was)


def exp_check_on(isa, precise, limit, stride):
    """_C._cpu_exp_check in the kernels of `isa` (skips where the CPU lacks it)."""
    if isa not in supported_isas():
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    old = C.cpu_isa()
    C.set_cpu_isa(isa)
    try:
        return C._cpu_exp_check(precise, limit, stride)
    finally:
        C.set_cpu_isa(old)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_exp_precise_is_within_an_ulp_of_exp_for_every_float(isa):
    # Every 7th float of |x| <= 104: past -103.97 e^x rounds to 0, past 88.73
    # to inf; in between lie the denormal results.
    worst, at, worst_ulps, ulps_at, checked = exp_check_on(isa, True, 104.0, 7)
    assert checked > 3e8
    assert worst_ulps <= 0.95, f"exp_precise on {isa}: {worst_ulps:.3g} ulp at x = {ulps_at!r}"
    assert worst <= 8e-8, f"exp_precise on {isa}: {worst:.3g} relative error at x = {at!r}"


def test_exp_polynomials_are_the_ones_their_script_fits():
    """vec_utils.h's coefficients of e^r (exp_fast's and exp_precise's) are what
    scripts/fit_exp_polynomial.py prints, so that the fits can be redone and checked."""
    import importlib.util
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("fit_exp_polynomial", root / "scripts" / "fit_exp_polynomial.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    source = (root / "op_extension/csrc/kernel/cpu/vec_utils.h").read_text()
    for name, degree in script.DEGREES.items():
        function = name.split()[0]
        coeffs, error = script.fit(degree)
        body = source[source.index(f"inline Vectorized<float> {function}("):]
        body = body[:body.index("\n}\n")]
        in_source = [float(c) for c in re.findall(r"[pV]\(([0-9.e-]+)f\)", body)]
        assert in_source == [float(c) for c in reversed(coeffs)] + [1.0, 1.0], (name, in_source)
        assert error < (4e-9 if degree == 4 else 1.1e-7), name


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_exp_fast_is_within_5e_7_of_exp_over_the_normal_floats(isa):
    worst, at, _, _, checked = exp_check_on(isa, False, 87.3, 13)
    assert checked > 1.5e8
    assert worst <= 5e-7, f"exp_fast on {isa}: {worst:.3g} relative error at x = {at!r}"
