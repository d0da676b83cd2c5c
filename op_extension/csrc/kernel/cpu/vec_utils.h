// Shared helpers for the CPU kernels: accumulation types, loads and stores that
// widen float16/bfloat16 to float, and the dtype switch.
//
// Included by kernel files that are compiled once per instruction set, so
// everything here lives in an anonymous namespace (each variant gets its own
// copy) and builds on at::vec, whose inline namespace CPU_CAPABILITY differs per
// variant too.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "cpu_kernels.h"

namespace op_ext::cpu {
namespace {

using at::vec::Vectorized;

// float16 and bfloat16 are computed in float; double stays double so that
// gradcheck sees exact derivatives.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
inline constexpr bool kIsReduced =
    std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>;

// ---- Streaming stores (cpu_kernels.h, streaming_store_bytes) ----------------
//
// stream_vector writes one whole vector register with a non-temporal store,
// which needs an address aligned to the register's size (kStreamAlign). The
// DEFAULT variant has no such store (kStreamAlign 0): it never streams.
#if defined(CPU_CAPABILITY_AVX512)
inline constexpr int64_t kStreamAlign = 64;
inline void stream_vector(float* p, const Vectorized<float>& v) { _mm512_stream_ps(p, v); }
inline void stream_vector(double* p, const Vectorized<double>& v) { _mm512_stream_pd(p, v); }
template <typename R, typename = std::enable_if_t<kIsReduced<R>>>
inline void stream_vector(R* p, const Vectorized<R>& v) {
  _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
}
#elif defined(CPU_CAPABILITY_AVX2)
inline constexpr int64_t kStreamAlign = 32;
inline void stream_vector(float* p, const Vectorized<float>& v) { _mm256_stream_ps(p, v); }
inline void stream_vector(double* p, const Vectorized<double>& v) { _mm256_stream_pd(p, v); }
template <typename R, typename = std::enable_if_t<kIsReduced<R>>>
inline void stream_vector(R* p, const Vectorized<R>& v) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
}
#else
inline constexpr int64_t kStreamAlign = 0;
template <typename S>
inline void stream_vector(S* p, const Vectorized<S>& v) { v.store(p); }
#endif

// (kStreamAlign, or 1 where it is 0, for the arithmetic of code that never streams then.)
inline constexpr int64_t kStreamModulus = kStreamAlign == 0 ? 1 : kStreamAlign;

inline bool stream_aligned(const void* p) {
  return kStreamAlign != 0 && reinterpret_cast<uintptr_t>(p) % kStreamModulus == 0;
}

// Whether a kernel call that moves `bytes` (inputs and outputs) writes its
// outputs with streaming stores; counted once per call that does.
inline bool streams_outputs(int64_t bytes) {
  if (kStreamAlign == 0 || bytes <= streaming_store_bytes()) return false;
  count_streamed_call();
  return true;
}

// How many of out[0, len) precede its first stream_aligned element: a kernel
// writes them with ordinary stores, then streams from there (all of them where
// out cannot be aligned, or the variant never streams).
template <typename T>
inline int64_t stream_head(const T* out, int64_t len) {
  if (kStreamAlign == 0) return len;
  const int64_t misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % kStreamModulus);
  if (misalign % static_cast<int64_t>(sizeof(T)) != 0) return len;
  return std::min(len, misalign == 0 ? 0 : (kStreamAlign - misalign) / static_cast<int64_t>(sizeof(T)));
}

// Makes a task's streaming stores visible to every core before the task is
// reported done: they are weakly ordered, and the thread pool's hand-off only
// orders ordinary stores. A few cycles where the task streamed nothing.
inline void stream_fence() {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  _mm_sfence();
#endif
}

