// Softmax over one dim of a dense [outer, dim_size, inner] view, forward and
// backward, on CUDA.
//
// inner == 1 (softmax over the last dim, the attention case): one block per row
// (row_common.cuh: row cache, block reductions): max, then sum of exp(x - max),
// then exp(x - max) / sum. exp is recomputed from the cached input in the last
// pass, which gives the same values as keeping them. A row too long for the cache
// takes the max and the sum in one pass over global memory (online softmax), so
// it is read twice, not three times; on sm_90 a thread-block cluster holds it
// instead (kCluster: block k of the cluster caches the k-th slice of the
// columns, the blocks combine the max and the sum through distributed shared
// memory, row_common.cuh), and it is read once.
// inner > 1: one thread per (outer, inner) column walks the softmax dim; the
// threads of a warp read neighbouring inner elements, so the accesses coalesce.
// max propagates NaN, as in torch: a NaN or +inf in a row makes it NaN, a row
// of -inf is NaN (0/0), -inf entries get probability 0.
#include <algorithm>

#include "row_common.cuh"
#include "softmax.cuh"

namespace op_ext::cuda {
namespace {

using namespace detail;

// At least 1 block per SM: without it ptxas (nvcc 13, sm_90) fits the double
// x2 instantiation into 32 registers for two blocks per SM and spills 40 bytes
// (check_cuda_compile.sh refuses spills); with it, 42 registers and no spill.
template <typename T, int kVec, bool kCluster>
__global__ void __launch_bounds__(kMaxRowThreads, 1)
    softmax_last_dim_kernel(const T* input, T* output, int64_t rows, int64_t cols, bool cached,
                            RowCluster cluster) {
  using Acc = acc_t<T>;
  unsigned char* const row_cache = dynamic_shared_bytes();
  T* cache = reinterpret_cast<T*>(row_cache);
  const RowSlice slice = row_slice<kCluster>(cols, cluster);
  auto reduce = row_reduce<kCluster, Acc>(cluster);
  cached = kCluster || cached;  // a cluster's slices always fit
  const int64_t accesses = slice.cols / kVec;
  for (int64_t row = slice.unit; row < rows; row += slice.units) {
    const T* x = input + row * cols + slice.col0;
    T* y = output + row * cols + slice.col0;
    Acc row_max[1] = {neg_infinity<Acc>()};
    Acc sum[1] = {Acc(0)};
    if (cached) {
      for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
        const int64_t j = v * kVec;
        const Pack<T, kVec> pack = load_pack<kVec>(x + j);
        store_pack<kVec>(cache + j, pack);
        Acc xv[kVec];
        widen(pack, xv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) row_max[0] = MaxOp{}(row_max[0], xv[e]);
      }
      reduce(row_max, MaxOp{});
      for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
        Acc xv[kVec];
        load_acc<kVec>(cache + v * kVec, xv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum[0] += dev_exp(xv[e] - row_max[0]);
      }
      reduce(sum, SumOp{});
    } else {
      // A row the cache cannot hold is read from global memory: the max and the
      // sum come from one pass (a running max per thread, its sum rescaled when
      // the max grows), so the row is read twice in all, not three times.
      for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
        Acc xv[kVec];
        load_acc<kVec>(x + v * kVec, xv);
        Acc pack_max = xv[0];
#pragma unroll
        for (int e = 1; e < kVec; ++e) pack_max = MaxOp{}(pack_max, xv[e]);
        const Acc new_max = MaxOp{}(row_max[0], pack_max);
        // While every value so far is -inf there is nothing to add (exp(-inf - -inf) is NaN).
        if (new_max == neg_infinity<Acc>()) continue;
        Acc pack_sum = Acc(0);
#pragma unroll
        for (int e = 0; e < kVec; ++e) pack_sum += dev_exp(xv[e] - new_max);
        sum[0] = sum[0] * dev_exp(row_max[0] - new_max) + pack_sum;
        row_max[0] = new_max;
      }
      const Acc thread_max = row_max[0];
      block_reduce(row_max, MaxOp{});
      // Each thread's sum is relative to its own max: bring it to the row's.
      if (thread_max != neg_infinity<Acc>()) sum[0] = sum[0] * dev_exp(thread_max - row_max[0]);
      block_reduce(sum, SumOp{});
    }
    const Acc m = row_max[0];
    const T* src = cached ? cache : x;
    const Acc inv = Acc(1) / sum[0];
    for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
      const int64_t j = v * kVec;
      Acc out[kVec];
      load_acc<kVec>(src + j, out);
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = dev_exp(out[e] - m) * inv;
      store_acc<kVec>(y + j, out);
    }
  }
  if constexpr (kCluster) cluster_sync();  // no block leaves while another reads its exchange
}

