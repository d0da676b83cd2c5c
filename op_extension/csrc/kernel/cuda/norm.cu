// Row normalisations on CUDA: RMSNorm, fused residual-add + RMSNorm, LayerNorm;
// forward and backward. Rows are [rows, cols] with cols = prod(normalized_shape);
// launch layout, row cache and reductions: row_common.cuh. The math, and the
// order of its operations, follow the CPU kernels (kernel/cpu/norm.cpp):
// statistics in float (double for double), LayerNorm's variance in two passes
// over a cached row (one, combined from per-thread moments, over a longer one).
//
// Weight and bias gradients are sums over rows. The rows are cut into at most
// kMaxGroups contiguous groups (a function of the row count only); the block of
// a group keeps its rows' contributions in registers and writes them once to
// its own partial row of a float workspace (each thread to the columns it owns,
// so no atomics and no barrier), and sum_partials_kernel then adds the partial
// rows in a fixed order. Rows too long to hold take a statistics launch and a
// column launch instead ("rows too long to hold" below). Either way the result
// is bit-identical run after run.
#include <algorithm>
#include <type_traits>

#include "row_common.cuh"
#include "fused_add_rms_norm.cuh"
#include "layer_norm.cuh"
#include "rms_norm.cuh"

namespace op_ext::cuda {
namespace {

using namespace detail;

constexpr int64_t kMaxGroups = 256;
// A group of one row reads the whole weight for that row alone: at 4 rows of
// 2048 that re-read is 21% of rms_norm_backward's minimum bytes. Two rows halve
// it (at most 1/14 of the minimum at any row count) and leave as many blocks as
// rows / 2, which still fills a GPU from 264 rows on.
constexpr int64_t kMinGroupRows = 2;

struct RowGroups {
  int64_t rows_per_group = 1;
  int64_t groups = 0;
};

RowGroups row_groups(int64_t rows) {
  RowGroups g;
  if (rows <= 0) return g;
  g.rows_per_group = std::max(kMinGroupRows, ceil_div(rows, kMaxGroups));
  g.groups = ceil_div(rows, g.rows_per_group);
  return g;
}

// ---- the slices of a row a thread owns ----------------------------------------------

// The row slices a thread owns, v = threadIdx.x + i * blockDim.x (each kVec
// elements at v * kVec), passed to f(i, v). With kHeld > 0 the row has at most
// kHeld slices per thread, i is a compile-time index (the loop is unrolled), and
// per-slice state lives in registers across a group's rows; with kHeld == 0 the
// row may be any length and i is always 0.
template <int kHeld, typename F>
__device__ __forceinline__ void for_each_slice(int64_t accesses, const F& f) {
  if constexpr (kHeld > 0) {
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (v < accesses) f(i, v);
    }
  } else {
    for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) f(0, v);
  }
}

// Whether a row of `cols` elements is held: at most kMaxRowThreads x the held
// slices per thread (kHeldVec on the 128-bit path, kHeldScalar on the other).
template <typename T, int kHeldVec, int kHeldScalar>
bool row_is_held(const RowLaunch& launch, int64_t cols) {
  const int64_t accesses = launch.vectorized ? cols / kVecOf<T> : cols;
  return accesses <= int64_t{kMaxRowThreads} * (launch.vectorized ? kHeldVec : kHeldScalar);
}

// Launches a row norm's kernel<kVec, kHeld> for rows planned as `launch`:
// run(vec, held, threads) with vec and held std::integral_constants. A row of at
// most kMaxRowThreads x held slices is held (kHeldVec or kHeldScalar slices per
// thread, one thread per held slices, a multiple of 32); a longer one is not
// (kHeld 0, the planned block), unless kHeldOnly: then the caller took longer
// rows elsewhere and no kHeld 0 kernel is instantiated.
template <typename T, int kHeldVec, int kHeldScalar, bool kHeldOnly = false, typename Run>
void launch_held(const RowLaunch& launch, int64_t cols, const Run& run) {
  const int64_t accesses = launch.vectorized ? cols / kVecOf<T> : cols;
  const int held_slices = launch.vectorized ? kHeldVec : kHeldScalar;
  const bool held = row_is_held<T, kHeldVec, kHeldScalar>(launch, cols);
  const int64_t held_threads = std::max<int64_t>(32, ceil_div(ceil_div(accesses, held_slices), 32) * 32);
  using std::integral_constant;
  if (launch.vectorized && held) {
    run(integral_constant<int, kVecOf<T>>{}, integral_constant<int, kHeldVec>{}, static_cast<int>(held_threads));
  } else if (held) {
    run(integral_constant<int, 1>{}, integral_constant<int, kHeldScalar>{}, static_cast<int>(held_threads));
  } else if constexpr (!kHeldOnly) {
    if (launch.vectorized) {
      run(integral_constant<int, kVecOf<T>>{}, integral_constant<int, 0>{}, launch.threads);
    } else {
      run(integral_constant<int, 1>{}, integral_constant<int, 0>{}, launch.threads);
    }
  }
}

// ---- forward rows: several at a time, the weight held --------------------------------
//
// A forward block takes up to kMaxStepRows rows at a time ("a step"): each
// thread issues the loads of its slices of all of them before the block
// reduces their statistics together (one block_reduce of kMaxStepRows values),
// so a small batch keeps as many loads in flight as one block per row would,
// and a large one runs at most kMaxHeldBlocks blocks. Where the row fits in
// kHeld slices per thread, each thread reads its slices of the weight (and
// bias) once, into registers, for all the rows of its block: the weight is
// read once per block, not once per row. The step's rows are kept in the row
// cache (row r at cache + r * cols) when they fit; otherwise they are read again
// from global memory: twice, a statistics pass (LayerNorm's mean and variance
// together: uncached_row_moments) and the output pass; and a weight too long
// to hold is read once per step of up to kMaxStepRows rows.

inline constexpr int kMaxStepRows = 4;  // held or not (no spills on sm_90)
inline constexpr int64_t kMaxHeldBlocks = 256;

// Slices per thread a forward norm holds: its weight's (and bias's) packs, in
// at most 16 32-bit registers (4 per 128-bit pack), 8 for the 16-bit types,
// whose packs widen to 8 floats per row in flight (check_cuda_compile.sh shows
// more spills); at most 4 slices.
template <typename T, int kVec, int kHeldArrays>
inline constexpr int kForwardHeldSlices =
    std::clamp((sizeof(T) == 2 ? 8 : 16) / (kHeldArrays * std::max(1, kVec * static_cast<int>(sizeof(T)) / 4)), 1, 4);

struct ForwardRows {
  int step_rows;       // rows per step, 1..kMaxStepRows
  bool cached;         // the step's rows are kept in the row cache
  size_t cache_bytes;  // the launch's dynamic shared memory
  // A row held by a cluster ("rows held by a cluster" below): the slices of
  // the columns its blocks own (row_common.cuh), cached at r * slice_cols.
  RowCluster cluster;
};

// The step of a forward row launch: as many rows (up to kMaxStepRows) as the
// row cache holds, or, when not even one fits, kMaxStepRows uncached rows, so
// that a weight too long to hold is still read once per step, not per row.
template <typename T>
ForwardRows plan_forward_rows(int64_t rows, int64_t cols) {
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(T);
  ForwardRows f{1, false, 0};
  const size_t cache_bytes = row_cache_bytes();
  if (row_bytes > cache_bytes) {
    f.step_rows = static_cast<int>(std::min<int64_t>(kMaxStepRows, std::max<int64_t>(rows, 1)));
    return f;
  }
  const int64_t fit = static_cast<int64_t>(cache_bytes / row_bytes);
  f.step_rows = static_cast<int>(std::min<int64_t>({fit, int64_t{kMaxStepRows}, std::max<int64_t>(rows, 1)}));
  f.cached = true;
  f.cache_bytes = row_bytes * static_cast<size_t>(f.step_rows);
  return f;
}

// Blocks of a forward row launch: one per step, at most kMaxHeldBlocks when the
// weight is held (each block reads it once, so fewer blocks read it less).
inline unsigned forward_grid(int64_t rows, int step_rows, bool held) {
  const int64_t steps = ceil_div(rows, static_cast<int64_t>(step_rows));
  return static_cast<unsigned>(std::min(steps, held ? kMaxHeldBlocks : kMaxGridBlocks));
}

// ---- rows held by a cluster (sm_90) ----------------------------------------------------
//
// A row whose weight (and bias) a block cannot hold in registers re-reads them
// for every step of rows, and a row past the row cache is read twice. On sm_90
// a thread-block cluster holds it instead: block k of a cluster of 2, 4 or 8
// owns the k-th slice of the columns, holds its slice of the weight (and bias)
// in registers for all the cluster's rows, and caches its slice of a step's
// rows; the blocks combine their statistics through distributed shared memory
// (ClusterRowReduce). Every input is then read once: at 4 x 65536 bfloat16
// LayerNorm moves its minimum, where one block per row re-read the weight and
// bias for every row (1.20x). A row takes the smallest cluster whose slices are
// held and cached; rows that need more than 8 blocks (the portable cluster
// size) keep the one-block kernels, as do unaligned rows and GPUs before sm_90.
//
// A cluster's blocks run 512 threads with twice the held slices of a
// one-block row: as many columns per block, and 128 registers per thread for
// the held weight (and bias), the cluster's reducer and a step's loads
// (check_cuda_compile.sh showed spills at 1024 threads).
// Steps of 2 rows keep the loads of a step in flight (2 x the held slices)
// within those registers too.
inline constexpr int kClusterThreads = 512;
inline constexpr int kClusterStepRows = 2;
inline constexpr int64_t kClusterMinRows = 4;
template <typename T, int kHeldArrays>
inline constexpr int kClusterHeldSlices = 2 * kForwardHeldSlices<T, kVecOf<T>, kHeldArrays>;

struct ForwardCluster {
  int blocks = 0;  // 0: no cluster
  int threads = 0;
  unsigned grid = 0;
  ForwardRows step{1, true, 0};
};

template <typename T, int kHeldArrays>
ForwardCluster plan_forward_cluster(int64_t rows, int64_t cols, bool aligned) {
  constexpr int kVec = kVecOf<T>;
  constexpr int kHeld = kClusterHeldSlices<T, kHeldArrays>;
  ForwardCluster c;
  // double is for checking, not speed: its rows keep the one-block kernels.
  if (sizeof(T) == 8 || rows <= 0 || !aligned || cols % kVec != 0 || !cluster_launch_supported()) return c;
  // One block holds it.
  if (cols <= int64_t{kMaxRowThreads} * kForwardHeldSlices<T, kVec, kHeldArrays> * kVec) return c;
  // The smallest cluster whose blocks hold their slice of the row (and of the
  // weight) in registers, and cache it for at least one row.
  const RowCluster cluster = plan_row_cluster<T>(cols, int64_t{kClusterThreads} * kHeld * kVec, sizeof(T));
  if (cluster.blocks == 0) return c;
  const int64_t accesses = cluster.slice_cols / kVec;
  const size_t slice_bytes = static_cast<size_t>(cluster.slice_cols) * sizeof(T);
  const int64_t fit = static_cast<int64_t>(row_cache_bytes() / slice_bytes);
  c.blocks = cluster.blocks;
  c.threads = static_cast<int>(std::max<int64_t>(32, ceil_div(ceil_div(accesses, kHeld), 32) * 32));
  c.step.step_rows = static_cast<int>(std::min<int64_t>({fit, int64_t{kClusterStepRows}, rows}));
  c.step.cluster = cluster;
  c.step.cache_bytes =
      cluster_shared_bytes<acc_t<T>>(slice_bytes * static_cast<size_t>(c.step.step_rows), &c.step.cluster);
  // Each cluster reads the weight (and bias) once: as forward_grid caps the
  // blocks that hold them, at most kMaxHeldBlocks blocks, and each cluster
  // takes at least kClusterMinRows rows, so that the weight is read at most
  // once per 4 rows, as a one-block step of 4 reads it.
  const int64_t clusters =
      std::min(ceil_div(rows, kClusterMinRows), std::max<int64_t>(1, kMaxHeldBlocks / cluster.blocks));
  c.grid = static_cast<unsigned>(clusters * cluster.blocks);
  return c;
}

