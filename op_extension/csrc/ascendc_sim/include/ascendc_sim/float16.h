// The 16-bit float types of Ascend C (`half`, `bfloat16_t`) for the CPU simulator.
//
// Storage is the raw IEEE bit pattern. Conversions from float/double round to
// nearest-even (the hardware's default, CAST_RINT); the other rounding modes of
// Cast are implemented in RoundTo<>() below. Arithmetic is deliberately not
// defined on these types: kernels compute through vector instructions, and the
// simulator's instructions round each result to the declared type themselves.
#ifndef ASCENDC_SIM_FLOAT16_H_
#define ASCENDC_SIM_FLOAT16_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace ascendc_sim {

// Rounding of a double to a binary format with `mant_bits` stored mantissa bits
// and `exp_bits` exponent bits, returning the bit pattern. `mode`: 0 nearest-even,
// 1 toward -inf, 2 toward +inf, 3 toward zero, 4 nearest with ties away from zero,
// 5 round to odd (an inexact result takes the neighbour with an odd last bit).
template <int kExpBits, int kMantBits>
inline uint16_t EncodeFloat(double x, int mode) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kMaxExp = (1 << kExpBits) - 1;
  uint16_t sign = std::signbit(x) ? uint16_t(1u << (kExpBits + kMantBits)) : uint16_t(0);
  if (std::isnan(x)) return uint16_t(sign | (kMaxExp << kMantBits) | (1u << (kMantBits - 1)));
  double a = std::fabs(x);
  const uint16_t inf = uint16_t(sign | (kMaxExp << kMantBits));
  const uint16_t max_finite = uint16_t(sign | ((kMaxExp - 1) << kMantBits) | ((1u << kMantBits) - 1));
  if (std::isinf(a)) return inf;
  if (a == 0.0) return sign;
  // Quantum (spacing of representable values) at a's binade; subnormals share the
  // quantum of the smallest normal binade.
  int e = std::ilogb(a);
  const int min_exp = 1 - kBias;
  if (e < min_exp) e = min_exp;
  const double quantum = std::ldexp(1.0, e - kMantBits);
  const double q = a / quantum;  // exact: a power-of-two scaling
  double lower = std::floor(q);
  const double frac = q - lower;
  const bool negative = sign != 0;
  bool up = false;
  switch (mode) {
    case 0:
      up = frac > 0.5 || (frac == 0.5 && std::fmod(lower, 2.0) != 0.0);
      break;
    case 1:
      up = negative && frac > 0.0;
      break;
    case 2:
      up = !negative && frac > 0.0;
      break;
    case 4:
      up = frac >= 0.5;
      break;
    case 5:
      up = frac > 0.0 && std::fmod(lower, 2.0) == 0.0;
      break;
    default:
      up = false;
  }
  double m = (lower + (up ? 1.0 : 0.0)) * quantum;  // rounded magnitude
  // Encode m.
  if (m == 0.0) return sign;
  int me = std::ilogb(m);
  if (me > kBias) {
    // Overflow: nearest-even and away-from-zero directions give inf, the others
    // the largest finite value (IEEE 754 overflow rules).
    const bool to_inf = mode == 0 || mode == 4 || (mode == 1 && negative) || (mode == 2 && !negative);
    return to_inf ? inf : max_finite;
  }
  if (me < min_exp) {
    const uint32_t mant = uint32_t(std::ldexp(m, kBias - 1 + kMantBits));
    return uint16_t(sign | mant);
  }
  const uint32_t mant = uint32_t(std::ldexp(m, kMantBits - me)) - (1u << kMantBits);
  return uint16_t(sign | (uint32_t(me + kBias) << kMantBits) | mant);
}