// ---- float -> float16/bfloat16 (cpu_kernels.h, native_bf16_narrowing) -----
//
// at::vec rounds float to bfloat16 with integer arithmetic: per 16 values a
// shift, an and, two adds, a NaN compare and blend, then a pack and a permute
// per 32. AVX512-BF16's VCVTNE2PS2BF16 does 32 in one instruction, with the same
// rounding (to nearest even) on every number but two kinds: it reads a
// denormal float as zero (at::vec rounds it to a bfloat16 denormal or zero)
// and keeps a NaN's sign and payload (at::vec writes 0xffff). A pair holding
// either kind is therefore converted by at::vec, so that the bits are the same
// both ways; one VFPCLASSPS per 16 values finds them. The AVX512 variant is
// compiled without -mavx512bf16 (the CPU may lack it: native_bf16_narrowing()
// says), hence the instruction in asm, which the assembler takes regardless.
#if defined(CPU_CAPABILITY_AVX512)
// VFPCLASSPS categories: quiet NaN (0x01), denormal (0x20), signalling NaN (0x80).
inline constexpr int kNanOrDenormal = 0x01 | 0x20 | 0x80;

// The native conversion of lo, hi into `out`; false, leaving `out` alone, where
// it is off or the pair holds a NaN or a denormal.
inline bool narrow_to_bfloat16_natively(const Vectorized<float>& lo, const Vectorized<float>& hi,
                                        Vectorized<c10::BFloat16>& out) {
  if (!native_bf16_narrowing() ||
      (_mm512_fpclass_ps_mask(lo, kNanOrDenormal) | _mm512_fpclass_ps_mask(hi, kNanOrDenormal)) != 0) {
    return false;
  }
  __m512i packed;
  // AT&T order: the last source (lo) fills the lower 16 lanes.
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed) : "v"(static_cast<__m512>(hi)), "v"(static_cast<__m512>(lo)));
  out = packed;
  return true;
}
#endif

// lo, hi (2 x Vectorized<float>::size() values) rounded to one Vectorized<R>.
template <typename R>
inline Vectorized<R> narrow(const Vectorized<float>& lo, const Vectorized<float>& hi) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<R, c10::BFloat16>) {
    Vectorized<R> out;
    if (narrow_to_bfloat16_natively(lo, hi, out)) return out;
  }
#endif
  return at::vec::convert_from_float<R>(lo, hi);
}

// ---- exp of float vectors ------------------------------------------------
//
// exp_fast(x), for the kernels that used ATen's exp_u20 (softmax, sigmoid and
// silu, the 16-bit GELUs), with exp_u20's contract: x finite or -inf (for
// +inf and NaN see kExpFastKeepsInfinities below). On AVX-512: x clamped
// to +-104 (VRANGEPS, one instruction; past that e^x is 0 or inf in float
// anyway), x = n ln2 + r with n = round(x / ln2) and r in [-ln2/2, ln2/2] (one
// FMA with ln2 rounded to float, as exp_u20 does: n times its error is below
// 3e-7 of r's scale at |x| <= 104), e^r = 1 + r (1 + r q(r)) with q of degree
// 3 fitted to e^r's relative error by scripts/fit_exp_polynomial.py (1.06e-7;
// Taylor's degree 6, one FMA more, left 1.2e-7), times 2^n by VSCALEFPS, which
// gives 0 and inf past the float range: 10 instructions, where exp_u20 takes
// about 20, and as exact: 4.0e-7 relative at most over every float down to
// FLT_MIN (Taylor's degree 6 gave 4.5e-7; exp_u20 3.7e-7 over |x| <= 80).
// exp_precise below, for float outputs, takes ln2 in two parts and q of
// degree 4: 0.77e-7. tests/test_cpu_numerics.py checks both
// (numerics_check.h). The portable variant keeps exp_u20.
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
// e^r for |r| <= ln2 / 2 (and a little past it), to 1.06e-7 relative (exp_fast).
inline Vectorized<float> exp_of_reduced(const Vectorized<float>& r) {
  using V = Vectorized<float>;
  V p(0.008312507532536983f);
  p = at::vec::fmadd(p, r, V(0.04189034178853035f));
  p = at::vec::fmadd(p, r, V(0.16667115688323975f));
  p = at::vec::fmadd(p, r, V(0.499992311000824f));
  p = at::vec::fmadd(p, r, V(1.0f));
  return at::vec::fmadd(p, r, V(1.0f));
}
#endif

