// Row normalisations on CUDA: RMSNorm, fused residual-add + RMSNorm, LayerNorm;
// forward and backward. Rows are [rows, cols] with cols = prod(normalized_shape);
// launch layout, row cache and reductions: row_common.cuh. The math, and the
// order of its operations, follow the CPU kernels (kernel/cpu/norm.cpp):
// statistics in float (double for double), LayerNorm's variance in two passes
// over a cached row (one, combined from per-thread moments, over a longer one).
//
// Weight and bias gradients are sums over rows. The rows are cut into at most
// kMaxGroups contiguous groups (a function of the row count only); the block of
// a group adds its rows' contributions into its own partial row of a float
// workspace (each thread to the columns it owns, so no atomics and no barrier),
// and sum_partials_kernel then adds the partial rows in a fixed order. The
// result is bit-identical run after run.
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

// partial[j .. j + kVec) = values for the first row of a group, += for the
// others: the thread's whole slice as one access, so a warp's lanes read and
// write neighbouring packs (one float per lane, kVec apart, touched a sector
// per lane: 0.35 sector efficiency on 16-bit rows).
template <int kVec, typename Acc>
__device__ __forceinline__ void accumulate(Acc* partial, bool first_row, const Acc (&values)[kVec]) {
  Pack<Acc, kVec> pack;
  if (first_row) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) pack.v[e] = values[e];
  } else {
    pack = load_pack<kVec>(partial);
#pragma unroll
    for (int e = 0; e < kVec; ++e) pack.v[e] += values[e];
  }
  store_pack<kVec>(partial, pack);
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