// Launches Kernel, a forward norm's cluster instantiation, where a cluster
// holds the rows: false where none does, or the GPU refused the launch.
template <typename T, int kHeldArrays, auto Kernel, typename Args>
bool launch_forward_cluster(const Args& a, bool aligned, cudaStream_t stream) {
  const ForwardCluster c = plan_forward_cluster<T, kHeldArrays>(a.rows, a.cols, aligned);
  return c.blocks > 0 &&
         launch_cluster_kernel<Kernel>(c.grid, c.threads, static_cast<unsigned>(c.blocks), c.step.cache_bytes, stream,
                                       a, c.step);
}

// The packs of an optional per-column parameter (weight, bias) a thread uses:
// held in registers (kHeld > 0, read once by load) or read where used. Kept as
// T packs, widened element by element where used: widened copies of a 16-bit
// weight and bias (16 floats) made LayerNorm's forward spill.
template <typename T, int kVec, int kHeld>
struct ColumnParam {
  const T* base;
  Pack<T, kVec> held[kHeld > 0 ? kHeld : 1];

  __device__ __forceinline__ void load(int64_t accesses) {
    if constexpr (kHeld > 0) {
      if (base == nullptr) {
#pragma unroll
        for (int i = 0; i < kHeld; ++i) held[i] = Pack<T, kVec>{};
        return;
      }
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) { held[i] = load_pack<kVec>(base + v * kVec); });
    }
  }
  // The pack of slice (i, v); zeros without a parameter (then unused).
  __device__ __forceinline__ Pack<T, kVec> pack(int i, int64_t v) const {
    if constexpr (kHeld > 0) {
      return held[i];
    } else {
      if (base != nullptr) return load_pack<kVec>(base + v * kVec);
      return Pack<T, kVec>{};
    }
  }
};

// ---- RMSNorm (and fused residual add) forward -------------------------------------

template <typename T, int kVec, int kHeld, bool kCluster>
__global__ void __launch_bounds__(kCluster ? kClusterThreads : kMaxRowThreads)
    rms_norm_forward_kernel(RmsNormArgs a, ForwardRows step) {
  using Acc = acc_t<T>;
  constexpr int kStep = kCluster ? kClusterStepRows : kMaxStepRows;
  T* const cache = reinterpret_cast<T*>(dynamic_shared_bytes());
  const int64_t cols = a.cols;
  const RowSlice slice = row_slice<kCluster>(cols, step.cluster);
  const int64_t cache_stride = kCluster ? step.cluster.slice_cols : cols;
  const int64_t accesses = slice.cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const bool fused = a.residual != nullptr;
  auto reduce = row_reduce<kCluster, Acc>(step.cluster);
  ColumnParam<T, kVec, kHeld> weight{a.weight != nullptr ? static_cast<const T*>(a.weight) + slice.col0 : nullptr};
  weight.load(accesses);
  for (int64_t row0 = slice.unit * step.step_rows; row0 < a.rows; row0 += slice.units * step.step_rows) {
    const int nrows = static_cast<int>(min(int64_t{step.step_rows}, a.rows - row0));
    // Where row r's values are read back: the cache, or the tensor the norm reads.
    const auto src = [&](int r) -> const T* {
      if (step.cached) return cache + r * cache_stride;
      return fused ? static_cast<const T*>(a.residual_out) + (row0 + r) * cols + slice.col0
                   : static_cast<const T*>(a.input) + (row0 + r) * cols + slice.col0;
    };
    Acc sum_sq[kStep] = {};
    for_each_slice<kHeld>(accesses, [&](int, int64_t v) {
      const int64_t j = v * kVec;
#pragma unroll
      for (int r = 0; r < kStep; ++r) {
        if (r > 0 && r >= nrows) break;
        const int64_t offset = (row0 + r) * cols + slice.col0 + j;
        Pack<T, kVec> pack;
        if (fused) {
          // residual_out = input + residual, rounded to T as the unfused ops
          // would store it; the norm reads the rounded values.
          Acc xv[kVec], rv[kVec];
          load_acc<kVec>(static_cast<const T*>(a.input) + offset, xv);
          load_acc<kVec>(static_cast<const T*>(a.residual) + offset, rv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) pack.v[e] = from_acc<T>(xv[e] + rv[e]);
          store_pack<kVec>(static_cast<T*>(a.residual_out) + offset, pack);
        } else {
          pack = load_pack<kVec>(static_cast<const T*>(a.input) + offset);
        }
        if (step.cached) store_pack<kVec>(cache + r * cache_stride + j, pack);
        Acc s[kVec];
        widen(pack, s);
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum_sq[r] += s[e] * s[e];
      }
    });
    reduce(sum_sq, SumOp{});
    // y = (x * scale) * rstd; scale is 1 unless the row's squares overflowed
    // (a test on reduced values: the same for every thread of the block).
    Acc scale[kStep], rstd[kStep];
#pragma unroll
    for (int r = 0; r < kStep; ++r) {
      if (r > 0 && r >= nrows) break;  // a step has a row: row 0 needs no test
      scale[r] = Acc(1);
      Acc eps_scaled = eps;
      const bool underflowed = statistic_underflows(sum_sq[r], static_cast<Acc>(cols), eps);
      if (!dev_isfinite(sum_sq[r]) || underflowed) {
        const Acc s = rescue_scale(row_abs_max<kVec>(src(r), accesses, reduce));
        if (s != Acc(0)) {
          scale[r] = s;
          eps_scaled = eps * s * s;
          sum_sq[r] = row_centered_squares<kVec>(src(r), accesses, s, Acc(0), reduce);  // sum of (x * s)^2
        }
      }
      rstd[r] = Acc(1) / dev_sqrt(sum_sq[r] / static_cast<Acc>(cols) + eps_scaled);
    }
    for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
      const int64_t j = v * kVec;
      const Pack<T, kVec> w = weight.pack(i, v);
#pragma unroll
      for (int r = 0; r < kStep; ++r) {
        if (r > 0 && r >= nrows) break;
        Acc out[kVec];
        load_acc<kVec>(src(r) + j, out);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          out[e] = (scale[r] != Acc(1) ? out[e] * scale[r] : out[e]) * rstd[r];
          if (weight.base != nullptr) out[e] = out[e] * to_acc(w.v[e]);
        }
        store_acc<kVec>(static_cast<T*>(a.output) + (row0 + r) * cols + slice.col0 + j, out);
      }
    });
  }
  if constexpr (kCluster) cluster_sync();  // no block leaves while another reads its exchange
}

// Launches a forward norm's kernel<kVec, kHeld> (run(vec, held, threads), as
// launch_held) with kForwardHeldSlices for `held_arrays` per-column parameters.
template <typename T, int kHeldArrays, typename Run>
void launch_forward(int64_t cols, bool aligned, const Run& run) {
  const RowLaunch launch = plan_rows<T>(cols, aligned, 1);
  launch_held<T, kForwardHeldSlices<T, kVecOf<T>, kHeldArrays>, kForwardHeldSlices<T, 1, kHeldArrays>>(
      launch, cols, run);
}

template <typename T>
void rms_norm_forward_typed(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.cols <= 0) return;
  const bool fused = a.residual != nullptr;
  const bool aligned = is_aligned16(a.input) && is_aligned16(a.output) &&
                       (a.weight == nullptr || is_aligned16(a.weight)) &&
                       (!fused || (is_aligned16(a.residual) && is_aligned16(a.residual_out)));
  if constexpr (sizeof(T) < 8) {  // double keeps the one-block kernels
    constexpr int kVec = kVecOf<T>;
    if (launch_forward_cluster<T, 1, rms_norm_forward_kernel<T, kVec, kClusterHeldSlices<T, 1>, true>>(
            a, aligned, stream)) {
      return;
    }
  }
  launch_forward<T, 1>(a.cols, aligned, [&](auto vec, auto held, int threads) {
    constexpr int kHeld = decltype(held)::value;
    const ForwardRows step = plan_forward_rows<T>(a.rows, a.cols);
    launch_kernel<rms_norm_forward_kernel<T, decltype(vec)::value, kHeld, false>>(
        forward_grid(a.rows, step.step_rows, kHeld > 0), threads, step.cache_bytes, stream, a, step);
  });
}

// ---- backward norms: the statistics of a row, and rows too long to hold ---------------
//
// A backward row of at most kMaxRowThreads x the held slices keeps the thread's
// slices of the weight and of the weight- (and bias-) gradient sums in
// registers across its group's rows (rms_norm_backward_kernel,
// layer_norm_backward_kernel). A longer row cannot, and takes two launches
// instead, with no partial rows and no sum_partials launch:
//  1. a statistics kernel: a block per step of up to kMaxStepRows rows reads
//     x and dy once (the weight once per step) and writes each row's
//     statistics (kStats values at row * kStats of the workspace);
//  2. long_row_backward_columns_kernel: a block per 32 accesses of the
//     columns walks all the rows, reads x and dy a second time (the one extra
//     read of the row inputs these rows are allowed), writes dx, and keeps the
//     weight (and bias) gradient sums of its columns in registers: warp w adds
//     rows w, w + warps, ... of each batch of kLongRowBatch rows, the warps'
//     sums are added in warp order and written once. No atomics: the same
//     bits every run.
// Before, such a row re-read the weight and read-modify-wrote a float partial
// row for every row: 1.39-2.63x its minimum bytes (docs/cuda.md).

// Where a backward row's statistics sit (the first 3 shared by both norms).
inline constexpr int kStatRstd = 0;
inline constexpr int kStatMeanGxhat = 1;  // rstd * mean(g * d): g = dy * w, d = x (RMSNorm) or x - mean
inline constexpr int kStatScale = 2;      // 1, or the power of two the row's statistics were taken at
inline constexpr int kStatMean = 3;       // LayerNorm: mean of x * scale
inline constexpr int kStatMeanG = 4;      // LayerNorm: mean(g)