#if defined(CPU_CAPABILITY_AVX512)
inline Vectorized<float> exp_fast(const Vectorized<float>& v) {
  // VRANGEPS imm 0b0010: the smaller magnitude of the two, with the sign of x.
  const __m512 x = _mm512_range_ps(v, _mm512_set1_ps(104.0f), 0x02);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147180559945309f), x);
  return _mm512_scalef_ps(exp_of_reduced(Vectorized<float>(r)), n);
}
#elif defined(CPU_CAPABILITY_AVX2)
// AVX2 has neither VRANGEPS nor VSCALEFPS: x is clamped to [-88, 89] by two
// instructions, and 2^n is built in the exponent field. One FMA adds
// 1.5 * 2^23 + 127 to x / ln2, whose float then holds round(x / ln2) + 127 in
// its low mantissa bits (a float of [2^23, 2^24) is an integer); shifted left by
// 23, those bits are 2^n, 0 for n = -127 (x below -87.68, where e^x is a
// denormal: flushed, as exp_u20 does below FLT_MIN) and inf for n = 128 (x
// above 88.38, where e^x is within 2^-0.35 of overflowing; no caller's
// argument comes near: softmax's and GELU's are <= 0, and sigmoid's 1 / (1 +
// e^-x) is as good as 0 there). The same polynomial: 12 instructions, where
// exp_u20 takes about 20.
inline Vectorized<float> exp_fast(const Vectorized<float>& v) {
  const __m256 x = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-88.0f)), _mm256_set1_ps(89.0f));
  const __m256 shifter = _mm256_set1_ps(12583039.0f);  // 1.5 * 2^23 + 127
  const __m256 biased = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), shifter);
  const __m256 n = _mm256_sub_ps(biased, shifter);  // round(x / ln2), exactly
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147180559945309f), x);
  const __m256 two_to_n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(biased), 23));
  return _mm256_mul_ps(exp_of_reduced(Vectorized<float>(r)), two_to_n);
}
#else
inline Vectorized<float> exp_fast(const Vectorized<float>& v) { return v.exp_u20(); }
#endif
// Whether exp_fast also gives 0 for -inf and inf for +inf, and a number (not
// NaN: inf on AVX-512, 0 on AVX2) for NaN: their clamps do that, so a
// caller whose result takes x's NaN anyway (sigmoid times x, as silu and GELU)
// needs no test of its lanes. exp_u20 saturates instead: the portable variant's
// callers send vectors holding an infinity or NaN to the exact exp.
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
constexpr bool kExpFastKeepsInfinities = true;
#else
constexpr bool kExpFastKeepsInfinities = false;
#endif

