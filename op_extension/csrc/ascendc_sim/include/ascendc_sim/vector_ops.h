// Vector instructions ("first n elements" forms) on the simulator.
//
// Each instruction computes every element exactly and rounds it once to the
// operand type, as the vector unit does: on half (float16) every instruction's
// result is a half, so a chain of instructions on half data rounds after each
// step. float results are IEEE single-precision results (float arithmetic on the
// host). Exp, Ln, Sqrt and Div return the correctly rounded value (their API
// pages document at most 1 ulp, for Ascend 950 only). Rsqrt and Reciprocal are
// worse, per their pages ("half results miss a relative 1e-3, float results a
// relative 1e-4"): the simulator returns them with that error (see
// kApproxRelError), so a kernel that needs more accuracy fails its reference test.
// Overflow: in inf/NaN mode (910B default) IEEE; in saturation mode (310P, the
// only mode there) a float16/bfloat16 result that is +-inf becomes +-max and a
// NaN becomes 0 (see Saturate).
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

// Saturation mode (aclrtSetDeviceSatMode, aclrtFloatOverflowMode page; CTRL[48]
// on the SetCtrlSpr page: "inf output saturated to +-MAX, NaN output to 0", for
// half and bfloat16_t results of computations and conversions). float results
// are never saturated.
template <typename T>
inline T Saturate(T v) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16_t>) {
    if (Device().spec.saturation) {
      const uint16_t sign = v.bits & 0x8000u;
      const uint16_t magnitude = v.bits & 0x7FFFu;
      constexpr uint16_t kInf = std::is_same_v<T, half> ? 0x7C00u : 0x7F80u;
      constexpr uint16_t kMax = std::is_same_v<T, half> ? 0x7BFFu : 0x7F7Fu;
      if (magnitude > kInf) return T::FromBits(0);                   // NaN -> 0
      if (magnitude == kInf) return T::FromBits(uint16_t(sign | kMax));  // +-inf -> +-max
    }
  }
  return v;
}

template <typename T>
inline T Store(ComputeT<T> v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return Saturate(RoundTo<T>(double(v), 0));
  }
}

// Rsqrt and Reciprocal: the relative error the simulator gives their results.
// Their API pages say only that half results miss a relative 1e-3 and float
// results a relative 1e-4 ("双千分之一" / "双万分之一"), so the model takes the
// smallest power of two past each bound: 2^-12 (2.4e-4) for float, 2^-9 (2.0e-3)
// for half. The sign of the error follows a hash of the input bits: deterministic,
// and not a uniform bias a test could calibrate away.
template <typename T>
inline constexpr double kApproxRelError = std::is_same_v<T, float> ? 0x1p-12 : 0x1p-9;

template <typename T>
inline ComputeT<T> Approximate(ComputeT<T> exact, ComputeT<T> input) {
  if (!(std::fabs(exact) < std::numeric_limits<ComputeT<T>>::infinity()) || exact == 0) return exact;
  const float in = float(input);
  uint32_t bits = 0;
  std::memcpy(&bits, &in, sizeof(bits));
  const double sign = ((bits * 0x9E3779B1u) >> 31) ? -1.0 : 1.0;
  return ComputeT<T>(double(exact) * (1.0 + sign * kApproxRelError<T>));
}

// "If src holds a non-positive value, the result may be unknown" (Sqrt and Rsqrt
// pages; Reciprocal: a zero value): such elements give NaN, the simulator's
// unknown value, so nothing downstream can depend on them.
template <typename C>
inline C Unknown() {
  return std::numeric_limits<C>::quiet_NaN();
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
  const uint64_t n = IssueInstruction(Pipe::kV);
  src.Use(Pipe::kV, n, api, count, false);
  dst.Use(Pipe::kV, n, api, count, true);
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
  const uint64_t n = IssueInstruction(Pipe::kV);
  a.Use(Pipe::kV, n, api, count, false);
  b.Use(Pipe::kV, n, api, count, false);
  dst.Use(Pipe::kV, n, api, count, true);
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
ASCENDC_SIM_UNARY(Sqrt, a > C(0) ? std::sqrt(a) : ascendc_sim::Unknown<C>())
ASCENDC_SIM_UNARY(Rsqrt, a > C(0) ? ascendc_sim::Approximate<T>(C(1) / std::sqrt(a), a) : ascendc_sim::Unknown<C>())
ASCENDC_SIM_UNARY(Reciprocal, a != C(0) ? ascendc_sim::Approximate<T>(C(1) / a, a) : ascendc_sim::Unknown<C>())
ASCENDC_SIM_UNARY(Relu, a > C(0) ? a : C(0))
#undef ASCENDC_SIM_UNARY

template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
  static_assert(ascendc_sim::kIsVectorFloat<T> || std::is_integral_v<T>, "Duplicate: unsupported type");
  constexpr const char* api = "Duplicate";
  ascendc_sim::CheckCount(api, count);
  if (count == 0) return;
  T* d = dst.Access(count, api, true);
  dst.Use(ascendc_sim::Pipe::kV, ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kV), api, count, true);
  for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
}

}  // namespace AscendC

