// Vector instructions ("first n elements" forms) on the simulator.
//
// Each instruction computes every element exactly and rounds it once to the
// operand type, as the vector unit does: on half (float16) every instruction's
// result is a half, so a chain of instructions on half data rounds after each
// step. float results are IEEE single-precision results (float arithmetic on the
// host). Transcendental instructions (Exp, Ln, Sqrt, Rsqrt, Reciprocal) return
// the correctly rounded value; the hardware's own approximation error (an ulp or
// so) is not modelled. Overflow follows IEEE (inf), as the 910B's inf/nan mode.
//
// Operand rules checked: 32-byte aligned UB start addresses, counts inside the
// tensors, operands either identical (in place) or disjoint, and the element
// types each instruction supports (half and float; bfloat16_t only through Cast).
#ifndef ASCENDC_SIM_VECTOR_OPS_H_
#define ASCENDC_SIM_VECTOR_OPS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ascendc_sim/core.h"
#include "ascendc_sim/float16.h"
#include "ascendc_sim/tensor.h"

namespace AscendC {

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

}  // namespace AscendC

namespace ascendc_sim {

// The vector unit computes on half and float; a bfloat16_t instantiation is a
// compile error, as with CANN's headers.
template <typename T>
inline constexpr bool kIsVectorFloat = std::is_same_v<T, half> || std::is_same_v<T, float>;

// Arithmetic type per element type: float for float (so results are IEEE float
// operations), double for half (exact for sums and products of two halves, then
// one rounding to half).
template <typename T>
using ComputeT = std::conditional_t<std::is_same_v<T, float>, float, double>;

template <typename T>
inline ComputeT<T> Load(T v) {
  return ComputeT<T>(static_cast<float>(v));
}

template <typename T>
inline T Store(ComputeT<T> v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return RoundTo<T>(double(v), 0);
  }
}

template <typename A, typename B>
inline void CheckOverlap(const char* api, const AscendC::LocalTensor<A>& dst, uint64_t dstCount,
                         const AscendC::LocalTensor<B>& src, uint64_t srcCount) {
  const uint64_t d0 = dst.UbAddress(), d1 = d0 + dstCount * sizeof(A);
  const uint64_t s0 = src.UbAddress(), s1 = s0 + srcCount * sizeof(B);
  if (d0 == s0 && sizeof(A) == sizeof(B)) return;  // in place
  if (d0 < s1 && s0 < d1) {
    Fail(Str(api, ": destination UB+", d0, "..", d1, " partly overlaps a source UB+", s0, "..", s1,
             " (operands must be the same tensor or disjoint)"));
  }
}

inline void CheckCount(const char* api, int64_t count) {
  if (count < 0) Fail(Str(api, ": negative count ", count));
}

template <typename T, typename F>
inline void Unary(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                  int32_t count, F f) {
  CheckCount(api, count);
  if (count == 0) return;
  T* d = dst.Access(count, api, true);
  const T* s = src.Access(count, api, true);
  CheckOverlap(api, dst, count, src, count);
  for (int32_t i = 0; i < count; ++i) d[i] = Store<T>(f(Load(s[i])));
}

template <typename T, typename F>
inline void Binary(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& a,
                   const AscendC::LocalTensor<T>& b, int32_t count, F f) {
  CheckCount(api, count);
  if (count == 0) return;
  T* d = dst.Access(count, api, true);
  const T* x = a.Access(count, api, true);
  const T* y = b.Access(count, api, true);
  CheckOverlap(api, dst, count, a, count);
  CheckOverlap(api, dst, count, b, count);
  for (int32_t i = 0; i < count; ++i) d[i] = Store<T>(f(Load(x[i]), Load(y[i])));
}

}  // namespace ascendc_sim

