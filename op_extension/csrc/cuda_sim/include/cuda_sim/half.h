// __half and __nv_bfloat16 for the CPU harness: 16-bit storage types with the
// conversion intrinsics the kernels use. Only explicit conversions exist, as in a
// torch CUDA build (__CUDA_NO_HALF_CONVERSIONS__ / __CUDA_NO_HALF_OPERATORS__):
// a kernel that relies on an implicit conversion fails to compile here too.
// float -> 16 bits rounds to nearest, ties to even, like the _rn intrinsics; a
// NaN becomes the canonical NaN that the GPU produces (0x7fff).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_sim/runtime.h"

struct __half {
  uint16_t bits_;
};
struct __nv_bfloat16 {
  uint16_t bits_;
};

namespace cuda_sim::detail {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {  // a normal half (>= 2^-14)
    const uint32_t mant = a & 0x7fffffu;
    uint32_t h = ((((a >> 23) - 127 + 15)) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
    return static_cast<uint16_t>(sign | h);
  }
  if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below 2^-25: zero
  // A subnormal half, in units of 2^-24: m * 2^(e - 126) with the implicit bit.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1);
  if (rest > half_ulp || (rest == half_ulp && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
  // zero or subnormal: mant * 2^-24, exact in float
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace cuda_sim::detail

inline __half __float2half_rn(float f) { return __half{cuda_sim::detail::float_to_half_bits(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __half2float(__half h) { return cuda_sim::detail::half_bits_to_float(h.bits_); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __nv_bfloat16{cuda_sim::detail::float_to_bf16_bits(f)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
  return cuda_sim::detail::bits_float(static_cast<uint32_t>(b.bits_) << 16);
}
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits_; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits_; }