namespace ascendc_sim {

// Elements of the work tensor (sharedTmpBuffer) the "first n elements" reductions
// write, per the API pages and the device implementations
// (impl/basic_api/kernel_operator_vec_reduce_intf_impl.h, ReduceMax / ReduceSum,
// and dav_c220|dav_m200/kernel_operator_vec_reduce_impl.h, ReduceImpl):
// - ReduceMax / ReduceMin: the first pass stores a (value, index) pair per full
//   256-byte repeat ("无论开发者是否需要返回索引，底层指令都会返回索引", ReduceMax page),
//   so 2 * max(1, count / elementsPerRepeat) elements, rounded up to 32 bytes --
//   twice what ReduceSum needs;
// - ReduceSum: on Atlas A2 (2201) one vcadd over the count, the work tensor is not
//   used ("方式一"); elsewhere one partial per full repeat, max(1, count /
//   elementsPerRepeat) elements rounded up to 32 bytes ("方式二").
// - ReduceMax with calIndex: every round's (value, index) pairs are kept for the
//   index of the next round, so the rounds' outputs are laid one after another,
//   each rounded up to 32 bytes (ReduceMax page, "sharedTmpBuffer所需空间设置",
//   需要返回最大值索引).
// A smaller work tensor is overrun on hardware (whatever follows it in the UB is
// overwritten -- in softmax, the row being reduced); the simulator refuses it.
template <typename T>
inline uint64_t ReduceWorkElements(const char* api, uint64_t count, bool calIndex = false) {
  const uint64_t perRepeat = kRepeatBytes / sizeof(T);
  const uint64_t perBlock = kUbBlockBytes / sizeof(T);
  auto roundBlock = [&](uint64_t n) { return (n + perBlock - 1) / perBlock * perBlock; };
  const uint64_t repeats = std::max<uint64_t>(1, count / perRepeat);
  const bool isSum = std::string(api) == "ReduceSum";
  if (isSum && Device().spec.npuArch == 2201) return 0;
  if (calIndex) {
    const uint64_t first = 2 * repeats;
    const uint64_t second = (first + perRepeat - 1) / perRepeat * 2;
    uint64_t need = roundBlock(first) + roundBlock(second);
    if (second > 2) need = roundBlock(first) + roundBlock(second) + roundBlock((second + perRepeat - 1) / perRepeat * 2);
    return need;
  }
  const uint64_t written = isSum ? repeats : 2 * repeats;
  return roundBlock(written);
}

// The index ReduceMax stores with calIndex: the first position of the maximum
// (ReduceMax page: with several maxima the smallest index), or of the first NaN.
template <typename T>
inline uint64_t ArgMax(const T* s, uint64_t count) {
  uint64_t best = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(s[i]);
    if (v != v) return i;
    if (v > static_cast<float>(s[best])) best = i;
  }
  return best;
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

// `calIndex` (ReduceMax): dst receives two elements, the maximum and its index
// ("dst结果存储顺序为最大值，最大值索引，若不需要索引，只会存储最大值", ReduceMax
// page 约束说明), the index as the bits of an integer of T's width ("索引按操作数的
// 数据类型存储"). Without it only dst[0] is written, as the devkit's ReduceImplNoIndex
// and ReduceTailCompute (dav_c220 / dav_m200) do.
template <typename T, typename Op>
inline void Reduce(const char* api, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                   const AscendC::LocalTensor<T>& work, int32_t count, Op op, bool calIndex = false) {
  CheckCount(api, count);
  if (count == 0) Fail(Str(api, ": count is 0"));
  const T* s = src.Access(count, api, true);
  if constexpr (sizeof(T) == 2) {
    if (calIndex && count > 65536) {
      Fail(Str(api, ": calIndex on ", count, " elements of ", TypeName<T>::value, ": a half index holds at most 65535 "
               "(rule: ReduceMax index range, ReduceMax page 约束说明)"));
    }
  }
  const uint64_t need = ReduceWorkElements<T>(api, count, calIndex);
  if (work.GetSize() < need) {
    Fail(Str(api, ": work tensor (sharedTmpBuffer) has ", work.GetSize(), " elements; reducing ", count,
             " elements of ", TypeName<T>::value, calIndex ? " with calIndex" : "", " on ", Device().spec.socName,
             " needs at least ", need, " (rule: reduce work size, ", api, " API page)"));
  }
  T* w = need > 0 ? work.Access(need, api, true) : nullptr;
  if (w != nullptr) {
    // The work tensor may reuse the source's space (ReduceMax page note) -- the
    // same start address -- but must not overlap it otherwise: the first pass
    // would overwrite source repeats it has not read yet.
    const uint64_t w0 = work.UbAddress(), w1 = w0 + need * sizeof(T);
    const uint64_t s0 = src.UbAddress(), s1 = s0 + uint64_t(count) * sizeof(T);
    if (w0 != s0 && w0 < s1 && s0 < w1) {
      Fail(Str(api, ": work tensor UB+", w0, "..", w1, " partly overlaps the source UB+", s0, "..", s1,
               " (rule: reduce work aliasing; it may only start where the source starts)"));
    }
  }
  const uint32_t dstCount = calIndex ? 2 : 1;
  T* d = dst.Access(dstCount, api, false);
  if (dst.UbAddress() % sizeof(T) != 0) Fail(Str(api, ": destination is not element aligned"));
  CheckOverlap(api, dst, dstCount, src, count);
  const uint64_t n = IssueInstruction(Pipe::kV);
  src.Use(Pipe::kV, n, api, count, false);
  if (w != nullptr) work.Use(Pipe::kV, n, api, need, true);
  dst.Use(Pipe::kV, n, api, dstCount, true);
  const uint64_t index = calIndex ? ArgMax(s, uint64_t(count)) : 0;
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
  if (w != nullptr) std::memset(static_cast<void*>(w), kGarbageByte, need * sizeof(T));
  d[0] = Store<T>(result);
  if (calIndex) {
    // The integer's bits, not its value: read back through ReinterpretCast<int32_t> (float) / <uint16_t> (half).
    if constexpr (sizeof(T) == 4) {
      const uint32_t bits = uint32_t(index);
      std::memcpy(static_cast<void*>(d + 1), &bits, sizeof(bits));
    } else {
      const uint16_t bits = uint16_t(index);
      std::memcpy(static_cast<void*>(d + 1), &bits, sizeof(bits));
    }
  }
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
  using C = ascendc_sim::ComputeT<T>;
  ascendc_sim::Reduce(
      "ReduceMax", dst, src, workLocal, count,
      [](C a, C b) -> C { return (a != a || b != b) ? std::numeric_limits<C>::quiet_NaN() : std::max(a, b); },
      calIndex);
}

}  // namespace AscendC

