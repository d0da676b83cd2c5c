// vec_utils.h's own numerics, checked over every float by
// tests/test_cpu_numerics.py (not ops; compiled once per instruction set like
// the kernels, so that each variant's code is the one checked):
// - bf16_narrowing_check: the float -> bfloat16 rounding that every bfloat16
//   kernel stores through (narrow): its native path (VCVTNE2PS2BF16, where
//   cpu_kernels.h's native_bf16_narrowing() allows it) must give at::vec's bits;
// - exp_check: exp_fast's and exp_precise's errors against the exact exponential.
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

// exp_fast(x) or exp_precise(x) against exp(x) in double, for every `stride`-th
// float pattern with |x| <= limit (an odd stride visits every residue of the
// low bits), both signs: the largest relative error over the results that are
// normal floats, and the largest error in ulps of the exact result over all of
// them (denormal results included: their ulp is 2^-149; where the exact value
// is past FLT_MAX, inf is 0 ulps and anything else inf). Then the ends, where a
// miss makes both errors inf at that x: 0 for -inf and -1000, inf for 1000 and
// +inf, and for exp_precise NaN for NaN.
struct ExpCheckArgs {
  bool precise;         // exp_precise, or exp_fast
  float limit;
  int64_t stride;
  double* worst_error;  // out: the largest relative error (normal results)
  float* worst_at;      // out: its x
  double* worst_ulps;   // out: the largest error in ulps (every result)
  float* worst_ulps_at; // out: its x
  int64_t* checked;     // out: floats checked
};

struct ExpCheck final : KernelStub<ExpCheckArgs> {
  using KernelStub::KernelStub;
};
inline ExpCheck exp_check{"exp_check"};

}  // namespace op_ext::cpu