inline constexpr int kLongRowWarps = 8;
// Threads of a statistics block: a step's 4 rows of moments (LayerNorm: 16
// values) and a pack of x, dy and the weight need more than the 64 registers
// of a 1024-thread block (check_cuda_compile.sh showed spills); in double, 2
// rows a step and 256 threads.
template <typename Acc>
inline constexpr int kLongRowStatsThreads = sizeof(Acc) == 8 ? 256 : 512;
template <typename Acc>
inline constexpr int kLongRowStepRows = sizeof(Acc) == 8 ? 2 : kMaxStepRows;
inline constexpr int kLongRowBatch = 32;

// The weight's pack at access v as Acc, or ones without a weight (g = dy * 1 is dy).
template <int kVec, typename T>
__device__ __forceinline__ void weight_or_ones(const T* weight, int64_t v, acc_t<T> (&w)[kVec]) {
  if (weight != nullptr) {
    load_acc<kVec>(weight + v * kVec, w);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) w[e] = acc_t<T>(1);
  }
}

// Writes each of a step's rows' statistics, stats[r], to out + (row0 + r) *
// kStats: thread r writes row r's as one pack, so a step's rows are one
// contiguous warp-wide store.
template <int kStats, int kStep, typename Acc>
__device__ __forceinline__ void store_row_stats(Acc* out, int64_t row0, int nrows,
                                                const Acc (&stats)[kStep][kStats]) {
  const int r = static_cast<int>(threadIdx.x);
  if (r >= nrows) return;
  Pack<Acc, kStats> pack;
#pragma unroll
  for (int q = 0; q < kStep; ++q) {
    if (q == r) {
#pragma unroll
      for (int k = 0; k < kStats; ++k) pack.v[k] = stats[q][k];
    }
  }
  store_pack<kStats>(out + (row0 + r) * kStats, pack);
}

// A long row's backward pointers, for long_row_backward_columns_kernel.
template <typename T>
struct LongRowBackward {
  int64_t rows = 0, cols = 0;
  const T* input = nullptr;
  const T* grad_output = nullptr;
  const T* weight = nullptr;             // null: 1
  const T* grad_residual_out = nullptr;  // null: none (added to dx when set)
  T* grad_input = nullptr;
  T* column_sums[2] = {nullptr, nullptr};  // Norm::kSums column sums; null: not wanted
};

// A warp's lanes' kVec values each in shared memory (`values`: 32 * kVec of
// them), as 16-byte packs: the lanes' k-th packs lie side by side, so a
// quarter-warp's packs cover the 32 banks once (no bank conflict), where lane
// l's values at l * kVec + e, read one element at a time, would put 4 or 8
// lanes in each bank.
template <int kVec, typename Acc>
inline constexpr int kLanePack = kVec < int(16 / sizeof(Acc)) ? kVec : int(16 / sizeof(Acc));

template <int kVec, typename Acc>
__device__ __forceinline__ void store_lane_values(Acc* values, int lane, const Acc (&v)[kVec]) {
  constexpr int kP = kLanePack<kVec, Acc>;
#pragma unroll
  for (int p = 0; p < kVec / kP; ++p) {
    Pack<Acc, kP> pack;
#pragma unroll
    for (int e = 0; e < kP; ++e) pack.v[e] = v[p * kP + e];
    store_pack<kP>(values + (p * 32 + lane) * kP, pack);
  }
}

template <int kVec, typename Acc>
__device__ __forceinline__ void load_lane_values(const Acc* values, int lane, Acc (&v)[kVec]) {
  constexpr int kP = kLanePack<kVec, Acc>;
#pragma unroll
  for (int p = 0; p < kVec / kP; ++p) {
    const Pack<Acc, kP> pack = load_pack<kP>(values + (p * 32 + lane) * kP);
#pragma unroll
    for (int e = 0; e < kP; ++e) v[p * kP + e] = pack.v[e];
  }
}

// Pass 2 of a long row's backward (above): Norm::element(stats, x, dy, w,
// terms) is one element's dx, and its terms of the Norm::kSums column sums. A block of
// 32 x warps threads takes 32 accesses of kVec columns (one per lane) at a
// time; its weight, read by warp 0, and the statistics of kLongRowBatch rows at
// a time (one pack per row, read by the first threads: one contiguous load) are
// staged in shared memory, so that the warps do not each read them.
template <typename T, int kVec, typename Norm>
__global__ void __launch_bounds__(kLongRowWarps * 32)
    long_row_backward_columns_kernel(LongRowBackward<T> a, const acc_t<T>* stats) {
  using Acc = acc_t<T>;
  constexpr int kStats = Norm::kStats;
  constexpr int kSums = Norm::kSums;
  __shared__ Acc batch_stats[kLongRowBatch][kStats];
  // Read and written as 16-byte packs (store_lane_values).
  __shared__ __align__(16) Acc warp_sums[kLongRowWarps][kSums][32 * kVec];
  __shared__ __align__(16) Acc chunk_weight[32 * kVec];
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int64_t accesses = a.cols / kVec;
  bool want_sums = false;
#pragma unroll
  for (int s = 0; s < kSums; ++s) want_sums = want_sums || a.column_sums[s] != nullptr;
  for (int64_t chunk = blockIdx.x; chunk * 32 < accesses; chunk += gridDim.x) {
    const int64_t v = chunk * 32 + lane;
    const bool active = v < accesses;
    const int64_t j = v * kVec;
    // Warp 0 reads the chunk's weight; the other warps take it from shared memory.
    if (warp == 0) {
      Acc w0[kVec];
      weight_or_ones<kVec>(active ? a.weight : nullptr, v, w0);
      store_lane_values<kVec>(chunk_weight, lane, w0);
    }
    __syncthreads();
    Acc w[kVec];
    load_lane_values<kVec>(chunk_weight, lane, w);
    Acc sums[kSums][kVec] = {};
    for (int64_t b = 0; b < a.rows; b += kLongRowBatch) {
      const int batch = static_cast<int>(min(int64_t{kLongRowBatch}, a.rows - b));
      __syncthreads();  // the previous batch's readers are done with batch_stats
      if (static_cast<int>(threadIdx.x) < batch) {
        const Pack<Acc, kStats> pack = load_pack<kStats>(stats + (b + threadIdx.x) * kStats);
#pragma unroll
        for (int k = 0; k < kStats; ++k) store_shared(&batch_stats[threadIdx.x][k], pack.v[k]);
      }
      __syncthreads();
      if (!active) continue;
      // Two of the warp's rows at a time, both rows' loads issued before
      // either's store (the compiler cannot move a load above a store to dx,
      // which might alias it), so that a warp keeps 2 rows of loads in
      // flight. Rows are still added in order: r, then r + warps.
      for (int r = warp; r < batch; r += 2 * warps) {
        const int pair = r + warps < batch ? 2 : 1;
        Pack<T, kVec> xp[2], dyp[2], grp[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          if (q >= pair) break;
          const int64_t offset = (b + r + q * warps) * a.cols + j;
          xp[q] = load_pack<kVec>(a.input + offset);
          dyp[q] = load_pack<kVec>(a.grad_output + offset);
          if (a.grad_residual_out != nullptr) grp[q] = load_pack<kVec>(a.grad_residual_out + offset);
        }
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          if (q >= pair) break;
          const int row = r + q * warps;
          Acc xv[kVec], dyv[kVec], out[kVec], row_stats[kStats];
          widen(xp[q], xv);
          widen(dyp[q], dyv);
#pragma unroll
          for (int k = 0; k < kStats; ++k) row_stats[k] = load_shared(&batch_stats[row][k]);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            Acc terms[kSums];
            out[e] = Norm::element(row_stats, xv[e], dyv[e], w[e], terms);
#pragma unroll
            for (int s = 0; s < kSums; ++s) sums[s][e] += terms[s];
          }
          if (a.grad_residual_out != nullptr) {
            Acc gr[kVec];
            widen(grp[q], gr);
#pragma unroll
            for (int e = 0; e < kVec; ++e) out[e] = out[e] + gr[e];
          }
          store_acc<kVec>(a.grad_input + (b + row) * a.cols + j, out);
        }
      }
    }
    if (want_sums) {
#pragma unroll
      for (int s = 0; s < kSums; ++s) store_lane_values<kVec>(warp_sums[warp][s], lane, sums[s]);
      __syncthreads();
    }
    if (want_sums && warp == 0 && active) {
#pragma unroll
      for (int s = 0; s < kSums; ++s) {
        if (a.column_sums[s] == nullptr) continue;
        Acc total[kVec];
        load_lane_values<kVec>(warp_sums[0][s], lane, total);
        for (int other = 1; other < warps; ++other) {
          Acc more[kVec];
          load_lane_values<kVec>(warp_sums[other][s], lane, more);
#pragma unroll
          for (int e = 0; e < kVec; ++e) total[e] += more[e];
        }
        store_acc<kVec>(a.column_sums[s] + j, total);
      }
    }
    __syncthreads();  // every warp is done with chunk_weight and warp_sums before the next chunk's
  }
}

// The pointers a norm's backward args (RmsNormBackwardArgs, LayerNormBackwardArgs)
// share, as a long row's column launch takes them.
template <typename T, typename Args>
LongRowBackward<T> long_rows_of(const Args& a) {
  LongRowBackward<T> rows;
  rows.rows = a.rows;
  rows.cols = a.cols;
  rows.input = static_cast<const T*>(a.input);
  rows.grad_output = static_cast<const T*>(a.grad_output);
  rows.weight = static_cast<const T*>(a.weight);
  rows.grad_input = static_cast<T*>(a.grad_input);
  return rows;
}

// A long row's two launches: Norm::stats_kernel<T, kVec>(a, stats) over steps
// of rows (kVec: the 128-bit path or single elements, as `launch` planned),
// then the column launch with Norm::element.
template <typename T, typename Norm, typename Args>
void launch_long_row_backward(const Args& a, const RowLaunch& launch, const LongRowBackward<T>& rows,
                              acc_t<T>* stats, cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (rows.rows > 0) {
    const auto steps = static_cast<unsigned>(std::min(ceil_div(rows.rows, int64_t{kLongRowStepRows<Acc>}), kMaxGridBlocks));
    const int threads = std::min(launch.threads, kLongRowStatsThreads<Acc>);
    if (launch.vectorized) {
      launch_kernel<Norm::template stats_kernel<T, kVecOf<T>>>(steps, threads, 0, stream, a, stats);
    } else {
      launch_kernel<Norm::template stats_kernel<T, 1>>(steps, threads, 0, stream, a, stats);
    }
  }
  const int64_t accesses = launch.vectorized ? rows.cols / kVecOf<T> : rows.cols;
  const unsigned grid = grid_for(accesses, 32);
  const int threads = static_cast<int>(32 * std::clamp<int64_t>(rows.rows, 1, kLongRowWarps));
  if (launch.vectorized) {
    launch_kernel<long_row_backward_columns_kernel<T, kVecOf<T>, Norm>>(grid, threads, 0, stream, rows, stats);
  } else {
    launch_kernel<long_row_backward_columns_kernel<T, 1, Norm>>(grid, threads, 0, stream, rows, stats);
  }
}

// ---- RMSNorm backward -------------------------------------------------------------

