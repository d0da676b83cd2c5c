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
#include <cmath>
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
      at::vec::convert_from_float<T>(lo, hi).store(p);
    } else {
      lo.store(p);
      hi.store(p + AVec::size());
    }
  }

  static inline void store_partial(T* p, int64_t count, const AVec& lo, const AVec& hi) {
    if constexpr (kIsReduced<T>) {
      at::vec::convert_from_float<T>(lo, hi).store(p, count);
    } else {
      const int64_t n = AVec::size();
      lo.store(p, std::min(count, n));
      if (count > n) {
        hi.store(p + n, count - n);
      }
    }
  }

  // Rounds to T and back, so later math sees exactly what was stored.
  static inline void round_to_storage(AVec& lo, AVec& hi) {
    if constexpr (kIsReduced<T>) {
      std::tie(lo, hi) = at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(lo, hi));
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

template <typename T>
inline void store_slice(T* p, int64_t count, const Vectorized<acc_t<T>>& lo,
                        const Vectorized<acc_t<T>>& hi) {
  if (count == Vec2<T>::kStep) {
    Vec2<T>::store(p, lo, hi);
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
  at::parallel_for(0, n, std::max<int64_t>(grain, 1), f);
}

// Number of rows one task handles so that it touches ~32K elements: enough to
// amortise the thread hand-off, small enough to balance two to many cores.
inline int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
}

inline constexpr int64_t kElementwiseGrain = 32768;

}  // namespace
}  // namespace op_ext::cpu
