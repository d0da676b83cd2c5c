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
// (same code, another source pointer). The cache may take up to 128 KiB, past
// the 48 KiB a block gets by default (launch_kernel opts the kernel in once per
// device): a forward step of 4 rows of 8192 float32 is cached whole (its block
// reads the weight and bias once for the 4), and a backward caches dy and x of
// 16384 floats. A block that uses it all has an SM to itself (228 KiB on sm_90,
// 164 KiB on sm_80), with up to 1024 threads, each with several rows' loads in
// flight; the smaller opt-in of sm_86/sm_89 (99 KiB) caps it there. Not yet
// timed on a GPU against a 2-blocks-per-SM budget.
#pragma once

#include "cuda_common.cuh"

namespace op_ext::cuda::detail {

// Dynamic shared memory for the row cache: at most kRowCacheMaxBytes, and
// kStaticSharedReserveBytes under the device's opt-in maximum, which the static
// arrays share (block_reduce's: at most 3 x 33 doubles per call site). On a
// device that cannot opt in, 48 KiB less the reserve.
inline constexpr size_t kRowCacheMaxBytes = 128 * 1024;
inline constexpr size_t kStaticSharedReserveBytes = 4 * 1024;

inline size_t row_cache_bytes() {
  const size_t optin = max_dynamic_shared_optin() - kStaticSharedReserveBytes;
  return optin < kRowCacheMaxBytes ? optin : kRowCacheMaxBytes;
}
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
  launch.cache_bytes = bytes <= row_cache_bytes() ? bytes : 0;
  return launch;
}

inline unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxGridBlocks ? rows : kMaxGridBlocks);
}

// ---- combining a row's statistics: one block, or the blocks of a cluster --------------
//
// A row held by one block reduces its statistics with block_reduce. A row held
// by a thread-block cluster (sm_90; norm.cu, "rows held by a cluster") is cut
// into one slice of columns per block: each block reduces its slice, then every
// block combines the blocks' values in rank order, so all the blocks of the
// cluster get the same bits, run after run. The kernels and the helpers below
// take either reducer as `reduce(values, op)`.

struct BlockRowReduce {
  template <typename Op, typename Acc, int N>
  __device__ __forceinline__ void operator()(Acc (&v)[N], const Op& op) {
    block_reduce(v, op);
  }
};

// Values a cluster reduction exchanges at most (a step's rows).
inline constexpr int kClusterExchangeValues = 4;

// The dynamic shared memory a cluster reduction uses, after the row cache:
// two slots that alternate between calls, and the combined values.
template <typename Acc>
inline constexpr size_t kClusterExchangeBytes = 3 * kClusterExchangeValues * sizeof(Acc);

template <typename Acc>
struct ClusterRowReduce {
  Acc* exchange;      // kClusterExchangeBytes of this block's dynamic shared memory
  unsigned blocks;    // of the cluster
  int parity = 0;     // the slot this call writes

  // Each block publishes its values in a slot of its shared memory; after the
  // cluster barrier, lane i of warp 0 reads value i of every block's slot (in
  // rank order, distributed shared memory) and the block shares the result.
  // Why two slots: a block may publish call k + 1's values while a slower
  // block still reads call k's; call k + 2 writes the first slot again only
  // after call k + 1's barrier, which every block reaches after its reads of
  // call k. The kernel ends with cluster_sync(), so no block exits while
  // another still reads its slots.
  template <typename Op, int N>
  __device__ __forceinline__ void operator()(Acc (&v)[N], const Op& op) {
    static_assert(N <= kClusterExchangeValues, "more values than the exchange holds");
    block_reduce(v, op);  // every thread has the block's values
    Acc* const slot = exchange + parity * kClusterExchangeValues;
    Acc* const combined = exchange + 2 * kClusterExchangeValues;
    parity ^= 1;
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < N; ++i) store_shared(slot + i, v[i]);
    }
    cluster_sync();
    const int lane = static_cast<int>(threadIdx.x);
    if (lane < N) {
      Acc total = load_shared(cluster_map_shared(slot, 0) + lane);
      for (unsigned r = 1; r < blocks; ++r) total = op(total, load_shared(cluster_map_shared(slot, r) + lane));
      store_shared(combined + lane, total);
    }
    // block_reduce's opening barrier keeps the next call's writes of
    // `combined` behind these reads.
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = load_shared(combined + i);
  }
};