// Slices per thread the backward norms hold in registers (the weight and the
// weight-gradient sums): 16 32-bit registers of such state, so that the kernel
// stays within the 64 registers a thread of a 1024-thread block has
// (check_cuda_compile.sh refuses spills). A row of up to 1024 x kHeldSlices
// slices (8192 elements in float and 16-bit, 4096 in double, on the 128-bit
// path; 4096 on the scalar path) takes a block of ceil(slices / kHeldSlices) threads and reads its weight
// and writes its partial once per group; a longer row takes the two launches
// of a long row (above).
// At most 4 slices: the unrolled slice loop's indices cost registers too.
template <typename T, int kVec>
inline constexpr int kHeldSlices = std::clamp(8 / (kVec * static_cast<int>(sizeof(acc_t<T>) / 4)), 1, 4);

// ---- backward rows held by a cluster (sm_90) -----------------------------------------
//
// A backward row past what one block holds (8192 elements) takes the two
// long-row launches above, which read x and dy twice. On sm_90 a thread-block
// cluster holds it instead, as the forward rows ("rows held by a cluster"):
// block k of a cluster of 2, 4 or 8 owns the k-th slice of the columns, holds
// its slice of the weight and of the weight-gradient sums in registers for all
// the cluster's rows, caches its slice of a row's x and dy, and the row's sums
// are combined across the cluster (ClusterRowReduce). x and dy are read once,
// and the weight once per cluster. A group is a cluster's rows (at least
// kClusterMinRows of them; at most kMaxHeldBlocks blocks run), each block
// writes its slice of the group's partial row, and sum_partials adds the
// groups' partials as after the one-block kernels: two launches, the same
// bits run after run. Double, unaligned rows, rows that need more than 8
// blocks and GPUs before sm_90 keep the long-row launches.
//
// A cluster's blocks run 256 threads with four times the one-block held
// slices: as many columns per block as 1024 threads hold, up to 65536 columns
// in 8 blocks. The held weight and sums (32 registers) and a row's loads need
// more than the 128 registers of a 512-thread block (ptxas spilled 4-60 bytes
// there). LayerNorm's bias sums make 48 registers, and its float kernel still
// spilled at 256 threads (at 384 too): its cluster kernel keeps its slice of
// the weight in shared memory, beside the cached x and dy, instead.
inline constexpr int kBackwardClusterThreads = 256;
template <typename T>
inline constexpr int kClusterBackwardHeldSlices = 4 * kHeldSlices<T, kVecOf<T>>;

// With g = dy * w and xhat = x * rstd (y = w * xhat):
//   dx = rstd * (g - xhat * mean(g * xhat)),  dw = sum over rows of dy * xhat,
// written with xhat rather than rstd^3 * x * mean(g * x), whose rstd^3
// underflows for rows with |x| past ~1e13 in float. `input` is the normalised
// tensor (residual_out for the fused op, whose grad_residual_out is added to dx).
//
// A row's statistics from sums = {sum(x^2), sum(g * x)} over it: stats[kStatRstd],
// [kStatMeanGxhat], [kStatScale]. Where the sums overflowed float, they are
// taken again (x, dy and the weight read again: rows past |x| ~ 1.8e19 only)
// on x * scale, the power of two that brings max |x| into [0.5, 1).
// Uniform over the block, or the cluster (the tests are on reduced values):
// x, dy and weight are the slices `reduce` combines.
template <int kVec, typename T, int kStats, typename Reduce>
__device__ __forceinline__ void rms_norm_row_stats(const T* x, const T* dy, const T* weight, int64_t accesses,
                                                   acc_t<T> eps, acc_t<T> n, acc_t<T> (&sums)[2],
                                                   acc_t<T> (&stats)[kStats], Reduce& reduce) {
  using Acc = acc_t<T>;
  Acc scale = Acc(1);
  const bool underflowed = statistic_underflows(sums[0], n, eps);
  if (!dev_isfinite(sums[0]) || !dev_isfinite(sums[1]) || underflowed) {
    const Acc s = rescue_scale(row_abs_max<kVec>(x, accesses, reduce));
    if (s != Acc(0)) {
      scale = s;
      sums[0] = sums[1] = Acc(0);
      for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
        Acc xv[kVec], gv[kVec], w[kVec];
        load_acc<kVec>(x + v * kVec, xv);
        load_acc<kVec>(dy + v * kVec, gv);
        weight_or_ones<kVec>(weight, v, w);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const Acc xs = xv[e] * s;
          sums[0] += xs * xs;
          sums[1] += gv[e] * w[e] * xs;
        }
      }
      reduce(sums, SumOp{});
    }
  }
  // rstd of the scaled row; the true rstd is rstd * scale.
  const Acc rstd = Acc(1) / dev_sqrt(sums[0] / n + eps * scale * scale);
  stats[kStatRstd] = rstd;
  stats[kStatMeanGxhat] = rstd * (sums[1] / n);
  stats[kStatScale] = scale;
}

// One element's dx (before grad_residual_out) and dw term from its row's statistics.
template <typename Acc>
__device__ __forceinline__ Acc rms_norm_dx(const Acc* stats, Acc x, Acc dy, Acc w, Acc& dw_term) {
  const Acc rstd = stats[kStatRstd], scale = stats[kStatScale];
  const Acc xhat = (scale != Acc(1) ? x * scale : x) * rstd;
  dw_term = dy * xhat;
  const Acc out = rstd * (dy * w - xhat * stats[kStatMeanGxhat]);
  return scale != Acc(1) ? out * scale : out;
}

// The weight and the group's weight-gradient sums: the thread's slices of the
// weight are read once per group and its sums of dy * xhat are kept in
// registers over the group's rows (in row order) and written once, a whole
// pack per slice, to the group's partial row.
//
// kCluster: a row held by a thread-block cluster ("backward rows held by a
// cluster" below). A group is then a cluster's rows; block k owns the k-th
// slice of the columns, caches its slice of x and dy, holds its slice of the
// weight and of the sums, and writes its slice of the group's partial row; the
// row's two sums are combined across the cluster.
template <typename T, int kVec, int kHeld, bool kCluster>
__global__ void __launch_bounds__(kCluster ? kBackwardClusterThreads : kMaxRowThreads)
    rms_norm_backward_kernel(RmsNormBackwardArgs a, acc_t<T>* partial_w, RowGroups groups, bool cached,
                             RowCluster cluster) {
  static_assert(kHeld > 0, "a row too long to hold takes the long-row kernels");
  using Acc = acc_t<T>;
  unsigned char* const row_cache = dynamic_shared_bytes();
  const int64_t cols = a.cols;
  const RowSlice slice = row_slice<kCluster>(cols, cluster);
  const int64_t cache_stride = kCluster ? cluster.slice_cols : cols;
  T* cache_x = reinterpret_cast<T*>(row_cache);
  T* cache_dy = cache_x + cache_stride;
  const T* weight = a.weight != nullptr ? static_cast<const T*>(a.weight) + slice.col0 : nullptr;
  const int64_t accesses = slice.cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  auto reduce = row_reduce<kCluster, Acc>(cluster);
  Acc w_held[kHeld][kVec];
  Acc dw_held[kHeld][kVec];
  for (int64_t g = slice.unit; g < groups.groups; g += slice.units) {
    const int64_t row_begin = g * groups.rows_per_group;
    const int64_t row_end = min(a.rows, row_begin + groups.rows_per_group);
    Acc* partial = partial_w != nullptr ? partial_w + g * cols + slice.col0 : nullptr;
    for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
      weight_or_ones<kVec>(weight, v, w_held[i]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) dw_held[i][e] = Acc(0);
    });
    for (int64_t row = row_begin; row < row_end; ++row) {
      const T* x = static_cast<const T*>(a.input) + row * cols + slice.col0;
      const T* dy = static_cast<const T*>(a.grad_output) + row * cols + slice.col0;
      T* dx = static_cast<T*>(a.grad_input) + row * cols + slice.col0;
      Acc sums[2] = {Acc(0), Acc(0)};  // sum(x^2), sum(dy * w * x)
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        const int64_t j = v * kVec;
        const Pack<T, kVec> xp = load_pack<kVec>(x + j);
        const Pack<T, kVec> gp = load_pack<kVec>(dy + j);
        if (cached) {
          store_pack<kVec>(cache_x + j, xp);
          store_pack<kVec>(cache_dy + j, gp);
        }
        Acc xv[kVec], gv[kVec];
        widen(xp, xv);
        widen(gp, gv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          sums[0] += xv[e] * xv[e];
          sums[1] += gv[e] * w_held[i][e] * xv[e];
        }
      });
      reduce(sums, SumOp{});
      const T* x_src = cached ? cache_x : x;
      const T* dy_src = cached ? cache_dy : dy;
      Acc stats[3];
      rms_norm_row_stats<kVec>(x_src, dy_src, weight, accesses, eps, n, sums, stats, reduce);
      const T* gr = a.grad_residual_out != nullptr
                        ? static_cast<const T*>(a.grad_residual_out) + row * cols + slice.col0
                        : nullptr;
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        const int64_t j = v * kVec;
        Acc xv[kVec], dyv[kVec], out[kVec];
        load_acc<kVec>(x_src + j, xv);
        load_acc<kVec>(dy_src + j, dyv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          Acc dw_term;
          out[e] = rms_norm_dx(stats, xv[e], dyv[e], w_held[i][e], dw_term);
          dw_held[i][e] = row == row_begin ? dw_term : dw_held[i][e] + dw_term;
        }
        if (gr != nullptr) {
          Acc grv[kVec];
          load_acc<kVec>(gr + j, grv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) out[e] = out[e] + grv[e];
        }
        store_acc<kVec>(dx + j, out);
      });
    }
    if (partial != nullptr && row_end > row_begin) {
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        Pack<Acc, kVec> pack;
#pragma unroll
        for (int e = 0; e < kVec; ++e) pack.v[e] = dw_held[i][e];
        store_pack<kVec>(partial + v * kVec, pack);
      });
    }
  }
  if constexpr (kCluster) cluster_sync();  // no block leaves while another reads its exchange
}

// Pass 1 of a long row's RMSNorm backward: each row's {rstd, rstd * mean(g * x), scale}.
inline constexpr int kRmsNormStats = 4;

template <typename T, int kVec>
__global__ void __launch_bounds__(kLongRowStatsThreads<acc_t<T>>)
    rms_norm_long_row_stats_kernel(RmsNormBackwardArgs a, acc_t<T>* stats) {
  using Acc = acc_t<T>;
  constexpr int kStep = kLongRowStepRows<Acc>;
  const int64_t cols = a.cols;
  const T* weight = static_cast<const T*>(a.weight);
  const int64_t accesses = cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  for (int64_t row0 = int64_t{blockIdx.x} * kStep; row0 < a.rows; row0 += int64_t{gridDim.x} * kStep) {
    const int nrows = static_cast<int>(min(int64_t{kStep}, a.rows - row0));
    const T* x = static_cast<const T*>(a.input) + row0 * cols;
    const T* dy = static_cast<const T*>(a.grad_output) + row0 * cols;
    Acc sums[2 * kStep] = {};  // row r: sum(x^2), sum(dy * w * x)
    for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
      Acc w[kVec];
      weight_or_ones<kVec>(weight, v, w);
#pragma unroll
      for (int r = 0; r < kStep; ++r) {
        if (r > 0 && r >= nrows) break;
        Acc xv[kVec], gv[kVec];
        load_acc<kVec>(x + r * cols + v * kVec, xv);
        load_acc<kVec>(dy + r * cols + v * kVec, gv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          sums[2 * r] += xv[e] * xv[e];
          sums[2 * r + 1] += gv[e] * w[e] * xv[e];
        }
      }
    }
    block_reduce(sums, SumOp{});
    Acc row_stats[kStep][kRmsNormStats] = {};
#pragma unroll
    for (int r = 0; r < kStep; ++r) {
      if (r > 0 && r >= nrows) break;
      Acc row_sums[2] = {sums[2 * r], sums[2 * r + 1]};
      BlockRowReduce reduce;
      rms_norm_row_stats<kVec>(x + r * cols, dy + r * cols, weight, accesses, eps, n, row_sums, row_stats[r], reduce);
    }
    store_row_stats(stats, row0, nrows, row_stats);
  }
}