// exp_precise(x): e^x for results stored as float (GELU's float32 outputs),
// where exp_fast's 4.0e-7 would be several ulp. Every float is in its
// contract: NaN gives NaN, -inf 0, +inf inf, and results below FLT_MIN come
// out as denormals. x = n ln2 + r as in exp_fast, but with ln2 in two parts
// (float(ln2) and the rest, an FMA each), so that n times ln2's rounding error
// no longer shows in r, and e^r = 1 + r (1 + r q(r)) with q of degree 4 fitted
// to e^r's relative error on |r| <= ln2 / 2 by scripts/fit_exp_polynomial.py
// (3.7e-9 with its coefficients in float, where the Taylor polynomial needs
// degree 7 for 5.3e-9: one FMA fewer, 7% of GELU-tanh). Measured over every float with
// |x| <= 104 on both variants: at most 0.90 ulp from the exact exponential,
// denormal results included, and 7.7e-8 relative over the normal ones, where
// Sleef's exp (ATen's Vectorized::exp, which GELU's float path called before,
// a function call per vector, most of that kernel's time) is documented within
// 1 ulp. tests/test_cpu_numerics.py holds it to 0.95 ulp on every 7th float.
// 13 instructions on AVX-512, 23 on AVX2 (2^n in two factors), inline; the
// portable variant keeps Sleef's.
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
// e^r for |r| <= ln2 / 2, to 3.7e-9 relative (exp_precise).
inline Vectorized<float> exp_of_reduced_precise(const Vectorized<float>& r) {
  using V = Vectorized<float>;
  V p(0.0013814534759148955f);
  p = at::vec::fmadd(p, r, V(0.00836874544620514f));
  p = at::vec::fmadd(p, r, V(0.04166839271783829f));
  p = at::vec::fmadd(p, r, V(0.1666652113199234f));
  p = at::vec::fmadd(p, r, V(0.4999999403953552f));
  p = at::vec::fmadd(p, r, V(1.0f));
  return at::vec::fmadd(p, r, V(1.0f));
}
// ln2 = kLn2Hi + kLn2Lo, kLn2Hi = float(ln2).
constexpr float kLn2Hi = 0.693147182464599609375f;
constexpr float kLn2Lo = -1.904654299957768e-09f;
#endif

#if defined(CPU_CAPABILITY_AVX512)
inline Vectorized<float> exp_precise(const Vectorized<float>& v) {
  // Clamped to +-104: past it e^x is 0 (below half the smallest denormal) or
  // inf. Not by VRANGEPS, as in exp_fast: it turns NaN into 104. MAXPS and
  // MINPS return their second operand when either is NaN: v second, so that a
  // NaN lane stays NaN through everything after. VSCALEFPS rounds p * 2^n
  // once, to a denormal where it is one.
  const __m512 x = _mm512_min_ps(_mm512_set1_ps(104.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), v));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  return _mm512_scalef_ps(exp_of_reduced_precise(Vectorized<float>(r)), n);
}
#elif defined(CPU_CAPABILITY_AVX2)
inline Vectorized<float> exp_precise(const Vectorized<float>& v) {
  // MAXPS/MINPS return their second operand when either is NaN: v second, so
  // that a NaN lane stays NaN through the clamp and everything after it.
  const __m256 x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), v));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  const __m256 p = exp_of_reduced_precise(Vectorized<float>(r));
  // 2^n for n in [-150, 128], as 2^h * 2^(n - h) with h = n / 2 rounded toward
  // zero: both factors are normal floats, built in the exponent field, and the
  // second product rounds once, to a denormal, a float or inf.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i h = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 two_h = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  const __m256 two_rest =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, two_h), two_rest);
}
#else
inline Vectorized<float> exp_precise(const Vectorized<float>& v) { return v.exp(); }
#endif

// A step is two accumulator vectors' worth of T: one Vectorized<T> for the
// 16-bit types, two for float and double. Loops advance by kStep.
template <typename T>
struct Vec2 {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  static constexpr int64_t kStep = 2 * AVec::size();

  static inline void load(const T* p, AVec& lo, AVec& hi) {
    if constexpr (kIsReduced<T>) {
      std::tie(lo, hi) = at::vec::convert_to_float<T>(Vectorized<T>::loadu(p));
    } else {
      lo = AVec::loadu(p);
      hi = AVec::loadu(p + AVec::size());
    }
  }

  // Loads `count` < kStep elements; the lanes past them read as zero.
  static inline void load_partial(const T* p, int64_t count, AVec& lo, AVec& hi) {
    if constexpr (kIsReduced<T>) {
      std::tie(lo, hi) = at::vec::convert_to_float<T>(Vectorized<T>::loadu(p, count));
    } else {
      const int64_t n = AVec::size();
      lo = AVec::loadu(p, std::min(count, n));
      hi = count > n ? AVec::loadu(p + n, count - n) : AVec(Acc(0));
    }
  }

  static inline void store(T* p, const AVec& lo, const AVec& hi) {
    if constexpr (kIsReduced<T>) {
      narrow<T>(lo, hi).store(p);
    } else {
      lo.store(p);
      hi.store(p + AVec::size());
    }
  }