// Launches a row norm's kernel<kVec, kHeld> for rows planned as `launch`:
// run(vec, held, threads) with vec and held std::integral_constants. A row of at
// most kMaxRowThreads x held slices is held (kHeldVec or kHeldScalar slices per
// thread, one thread per held slices, a multiple of 32); a longer one is not
// (kHeld 0, the planned block).
template <typename T, int kHeldVec, int kHeldScalar, typename Run>
void launch_held(const RowLaunch& launch, int64_t cols, const Run& run) {
  const int64_t accesses = launch.vectorized ? cols / kVecOf<T> : cols;
  const int held_slices = launch.vectorized ? kHeldVec : kHeldScalar;
  const bool held = accesses <= int64_t{kMaxRowThreads} * held_slices;
  const int64_t held_threads = std::max<int64_t>(32, ceil_div(ceil_div(accesses, held_slices), 32) * 32);
  using std::integral_constant;
  if (launch.vectorized && held) {
    run(integral_constant<int, kVecOf<T>>{}, integral_constant<int, kHeldVec>{}, static_cast<int>(held_threads));
  } else if (launch.vectorized) {
    run(integral_constant<int, kVecOf<T>>{}, integral_constant<int, 0>{}, launch.threads);
  } else if (held) {
    run(integral_constant<int, 1>{}, integral_constant<int, kHeldScalar>{}, static_cast<int>(held_threads));
  } else {
    run(integral_constant<int, 1>{}, integral_constant<int, 0>{}, launch.threads);
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
  int step_rows;   // rows per step, 1..kMaxStepRows
  bool cached;     // the step's rows are kept in the row cache
  size_t cache_bytes;
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

template <typename T, int kVec, int kHeld>
__global__ void __launch_bounds__(kMaxRowThreads)
    rms_norm_forward_kernel(RmsNormArgs a, ForwardRows step) {
  using Acc = acc_t<T>;
  T* const cache = reinterpret_cast<T*>(dynamic_shared_bytes());
  const int64_t cols = a.cols;
  const int64_t accesses = cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const bool fused = a.residual != nullptr;
  ColumnParam<T, kVec, kHeld> weight{static_cast<const T*>(a.weight)};
  weight.load(accesses);
  for (int64_t row0 = int64_t{blockIdx.x} * step.step_rows; row0 < a.rows;
       row0 += int64_t{gridDim.x} * step.step_rows) {
    const int nrows = static_cast<int>(min(int64_t{step.step_rows}, a.rows - row0));
    // Where row r's values are read back: the cache, or the tensor the norm reads.
    const auto src = [&](int r) -> const T* {
      if (step.cached) return cache + r * cols;
      return fused ? static_cast<const T*>(a.residual_out) + (row0 + r) * cols
                   : static_cast<const T*>(a.input) + (row0 + r) * cols;
    };
    Acc sum_sq[kMaxStepRows] = {};
    for_each_slice<kHeld>(accesses, [&](int, int64_t v) {
      const int64_t j = v * kVec;
#pragma unroll
      for (int r = 0; r < kMaxStepRows; ++r) {
        if (r > 0 && r >= nrows) break;
        const int64_t offset = (row0 + r) * cols + j;
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
        if (step.cached) store_pack<kVec>(cache + r * cols + j, pack);
        Acc s[kVec];
        widen(pack, s);
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum_sq[r] += s[e] * s[e];
      }
    });
    block_reduce(sum_sq, SumOp{});
    // y = (x * scale) * rstd; scale is 1 unless the row's squares overflowed
    // (a test on reduced values: the same for every thread of the block).
    Acc scale[kMaxStepRows], rstd[kMaxStepRows];
#pragma unroll
    for (int r = 0; r < kMaxStepRows; ++r) {
      if (r > 0 && r >= nrows) break;  // a step has a row: row 0 needs no test
      scale[r] = Acc(1);
      Acc eps_scaled = eps;
      if (!dev_isfinite(sum_sq[r])) {
        const Acc s = overflow_scale(row_abs_max<kVec>(src(r), accesses));
        if (s != Acc(0)) {
          scale[r] = s;
          eps_scaled = eps * s * s;
          sum_sq[r] = row_centered_squares<kVec>(src(r), accesses, s, Acc(0));  // sum of (x * s)^2
        }
      }
      rstd[r] = Acc(1) / dev_sqrt(sum_sq[r] / static_cast<Acc>(cols) + eps_scaled);
    }
    for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
      const int64_t j = v * kVec;
      const Pack<T, kVec> w = weight.pack(i, v);
#pragma unroll
      for (int r = 0; r < kMaxStepRows; ++r) {
        if (r > 0 && r >= nrows) break;
        Acc out[kVec];
        load_acc<kVec>(src(r) + j, out);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          out[e] = (scale[r] != Acc(1) ? out[e] * scale[r] : out[e]) * rstd[r];
          if (weight.base != nullptr) out[e] = out[e] * to_acc(w.v[e]);
        }
        store_acc<kVec>(static_cast<T*>(a.output) + (row0 + r) * cols + j, out);
      }
    });
  }
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
  launch_forward<T, 1>(a.cols, aligned, [&](auto vec, auto held, int threads) {
    constexpr int kHeld = decltype(held)::value;
    const ForwardRows step = plan_forward_rows<T>(a.rows, a.cols);
    launch_kernel<rms_norm_forward_kernel<T, decltype(vec)::value, kHeld>>(
        forward_grid(a.rows, step.step_rows, kHeld > 0), threads, step.cache_bytes, stream, a, step);
  });
}

// ---- RMSNorm backward -------------------------------------------------------------

// Slices per thread the backward norms hold in registers (the weight and the
// weight-gradient sums): 16 32-bit registers of such state, so that the kernel
// stays within the 64 registers a thread of a 1024-thread block has
// (check_cuda_compile.sh refuses spills). A row of up to 1024 x kHeldSlices
// slices (8192 elements in float and 16-bit, 4096 in double, on the 128-bit
// path; 4096 on the scalar path) takes a block of ceil(slices / kHeldSlices) threads and reads its weight
// and writes its partial once per group; a longer row takes kHeld == 0.
// At most 4 slices: the unrolled slice loop's indices cost registers too.
template <typename T, int kVec>
inline constexpr int kHeldSlices = std::clamp(8 / (kVec * static_cast<int>(sizeof(acc_t<T>) / 4)), 1, 4);