template <int kExpBits, int kMantBits>
inline float DecodeFloat(uint16_t bits) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kMaxExp = (1 << kExpBits) - 1;
  const bool negative = (bits >> (kExpBits + kMantBits)) & 1u;
  const int exp = (bits >> kMantBits) & kMaxExp;
  const uint32_t mant = bits & ((1u << kMantBits) - 1);
  double v;
  if (exp == kMaxExp) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(double(mant), 1 - kBias - kMantBits);
  } else {
    v = std::ldexp(double(mant | (1u << kMantBits)), exp - kBias - kMantBits);
  }
  return float(negative ? -v : v);
}

}  // namespace ascendc_sim

// IEEE binary16, as Ascend C's `half`.
struct half {
  uint16_t bits = 0;
  half() = default;
  half(float v) : bits(ascendc_sim::EncodeFloat<5, 10>(v, 0)) {}  // NOLINT(runtime/explicit)
  half(double v) : bits(ascendc_sim::EncodeFloat<5, 10>(v, 0)) {}  // NOLINT(runtime/explicit)
  half(int v) : half(double(v)) {}                                   // NOLINT(runtime/explicit)
  operator float() const { return ascendc_sim::DecodeFloat<5, 10>(bits); }  // NOLINT
  static half FromBits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
};

// bfloat16 (8 exponent bits, 7 mantissa bits), as Ascend C's `bfloat16_t`.
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  bfloat16_t(float v) : bits(ascendc_sim::EncodeFloat<8, 7>(v, 0)) {}   // NOLINT(runtime/explicit)
  bfloat16_t(double v) : bits(ascendc_sim::EncodeFloat<8, 7>(v, 0)) {}  // NOLINT(runtime/explicit)
  bfloat16_t(int v) : bfloat16_t(double(v)) {}                            // NOLINT(runtime/explicit)
  operator float() const { return ascendc_sim::DecodeFloat<8, 7>(bits); }  // NOLINT
  static bfloat16_t FromBits(uint16_t b) {
    bfloat16_t h;
    h.bits = b;
    return h;
  }
};

namespace ascendc_sim {

// Value of any supported element type as double (exact for all of them).
template <typename T>
inline double ToDouble(T v) {
  return double(static_cast<float>(v));
}
template <>
inline double ToDouble<double>(double v) {
  return v;
}

// Rounds a double to the element type T with rounding `mode` (see EncodeFloat).
template <typename T>
inline T RoundTo(double v, int mode = 0);
template <>
inline float RoundTo<float>(double v, int mode) {
  if (mode == 0 || std::isnan(v) || std::isinf(v)) return float(v);
  const float f = float(v);  // nearest
  if (double(f) == v) return f;
  const float down = double(f) < v ? f : std::nextafter(f, -std::numeric_limits<float>::infinity());
  const float up = double(f) > v ? f : std::nextafter(f, std::numeric_limits<float>::infinity());
  if (mode == 1) return down;
  if (mode == 2) return up;
  return v > 0 ? down : up;
}
template <>
inline half RoundTo<half>(double v, int mode) {
  return half::FromBits(EncodeFloat<5, 10>(v, mode));
}
template <>
inline bfloat16_t RoundTo<bfloat16_t>(double v, int mode) {
  return bfloat16_t::FromBits(EncodeFloat<8, 7>(v, mode));
}

template <typename T>
struct TypeName;
template <>
struct TypeName<float> {
  static constexpr const char* value = "float";
};
template <>
struct TypeName<half> {
  static constexpr const char* value = "half";
};
template <>
struct TypeName<bfloat16_t> {
  static constexpr const char* value = "bfloat16_t";
};
template <>
struct TypeName<int32_t> {
  static constexpr const char* value = "int32_t";
};
template <>
struct TypeName<uint32_t> {
  static constexpr const char* value = "uint32_t";
};
template <>
struct TypeName<uint8_t> {
  static constexpr const char* value = "uint8_t";
};
template <>
struct TypeName<int16_t> {
  static constexpr const char* value = "int16_t";
};
template <>
struct TypeName<uint16_t> {
  static constexpr const char* value = "uint16_t";
};

}  // namespace ascendc_sim

#endif  // ASCENDC_SIM_FLOAT16_H_
