// bf16_narrowing_check (narrowing.h): vec_utils.h's float -> bfloat16 rounding,
// native path against at::vec, over every float. Compiled once per instruction
// set like the kernels; only the AVX512 variant has a native path, so the
// others compare at::vec with itself.
#include <atomic>
#include <cstring>

#include "register_kernel.h"
#include "vec_utils.h"
#include "narrowing.h"

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

}  // namespace

OP_EXT_REGISTER_KERNEL(bf16_narrowing_check, bf16_narrowing_check_impl);

}  // namespace op_ext::cpu