  // store() with streaming stores; p must be stream_aligned (a step is a whole
  // number of registers: 2 for float and double, 1 for the 16-bit types).
  static inline void store_stream(T* p, const AVec& lo, const AVec& hi) {
    if constexpr (kIsReduced<T>) {
      stream_vector(p, narrow<T>(lo, hi));
    } else {
      stream_vector(p, lo);
      stream_vector(p + AVec::size(), hi);
    }
  }

  static inline void store_partial(T* p, int64_t count, const AVec& lo, const AVec& hi) {
    if constexpr (kIsReduced<T>) {
      narrow<T>(lo, hi).store(p, count);
    } else {
      const int64_t n = AVec::size();
      lo.store(p, std::min(count, n));
      if (count > n) {
        hi.store(p + n, count - n);
      }
    }
  }
};

// Visits [0, cols) in kStep slices; `count` is kStep except for the tail.
template <typename T, typename F>
inline void for_each_slice(int64_t cols, const F& f) {
  constexpr int64_t kStep = Vec2<T>::kStep;
  int64_t i = 0;
  for (; i + kStep <= cols; i += kStep) f(i, kStep);
  if (i < cols) f(i, cols - i);
}

template <typename T>
inline void load_slice(const T* p, int64_t count, Vectorized<acc_t<T>>& lo,
                       Vectorized<acc_t<T>>& hi) {
  if (count == Vec2<T>::kStep) {
    Vec2<T>::load(p, lo, hi);
  } else {
    Vec2<T>::load_partial(p, count, lo, hi);
  }
}

// stream: a whole step is written with streaming stores (p stream_aligned). A
// flag tested per step rather than a template parameter: both kinds of store
// then follow one copy of the kernel's arithmetic, which the compiler might
// otherwise contract into FMAs differently in two instantiations (1 ulp apart
// in float64 on AVX2), and streaming must not change a bit.
template <typename T>
inline void store_slice(T* p, int64_t count, const Vectorized<acc_t<T>>& lo,
                        const Vectorized<acc_t<T>>& hi, bool stream = false) {
  if (count == Vec2<T>::kStep) {
    if (stream) {
      Vec2<T>::store_stream(p, lo, hi);
    } else {
      Vec2<T>::store(p, lo, hi);
    }
  } else {
    Vec2<T>::store_partial(p, count, lo, hi);
  }
}

// Asks for [p, p + bytes) to be brought into cache. Row kernels call it for the
// next row while they compute the current one from L1: their first pass over a
// row is a dependent read from memory, and without it the memory bus would sit
// idle during every cache-resident pass.
inline void prefetch_bytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

template <typename Acc>
inline Acc reduce_add(const Vectorized<Acc>& v) {
  return at::vec::vec_reduce_all<Acc>(
      [](Vectorized<Acc>& a, Vectorized<Acc>& b) { return a + b; }, v);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the C++ type of `dtype`.
template <typename F>
inline void dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      f(TypeTag<float>{});
      break;
    case DType::Float64:
      f(TypeTag<double>{});
      break;
    case DType::Float16:
      f(TypeTag<c10::Half>{});
      break;
    case DType::BFloat16:
      f(TypeTag<c10::BFloat16>{});
      break;
  }
}

// Splits [0, n) into chunks of at least `grain` items across ATen's thread pool.
template <typename F>
inline void parallel_range(int64_t n, int64_t grain, const F& f) {
  at::parallel_for(0, n, std::max<int64_t>(grain, 1), [&](int64_t begin, int64_t end) {
    f(begin, end);
    stream_fence();
  });
}

// Elements one task of an elementwise kernel handles at least.
inline constexpr int64_t kElementwiseGrain = 32768;