// With g = dy * w and xhat = x * rstd (y = w * xhat):
//   dx = rstd * (g - xhat * mean(g * xhat)),  dw = sum over rows of dy * xhat,
// written with xhat rather than rstd^3 * x * mean(g * x), whose rstd^3
// underflows for rows with |x| past ~1e13 in float. `input` is the normalised
// tensor (residual_out for the fused op, whose grad_residual_out is added to dx).
//
// The weight and the group's weight-gradient sums: with kHeld, the thread's
// slices of the weight are read once per group and its sums of dy * xhat are kept
// in registers over the group's rows (in row order, as the float partial row
// would add them) and written once, a whole pack per slice; without, they are
// re-read and read-modify-written per row in the workspace.
template <typename T, int kVec, int kHeld>
__global__ void __launch_bounds__(kMaxRowThreads)
    rms_norm_backward_kernel(RmsNormBackwardArgs a, acc_t<T>* partial_w, RowGroups groups,
                             bool cached) {
  using Acc = acc_t<T>;
  constexpr int kSlots = kHeld > 0 ? kHeld : 1;
  unsigned char* const row_cache = dynamic_shared_bytes();
  const int64_t cols = a.cols;
  T* cache_x = reinterpret_cast<T*>(row_cache);
  T* cache_dy = cache_x + cols;
  const T* weight = static_cast<const T*>(a.weight);
  const int64_t accesses = cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  Acc w_held[kSlots][kVec];
  Acc dw_held[kSlots][kVec];
  // dy * w of slice (i, v) into gv.
  const auto apply_weight = [&](int i, int64_t v, Acc (&gv)[kVec]) {
    if (weight == nullptr) return;
    Acc w[kVec];
    if constexpr (kHeld > 0) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[e] = w_held[i][e];
    } else {
      load_acc<kVec>(weight + v * kVec, w);
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) gv[e] = gv[e] * w[e];
  };
  for (int64_t g = blockIdx.x; g < groups.groups; g += gridDim.x) {
    const int64_t row_begin = g * groups.rows_per_group;
    const int64_t row_end = min(a.rows, row_begin + groups.rows_per_group);
    Acc* partial = partial_w != nullptr ? partial_w + g * cols : nullptr;
    if constexpr (kHeld > 0) {
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        if (weight != nullptr) load_acc<kVec>(weight + v * kVec, w_held[i]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) dw_held[i][e] = Acc(0);
      });
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      const T* x = static_cast<const T*>(a.input) + row * cols;
      const T* dy = static_cast<const T*>(a.grad_output) + row * cols;
      T* dx = static_cast<T*>(a.grad_input) + row * cols;
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
        apply_weight(i, v, gv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          sums[0] += xv[e] * xv[e];
          sums[1] += gv[e] * xv[e];
        }
      });
      block_reduce(sums, SumOp{});
      const T* x_src = cached ? cache_x : x;
      const T* dy_src = cached ? cache_dy : dy;
      // Statistics of x * scale; scale is 1 unless the sums overflowed.
      Acc scale = Acc(1);
      Acc eps_scaled = eps;
      if (!dev_isfinite(sums[0]) || !dev_isfinite(sums[1])) {
        const Acc s = overflow_scale(row_abs_max<kVec>(x_src, accesses));
        if (s != Acc(0)) {
          scale = s;
          eps_scaled = eps * s * s;
          sums[0] = sums[1] = Acc(0);
          for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
            const int64_t j = v * kVec;
            Acc xv[kVec], gv[kVec];
            load_acc<kVec>(x_src + j, xv);
            load_acc<kVec>(dy_src + j, gv);
            apply_weight(i, v, gv);
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              const Acc xs = xv[e] * s;
              sums[0] += xs * xs;
              sums[1] += gv[e] * xs;
            }
          });
          block_reduce(sums, SumOp{});
        }
      }
      // rstd of the scaled row; the true rstd is rstd * scale.
      const Acc rstd = Acc(1) / dev_sqrt(sums[0] / n + eps_scaled);
      const Acc mean_gxhat = rstd * (sums[1] / n);
      const T* gr = a.grad_residual_out != nullptr
                        ? static_cast<const T*>(a.grad_residual_out) + row * cols
                        : nullptr;
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        const int64_t j = v * kVec;
        Acc xv[kVec], dyv[kVec], out[kVec];
        load_acc<kVec>(x_src + j, xv);
        load_acc<kVec>(dy_src + j, dyv);
        Acc gv[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) gv[e] = dyv[e];
        apply_weight(i, v, gv);
        Acc xhat[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          xhat[e] = (scale != Acc(1) ? xv[e] * scale : xv[e]) * rstd;
          out[e] = rstd * (gv[e] - xhat[e] * mean_gxhat);
          if (scale != Acc(1)) out[e] = out[e] * scale;
        }
        if (gr != nullptr) {
          Acc grv[kVec];
          load_acc<kVec>(gr + j, grv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) out[e] = out[e] + grv[e];
        }
        store_acc<kVec>(dx + j, out);
        if (partial == nullptr) return;
        if constexpr (kHeld > 0) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            dw_held[i][e] = row == row_begin ? dyv[e] * xhat[e] : dw_held[i][e] + dyv[e] * xhat[e];
          }
        } else {
          Acc dw[kVec];
#pragma unroll
          for (int e = 0; e < kVec; ++e) dw[e] = dyv[e] * xhat[e];
          accumulate<kVec>(partial + j, row == row_begin, dw);
        }
      });
    }
    if constexpr (kHeld > 0) {
      if (partial != nullptr && row_end > row_begin) {
        for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
          Pack<Acc, kVec> pack;
#pragma unroll
          for (int e = 0; e < kVec; ++e) pack.v[e] = dw_held[i][e];
          store_pack<kVec>(partial + v * kVec, pack);
        });
      }
    }
  }
}