// A long RMSNorm row's two passes (launch_long_row_backward's Norm): the
// statistics kernel, and an element's dx and dw term in the column launch.
struct RmsNormLongRowMath {
  template <typename T, int kVec>
  static constexpr auto stats_kernel = rms_norm_long_row_stats_kernel<T, kVec>;
  static constexpr int kStats = kRmsNormStats;
  static constexpr int kSums = 1;
  template <typename Acc>
  __device__ __forceinline__ static Acc element(const Acc* stats, Acc x, Acc dy, Acc w, Acc (&terms)[kSums]) {
    return rms_norm_dx(stats, x, dy, w, terms[0]);
  }
};

template <typename T>
RowLaunch plan_rms_norm_backward(const RmsNormBackwardArgs& a) {
  const bool aligned = is_aligned16(a.grad_output) && is_aligned16(a.input) && is_aligned16(a.grad_input) &&
                       (a.weight == nullptr || is_aligned16(a.weight)) &&
                       (a.grad_residual_out == nullptr || is_aligned16(a.grad_residual_out));
  return plan_rows<T>(a.cols, aligned, 2);
}

template <typename T>
bool rms_norm_backward_holds(const RowLaunch& launch, int64_t cols) {
  return row_is_held<T, kHeldSlices<T, kVecOf<T>>, kHeldSlices<T, 1>>(launch, cols);
}

struct BackwardCluster {
  RowCluster cluster;  // blocks 0: no cluster holds the rows
  RowGroups groups;
  int threads = 0;
  size_t shared_bytes = 0;
};

// The cluster of blocks of kThreads threads, kHeld slices each, that holds a
// backward row one block does not (`vectorized`: the rows are aligned for
// kVec-element accesses), caching `cached_arrays` row inputs; blocks 0 where
// none does.
template <typename T, int kHeld, int kThreads>
BackwardCluster plan_backward_cluster(int64_t rows, int64_t cols, bool vectorized, int cached_arrays) {
  constexpr int kVec = kVecOf<T>;
  BackwardCluster c;
  c.cluster.blocks = 0;
  if (sizeof(T) == 8 || rows <= 0 || !vectorized || cols % kVec != 0) return c;
  const RowCluster cluster = plan_row_cluster<T>(cols, int64_t{kThreads} * kHeld * kVec,
                                                 static_cast<size_t>(cached_arrays) * sizeof(T));
  if (cluster.blocks == 0) return c;
  const int64_t clusters =
      std::min(ceil_div(rows, kClusterMinRows), std::max<int64_t>(1, kMaxHeldBlocks / cluster.blocks));
  c.groups.rows_per_group = ceil_div(rows, clusters);
  c.groups.groups = ceil_div(rows, c.groups.rows_per_group);
  c.cluster = cluster;
  const int64_t accesses = cluster.slice_cols / kVec;
  c.threads = static_cast<int>(std::max<int64_t>(32, ceil_div(ceil_div(accesses, kHeld), 32) * 32));
  c.shared_bytes = cluster_shared_bytes<acc_t<T>>(
      static_cast<size_t>(cached_arrays) * static_cast<size_t>(cluster.slice_cols) * sizeof(T), &c.cluster);
  return c;
}

// Launches Kernel, a backward norm's cluster instantiation, over the clusters
// `c` plans (each one group of rows), with (args..., groups, cached, cluster):
// false where no cluster holds the rows, or the GPU refused the launch.
template <auto Kernel, typename... Args>
bool launch_backward_cluster(const BackwardCluster& c, cudaStream_t stream, const Args&... args) {
  return c.cluster.blocks > 0 &&
         launch_cluster_kernel<Kernel>(static_cast<unsigned>(c.groups.groups * c.cluster.blocks), c.threads,
                                       static_cast<unsigned>(c.cluster.blocks), c.shared_bytes, stream, args...,
                                       c.groups, true, c.cluster);
}

// The workspace of rows one block does not hold: the long-row launches'
// statistics (`stats_bytes`), or, where a cluster holds the rows, its groups'
// `partial_rows` partial rows each, whichever is larger (the long-row launches
// still run where the GPU refuses the cluster).
template <typename T>
size_t unheld_rows_workspace(size_t stats_bytes, const BackwardCluster& c, int64_t partial_rows, int64_t cols) {
  if (c.cluster.blocks == 0 || partial_rows == 0) return stats_bytes;
  return std::max(stats_bytes, static_cast<size_t>(partial_rows * c.groups.groups * cols) * sizeof(acc_t<T>));
}

template <typename T>
BackwardCluster plan_rms_norm_backward_cluster(const RmsNormBackwardArgs& a, const RowLaunch& launch) {
  return plan_backward_cluster<T, kClusterBackwardHeldSlices<T>, kBackwardClusterThreads>(a.rows, a.cols,
                                                                                        launch.vectorized, 2);
}

template <typename T>
size_t rms_norm_backward_workspace_typed(const RmsNormBackwardArgs& a) {
  using Acc = acc_t<T>;
  if (a.cols <= 0) return 0;
  const bool want_dw = a.weight != nullptr && a.grad_weight != nullptr;
  const RowLaunch launch = plan_rms_norm_backward<T>(a);
  if (!rms_norm_backward_holds<T>(launch, a.cols)) {
    return unheld_rows_workspace<T>(static_cast<size_t>(a.rows) * kRmsNormStats * sizeof(Acc),
                                    plan_rms_norm_backward_cluster<T>(a, launch), want_dw ? 1 : 0, a.cols);
  }
  if (!want_dw) return 0;
  return static_cast<size_t>(row_groups(a.rows).groups * a.cols) * sizeof(Acc);
}

template <typename T>
void rms_norm_backward_typed(const RmsNormBackwardArgs& a, void* workspace, cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (a.cols <= 0) return;  // every output is empty
  const bool want_dw = a.weight != nullptr && a.grad_weight != nullptr;
  Acc* partial_w = want_dw ? static_cast<Acc*>(workspace) : nullptr;
  const RowLaunch launch = plan_rms_norm_backward<T>(a);
  if (!rms_norm_backward_holds<T>(launch, a.cols)) {
    if constexpr (sizeof(T) < 8) {  // double keeps the long-row launches
      const BackwardCluster c = plan_rms_norm_backward_cluster<T>(a, launch);
      if (launch_backward_cluster<rms_norm_backward_kernel<T, kVecOf<T>, kClusterBackwardHeldSlices<T>, true>>(
              c, stream, a, partial_w)) {
        if (want_dw) {
          launch_sum_partials<T>(partial_w, static_cast<T*>(a.grad_weight), 1, c.groups.groups, a.cols, Acc(1),
                                 stream);
        }
        return;
      }
    }
    LongRowBackward<T> rows = long_rows_of<T>(a);
    rows.grad_residual_out = static_cast<const T*>(a.grad_residual_out);
    rows.column_sums[0] = want_dw ? static_cast<T*>(a.grad_weight) : nullptr;
    launch_long_row_backward<T, RmsNormLongRowMath>(a, launch, rows, static_cast<Acc*>(workspace), stream);
    return;
  }
  const RowGroups groups = row_groups(a.rows);
  if (groups.groups > 0) {
    const bool cached = launch.cache_bytes > 0;
    launch_held<T, kHeldSlices<T, kVecOf<T>>, kHeldSlices<T, 1>, true>(
        launch, a.cols, [&](auto vec, auto held, int threads) {
          launch_kernel<rms_norm_backward_kernel<T, decltype(vec)::value, decltype(held)::value, false>>(
              row_grid(groups.groups), threads, launch.cache_bytes, stream, a, partial_w, groups, cached,
              RowCluster{});
        });
  }
  // With no rows the sum is over nothing: sum_partials writes zeros.
  if (want_dw) {
    launch_sum_partials<T>(partial_w, static_cast<T*>(a.grad_weight), 1, groups.groups, a.cols,
                           Acc(1), stream);
  }
}

// ---- LayerNorm forward --------------------------------------------------------------

// The float mean of a row is off by a few ulp of |mean|, which rstd carries
// into every output. Where |mean| * rstd > 16 that is more than a few ulp of
// the result (a constant row with eps = 0 gave +-1 instead of 0 * inf = NaN):
// such rows correct the mean by mean(x - mean), which makes a constant row's
// mean exact, and recompute their statistics (as kernel/cpu/norm.cpp).
template <typename Acc>
__device__ __forceinline__ bool mean_needs_refining(Acc mean, Acc var, Acc eps) {
  return mean * mean > Acc(256) * (var + eps);
}

// The mean and the sum of squared deviations (M2) of each of a step's rows
// (row r at rows + r * cols), read once from global memory: rows too long for
// the row cache, whose only other read is then the output pass. Not
// E[x^2] - mean^2, which loses every digit of a row whose mean is large
// against its spread. Each thread folds in one pack at a time with Chan et
// al.'s pairwise update: the pack's own mean and M2 from its registers, then
// (after k packs of kVec elements, the new one weighing 1 / (k + 1))
//   delta = mean_pack - mean,  mean += delta / (k + 1),
//   M2 += M2_pack + delta^2 * k * kVec / (k + 1),
// one division per pack for all the step's rows, the count kept as k. The block
// then combines the threads' (n_t, mean_t, M2_t) about the row's mean:
//   mean = sum(n_t * mean_t) / n,  M2 = sum(M2_t + n_t * (mean_t - mean)^2),
// two sums (block_reduce), each thread's term its own. A large mean against the spread
// makes mean_t - mean lose digits only where mean_needs_refining then
// recomputes both (|mean| > 16 x the standard deviation). Non-finite results
// (a row past float's range) take the rescaled path as before.
template <int kVec, typename T>
__device__ __forceinline__ void uncached_row_moments(const T* rows, int64_t cols, int64_t accesses, int nrows,
                                                     acc_t<T> (&mean)[kMaxStepRows],
                                                     acc_t<T> (&m2)[kMaxStepRows]) {
  using Acc = acc_t<T>;
  Acc packs = Acc(0);  // k: this thread's packs so far (exact below 2^24)
  for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
    const Acc weight = Acc(1) / (packs + Acc(1));
    const Acc cross = packs * weight * Acc(kVec);
    packs += Acc(1);
#pragma unroll
    for (int r = 0; r < kMaxStepRows; ++r) {
      if (r > 0 && r >= nrows) break;
      Acc xv[kVec];
      load_acc<kVec>(rows + r * cols + v * kVec, xv);
      Acc sum = Acc(0);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum += xv[e];
      const Acc pack_mean = sum * (Acc(1) / Acc(kVec));  // kVec a power of two: exact
      Acc pack_m2 = Acc(0);
#pragma unroll
      for (int e = 0; e < kVec; ++e) pack_m2 += (xv[e] - pack_mean) * (xv[e] - pack_mean);
      const Acc delta = pack_mean - mean[r];
      mean[r] += delta * weight;
      // (delta * cross) * delta: 0 for the first pack (cross 0) even where
      // delta^2 would overflow.
      m2[r] += pack_m2 + (delta * cross) * delta;
    }
  }
  const Acc count = packs * Acc(kVec);  // n_t
  Acc sum[kMaxStepRows];