// ---- rows held by a cluster (sm_90) ------------------------------------------------
//
// Block rank k of a cluster of `blocks` owns the columns [k * slice_cols,
// (k + 1) * slice_cols) of each row (the last rank fewer); the cluster takes
// rows where a block would. blocks 1: no cluster, one block owns the row.
struct RowCluster {
  int blocks = 1;
  int64_t slice_cols = 0;
  size_t exchange_offset = 0;  // of ClusterRowReduce's exchange in dynamic shared memory
};

inline constexpr int kMaxClusterBlocks = 8;  // the portable cluster size

// The part of the rows a block works on: its columns, and its index among the
// launch's blocks (or, in a cluster, the cluster's among the clusters).
struct RowSlice {
  int64_t col0;
  int64_t cols;
  int64_t unit;
  int64_t units;
};

template <bool kCluster>
__device__ __forceinline__ RowSlice row_slice(int64_t cols, const RowCluster& cluster) {
  if constexpr (kCluster) {
    const int64_t col0 = static_cast<int64_t>(cluster_block_rank()) * cluster.slice_cols;
    return {col0, min(cluster.slice_cols, cols - col0), blockIdx.x / cluster.blocks, gridDim.x / cluster.blocks};
  } else {
    return {0, cols, blockIdx.x, gridDim.x};
  }
}

// The reducer of a row's statistics: the block's, or the cluster's.
template <bool kCluster, typename Acc>
__device__ __forceinline__ auto row_reduce(const RowCluster& cluster) {
  if constexpr (kCluster) {
    return ClusterRowReduce<Acc>{reinterpret_cast<Acc*>(dynamic_shared_bytes() + cluster.exchange_offset),
                                 static_cast<unsigned>(cluster.blocks)};
  } else {
    return BlockRowReduce{};
  }
}

// The smallest cluster (2, 4 or 8 blocks) whose slices of a row of `cols` have
// at most max_slice_cols columns each (a multiple of kVecOf<T>; every block gets
// some) and whose cached slice, cached_bytes_per_col a column, fits the row
// cache. blocks 0: none, also where the GPU has no clusters or the exchange
// finds no room past the cache.
template <typename T>
RowCluster plan_row_cluster(int64_t cols, int64_t max_slice_cols, size_t cached_bytes_per_col) {
  RowCluster c;
  c.blocks = 0;
  if (!cluster_launch_supported()) return c;
  if (row_cache_bytes() + 16 + kClusterExchangeBytes<acc_t<T>> >
      max_dynamic_shared_optin() - kStaticSharedReserveBytes) {
    return c;
  }
  for (int blocks = 2; blocks <= kMaxClusterBlocks; blocks *= 2) {
    const int64_t slice_cols = ceil_div(ceil_div(cols, blocks), kVecOf<T>) * kVecOf<T>;
    if (slice_cols > max_slice_cols || static_cast<size_t>(slice_cols) * cached_bytes_per_col > row_cache_bytes()) {
      continue;
    }
    if ((blocks - 1) * slice_cols >= cols) continue;
    c.blocks = blocks;
    c.slice_cols = slice_cols;
    return c;
  }
  return c;
}