// dx = y * (dy - sum(dy * y)) along the row (kCluster: as the forward).
template <typename T, int kVec, bool kCluster>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_backward_last_dim_kernel(const T* grad_output, const T* output, T* grad_input,
                                     int64_t rows, int64_t cols, bool cached, RowCluster cluster) {
  using Acc = acc_t<T>;
  unsigned char* const row_cache = dynamic_shared_bytes();
  const RowSlice slice = row_slice<kCluster>(cols, cluster);
  auto reduce = row_reduce<kCluster, Acc>(cluster);
  T* cache_dy = reinterpret_cast<T*>(row_cache);
  T* cache_y = cache_dy + (kCluster ? cluster.slice_cols : cols);
  cached = kCluster || cached;  // a cluster's slices always fit
  const int64_t accesses = slice.cols / kVec;
  for (int64_t row = slice.unit; row < rows; row += slice.units) {
    const T* dy = grad_output + row * cols + slice.col0;
    const T* y = output + row * cols + slice.col0;
    T* dx = grad_input + row * cols + slice.col0;
    Acc dot[1] = {Acc(0)};
    for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
      const int64_t j = v * kVec;
      const Pack<T, kVec> gp = load_pack<kVec>(dy + j);
      const Pack<T, kVec> yp = load_pack<kVec>(y + j);
      if (cached) {
        store_pack<kVec>(cache_dy + j, gp);
        store_pack<kVec>(cache_y + j, yp);
      }
      Acc gv[kVec], yv[kVec];
      widen(gp, gv);
      widen(yp, yv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) dot[0] += gv[e] * yv[e];
    }
    reduce(dot, SumOp{});
    const T* dy_src = cached ? cache_dy : dy;
    const T* y_src = cached ? cache_y : y;
    for (int64_t v = threadIdx.x; v < accesses; v += blockDim.x) {
      const int64_t j = v * kVec;
      Acc gv[kVec], yv[kVec], out[kVec];
      load_acc<kVec>(dy_src + j, gv);
      load_acc<kVec>(y_src + j, yv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = yv[e] * (gv[e] - dot[0]);
      store_acc<kVec>(dx + j, out);
    }
  }
  if constexpr (kCluster) cluster_sync();
}

template <typename T>
__global__ void softmax_strided_kernel(const T* input, T* output, int64_t outer, int64_t dim_size,
                                       int64_t inner) {
  using Acc = acc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += step) {
    const int64_t base = (t / inner) * dim_size * inner + t % inner;
    const T* x = input + base;
    T* y = output + base;
    Acc m = neg_infinity<Acc>();
    for (int64_t d = 0; d < dim_size; ++d) m = MaxOp{}(m, to_acc(load_global(x + d * inner)));
    Acc sum = Acc(0);
    for (int64_t d = 0; d < dim_size; ++d) sum += dev_exp(to_acc(load_global(x + d * inner)) - m);
    const Acc inv = Acc(1) / sum;
    for (int64_t d = 0; d < dim_size; ++d) {
      store_global(y + d * inner, from_acc<T>(dev_exp(to_acc(load_global(x + d * inner)) - m) * inv));
    }
  }
}

template <typename T>
__global__ void softmax_backward_strided_kernel(const T* grad_output, const T* output,
                                                T* grad_input, int64_t outer, int64_t dim_size,
                                                int64_t inner) {
  using Acc = acc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += step) {
    const int64_t base = (t / inner) * dim_size * inner + t % inner;
    Acc dot = Acc(0);
    for (int64_t d = 0; d < dim_size; ++d) {
      dot += to_acc(load_global(grad_output + base + d * inner)) * to_acc(load_global(output + base + d * inner));
    }
    for (int64_t d = 0; d < dim_size; ++d) {
      const int64_t i = base + d * inner;
      store_global(grad_input + i, from_acc<T>(to_acc(load_global(output + i)) * (to_acc(load_global(grad_output + i)) - dot)));
    }
  }
}

constexpr int kStridedThreads = 256;