#pragma unroll
  for (int r = 0; r < kMaxStepRows; ++r) sum[r] = count * mean[r];
  block_reduce(sum, SumOp{});
  const Acc n = static_cast<Acc>(cols);
#pragma unroll
  for (int r = 0; r < kMaxStepRows; ++r) {
    const Acc row_mean = sum[r] / n;
    const Acc d = mean[r] - row_mean;
    m2[r] += (count * d) * d;  // a thread without packs adds 0 (count 0)
    mean[r] = row_mean;
  }
  block_reduce(m2, SumOp{});
}

template <typename T, int kVec, int kHeld, bool kCluster>
__global__ void __launch_bounds__(kCluster ? kClusterThreads : kMaxRowThreads)
    layer_norm_forward_kernel(LayerNormArgs a, ForwardRows step) {
  using Acc = acc_t<T>;
  constexpr int kStep = kCluster ? kClusterStepRows : kMaxStepRows;
  T* const cache = reinterpret_cast<T*>(dynamic_shared_bytes());
  const int64_t cols = a.cols;
  const RowSlice slice = row_slice<kCluster>(cols, step.cluster);
  const int64_t cache_stride = kCluster ? step.cluster.slice_cols : cols;
  const int64_t accesses = slice.cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  auto reduce = row_reduce<kCluster, Acc>(step.cluster);
  ColumnParam<T, kVec, kHeld> weight{a.weight != nullptr ? static_cast<const T*>(a.weight) + slice.col0 : nullptr};
  ColumnParam<T, kVec, kHeld> bias{a.bias != nullptr ? static_cast<const T*>(a.bias) + slice.col0 : nullptr};
  weight.load(accesses);
  bias.load(accesses);
  const T* const input = static_cast<const T*>(a.input) + slice.col0;
  for (int64_t row0 = slice.unit * step.step_rows; row0 < a.rows; row0 += slice.units * step.step_rows) {
    const int nrows = static_cast<int>(min(int64_t{step.step_rows}, a.rows - row0));
    const auto src = [&](int r) -> const T* {
      return step.cached ? cache + r * cache_stride : input + (row0 + r) * cols;
    };
    // The row's mean, and var: its sum of squared deviations from the mean.
    Acc mean[kStep] = {};
    Acc var[kStep] = {};
    // Only the kernels of rows too long to hold read the moments uncached: a
    // held row (at most 32 KiB) always fits the cache (at least 44 KiB), and
    // so does a cluster's slice.
    bool uncached = false;
    if constexpr (!kCluster) uncached = kHeld == 0 && !step.cached;
    if (uncached) {
      if constexpr (!kCluster) uncached_row_moments<kVec>(input + row0 * cols, cols, accesses, nrows, mean, var);
    } else {
      for_each_slice<kHeld>(accesses, [&](int, int64_t v) {
        const int64_t j = v * kVec;
#pragma unroll
        for (int r = 0; r < kStep; ++r) {
          if (r > 0 && r >= nrows) break;
          const Pack<T, kVec> pack = load_pack<kVec>(input + (row0 + r) * cols + j);
          if (step.cached) store_pack<kVec>(cache + r * cache_stride + j, pack);
          Acc xv[kVec];
          widen(pack, xv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) mean[r] += xv[e];
        }
      });
      reduce(mean, SumOp{});
      // Two-pass variance, the row read back from the cache: no cancellation
      // for rows with a large mean.
#pragma unroll
      for (int r = 0; r < kStep; ++r) mean[r] /= n;
      for_each_slice<kHeld>(accesses, [&](int, int64_t v) {
#pragma unroll
        for (int r = 0; r < kStep; ++r) {
          if (r > 0 && r >= nrows) break;
          Acc xv[kVec];
          load_acc<kVec>(src(r) + v * kVec, xv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) var[r] += (xv[e] - mean[r]) * (xv[e] - mean[r]);
        }
      });
      reduce(var, SumOp{});
    }
    // Mean and variance are those of x * scale; scale is 1 unless they
    // overflowed. Both tests are on reduced values: uniform over the block.
    Acc scale[kStep], rstd[kStep];
#pragma unroll
    for (int r = 0; r < kStep; ++r) {
      if (r > 0 && r >= nrows) break;  // a step has a row: row 0 needs no test
      scale[r] = Acc(1);
      Acc eps_scaled = eps;
      const bool underflowed = statistic_underflows(var[r], n, eps);
      if (!dev_isfinite(mean[r]) || !dev_isfinite(var[r]) || underflowed) {
        const Acc s = rescue_scale(row_abs_max<kVec>(src(r), accesses, reduce));
        if (s != Acc(0)) {
          scale[r] = s;
          eps_scaled = eps * s * s;
          mean[r] = row_shifted_sum<kVec>(src(r), accesses, s, Acc(0), reduce) / n;
          var[r] = row_centered_squares<kVec>(src(r), accesses, s, mean[r], reduce);
        }
      }
      if (mean_needs_refining(mean[r], var[r] / n, eps_scaled)) {
        mean[r] += row_shifted_sum<kVec>(src(r), accesses, scale[r], mean[r], reduce) / n;
        var[r] = row_centered_squares<kVec>(src(r), accesses, scale[r], mean[r], reduce);
        // A rescued constant row (unscale_constant_row): its centred values
        // x * scale - mean are 0 exactly, so the forward needs only a finite
        // rstd, the unscaled 1 / sqrt(eps), not its mean unscaled.
        if (scale[r] != Acc(1) && var[r] == Acc(0)) eps_scaled = eps;
      }
      rstd[r] = Acc(1) / dev_sqrt(var[r] / n + eps_scaled);
    }
    for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
      const int64_t j = v * kVec;
      Pack<T, kVec> w, b;
      if (weight.base != nullptr) w = weight.pack(i, v);
      if (bias.base != nullptr) b = bias.pack(i, v);
#pragma unroll
      for (int r = 0; r < kStep; ++r) {
        if (r > 0 && r >= nrows) break;
        Acc out[kVec];
        load_acc<kVec>(src(r) + j, out);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          out[e] = ((scale[r] != Acc(1) ? out[e] * scale[r] : out[e]) - mean[r]) * rstd[r];
          if (weight.base != nullptr) out[e] = out[e] * to_acc(w.v[e]);
          if (bias.base != nullptr) out[e] = out[e] + to_acc(b.v[e]);
        }
        store_acc<kVec>(static_cast<T*>(a.output) + (row0 + r) * cols + slice.col0 + j, out);
      }
    });
  }
  if constexpr (kCluster) cluster_sync();  // no block leaves while another reads its exchange
}

template <typename T>
void layer_norm_forward_typed(const LayerNormArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.cols <= 0) return;
  const bool aligned = is_aligned16(a.input) && is_aligned16(a.output) &&
                       (a.weight == nullptr || is_aligned16(a.weight)) &&
                       (a.bias == nullptr || is_aligned16(a.bias));
  if constexpr (sizeof(T) < 8) {  // double keeps the one-block kernels
    constexpr int kVec = kVecOf<T>;
    if (launch_forward_cluster<T, 2, layer_norm_forward_kernel<T, kVec, kClusterHeldSlices<T, 2>, true>>(
            a, aligned, stream)) {
      return;
    }
  }
  launch_forward<T, 2>(a.cols, aligned, [&](auto vec, auto held, int threads) {
    constexpr int kHeld = decltype(held)::value;
    const ForwardRows step = plan_forward_rows<T>(a.rows, a.cols);
    launch_kernel<layer_norm_forward_kernel<T, decltype(vec)::value, kHeld, false>>(
        forward_grid(a.rows, step.step_rows, kHeld > 0), threads, step.cache_bytes, stream, a, step);
  });
}

// ---- LayerNorm backward -----------------------------------------------------------

// Slices per thread the LayerNorm backward holds in registers: the weight and
// the weight- and bias-gradient sums, three values per element, in 24 32-bit
// registers (two float slices of 4, one 16-bit slice of 8 elements), which
// check_cuda_compile.sh shows fit without spilling; so float32 rows of up to
// 8192 elements hold them (they took the per-row partials before, 1.88x their
// minimum bytes on the traffic model). double keeps about 16 (the scalar
// double kernel spilled with 24). Longer rows take the two launches of a long row.
template <typename T, int kVec>
inline constexpr int kLayerNormHeldSlices =
    std::clamp((sizeof(acc_t<T>) == 8 ? 5 : 8) / (kVec * static_cast<int>(sizeof(acc_t<T>) / 4)), 1, 4);

// g = dy * w, d = x - mean, xhat = d * rstd:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
// dw = sum over rows of dy * xhat, db = sum over rows of dy. Written with xhat
// rather than rstd^2 * d * mean(g * d), whose rstd^2 underflows for wide rows.
//
// A row's sums about `mean`, on x * scale: {sum(d^2), sum(g), sum(g * d)}, the
// weight's pack of slice (i, v) from weight_of(i, v, w).
template <int kHeld, int kVec, typename T, typename WeightOf>
__device__ __forceinline__ void layer_norm_row_sums(const T* x, const T* dy, int64_t accesses, const WeightOf& weight_of,
                                                    acc_t<T> scale, acc_t<T> mean, acc_t<T> (&sums)[3]) {
  using Acc = acc_t<T>;
  sums[0] = sums[1] = sums[2] = Acc(0);
  for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
    const int64_t j = v * kVec;
    Acc xv[kVec], gv[kVec], w[kVec];
    load_acc<kVec>(x + j, xv);
    load_acc<kVec>(dy + j, gv);
    weight_of(i, v, w);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      gv[e] = gv[e] * w[e];
      const Acc d = (scale != Acc(1) ? xv[e] * scale : xv[e]) - mean;
      sums[0] += d * d;
      sums[1] += gv[e];
      sums[2] += gv[e] * d;
    }
  });
  block_reduce(sums, SumOp{});
}