// The dynamic shared memory of a cluster launch whose blocks cache
// `cache_bytes`: the cache, then the exchange, 16-byte aligned (its offset is
// set in *cluster).
template <typename Acc>
size_t cluster_shared_bytes(size_t cache_bytes, RowCluster* cluster) {
  cluster->exchange_offset = (cache_bytes + 15) / 16 * 16;
  return cluster->exchange_offset + kClusterExchangeBytes<Acc>;
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
template <int kVec, typename T, typename Reduce>
__device__ __forceinline__ acc_t<T> row_abs_max(const T* src, int64_t accesses, Reduce& reduce) {
  using Acc = acc_t<T>;
  Acc m[1] = {Acc(0)};
  for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
    Acc xv[kVec];
    load_acc<kVec>(src + v * kVec, xv);
#pragma unroll
    for (int e = 0; e < kVec; ++e) m[0] = MaxOp{}(m[0], dev_abs(xv[e]));
  }
  reduce(m, MaxOp{});
  return m[0];
}

// sum over the row of x * scale - shift (x - shift when scale is 1); every
// thread gets it. The scaled mean (shift 0) and the LayerNorm mean refinement.
template <int kVec, typename T, typename Reduce>
__device__ __forceinline__ acc_t<T> row_shifted_sum(const T* src, int64_t accesses, acc_t<T> scale, acc_t<T> shift,
                                                    Reduce& reduce) {
  using Acc = acc_t<T>;
  Acc sum[1] = {Acc(0)};
  for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
    Acc xv[kVec];
    load_acc<kVec>(src + v * kVec, xv);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum[0] += (scale != Acc(1) ? xv[e] * scale : xv[e]) - shift;
  }
  reduce(sum, SumOp{});
  return sum[0];
}

// sum over the row of (x * scale - mean)^2 (scale 1: x - mean); every thread
// gets it. LayerNorm's variance, recomputed for a rescaled or refined mean, and
// (mean 0) RMSNorm's sum of squares of a rescaled row.
template <int kVec, typename T, typename Reduce>
__device__ __forceinline__ acc_t<T> row_centered_squares(const T* src, int64_t accesses, acc_t<T> scale,
                                                         acc_t<T> mean, Reduce& reduce) {
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
  reduce(sum, SumOp{});
  return sum[0];
}

// The same over a row held by one block.
template <int kVec, typename T>
__device__ __forceinline__ acc_t<T> row_abs_max(const T* src, int64_t accesses) {
  BlockRowReduce reduce;
  return row_abs_max<kVec>(src, accesses, reduce);
}
template <int kVec, typename T>
__device__ __forceinline__ acc_t<T> row_shifted_sum(const T* src, int64_t accesses, acc_t<T> scale, acc_t<T> shift) {
  BlockRowReduce reduce;
  return row_shifted_sum<kVec>(src, accesses, scale, shift, reduce);
}
template <int kVec, typename T>
__device__ __forceinline__ acc_t<T> row_centered_squares(const T* src, int64_t accesses, acc_t<T> scale,
                                                         acc_t<T> mean) {
  BlockRowReduce reduce;
  return row_centered_squares<kVec>(src, accesses, scale, mean, reduce);
}

// Rows whose statistics leave float's range. Past |x| ~ 1.8e19 a row's sum of
// squares overflows (and a g * x sum near 3e38): the statistics come out inf and
// the row silent zeros or NaN. Below |x| ~ 1e-19 its squares are subnormal,
// rounded to 2^-149 absolute, or 0: where eps does not outweigh them (eps 0, or
// an eps itself that small), rstd loses its precision, or is 1 / sqrt(0) = inf
// and the row NaN, where x / rms(x) is finite. Either way the row's statistics
// are taken again on x * scale, a power of two (x * scale exact), and every
// result is the unscaled one's: rstd = rstd_s * scale. As the CPU kernels do
// (kernel/cpu/norm.cpp), the same scales.

// True when a row's first sum of squares over n, plus eps, is below min /
// epsilon (2^-103 in float), the only place where the squares' rounding reaches
// float's last bit; uniform where its arguments are. Tested as
// sum < (floor - eps) * n: a division's IEEE slow path is a call, and a call
// made the row kernels spill on sm_90.
template <typename Acc>
__device__ __forceinline__ bool statistic_underflows(Acc sum, Acc n, Acc eps) {
  constexpr Acc kFloor = sizeof(Acc) == 4 ? Acc(0x1p-103) : Acc(0x1p-970);
  return eps < kFloor && sum < (kFloor - eps) * n;
}

