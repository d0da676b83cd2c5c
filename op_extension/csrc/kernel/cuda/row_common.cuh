// How the row kernels (norms, softmax over the last dim) are launched.
//
// One block owns one row at a time (a single warp when the row is short), and
// its threads own fixed slices of the row: thread t takes the accesses t,
// t + blockDim.x, ... of kVec elements each. Statistics are block reductions
// (block_reduce) whose order depends on the row length only.
//
// A row is read from memory once when it fits on chip: the first pass copies
// the thread's own slices into dynamic shared memory, later passes read them
// back from there. Each thread only ever reads the slices it wrote, so the cache
// needs no barrier. Rows too long for the cache re-read global memory instead
// (same code, another source pointer). The cache is kept under the 48 KiB that
// any block may use without cudaFuncSetAttribute, which would be an extra API
// call on every launch path (and during CUDA graph capture).
#pragma once

#include "cuda_common.cuh"

namespace op_ext::cuda::detail {

// Dynamic shared memory for the row cache; block_reduce's static arrays (at
// most 3 x 33 doubles per call site) fit in the rest of the 48 KiB.
inline constexpr size_t kRowCacheBytes = 44 * 1024;
inline constexpr int kMaxRowThreads = 1024;
// Accesses per thread the block size aims for: enough independent loads in
// flight per thread, without idling threads on short rows.
inline constexpr int64_t kAccessesPerThread = 4;

struct RowLaunch {
  bool vectorized;  // kVec-element (128-bit) accesses
  int threads;      // a multiple of 32, <= kMaxRowThreads
  size_t cache_bytes;  // dynamic shared memory; 0: the rows do not fit, re-read global
};

// `aligned`: every row pointer the kernel touches is 16-byte aligned at row 0.
// With cols a multiple of kVec every later row then is too.
template <typename T>
RowLaunch plan_rows(int64_t cols, bool aligned, int cached_arrays) {
  RowLaunch launch{};
  launch.vectorized = aligned && cols % kVecOf<T> == 0;
  const int64_t accesses = launch.vectorized ? cols / kVecOf<T> : cols;
  int64_t threads = ceil_div(ceil_div(accesses, kAccessesPerThread), 32) * 32;
  threads = threads < 32 ? 32 : (threads > kMaxRowThreads ? kMaxRowThreads : threads);
  launch.threads = static_cast<int>(threads);
  const size_t bytes = static_cast<size_t>(cached_arrays) * static_cast<size_t>(cols) * sizeof(T);
  launch.cache_bytes = bytes <= kRowCacheBytes ? bytes : 0;
  return launch;
}

inline unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxGridBlocks ? rows : kMaxGridBlocks);
}

// ---- rows whose squares overflow ---------------------------------------------------
//
// A float sum of squares overflows once |x| passes ~1.8e19 (a dot product dy*x
// near 3e38), although the normalised row is representable. The norm kernels
// keep their one-pass statistics and, only for a row whose statistics are not
// finite while its max |x| is, recompute them on x * scale, where scale is the
// exact power of two that brings max |x| into [0.5, 1) (kernel/cpu/norm.cpp
// does the same). The test is uniform across the block, so the extra
// block_reduce calls inside it are reached by every thread.

// max |x| over the row (NaN if the row holds one); every thread gets it.
template <int kVec, typename T>
__device__ __forceinline__ acc_t<T> row_abs_max(const T* src, int64_t accesses) {
  using Acc = acc_t<T>;
  Acc m[1] = {Acc(0)};
  for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
    Acc xv[kVec];
    load_acc<kVec>(src + v * kVec, xv);
#pragma unroll
    for (int e = 0; e < kVec; ++e) m[0] = MaxOp{}(m[0], dev_abs(xv[e]));
  }
  block_reduce(m, MaxOp{});
  return m[0];
}

// sum over the row of x * scale - shift (x - shift when scale is 1); every
// thread gets it. The scaled mean (shift 0) and the LayerNorm mean refinement.
template <int kVec, typename T>
__device__ __forceinline__ acc_t<T> row_shifted_sum(const T* src, int64_t accesses, acc_t<T> scale, acc_t<T> shift) {
  using Acc = acc_t<T>;
  Acc sum[1] = {Acc(0)};
  for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
    Acc xv[kVec];
    load_acc<kVec>(src + v * kVec, xv);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum[0] += (scale != Acc(1) ? xv[e] * scale : xv[e]) - shift;
  }
  block_reduce(sum, SumOp{});
  return sum[0];
}

// sum over the row of (x * scale - mean)^2 (scale 1: x - mean); every thread
// gets it. LayerNorm's variance, recomputed for a rescaled or refined mean, and
// (mean 0) RMSNorm's sum of squares of a rescaled row.
template <int kVec, typename T>
__device__ __forceinline__ acc_t<T> row_centered_squares(const T* src, int64_t accesses, acc_t<T> scale, acc_t<T> mean) {
  using Acc = acc_t<T>;
  Acc sum[1] = {Acc(0)};
  for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
    Acc xv[kVec];
    load_acc<kVec>(src + v * kVec, xv);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const Acc d = (scale != Acc(1) ? xv[e] * scale : xv[e]) - mean;
      sum[0] += d * d;
    }
  }
  block_reduce(sum, SumOp{});
  return sum[0];
}

// The power of two that brings max_abs into [0.5, 1); 0 when scaling cannot
// help (inf or NaN in the row, or an all-zero row).
template <typename Acc>
__device__ __forceinline__ Acc overflow_scale(Acc max_abs) {
  if (!dev_isfinite(max_abs) || max_abs == Acc(0)) return Acc(0);
  int exponent = 0;
  dev_frexp(max_abs, &exponent);
  return dev_ldexp(Acc(1), -exponent);
}

}  // namespace op_ext::cuda::detail