// A row's statistics (kStatRstd, kStatMeanGxhat, kStatScale, kStatMean,
// kStatMeanG) from its mean and its sums about it (layer_norm_row_sums at scale
// 1). Where they overflowed float they are taken again on x * scale (the power
// of two that brings max |x| into [0.5, 1)); a mean large against the spread
// (mean_needs_refining) is corrected by mean(x - mean) and the sums taken again.
// Both re-read the row, and only such rows. Uniform over the block.
template <int kHeld, int kVec, typename T, typename WeightOf, int kStats>
__device__ __forceinline__ void layer_norm_row_stats(const T* x, const T* dy, int64_t accesses,
                                                     const WeightOf& weight_of, acc_t<T> eps, acc_t<T> n,
                                                     acc_t<T> mean, acc_t<T> (&sums)[3], acc_t<T> (&stats)[kStats]) {
  using Acc = acc_t<T>;
  Acc scale = Acc(1);
  Acc eps_scaled = eps;
  // Not where g * d is not finite because g is not (an inf dy, a NaN weight):
  // rescaling x cannot help, and the rescue's eps * s^2 underflows (a constant
  // row gave 0 * inf).
  const bool underflowed = statistic_underflows(sums[0], n, eps);
  if (!dev_isfinite(mean) || !dev_isfinite(sums[0]) || (!dev_isfinite(sums[2]) && dev_isfinite(sums[1])) ||
      underflowed) {
    const Acc s = rescue_scale(row_abs_max<kVec>(x, accesses));
    if (s != Acc(0)) {
      scale = s;
      eps_scaled = eps * s * s;
      mean = row_shifted_sum<kVec>(x, accesses, s, Acc(0)) / n;
      layer_norm_row_sums<kHeld, kVec>(x, dy, accesses, weight_of, s, mean, sums);
    }
  }
  if (mean_needs_refining(mean, sums[0] / n, eps_scaled)) {
    mean += row_shifted_sum<kVec>(x, accesses, scale, mean) / n;
    layer_norm_row_sums<kHeld, kVec>(x, dy, accesses, weight_of, scale, mean, sums);
    unscale_constant_row(sums[0], scale, mean, eps_scaled, eps);
  }
  // rstd of the scaled row; the true rstd is rstd * scale.
  const Acc rstd = Acc(1) / dev_sqrt(sums[0] / n + eps_scaled);
  stats[kStatRstd] = rstd;
  stats[kStatMeanGxhat] = rstd * (sums[2] / n);
  stats[kStatScale] = scale;
  stats[kStatMean] = mean;
  stats[kStatMeanG] = sums[1] / n;
}

// One element's dx and xhat from its row's statistics.
template <typename Acc>
__device__ __forceinline__ Acc layer_norm_dx(const Acc* stats, Acc x, Acc dy, Acc w, Acc& xhat) {
  const Acc rstd = stats[kStatRstd], scale = stats[kStatScale];
  xhat = ((scale != Acc(1) ? x * scale : x) - stats[kStatMean]) * rstd;
  const Acc out = rstd * (dy * w - stats[kStatMeanG] - xhat * stats[kStatMeanGxhat]);
  return scale != Acc(1) ? out * scale : out;
}

// Weight and sums held as in rms_norm_backward_kernel. Its statistics follow
// layer_norm_row_stats step for step, written out here rather than called:
// through those helpers (even with the rare rows reading the weight from
// global memory) the double and 16-bit kernels spilled 4-72 bytes on sm_90.
// kCluster: a row held by a thread-block cluster, as rms_norm_backward_kernel's;
// its slice of the weight is cached after x and dy rather than held.
template <typename T, int kVec, int kHeld, bool kCluster>
__global__ void __launch_bounds__(kCluster ? kBackwardClusterThreads : kMaxRowThreads)
    layer_norm_backward_kernel(LayerNormBackwardArgs a, acc_t<T>* partial_w, acc_t<T>* partial_b,
                               RowGroups groups, bool cached, RowCluster cluster) {
  static_assert(kHeld > 0, "a row too long to hold takes the long-row kernels");
  using Acc = acc_t<T>;
  unsigned char* const row_cache = dynamic_shared_bytes();
  const int64_t cols = a.cols;
  const RowSlice slice = row_slice<kCluster>(cols, cluster);
  const int64_t cache_stride = kCluster ? cluster.slice_cols : cols;
  T* cache_x = reinterpret_cast<T*>(row_cache);
  T* cache_dy = cache_x + cache_stride;
  T* cache_w = cache_dy + cache_stride;  // kCluster: the weight's slice
  const T* weight = a.weight != nullptr ? static_cast<const T*>(a.weight) + slice.col0 : nullptr;
  const int64_t accesses = slice.cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  auto reduce = row_reduce<kCluster, Acc>(cluster);
  Acc w_held[kCluster ? 1 : kHeld][kVec];
  Acc dw_held[kHeld][kVec];
  Acc db_held[kHeld][kVec];
  // The weight of slice (i, v) (1 without a weight).
  const auto weight_of = [&](int i, int64_t v, Acc (&w)[kVec]) {
    if (weight == nullptr) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[e] = Acc(1);
    } else if constexpr (kCluster) {
      load_acc<kVec>(cache_w + v * kVec, w);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[e] = w_held[i][e];
    }
  };
  for (int64_t g = slice.unit; g < groups.groups; g += slice.units) {
    const int64_t row_begin = g * groups.rows_per_group;
    const int64_t row_end = min(a.rows, row_begin + groups.rows_per_group);
    Acc* pw = partial_w != nullptr ? partial_w + g * cols + slice.col0 : nullptr;
    Acc* pb = partial_b != nullptr ? partial_b + g * cols + slice.col0 : nullptr;
    for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
      if (weight != nullptr) {
        if constexpr (kCluster) {
          store_pack<kVec>(cache_w + v * kVec, load_pack<kVec>(weight + v * kVec));
        } else {
          load_acc<kVec>(weight + v * kVec, w_held[i]);
        }
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) dw_held[i][e] = db_held[i][e] = Acc(0);
    });
    for (int64_t row = row_begin; row < row_end; ++row) {
      const T* x = static_cast<const T*>(a.input) + row * cols + slice.col0;
      const T* dy = static_cast<const T*>(a.grad_output) + row * cols + slice.col0;
      T* dx = static_cast<T*>(a.grad_input) + row * cols + slice.col0;
      Acc sum[1] = {Acc(0)};
      for_each_slice<kHeld>(accesses, [&](int, int64_t v) {
        const int64_t j = v * kVec;
        const Pack<T, kVec> xp = load_pack<kVec>(x + j);
        if (cached) {
          store_pack<kVec>(cache_x + j, xp);
          store_pack<kVec>(cache_dy + j, load_pack<kVec>(dy + j));
        }
        Acc xv[kVec];
        widen(xp, xv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum[0] += xv[e];
      });
      reduce(sum, SumOp{});
      const T* x_src = cached ? cache_x : x;
      const T* dy_src = cached ? cache_dy : dy;
      // Statistics of x * scale; scale is 1 unless they overflowed.
      Acc mean = sum[0] / n;
      Acc sums[3];  // sum(d^2), sum(g), sum(g * d)
      auto row_sums = [&](Acc s) {
        sums[0] = sums[1] = sums[2] = Acc(0);
        for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
          const int64_t j = v * kVec;
          Acc xv[kVec], gv[kVec], w[kVec];
          load_acc<kVec>(x_src + j, xv);
          load_acc<kVec>(dy_src + j, gv);
          weight_of(i, v, w);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            gv[e] = weight != nullptr ? gv[e] * w[e] : gv[e];
            const Acc d = (s != Acc(1) ? xv[e] * s : xv[e]) - mean;
            sums[0] += d * d;
            sums[1] += gv[e];
            sums[2] += gv[e] * d;
          }
        });
        reduce(sums, SumOp{});
      };
      row_sums(Acc(1));
      Acc scale = Acc(1);
      Acc eps_scaled = eps;
      // As layer_norm_row_stats: not for a g that is not finite.
      const bool underflowed = statistic_underflows(sums[0], n, eps);
      if (!dev_isfinite(mean) || !dev_isfinite(sums[0]) || (!dev_isfinite(sums[2]) && dev_isfinite(sums[1])) ||
          underflowed) {
        const Acc s = rescue_scale(row_abs_max<kVec>(x_src, accesses, reduce));
        if (s != Acc(0)) {
          scale = s;
          eps_scaled = eps * s * s;
          mean = row_shifted_sum<kVec>(x_src, accesses, s, Acc(0), reduce) / n;
          row_sums(s);
        }
      }
      if (mean_needs_refining(mean, sums[0] / n, eps_scaled)) {
        mean += row_shifted_sum<kVec>(x_src, accesses, scale, mean, reduce) / n;
        row_sums(scale);
        unscale_constant_row(sums[0], scale, mean, eps_scaled, eps);
      }
      // rstd of the scaled row; the true rstd is rstd * scale.
      const Acc rstd = Acc(1) / dev_sqrt(sums[0] / n + eps_scaled);
      const Acc mean_g = sums[1] / n;
      const Acc mean_gxhat = rstd * (sums[2] / n);
      const bool first = row == row_begin;
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        const int64_t j = v * kVec;
        Acc xv[kVec], dyv[kVec], out[kVec], w[kVec];
        load_acc<kVec>(x_src + j, xv);
        load_acc<kVec>(dy_src + j, dyv);
        weight_of(i, v, w);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const Acc xhat = ((scale != Acc(1) ? xv[e] * scale : xv[e]) - mean) * rstd;
          const Acc gv = weight != nullptr ? dyv[e] * w[e] : dyv[e];
          out[e] = rstd * (gv - mean_g - xhat * mean_gxhat);
          if (scale != Acc(1)) out[e] = out[e] * scale;
          dw_held[i][e] = first ? dyv[e] * xhat : dw_held[i][e] + dyv[e] * xhat;
          db_held[i][e] = first ? dyv[e] : db_held[i][e] + dyv[e];
        }
        store_acc<kVec>(dx + j, out);
      });
    }
    if (row_end > row_begin) {
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        Pack<Acc, kVec> wp, bp;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          wp.v[e] = dw_held[i][e];
          bp.v[e] = db_held[i][e];
        }
        if (pw != nullptr) store_pack<kVec>(pw + v * kVec, wp);
        if (pb != nullptr) store_pack<kVec>(pb + v * kVec, bp);
      });
    }
  }
  if constexpr (kCluster) cluster_sync();  // no block leaves while another reads its exchange
}

// Pass 1 of a long row's LayerNorm backward: each row's statistics (layer_norm_row_stats).
inline constexpr int kLayerNormStats = 8;