template <typename T>
void rms_norm_backward_typed(const RmsNormBackwardArgs& a, void* workspace, cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (a.cols <= 0) return;  // every output is empty
  const bool want_dw = a.weight != nullptr && a.grad_weight != nullptr;
  Acc* partial_w = want_dw ? static_cast<Acc*>(workspace) : nullptr;
  const RowGroups groups = row_groups(a.rows);
  if (groups.groups > 0) {
    const bool aligned =
        is_aligned16(a.grad_output) && is_aligned16(a.input) && is_aligned16(a.grad_input) &&
        (a.weight == nullptr || is_aligned16(a.weight)) &&
        (a.grad_residual_out == nullptr || is_aligned16(a.grad_residual_out));
    const RowLaunch launch = plan_rows<T>(a.cols, aligned, 2);
    const bool cached = launch.cache_bytes > 0;
    launch_held<T, kHeldSlices<T, kVecOf<T>>, kHeldSlices<T, 1>>(launch, a.cols, [&](auto vec, auto held, int threads) {
      launch_kernel<rms_norm_backward_kernel<T, decltype(vec)::value, decltype(held)::value>>(
          row_grid(groups.groups), threads, launch.cache_bytes, stream, a, partial_w, groups, cached);
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

template <typename T, int kVec, int kHeld>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_forward_kernel(LayerNormArgs a, ForwardRows step) {
  using Acc = acc_t<T>;
  T* const cache = reinterpret_cast<T*>(dynamic_shared_bytes());
  const int64_t cols = a.cols;
  const int64_t accesses = cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  ColumnParam<T, kVec, kHeld> weight{static_cast<const T*>(a.weight)};
  ColumnParam<T, kVec, kHeld> bias{static_cast<const T*>(a.bias)};
  weight.load(accesses);
  bias.load(accesses);
  for (int64_t row0 = int64_t{blockIdx.x} * step.step_rows; row0 < a.rows;
       row0 += int64_t{gridDim.x} * step.step_rows) {
    const int nrows = static_cast<int>(min(int64_t{step.step_rows}, a.rows - row0));
    const auto src = [&](int r) -> const T* {
      return step.cached ? cache + r * cols : static_cast<const T*>(a.input) + (row0 + r) * cols;
    };
    // The row's mean, and var: its sum of squared deviations from the mean.
    Acc mean[kMaxStepRows] = {};
    Acc var[kMaxStepRows] = {};
    if (kHeld == 0 && !step.cached) {
      // Only the kernels of rows too long to hold take this branch: a held row
      // (at most 32 KiB) always fits the cache (at least 44 KiB).
      uncached_row_moments<kVec>(static_cast<const T*>(a.input) + row0 * cols, cols, accesses, nrows, mean, var);
    } else {
      for_each_slice<kHeld>(accesses, [&](int, int64_t v) {
        const int64_t j = v * kVec;
#pragma unroll
        for (int r = 0; r < kMaxStepRows; ++r) {
          if (r > 0 && r >= nrows) break;
          const Pack<T, kVec> pack = load_pack<kVec>(static_cast<const T*>(a.input) + (row0 + r) * cols + j);
          if (step.cached) store_pack<kVec>(cache + r * cols + j, pack);
          Acc xv[kVec];
          widen(pack, xv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) mean[r] += xv[e];
        }
      });
      block_reduce(mean, SumOp{});
      // Two-pass variance, the row read back from the cache: no cancellation
      // for rows with a large mean.
#pragma unroll
      for (int r = 0; r < kMaxStepRows; ++r) mean[r] /= n;
      for_each_slice<kHeld>(accesses, [&](int, int64_t v) {
#pragma unroll
        for (int r = 0; r < kMaxStepRows; ++r) {
          if (r > 0 && r >= nrows) break;
          Acc xv[kVec];
          load_acc<kVec>(src(r) + v * kVec, xv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) var[r] += (xv[e] - mean[r]) * (xv[e] - mean[r]);
        }
      });
      block_reduce(var, SumOp{});
    }
    // Mean and variance are those of x * scale; scale is 1 unless they
    // overflowed. Both tests are on reduced values: uniform over the block.
    Acc scale[kMaxStepRows], rstd[kMaxStepRows];
#pragma unroll
    for (int r = 0; r < kMaxStepRows; ++r) {
      if (r > 0 && r >= nrows) break;  // a step has a row: row 0 needs no test
      scale[r] = Acc(1);
      Acc eps_scaled = eps;
      if (!dev_isfinite(mean[r]) || !dev_isfinite(var[r])) {
        const Acc s = overflow_scale(row_abs_max<kVec>(src(r), accesses));
        if (s != Acc(0)) {
          scale[r] = s;
          eps_scaled = eps * s * s;
          mean[r] = row_shifted_sum<kVec>(src(r), accesses, s, Acc(0)) / n;
          var[r] = row_centered_squares<kVec>(src(r), accesses, s, mean[r]);
        }
      }
      if (mean_needs_refining(mean[r], var[r] / n, eps_scaled)) {
        mean[r] += row_shifted_sum<kVec>(src(r), accesses, scale[r], mean[r]) / n;
        var[r] = row_centered_squares<kVec>(src(r), accesses, scale[r], mean[r]);
      }
      rstd[r] = Acc(1) / dev_sqrt(var[r] / n + eps_scaled);
    }
    for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
      const int64_t j = v * kVec;
      Pack<T, kVec> w, b;
      if (weight.base != nullptr) w = weight.pack(i, v);
      if (bias.base != nullptr) b = bias.pack(i, v);
#pragma unroll
      for (int r = 0; r < kMaxStepRows; ++r) {
        if (r > 0 && r >= nrows) break;
        Acc out[kVec];
        load_acc<kVec>(src(r) + j, out);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          out[e] = ((scale[r] != Acc(1) ? out[e] * scale[r] : out[e]) - mean[r]) * rstd[r];
          if (weight.base != nullptr) out[e] = out[e] * to_acc(w.v[e]);
          if (bias.base != nullptr) out[e] = out[e] + to_acc(b.v[e]);
        }
        store_acc<kVec>(static_cast<T*>(a.output) + (row0 + r) * cols + j, out);
      }
    });
  }
}

template <typename T>
void layer_norm_forward_typed(const LayerNormArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.cols <= 0) return;
  const bool aligned = is_aligned16(a.input) && is_aligned16(a.output) &&
                       (a.weight == nullptr || is_aligned16(a.weight)) &&
                       (a.bias == nullptr || is_aligned16(a.bias));
  launch_forward<T, 2>(a.cols, aligned, [&](auto vec, auto held, int threads) {
    constexpr int kHeld = decltype(held)::value;
    const ForwardRows step = plan_forward_rows<T>(a.rows, a.cols);
    launch_kernel<layer_norm_forward_kernel<T, decltype(vec)::value, kHeld>>(
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
// double kernel spilled with 24).
template <typename T, int kVec>
inline constexpr int kLayerNormHeldSlices =
    std::clamp((sizeof(acc_t<T>) == 8 ? 5 : 8) / (kVec * static_cast<int>(sizeof(acc_t<T>) / 4)), 1, 4);

// g = dy * w, d = x - mean, xhat = d * rstd:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
// dw = sum over rows of dy * xhat, db = sum over rows of dy. Written with xhat
// rather than rstd^2 * d * mean(g * d), whose rstd^2 underflows for wide rows.
// Weight and sums held as in rms_norm_backward_kernel (kHeld; 0: re-read and
// read-modify-written per row, for long rows).
template <typename T, int kVec, int kHeld>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_backward_kernel(LayerNormBackwardArgs a, acc_t<T>* partial_w, acc_t<T>* partial_b,
                               RowGroups groups, bool cached) {
  using Acc = acc_t<T>;
  constexpr int kSlots = kHeld > 0 ? kHeld : 1;
  unsigned char* const row_cache = dynamic_shared_bytes();
  const int64_t cols = a.cols;
  T* cache_x = reinterpret_cast<T*>(row_cache);
  T* cache_dy = cache_x + cols;
  const T* weight = static_cast<const T*>(a.weight);
  const int64_t accesses = cols / kVec;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  Acc w_held[kSlots][kVec];
  Acc dw_held[kSlots][kVec];
  Acc db_held[kSlots][kVec];
  // The weight of slice (i, v) (1 without a weight).
  const auto weight_of = [&](int i, int64_t v, Acc (&w)[kVec]) {
    if (weight == nullptr) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[e] = Acc(1);
    } else if constexpr (kHeld > 0) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) w[e] = w_held[i][e];
    } else {
      load_acc<kVec>(weight + v * kVec, w);
    }
  };
  for (int64_t g = blockIdx.x; g < groups.groups; g += gridDim.x) {
    const int64_t row_begin = g * groups.rows_per_group;
    const int64_t row_end = min(a.rows, row_begin + groups.rows_per_group);
    Acc* pw = partial_w != nullptr ? partial_w + g * cols : nullptr;
    Acc* pb = partial_b != nullptr ? partial_b + g * cols : nullptr;
    if constexpr (kHeld > 0) {
      for_each_slice<kHeld>(accesses, [&](int i, int64_t v) {
        if (weight != nullptr) load_acc<kVec>(weight + v * kVec, w_held[i]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) dw_held[i][e] = db_held[i][e] = Acc(0);
      });
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      const T* x = static_cast<const T*>(a.input) + row * cols;
      const T* dy = static_cast<const T*>(a.grad_output) + row * cols;
      T* dx = static_cast<T*>(a.grad_input) + row * cols;
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
      block_reduce(sum, SumOp{});
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
        block_reduce(sums, SumOp{});
      };
      row_sums(Acc(1));
      Acc scale = Acc(1);
      Acc eps_scaled = eps;
      if (!dev_isfinite(mean) || !dev_isfinite(sums[0]) || !dev_isfinite(sums[2])) {
        const Acc s = overflow_scale(row_abs_max<kVec>(x_src, accesses));
        if (s != Acc(0)) {
          scale = s;
          eps_scaled = eps * s * s;
          mean = row_shifted_sum<kVec>(x_src, accesses, s, Acc(0)) / n;
          row_sums(s);
        }
      }
      if (mean_needs_refining(mean, sums[0] / n, eps_scaled)) {
        mean += row_shifted_sum<kVec>(x_src, accesses, scale, mean) / n;
        row_sums(scale);
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
        Acc dw[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const Acc xhat = ((scale != Acc(1) ? xv[e] * scale : xv[e]) - mean) * rstd;
          const Acc gv = weight != nullptr ? dyv[e] * w[e] : dyv[e];
          out[e] = rstd * (gv - mean_g - xhat * mean_gxhat);
          if (scale != Acc(1)) out[e] = out[e] * scale;
          if constexpr (kHeld > 0) {
            dw_held[i][e] = first ? dyv[e] * xhat : dw_held[i][e] + dyv[e] * xhat;
            db_held[i][e] = first ? dyv[e] : db_held[i][e] + dyv[e];
          } else {
            dw[e] = dyv[e] * xhat;
          }
        }
        if constexpr (kHeld == 0) {
          if (pw != nullptr) accumulate<kVec>(pw + j, first, dw);
          if (pb != nullptr) accumulate<kVec>(pb + j, first, dyv);
        }
        store_acc<kVec>(dx + j, out);
      });
    }
    if constexpr (kHeld > 0) {
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
  }
}