// Launches the cluster kernel of a last-dim softmax whose rows one block
// cannot cache (`arrays` of them per row: 1 forward, 2 backward), where the GPU
// has clusters and the row is 128-bit aligned; false where it did not.
template <typename T, auto Kernel, typename... Args>
bool launch_softmax_cluster(int64_t rows, int64_t cols, bool aligned, int arrays, cudaStream_t stream,
                            Args... args) {
  constexpr int kVec = kVecOf<T>;
  // double is for checking, not speed: it keeps the one-block kernels.
  if (sizeof(T) == 8 || !aligned || cols % kVec != 0) return false;
  RowCluster cluster = plan_row_cluster<T>(cols, cols, static_cast<size_t>(arrays) * sizeof(T));
  if (cluster.blocks == 0) return false;
  const size_t shared = cluster_shared_bytes<acc_t<T>>(
      static_cast<size_t>(arrays) * static_cast<size_t>(cluster.slice_cols) * sizeof(T), &cluster);
  const int threads = plan_rows<T>(cluster.slice_cols, true, 0).threads;
  const int64_t clusters = std::min<int64_t>(rows, kMaxGridBlocks / cluster.blocks);
  return launch_cluster_kernel<Kernel>(static_cast<unsigned>(clusters * cluster.blocks), threads,
                                       static_cast<unsigned>(cluster.blocks), shared, stream, args..., true,
                                       cluster);
}

template <typename T>
void softmax_forward_typed(const SoftmaxArgs& a, cudaStream_t stream) {
  if (a.outer <= 0 || a.dim_size <= 0 || a.inner <= 0) return;
  const T* x = static_cast<const T*>(a.input);
  T* y = static_cast<T*>(a.output);
  if (a.inner > 1) {
    launch_kernel<softmax_strided_kernel<T>>(grid_for(a.outer * a.inner, kStridedThreads),
        kStridedThreads, 0, stream, x, y, a.outer, a.dim_size, a.inner);
    return;
  }
  const bool aligned = is_aligned16(x) && is_aligned16(y);
  const RowLaunch launch = plan_rows<T>(a.dim_size, aligned, 1);
  const bool cached = launch.cache_bytes > 0;
  if constexpr (sizeof(T) < 8) {
    if (!cached && launch_softmax_cluster<T, softmax_last_dim_kernel<T, kVecOf<T>, true>>(
                       a.outer, a.dim_size, aligned, 1, stream, x, y, a.outer, a.dim_size)) {
      return;
    }
  }
  if (launch.vectorized) {
    launch_kernel<softmax_last_dim_kernel<T, kVecOf<T>, false>>(row_grid(a.outer), launch.threads,
        launch.cache_bytes, stream, x, y, a.outer, a.dim_size, cached, RowCluster{});
  } else {
    launch_kernel<softmax_last_dim_kernel<T, 1, false>>(row_grid(a.outer), launch.threads,
        launch.cache_bytes, stream, x, y, a.outer, a.dim_size, cached, RowCluster{});
  }
}

template <typename T>
void softmax_backward_typed(const SoftmaxBackwardArgs& a, cudaStream_t stream) {
  if (a.outer <= 0 || a.dim_size <= 0 || a.inner <= 0) return;
  const T* dy = static_cast<const T*>(a.grad_output);
  const T* y = static_cast<const T*>(a.output);
  T* dx = static_cast<T*>(a.grad_input);
  if (a.inner > 1) {
    launch_kernel<softmax_backward_strided_kernel<T>>(grid_for(a.outer * a.inner, kStridedThreads),
        kStridedThreads, 0, stream, dy, y, dx, a.outer, a.dim_size, a.inner);
    return;
  }
  const bool aligned = is_aligned16(dy) && is_aligned16(y) && is_aligned16(dx);
  const RowLaunch launch = plan_rows<T>(a.dim_size, aligned, 2);
  const bool cached = launch.cache_bytes > 0;
  if constexpr (sizeof(T) < 8) {
    if (!cached && launch_softmax_cluster<T, softmax_backward_last_dim_kernel<T, kVecOf<T>, true>>(
                       a.outer, a.dim_size, aligned, 2, stream, dy, y, dx, a.outer, a.dim_size)) {
      return;
    }
  }
  if (launch.vectorized) {
    launch_kernel<softmax_backward_last_dim_kernel<T, kVecOf<T>, false>>(row_grid(a.outer), launch.threads,
        launch.cache_bytes, stream, dy, y, dx, a.outer, a.dim_size, cached, RowCluster{});
  } else {
    launch_kernel<softmax_backward_last_dim_kernel<T, 1, false>>(row_grid(a.outer), launch.threads,
        launch.cache_bytes, stream, dy, y, dx, a.outer, a.dim_size, cached, RowCluster{});
  }
}

}  // namespace

void softmax_forward(DType dtype, const SoftmaxArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype,
                 [&](auto tag) { softmax_forward_typed<typename decltype(tag)::type>(args, stream); });
}

void softmax_backward(DType dtype, const SoftmaxBackwardArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype,
                 [&](auto tag) { softmax_backward_typed<typename decltype(tag)::type>(args, stream); });
}

}  // namespace op_ext::cuda