namespace AscendC {

#define ASCENDC_SIM_BINARY(NAME, EXPR)                                                                 \
  template <typename T>                                                                                \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, \
                   const int32_t& count) {                                                             \
    static_assert(ascendc_sim::kIsVectorFloat<T>, #NAME ": supported types are half and float");       \
    using C = ascendc_sim::ComputeT<T>;                                                                \
    ascendc_sim::Binary(#NAME, dst, src0, src1, count, [](C a, C b) -> C { return EXPR; });            \
  }

ASCENDC_SIM_BINARY(Add, a + b)
ASCENDC_SIM_BINARY(Sub, a - b)
ASCENDC_SIM_BINARY(Mul, a * b)
ASCENDC_SIM_BINARY(Div, a / b)
ASCENDC_SIM_BINARY(Max, (a != a || b != b) ? std::numeric_limits<C>::quiet_NaN() : std::max(a, b))
ASCENDC_SIM_BINARY(Min, (a != a || b != b) ? std::numeric_limits<C>::quiet_NaN() : std::min(a, b))
#undef ASCENDC_SIM_BINARY

#define ASCENDC_SIM_SCALAR(NAME, EXPR)                                                                      \
  template <typename T>                                                                                     \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,            \
                   const int32_t& count) {                                                                  \
    static_assert(ascendc_sim::kIsVectorFloat<T>, #NAME ": supported types are half and float");            \
    using C = ascendc_sim::ComputeT<T>;                                                                     \
    const C s = ascendc_sim::Load(scalarValue);                                                             \
    ascendc_sim::Unary(#NAME, dst, src, count, [s](C a) -> C { return EXPR; });                             \
  }

ASCENDC_SIM_SCALAR(Adds, a + s)
ASCENDC_SIM_SCALAR(Muls, a * s)
ASCENDC_SIM_SCALAR(Maxs, (a != a) ? a : std::max(a, s))
ASCENDC_SIM_SCALAR(Mins, (a != a) ? a : std::min(a, s))
#undef ASCENDC_SIM_SCALAR

#define ASCENDC_SIM_UNARY(NAME, EXPR)                                                                   \
  template <typename T>                                                                                 \
  inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count) {      \
    static_assert(ascendc_sim::kIsVectorFloat<T>, #NAME ": supported types are half and float");        \
    using C = ascendc_sim::ComputeT<T>;                                                                 \
    ascendc_sim::Unary(#NAME, dst, src, count, [](C a) -> C { return EXPR; });                          \
  }

ASCENDC_SIM_UNARY(Exp, std::exp(a))
ASCENDC_SIM_UNARY(Ln, std::log(a))
ASCENDC_SIM_UNARY(Abs, std::fabs(a))
ASCENDC_SIM_UNARY(Sqrt, std::sqrt(a))
ASCENDC_SIM_UNARY(Rsqrt, C(1) / std::sqrt(a))
ASCENDC_SIM_UNARY(Reciprocal, C(1) / a)
ASCENDC_SIM_UNARY(Relu, a > C(0) ? a : C(0))
#undef ASCENDC_SIM_UNARY

template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
  static_assert(ascendc_sim::kIsVectorFloat<T> || std::is_integral_v<T>, "Duplicate: unsupported type");
  constexpr const char* api = "Duplicate";
  ascendc_sim::CheckCount(api, count);
  if (count == 0) return;
  T* d = dst.Access(count, api, true);
  for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
}

}  // namespace AscendC

namespace ascendc_sim {

// Elements of the work tensor ReduceSum / ReduceMax need (CANN 8 ReduceSum page:
// one partial per 256-byte repeat, rounded up to whole 32-byte blocks).
template <typename T>
inline uint64_t ReduceWorkElements(uint64_t count) {
  const uint64_t perRepeat = kRepeatBytes / sizeof(T);
  const uint64_t perBlock = kUbBlockBytes / sizeof(T);
  const uint64_t repeats = std::max<uint64_t>(1, (count + perRepeat - 1) / perRepeat);
  return (repeats + perBlock - 1) / perBlock * perBlock;
}

// Binary tree of neighbouring pairs, each addition rounded to T.
template <typename T, typename Op>
inline ComputeT<T> TreeReduce(std::vector<ComputeT<T>> v, Op op) {
  while (v.size() > 1) {
    std::vector<ComputeT<T>> next((v.size() + 1) / 2);
    for (size_t i = 0; i < next.size(); ++i) {
      next[i] = 2 * i + 1 < v.size() ? Load(Store<T>(op(v[2 * i], v[2 * i + 1]))) : v[2 * i];
    }
    v.swap(next);
  }
  return v[0];
}

template <typename T, typename Op>
inline void Reduce(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                   const AscendC::LocalTensor<T>& work, int32_t count, Op op) {
  CheckCount(api, count);
  if (count == 0) Fail(Str(api, ": count is 0"));
  const T* s = src.Access(count, api, true);
  const uint64_t need = ReduceWorkElements<T>(count);
  if (work.GetSize() < need) {
    Fail(Str(api, ": work tensor has ", work.GetSize(), " elements; reducing ", count, " elements of ",
             TypeName<T>::value, " needs at least ", need));
  }
  T* w = work.Access(need, api, true);
  T* d = dst.Access(1, api, false);
  if (dst.UbAddress() % sizeof(T) != 0) Fail(Str(api, ": destination is not element aligned"));
  const uint64_t perRepeat = kRepeatBytes / sizeof(T);
  std::vector<ComputeT<T>> partials;
  for (uint64_t r = 0; r * perRepeat < uint64_t(count); ++r) {
    const uint64_t n = std::min<uint64_t>(perRepeat, count - r * perRepeat);
    std::vector<ComputeT<T>> v(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = Load(s[r * perRepeat + i]);
    partials.push_back(Load(Store<T>(TreeReduce<T>(v, op))));
  }
  ComputeT<T> result;
  if (Device().spec.reduceOrder == ReduceOrder::kRepeatsSequential) {
    result = partials[0];
    for (size_t i = 1; i < partials.size(); ++i) result = Load(Store<T>(op(result, partials[i])));
  } else {
    result = TreeReduce<T>(partials, op);
  }
  // The work area holds intermediate results afterwards: nothing a kernel may rely on.
  std::memset(static_cast<void*>(w), kGarbageByte, need * sizeof(T));
  d[0] = Store<T>(result);
}

}  // namespace ascendc_sim

namespace AscendC {

template <typename T>
inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& workLocal,
                      const int32_t count) {
  static_assert(ascendc_sim::kIsVectorFloat<T>, "ReduceSum: supported types are half and float");
  using C = ascendc_sim::ComputeT<T>;
  ascendc_sim::Reduce("ReduceSum", dst, src, workLocal, count, [](C a, C b) -> C { return a + b; });
}

template <typename T>
inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& workLocal,
                      const int32_t count, bool calIndex = false) {
  static_assert(ascendc_sim::kIsVectorFloat<T>, "ReduceMax: supported types are half and float");
  if (calIndex) ascendc_sim::Fail("ReduceMax: calIndex=true is not modelled by the simulator");
  using C = ascendc_sim::ComputeT<T>;
  ascendc_sim::Reduce("ReduceMax", dst, src, workLocal, count,
                      [](C a, C b) -> C { return (a != a || b != b) ? std::numeric_limits<C>::quiet_NaN() : std::max(a, b); });
}

// Precision conversion. Pairs modelled: half -> float, float -> half,
// bfloat16_t -> float and float -> bfloat16_t (the last two only where the SoC
// has bfloat16). Rounding modes modelled: NONE (= RINT when narrowing), RINT,
// FLOOR, CEIL, TRUNC.
template <typename T1, typename T2>
inline void Cast(const LocalTensor<T1>& dst, const LocalTensor<T2>& src, const RoundMode& roundMode,
                 const uint32_t count) {
  using ascendc_sim::Fail;
  using ascendc_sim::Str;
  constexpr const char* api = "Cast";
  constexpr bool widen = std::is_same_v<T1, float> && (std::is_same_v<T2, half> || std::is_same_v<T2, bfloat16_t>);
  constexpr bool narrow = std::is_same_v<T2, float> && (std::is_same_v<T1, half> || std::is_same_v<T1, bfloat16_t>);
  static_assert(widen || narrow, "Cast: the simulator models half/bfloat16_t <-> float only");
  if constexpr (std::is_same_v<T1, bfloat16_t> || std::is_same_v<T2, bfloat16_t>) {
    if (!ascendc_sim::Device().spec.hasBfloat16) {
      Fail(Str(api, ": bfloat16_t conversion is not supported on ", ascendc_sim::Device().spec.socName));
    }
  }
  int mode = 0;
  switch (roundMode) {
    case RoundMode::CAST_NONE:
    case RoundMode::CAST_RINT:
      mode = 0;
      break;
    case RoundMode::CAST_FLOOR:
      mode = 1;
      break;
    case RoundMode::CAST_CEIL:
      mode = 2;
      break;
    case RoundMode::CAST_TRUNC:
      mode = 3;
      break;
    default:
      Fail(Str(api, ": round mode ", int(roundMode), " is not modelled by the simulator"));
  }
  if (widen && roundMode != RoundMode::CAST_NONE) {
    Fail(Str(api, ": widening ", ascendc_sim::TypeName<T2>::value, " -> float takes RoundMode::CAST_NONE"));
  }
  if (count == 0) return;
  T1* d = dst.Access(count, api, true);
  const T2* s = src.Access(count, api, true);
  ascendc_sim::CheckOverlap(api, dst, count, src, count);
  for (uint32_t i = 0; i < count; ++i) d[i] = ascendc_sim::RoundTo<T1>(ascendc_sim::ToDouble(s[i]), mode);
}

}  // namespace AscendC

#endif  // ASCENDC_SIM_VECTOR_OPS_H_