// The mean of x, the mean of g = dy * w, sum((x - mean)^2) and the co-moment
// sum((g - mean(g)) * (x - mean)), which is sum(g * d) (the sum of d is 0), of
// each of a step's rows in one read: each thread folds in one pack at a time
// with Chan et al.'s pairwise update (as uncached_row_moments, the co-moment
// with it: C += C_pack + delta_g * delta_x * k * kVec / (k + 1)), then the block
// combines the threads' moments about the row's means. Not sum(g * x) - mean *
// sum(g), which loses every digit of a row whose mean is large against its
// spread.
template <typename T, int kVec>
__global__ void __launch_bounds__(kLongRowStatsThreads<acc_t<T>>)
    layer_norm_long_row_stats_kernel(LayerNormBackwardArgs a, acc_t<T>* stats) {
  using Acc = acc_t<T>;
  constexpr int kStep = kLongRowStepRows<Acc>;
  const int64_t cols = a.cols;
  const T* weight = static_cast<const T*>(a.weight);
  const int64_t accesses = cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  const auto weight_of = [&](int, int64_t v, Acc (&w)[kVec]) { weight_or_ones<kVec>(weight, v, w); };
  for (int64_t row0 = int64_t{blockIdx.x} * kStep; row0 < a.rows; row0 += int64_t{gridDim.x} * kStep) {
    const int nrows = static_cast<int>(min(int64_t{kStep}, a.rows - row0));
    const T* x = static_cast<const T*>(a.input) + row0 * cols;
    const T* dy = static_cast<const T*>(a.grad_output) + row0 * cols;
    // Row r: means of x and g (then m[kStep + r]), M2 and the co-moment.
    Acc mean[2 * kStep] = {};
    Acc moment[2 * kStep] = {};
    Acc packs = Acc(0);  // k: this thread's packs so far (exact below 2^24)
    for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
      const Acc fold = Acc(1) / (packs + Acc(1));
      const Acc cross = packs * fold * Acc(kVec);
      packs += Acc(1);
      Acc w[kVec];
      weight_or_ones<kVec>(weight, v, w);
#pragma unroll
      for (int r = 0; r < kStep; ++r) {
        if (r > 0 && r >= nrows) break;
        Acc xv[kVec], gv[kVec];
        load_acc<kVec>(x + r * cols + v * kVec, xv);
        load_acc<kVec>(dy + r * cols + v * kVec, gv);
        Acc sum_x = Acc(0), sum_g = Acc(0);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          gv[e] = gv[e] * w[e];
          sum_x += xv[e];
          sum_g += gv[e];
        }
        const Acc pack_x = sum_x * (Acc(1) / Acc(kVec));  // kVec a power of two: exact
        const Acc pack_g = sum_g * (Acc(1) / Acc(kVec));
        Acc pack_m2 = Acc(0), pack_c = Acc(0);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const Acc d = xv[e] - pack_x;
          pack_m2 += d * d;
          pack_c += (gv[e] - pack_g) * d;
        }
        const Acc delta_x = pack_x - mean[r];
        const Acc delta_g = pack_g - mean[kStep + r];
        mean[r] += delta_x * fold;
        mean[kStep + r] += delta_g * fold;
        // (delta * cross) * delta: 0 for the first pack (cross 0) even where
        // the product of the deltas would overflow.
        moment[r] += pack_m2 + (delta_x * cross) * delta_x;
        moment[kStep + r] += pack_c + (delta_g * cross) * delta_x;
      }
    }
    const Acc count = packs * Acc(kVec);  // n_t
    Acc total[2 * kStep];
#pragma unroll
    for (int k = 0; k < 2 * kStep; ++k) total[k] = count * mean[k];
    block_reduce(total, SumOp{});
#pragma unroll
    for (int r = 0; r < kStep; ++r) {
      const Acc row_x = total[r] / n, row_g = total[kStep + r] / n;
      const Acc dx = mean[r] - row_x, dg = mean[kStep + r] - row_g;
      moment[r] += (count * dx) * dx;  // a thread without packs adds 0 (count 0)
      moment[kStep + r] += (count * dx) * dg;
      mean[r] = row_x;
      mean[kStep + r] = row_g;
    }
    block_reduce(moment, SumOp{});
    Acc row_stats[kStep][kLayerNormStats] = {};
#pragma unroll
    for (int r = 0; r < kStep; ++r) {
      if (r > 0 && r >= nrows) break;
      Acc sums[3] = {moment[r], mean[kStep + r] * n, moment[kStep + r]};
      layer_norm_row_stats<0, kVec>(x + r * cols, dy + r * cols, accesses, weight_of, eps, n, mean[r], sums,
                                    row_stats[r]);
    }
    store_row_stats(stats, row0, nrows, row_stats);
  }
}

// A long LayerNorm row's two passes: the statistics kernel, and an element's
// dx and its dw and db terms in the column launch.
struct LayerNormLongRowMath {
  template <typename T, int kVec>
  static constexpr auto stats_kernel = layer_norm_long_row_stats_kernel<T, kVec>;
  static constexpr int kStats = kLayerNormStats;
  static constexpr int kSums = 2;
  template <typename Acc>
  __device__ __forceinline__ static Acc element(const Acc* stats, Acc x, Acc dy, Acc w, Acc (&terms)[kSums]) {
    Acc xhat;
    const Acc out = layer_norm_dx(stats, x, dy, w, xhat);
    terms[0] = dy * xhat;
    terms[1] = dy;
    return out;
  }
};

template <typename T>
RowLaunch plan_layer_norm_backward(const LayerNormBackwardArgs& a) {
  const bool aligned = is_aligned16(a.grad_output) && is_aligned16(a.input) && is_aligned16(a.grad_input) &&
                       (a.weight == nullptr || is_aligned16(a.weight));
  return plan_rows<T>(a.cols, aligned, 2);
}

template <typename T>
bool layer_norm_backward_holds(const RowLaunch& launch, int64_t cols) {
  return row_is_held<T, kLayerNormHeldSlices<T, kVecOf<T>>, kLayerNormHeldSlices<T, 1>>(launch, cols);
}

// The cluster that holds a LayerNorm backward row one block does not (above:
// "backward rows held by a cluster"): four times the one-block held slices,
// its slice of the weight cached with x and dy.
template <typename T>
inline constexpr int kClusterLayerNormHeldSlices = 4 * kLayerNormHeldSlices<T, kVecOf<T>>;

template <typename T>
BackwardCluster plan_layer_norm_backward_cluster(const LayerNormBackwardArgs& a, const RowLaunch& launch) {
  return plan_backward_cluster<T, kClusterLayerNormHeldSlices<T>, kBackwardClusterThreads>(a.rows, a.cols,
                                                                                            launch.vectorized, 3);
}

template <typename T>
size_t layer_norm_backward_workspace_typed(const LayerNormBackwardArgs& a) {
  using Acc = acc_t<T>;
  if (a.cols <= 0) return 0;
  const int64_t sums = (a.grad_weight != nullptr ? 1 : 0) + (a.grad_bias != nullptr ? 1 : 0);
  const RowLaunch launch = plan_layer_norm_backward<T>(a);
  if (!layer_norm_backward_holds<T>(launch, a.cols)) {
    return unheld_rows_workspace<T>(static_cast<size_t>(a.rows) * kLayerNormStats * sizeof(Acc),
                                    plan_layer_norm_backward_cluster<T>(a, launch), sums, a.cols);
  }
  return static_cast<size_t>(sums * row_groups(a.rows).groups * a.cols) * sizeof(Acc);
}

template <typename T>
void layer_norm_backward_typed(const LayerNormBackwardArgs& a, void* workspace,
                               cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (a.cols <= 0) return;  // every output is empty
  const RowLaunch launch = plan_layer_norm_backward<T>(a);
  T* const grad_weight = static_cast<T*>(a.grad_weight);
  T* const grad_bias = static_cast<T*>(a.grad_bias);
  // The groups' partial rows in the workspace: the weight's, then the bias's.
  Acc* partial_w = nullptr;
  Acc* partial_b = nullptr;
  const auto place_partials = [&](const RowGroups& groups) {
    Acc* next = static_cast<Acc*>(workspace);
    if (grad_weight != nullptr) {
      partial_w = next;
      next += groups.groups * a.cols;
    }
    if (grad_bias != nullptr) partial_b = next;
  };
  // Decided by the outputs, not the partial pointers: with no rows the
  // workspace is empty (maybe null) and the sums over nothing are zeros. The
  // bias partials follow the weight's in the workspace: one launch sums both.
  const auto sum_groups = [&](const RowGroups& groups) {
    if (grad_weight != nullptr && grad_bias != nullptr) {
      launch_sum_partials<T>(partial_w, grad_weight, 2, groups.groups, a.cols, Acc(1), stream, grad_bias);
    } else if (grad_weight != nullptr || grad_bias != nullptr) {
      launch_sum_partials<T>(grad_weight != nullptr ? partial_w : partial_b,
                             grad_weight != nullptr ? grad_weight : grad_bias, 1, groups.groups, a.cols, Acc(1),
                             stream);
    }
  };
  if (!layer_norm_backward_holds<T>(launch, a.cols)) {
    if constexpr (sizeof(T) < 8) {  // double keeps the long-row launches
      const BackwardCluster c = plan_layer_norm_backward_cluster<T>(a, launch);
      place_partials(c.groups);
      if (launch_backward_cluster<layer_norm_backward_kernel<T, kVecOf<T>, kClusterLayerNormHeldSlices<T>, true>>(
              c, stream, a, partial_w, partial_b)) {
        sum_groups(c.groups);
        return;
      }
    }
    LongRowBackward<T> rows = long_rows_of<T>(a);
    rows.column_sums[0] = grad_weight;
    rows.column_sums[1] = grad_bias;
    launch_long_row_backward<T, LayerNormLongRowMath>(a, launch, rows, static_cast<Acc*>(workspace), stream);
    return;
  }
  const RowGroups groups = row_groups(a.rows);
  place_partials(groups);
  if (groups.groups > 0) {
    const bool cached = launch.cache_bytes > 0;
    launch_held<T, kLayerNormHeldSlices<T, kVecOf<T>>, kLayerNormHeldSlices<T, 1>, true>(
        launch, a.cols, [&](auto vec, auto held, int threads) {
          launch_kernel<layer_norm_backward_kernel<T, decltype(vec)::value, decltype(held)::value, false>>(
              row_grid(groups.groups), threads, launch.cache_bytes, stream, a, partial_w, partial_b, groups, cached,
              RowCluster{});
        });
  }
  sum_groups(groups);
}

}  // namespace

void rms_norm_forward(DType dtype, const RmsNormArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype,
                 [&](auto tag) { rms_norm_forward_typed<typename decltype(tag)::type>(args, stream); });
}

size_t rms_norm_backward_workspace_bytes(DType dtype, const RmsNormBackwardArgs& args) {
  size_t bytes = 0;
  dispatch_dtype(dtype, [&](auto tag) { bytes = rms_norm_backward_workspace_typed<typename decltype(tag)::type>(args); });
  return bytes;
}

void rms_norm_backward(DType dtype, const RmsNormBackwardArgs& args, void* workspace,
                       cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    rms_norm_backward_typed<typename decltype(tag)::type>(args, workspace, stream);
  });
}

void layer_norm_forward(DType dtype, const LayerNormArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    layer_norm_forward_typed<typename decltype(tag)::type>(args, stream);
  });
}

size_t layer_norm_backward_workspace_bytes(DType dtype, const LayerNormBackwardArgs& args) {
  size_t bytes = 0;
  dispatch_dtype(dtype, [&](auto tag) { bytes = layer_norm_backward_workspace_typed<typename decltype(tag)::type>(args); });
  return bytes;
}

void layer_norm_backward(DType dtype, const LayerNormBackwardArgs& args, void* workspace,
                         cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    layer_norm_backward_typed<typename decltype(tag)::type>(args, workspace, stream);
  });
}

}  // namespace op_ext::cuda