// Applies f to every kStep-wide slice of the inputs. f takes the input vectors
// and fills the output vectors, once for the low and once for the high half.
// Calls that move more than streaming_store_bytes() write the outputs' whole
// steps with streaming stores, from the first element where all of them are
// aligned (the outputs are allocated alike, so one such element serves all).
template <typename T, size_t kIn, size_t kOut, typename F>
void vec_map(int64_t n, const std::array<const T*, kIn>& in, const std::array<T*, kOut>& out,
             const F& f) {
  using V = Vec2<T>;
  using AVec = typename V::AVec;
  const bool stream = streams_outputs(n * static_cast<int64_t>((kIn + kOut) * sizeof(T)));
  parallel_range(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    std::array<AVec, kIn> lo, hi;
    std::array<AVec, kOut> out_lo, out_hi;
    // [begin, begin + head) is stored plainly, then whole steps stream.
    int64_t head = 0;
    bool stream_steps = stream;
    if (stream) {
      head = stream_head(out[0] + begin, end - begin);
      for (size_t k = 0; k < kOut; ++k) stream_steps = stream_steps && stream_aligned(out[k] + begin + head);
      if (!stream_steps) head = 0;
    }
    // Where a step is half a cache line (the 16-bit types on AVX2: one 32-byte
    // register), a line's first half is held in registers until its second is
    // computed, and both are streamed back to back. Streamed one by one, with a
    // step's arithmetic between them, the halves left the write-combining
    // buffer as partial lines, each costing the memory a read and a write:
    // SwiGLU in bfloat16 ran at half the speed of ordinary stores. A half step
    // that cannot be paired (a line's second half at a task's start, a first
    // half at its end, outputs in different phases of their lines) is stored
    // plainly.
    constexpr bool kHalfLineSteps = kIsReduced<T> && V::kStep * static_cast<int64_t>(sizeof(T)) == 32;
    if constexpr (kHalfLineSteps) {
      const uintptr_t phase = reinterpret_cast<uintptr_t>(out[0] + begin + head) % 64;
      for (size_t k = 1; k < kOut; ++k) {
        stream_steps = stream_steps && reinterpret_cast<uintptr_t>(out[k] + begin + head) % 64 == phase;
      }
    }
    std::array<Vectorized<T>, kOut> held;
    bool holding = false;
    int64_t i = begin;
    while (i < end) {
      const int64_t count = i == begin && head > 0 ? head : std::min(V::kStep, end - i);
      // One test for all inputs, so that the loops over them unroll and the
      // vectors stay in registers (a test per input kept them on the stack).
      if (count == V::kStep) {
#pragma GCC unroll 4
        for (size_t k = 0; k < kIn; ++k) V::load(in[k] + i, lo[k], hi[k]);
      } else {
        for (size_t k = 0; k < kIn; ++k) V::load_partial(in[k] + i, count, lo[k], hi[k]);
      }
      f(lo, out_lo);
      f(hi, out_hi);
      if constexpr (kHalfLineSteps) {
        if (holding) {
          for (size_t k = 0; k < kOut; ++k) {
            stream_vector(out[k] + i - V::kStep, held[k]);
            stream_vector(out[k] + i, narrow<T>(out_lo[k], out_hi[k]));
          }
          holding = false;
        } else if (stream_steps && count == V::kStep && i + 2 * V::kStep <= end &&
                   reinterpret_cast<uintptr_t>(out[0] + i) % 64 == 0) {
          for (size_t k = 0; k < kOut; ++k) held[k] = narrow<T>(out_lo[k], out_hi[k]);
          holding = true;
        } else {
          for (size_t k = 0; k < kOut; ++k) store_slice(out[k] + i, count, out_lo[k], out_hi[k]);
        }
      } else {
        for (size_t k = 0; k < kOut; ++k) store_slice(out[k] + i, count, out_lo[k], out_hi[k], stream_steps);
      }
      i += count;
    }
  });
}

// Number of rows one task handles so that it touches ~32K elements: enough to
// amortise the thread hand-off, small enough to balance two to many cores.
inline int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
}


}  // namespace
}  // namespace op_ext::cpu