namespace ascendc_sim {

inline const char* RoundModeName(AscendC::RoundMode m) {
  static const char* const kNames[] = {"CAST_NONE", "CAST_RINT",  "CAST_FLOOR", "CAST_CEIL",
                                       "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
  const int i = int(m);
  return i >= 0 && i < 7 ? kNames[i] : "an invalid RoundMode";
}

// Round modes Cast accepts for each (src, dst) pair on each SoC: the data type
// tables of the Cast page ("Atlas A2 训练系列产品 ... 支持的数据类型组合情况" and
// "Atlas 推理系列产品AI Core ...") and CastIntrinsicsImpl in
// impl/basic_api/dav_c220|dav_m200/kernel_operator_vec_vconv_impl.h. Any other mode
// is an ASCENDC_ASSERT there, which is empty in device builds: no instruction
// runs and dst keeps whatever it held. Bit i set: RoundMode(i) accepted.
template <typename Dst, typename Src>
inline uint32_t SupportedCastModes(uint32_t npuArch) {
  using AscendC::RoundMode;
  constexpr auto bit = [](RoundMode m) { return 1u << int(m); };
  const uint32_t directed = bit(RoundMode::CAST_RINT) | bit(RoundMode::CAST_FLOOR) | bit(RoundMode::CAST_CEIL) |
                            bit(RoundMode::CAST_ROUND) | bit(RoundMode::CAST_TRUNC);
  if constexpr (std::is_same_v<Dst, float>) {
    return bit(RoundMode::CAST_NONE);  // half / bfloat16_t -> float is exact
  } else if constexpr (std::is_same_v<Dst, half>) {
    // float -> half: 2201 any mode; 2002 only CAST_NONE (nearest even) and CAST_ODD.
    return npuArch == 2201 ? directed | bit(RoundMode::CAST_NONE) | bit(RoundMode::CAST_ODD)
                           : bit(RoundMode::CAST_NONE) | bit(RoundMode::CAST_ODD);
  } else {
    // float -> bfloat16_t (2201 only): the directed modes; CAST_NONE and CAST_ODD
    // are asserts (vconv_f322bf16 exists only with an explicit rounding).
    return npuArch == 2201 ? directed : 0u;
  }
}

}  // namespace ascendc_sim

namespace AscendC {

// Precision conversion. Pairs modelled: half -> float, float -> half,
// bfloat16_t -> float and float -> bfloat16_t (the last two only where the SoC
// has bfloat16), each with the round modes SupportedCastModes lists for the SoC.
// CAST_NONE narrowing rounds to nearest even ("CAST_NONE: 在转换有精度损失时表示
// CAST_RINT模式"). In saturation mode a half / bfloat16_t result that is inf or NaN
// is saturated (Saturate).
template <typename T1, typename T2>
inline void Cast(const LocalTensor<T1>& dst, const LocalTensor<T2>& src, const RoundMode& roundMode,
                 const uint32_t count) {
  using ascendc_sim::Fail;
  using ascendc_sim::Str;
  constexpr const char* api = "Cast";
  constexpr bool widen = std::is_same_v<T1, float> && (std::is_same_v<T2, half> || std::is_same_v<T2, bfloat16_t>);
  constexpr bool narrow = std::is_same_v<T2, float> && (std::is_same_v<T1, half> || std::is_same_v<T1, bfloat16_t>);
  static_assert(widen || narrow, "Cast: the simulator models half/bfloat16_t <-> float only");
  const auto& spec = ascendc_sim::Device().spec;
  if constexpr (std::is_same_v<T1, bfloat16_t> || std::is_same_v<T2, bfloat16_t>) {
    if (!spec.hasBfloat16) {
      Fail(Str(api, ": bfloat16_t conversion is not supported on ", spec.socName));
    }
  }
  const uint32_t supported = ascendc_sim::SupportedCastModes<T1, T2>(spec.npuArch);
  if (int(roundMode) < 0 || int(roundMode) > 6 || !(supported & (1u << int(roundMode)))) {
    std::string list;
    for (int m = 0; m < 7; ++m) {
      if (supported & (1u << m)) list += (list.empty() ? "" : ", ") + std::string(ascendc_sim::RoundModeName(RoundMode(m)));
    }
    Fail(Str(api, ": RoundMode::", ascendc_sim::RoundModeName(roundMode), " is not supported for ",
             ascendc_sim::TypeName<T2>::value, " -> ", ascendc_sim::TypeName<T1>::value, " on ", spec.socName,
             " (rule: Cast round modes per SoC, Cast API page; supported: ", list,
             "); on hardware no instruction runs and dst keeps its old content"));
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
    case RoundMode::CAST_ROUND:
      mode = 4;
      break;
    case RoundMode::CAST_ODD:
      mode = 5;
      break;
  }
  if (count == 0) return;
  T1* d = dst.Access(count, api, true);
  const T2* s = src.Access(count, api, true);
  ascendc_sim::CheckOverlap(api, dst, count, src, count);
  const uint64_t n = ascendc_sim::IssueInstruction(ascendc_sim::Pipe::kV);
  src.Use(ascendc_sim::Pipe::kV, n, api, count, false);
  dst.Use(ascendc_sim::Pipe::kV, n, api, count, true);
  for (uint32_t i = 0; i < count; ++i) {
    d[i] = ascendc_sim::Saturate(ascendc_sim::RoundTo<T1>(ascendc_sim::ToDouble(s[i]), mode));
  }
}

}  // namespace AscendC

#endif  // ASCENDC_SIM_VECTOR_OPS_H_