// The scale of a row whose statistics overflowed or underflowed: the power of
// two that brings max |x| into [0.5, 1), down or up; 0 for none (max |x| already
// there, inf or NaN in the row, an all-zero row). Bounded:
//   * down to 2^-126 (2^-1022 in double), a normal number, as Ascend's
//     PowerOfTwoScale: max |x| * scale is then below 4, and 1 / scale exact
//     (unscale_constant_row);
//   * up to 2^100 (2^900): eps, below 2^-103 wherever a row underflowed, keeps
//     eps * scale^2 below 2^97, finite; and a row that would take more (max |x|
//     below 2^-100, every x a multiple of 2^-149) has x * scale a multiple of
//     2^-49, whose squares, multiples of 2^-98, float holds exactly.
// Chosen by max |x| alone, so that no flag lives across the max's reduction: a
// row that underflows has max |x| below 2^-35 (a mean square below 2^-103 over at
// most 2^31 elements), one that overflows at least 1, or, where only its g * x
// sum did (an inf dy), it is scaled exactly, to the same result. From the
// exponent field, not frexp / ldexp, whose code made the row kernels spill on
// sm_90; a subnormal max |x| (field 0) is below 2^-100 and takes the bound.
template <typename Acc>
__device__ __forceinline__ Acc rescue_scale(Acc max_abs) {
  if (!dev_isfinite(max_abs) || max_abs == Acc(0)) return Acc(0);
  using Bits = std::conditional_t<sizeof(Acc) == 4, unsigned int, unsigned long long>;
  constexpr int kMantissaBits = sizeof(Acc) == 4 ? 23 : 52;
  constexpr int kBias = sizeof(Acc) == 4 ? 127 : 1023;
  constexpr int kMaxUp = sizeof(Acc) == 4 ? 100 : 900;
  Bits bits = 0;
  __builtin_memcpy(&bits, &max_abs, sizeof bits);
  // max_abs in [2^(field - kBias), 2^(field - kBias + 1)): times 2^(kBias - 1 - field), in [0.5, 1).
  int shift = kBias - 1 - static_cast<int>(bits >> kMantissaBits);  // the sign bit is 0
  shift = shift < kMaxUp ? shift : kMaxUp;
  shift = shift > 1 - kBias ? shift : 1 - kBias;
  if (shift == 0) return Acc(0);
  bits = static_cast<Bits>(shift + kBias) << kMantissaBits;
  Acc scale = 0;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  return scale;
}

// A LayerNorm row rescued down (rescue_scale) whose scaled variance is 0 is
// constant: every x * scale equals the scaled mean exactly. Its rstd at that
// scale, 1 / (sqrt(eps) * scale), is past Acc's range (eps * scale^2
// underflows), and xhat = 0 * inf gave NaN where the output is the bias and the
// gradient rstd * (g - mean(g)). Its statistics are exact unscaled (mean /
// scale, variance 0), so the row is taken back to scale 1, where rstd is
// 1 / sqrt(eps); its centred values, 0 at either scale, leave the sums as they
// are. With eps 0 rstd is inf and xhat NaN, as 0 / 0 is. Such a row always
// takes the mean's refining (its mean is large against a spread of 0), which
// calls this after it; uniform over the block (reduced values).
template <typename Acc>
__device__ __forceinline__ void unscale_constant_row(Acc centred_sq_sum, Acc& scale, Acc& mean, Acc& eps_scaled,
                                                     Acc eps) {
  if (scale == Acc(1) || centred_sq_sum != Acc(0)) return;
  mean = mean * dev_pow2_reciprocal(scale);  // exact: rescue_scale's scales are normal
  scale = Acc(1);
  eps_scaled = eps;
}

}  // namespace op_ext::cuda::detail
