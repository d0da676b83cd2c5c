// numerics_check.h's checks of vec_utils.h: bf16_narrowing_check (only the
// AVX512 variant has a native path; the others compare at::vec with itself) and
// exp_check (exp_fast and exp_precise).
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <mutex>

#include "register_kernel.h"
#include "vec_utils.h"
#include "numerics_check.h"

namespace op_ext::cpu {
namespace {

constexpr int64_t kLanes = 2 * Vectorized<float>::size();
constexpr int kLaneBits = kLanes == 32 ? 5 : kLanes == 16 ? 4 : 3;
static_assert(int64_t{1} << kLaneBits == kLanes);

void bf16_narrowing_check_impl(DType, const Bf16NarrowingCheckArgs& a) {
  constexpr int64_t kPairs = (int64_t{1} << 32) / kLanes;
  std::atomic<int64_t> mismatches{0}, native{0};
  std::atomic<uint64_t> first{uint64_t{1} << 32};
  parallel_range(kPairs, 1 << 16, [&](int64_t begin, int64_t end) {
    int64_t local_mismatches = 0, local_native = 0;
    uint64_t local_first = uint64_t{1} << 32;
    uint32_t bits[kLanes];
    float values[kLanes];
    c10::BFloat16 ours[kLanes], reference[kLanes];
    for (int64_t pair = begin; pair < end; ++pair) {
      for (int64_t k = 0; k < kLanes; ++k) {
        bits[k] = static_cast<uint32_t>(a.spread ? (static_cast<uint64_t>(k) << (32 - kLaneBits)) | pair
                                                 : pair * kLanes + k);
      }
      std::memcpy(values, bits, sizeof(values));
      const auto lo = Vectorized<float>::loadu(values);
      const auto hi = Vectorized<float>::loadu(values + kLanes / 2);
      narrow<c10::BFloat16>(lo, hi).store(ours);
      at::vec::convert_from_float<c10::BFloat16>(lo, hi).store(reference);
#if defined(CPU_CAPABILITY_AVX512)
      Vectorized<c10::BFloat16> unused;
      local_native += narrow_to_bfloat16_natively(lo, hi, unused) ? 1 : 0;
#endif
      for (int64_t k = 0; k < kLanes; ++k) {
        if (ours[k].x != reference[k].x) {
          ++local_mismatches;
          local_first = std::min<uint64_t>(local_first, bits[k]);
        }
      }
    }
    mismatches += local_mismatches;
    native += local_native;
    uint64_t seen = first.load();
    while (local_first < seen && !first.compare_exchange_weak(seen, local_first)) {
    }
  });
  *a.mismatches = mismatches.load();
  *a.native_pairs = native.load();
  *a.first_mismatch = first.load();
  *a.pairs = kPairs;
}

// The error of one result in ulps of the exact value (see ExpCheckArgs).
double ulps_off(float got, double exact) {
  if (exact > static_cast<double>(FLT_MAX)) return got == INFINITY ? 0.0 : INFINITY;
  const double tiny = std::ldexp(1.0, -149);
  const double ulp = exact < std::ldexp(1.0, -126) ? tiny : std::ldexp(1.0, std::ilogb(exact) - 23);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

void exp_check_impl(DType, const ExpCheckArgs& a) {
  constexpr int64_t kWidth = Vectorized<float>::size();
  const auto exp_under_test = [&](const float* x, float* y) {
    const Vectorized<float> v = Vectorized<float>::loadu(x);
    (a.precise ? exp_precise(v) : exp_fast(v)).store(y);
  };
  // Non-negative floats up to the limit, by their bit patterns; each is checked
  // with both signs.
  uint32_t top = 0;
  std::memcpy(&top, &a.limit, sizeof(top));
  const int64_t groups = (static_cast<int64_t>(top) / a.stride + kWidth) / kWidth;
  std::mutex merge;
  double worst = 0, worst_ulps = 0;
  float worst_at = 0, worst_ulps_at = 0;
  int64_t checked = 0;
  // Keeps the larger error, and at equal errors the larger |x| (NaN counts as the worst).
  const auto keep = [](double error, float x, double& into, float& at) {
    if (std::isnan(error)) error = INFINITY;
    if (error > into || (error == into && std::fabs(x) > std::fabs(at))) {
      into = error;
      at = x;
    }
  };
  parallel_range(groups, 1 << 12, [&](int64_t begin, int64_t end) {
    double local_worst = 0, local_ulps = 0;
    float local_at = 0, local_ulps_at = 0;
    int64_t local_checked = 0;
    float x[kWidth], y[kWidth];
    for (int64_t g = begin; g < end; ++g) {
      for (int sign = 0; sign < 2; ++sign) {
        for (int64_t k = 0; k < kWidth; ++k) {
          const uint64_t bits = std::min<uint64_t>((g * kWidth + k) * a.stride, top) | (sign ? 0x80000000u : 0u);
          const uint32_t b = static_cast<uint32_t>(bits);
          std::memcpy(&x[k], &b, sizeof(b));
        }
        exp_under_test(x, y);
        for (int64_t k = 0; k < kWidth; ++k) {
          const double exact = std::exp(static_cast<double>(x[k]));
          if (exact >= static_cast<double>(FLT_MIN) && exact <= static_cast<double>(FLT_MAX)) {
            keep(std::fabs(static_cast<double>(y[k]) - exact) / exact, x[k], local_worst, local_at);
          }
          keep(ulps_off(y[k], exact), x[k], local_ulps, local_ulps_at);
          ++local_checked;
        }
      }
    }
    std::lock_guard<std::mutex> lock(merge);
    checked += local_checked;
    keep(local_worst, local_at, worst, worst_at);
    keep(local_ulps, local_ulps_at, worst_ulps, worst_ulps_at);
  });
  // The ends of the contract: e^x is 0 for -inf and far below the float range,
  // inf for +inf and far above it, and exp_precise keeps NaN. A miss counts as
  // the worst error.
  float ends[kWidth], got[kWidth];
  const float kEnds[5] = {-INFINITY, -1000.0f, 1000.0f, INFINITY, NAN};
  const int64_t kinds = a.precise ? 5 : 4;
  for (int64_t k = 0; k < kWidth; ++k) ends[k] = kEnds[k % kinds];
  exp_under_test(ends, got);
  for (int64_t k = 0; k < kWidth; ++k) {
    const bool right = std::isnan(ends[k]) ? std::isnan(got[k]) : got[k] == (ends[k] < 0 ? 0.0f : INFINITY);
    if (!right) {
      worst = worst_ulps = INFINITY;
      worst_at = worst_ulps_at = ends[k];
    }
  }
  *a.worst_error = worst;
  *a.worst_at = worst_at;
  *a.worst_ulps = worst_ulps;
  *a.worst_ulps_at = worst_ulps_at;
  *a.checked = checked;
}

}  // namespace

OP_EXT_REGISTER_KERNEL(bf16_narrowing_check, bf16_narrowing_check_impl);
OP_EXT_REGISTER_KERNEL(exp_check, exp_check_impl);

}  // namespace op_ext::cpu