template <typename T>
void layer_norm_backward_typed(const LayerNormBackwardArgs& a, void* workspace,
                               cudaStream_t stream) {
  using Acc = acc_t<T>;
  if (a.cols <= 0) return;  // every output is empty
  const RowGroups groups = row_groups(a.rows);
  Acc* next = static_cast<Acc*>(workspace);
  Acc* partial_w = nullptr;
  Acc* partial_b = nullptr;
  if (a.grad_weight != nullptr) {
    partial_w = next;
    next += groups.groups * a.cols;
  }
  if (a.grad_bias != nullptr) partial_b = next;
  if (groups.groups > 0) {
    const bool aligned = is_aligned16(a.grad_output) && is_aligned16(a.input) &&
                         is_aligned16(a.grad_input) &&
                         (a.weight == nullptr || is_aligned16(a.weight));
    const RowLaunch launch = plan_rows<T>(a.cols, aligned, 2);
    const bool cached = launch.cache_bytes > 0;
    launch_held<T, kLayerNormHeldSlices<T, kVecOf<T>>, kLayerNormHeldSlices<T, 1>>(
        launch, a.cols, [&](auto vec, auto held, int threads) {
          launch_kernel<layer_norm_backward_kernel<T, decltype(vec)::value, decltype(held)::value>>(
              row_grid(groups.groups), threads, launch.cache_bytes, stream, a, partial_w, partial_b, groups, cached);
        });
  }
  // Decided by the outputs, not the partial pointers: with no rows the
  // workspace is empty (maybe null) and the sums over nothing are zeros. The
  // bias partials follow the weight's in the workspace: one launch sums both.
  T* const grad_weight = static_cast<T*>(a.grad_weight);
  T* const grad_bias = static_cast<T*>(a.grad_bias);
  if (grad_weight != nullptr && grad_bias != nullptr) {
    launch_sum_partials<T>(partial_w, grad_weight, 2, groups.groups, a.cols, Acc(1), stream, grad_bias);
  } else if (grad_weight != nullptr || grad_bias != nullptr) {
    launch_sum_partials<T>(grad_weight != nullptr ? partial_w : partial_b,
                           grad_weight != nullptr ? grad_weight : grad_bias, 1, groups.groups, a.cols, Acc(1),
                           stream);
  }
}

size_t acc_size(DType dtype) {
  return dtype == DType::Float64 ? sizeof(double) : sizeof(float);
}

}  // namespace

void rms_norm_forward(DType dtype, const RmsNormArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype,
                 [&](auto tag) { rms_norm_forward_typed<typename decltype(tag)::type>(args, stream); });
}

size_t rms_norm_backward_workspace_bytes(DType dtype, const RmsNormBackwardArgs& args) {
  if (args.cols <= 0 || args.weight == nullptr || args.grad_weight == nullptr) return 0;
  return static_cast<size_t>(row_groups(args.rows).groups * args.cols) * acc_size(dtype);
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
  if (args.cols <= 0) return 0;
  const int64_t sums = (args.grad_weight != nullptr ? 1 : 0) + (args.grad_bias != nullptr ? 1 : 0);
  return static_cast<size_t>(sums * row_groups(args.rows).groups * args.cols) * acc_size(dtype);
}

void layer_norm_backward(DType dtype, const LayerNormBackwardArgs& args, void* workspace,
                         cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    layer_norm_backward_typed<typename decltype(tag)::type>(args, workspace, stream);
  });
}

}  // namespace op_ext::cuda
