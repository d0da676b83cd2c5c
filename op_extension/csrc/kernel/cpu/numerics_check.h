// vec_utils.h's own numerics, checked over every float by
// tests/test_cpu_numerics.py (not ops; compiled once per instruction set like
// the kernels, so that each variant's code is the one checked):
// - bf16_narrowing_check: the float -> bfloat16 rounding that every bfloat16
//   kernel stores through (narrow): its native path (VCVTNE2PS2BF16, where
//   cpu_kernels.h's native_bf16_narrowing() allows it) must give at::vec's bits;
// - exp_fast_check: exp_fast's error against the exact exponential.
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace op_ext::cpu {

// Converts each of the 2^32 floats once both ways, a pair of vectors (n = 2 x
// Vectorized<float>::size() lanes) at a time, and counts the results that differ.
// Pair p holds
// - consecutive: the patterns p * n ... p * n + n - 1, so that nearly every
//   float goes the native way (all but the pairs holding a NaN or a denormal);
// - spread: in lane k the pattern (k << (32 - log2 n)) | p, lanes whose sign and
//   exponent differ, so that a value written to another lane shows too.
struct Bf16NarrowingCheckArgs {
  bool spread;
  int64_t* mismatches;       // out: floats whose two bfloat16 results differ
  uint64_t* first_mismatch;  // out: the lowest such pattern (2^32 where none)
  int64_t* native_pairs;     // out: pairs the native path converted
  int64_t* pairs;            // out: pairs converted (2^32 / n)
};

struct Bf16NarrowingCheck final : KernelStub<Bf16NarrowingCheckArgs> {
  using KernelStub::KernelStub;
};
inline Bf16NarrowingCheck bf16_narrowing_check{"bf16_narrowing_check"};

// exp_fast(x) against exp(x) in double, relative, for every `stride`-th float
// pattern with |x| <= limit (an odd stride visits every residue of the low bits);
// then the ends: 0 for -inf and -1000, inf for 1000 and +inf, or the worst
// error is inf at that x.
struct ExpFastCheckArgs {
  float limit;
  int64_t stride;
  double* worst_error;  // out: the largest relative error
  float* worst_at;      // out: its x
  int64_t* checked;     // out: floats checked
};

struct ExpFastCheck final : KernelStub<ExpFastCheckArgs> {
  using KernelStub::KernelStub;
};
inline ExpFastCheck exp_fast_check{"exp_fast_check"};

}  // namespace op_ext::cpu
