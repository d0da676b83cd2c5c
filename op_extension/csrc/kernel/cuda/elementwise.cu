// add with broadcasting, and its backward (reduce_to: the sum of the incoming
// gradient over the broadcast dims), on CUDA.
//
// add walks the dense output and reaches each operand through its element
// strides (0 on broadcast dims), with 64-bit index math. When the innermost dim
// is dense or broadcast for both operands and every kVec-element run starts
// 16-byte aligned, a thread handles kVec outputs with 128-bit accesses (a
// broadcast operand is read once and splat); otherwise one element at a time.
//
// reduce_to with one summed dim, [A, R, C] -> [A, C] (the pattern of a bias,
// a row or column vector, or a scalar), sums R in fixed chunks into a float
// workspace, then adds the chunks in order (sum_partials_kernel): no atomics,
// the same bits every run. Other patterns give each output element to one
// thread, which walks its summed sub-space in order.
#include <algorithm>

#include "cuda_common.cuh"
#include "add.cuh"

namespace op_ext::cuda {
namespace {

using namespace detail;

// ---- add -----------------------------------------------------------------------

template <typename T, int kVec>
__global__ void add_kernel(AddArgs args, int64_t numel) {
  using Acc = acc_t<T>;
  const T* a = static_cast<const T*>(args.a);
  const T* b = static_cast<const T*>(args.b);
  T* out = static_cast<T*>(args.out);
  const Acc alpha = static_cast<Acc>(args.alpha);
  const int nd = args.ndim;
  const bool a_dense = args.a_strides[nd - 1] == 1;
  const bool b_dense = args.b_strides[nd - 1] == 1;
  const int64_t nvec = numel / kVec;  // kVec > 1 only when the inner size is a multiple
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec;
       v += stride) {
    const int64_t i = v * kVec;
    int64_t rem = i, off_a = 0, off_b = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t size = args.sizes[d];
      const int64_t idx = rem % size;
      rem /= size;
      off_a += idx * args.a_strides[d];
      off_b += idx * args.b_strides[d];
    }
    Acc va[kVec], vb[kVec], vo[kVec];
    if (kVec == 1 || a_dense) {
      load_acc<kVec>(a + off_a, va);
    } else {
      const Acc s = to_acc(load_global(a + off_a));
#pragma unroll
      for (int e = 0; e < kVec; ++e) va[e] = s;
    }
    if (kVec == 1 || b_dense) {
      load_acc<kVec>(b + off_b, vb);
    } else {
      const Acc s = to_acc(load_global(b + off_b));
#pragma unroll
      for (int e = 0; e < kVec; ++e) vb[e] = s;
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) vo[e] = va[e] + alpha * vb[e];
    store_acc<kVec>(out + i, vo);
  }
}

// Whether every kVec-element run of the output maps to a 16-byte aligned run
// (or a single broadcast element) of each operand.
template <typename T>
bool add_can_vectorize(const AddArgs& args) {
  constexpr int kVec = kVecOf<T>;
  const int inner = args.ndim - 1;
  if (args.sizes[inner] % kVec != 0 || !is_aligned16(args.out)) return false;
  auto operand_ok = [&](const void* p, const int64_t* strides) {
    if (strides[inner] == 0) return true;  // broadcast along the run: one scalar load
    if (strides[inner] != 1 || !is_aligned16(p)) return false;
    for (int d = 0; d < inner; ++d) {
      if (strides[d] % kVec != 0) return false;
    }
    return true;
  };
  return operand_ok(args.a, args.a_strides) && operand_ok(args.b, args.b_strides);
}

// ---- add with a row-vector operand: [rows, cols] + [cols] (a bias) ---------------
//
// The general kernel re-reads the vector for every row. Here a thread owns one
// kVec-element pack of columns and walks the rows of its block's chunk, so the
// vector's pack is read once per chunk: a chunk is kRowVectorChunk rows (and
// every row when there are fewer), enough for the vector to be a small share of
// the bytes moved, with many chunks still in flight on a large input.

inline constexpr int64_t kRowVectorChunk = 16;

struct RowVectorAdd {
  int64_t rows, cols;
  bool vector_is_b;  // out = a + alpha * vector, or vector + alpha * b
};

template <typename T, int kVec>
__global__ void add_row_vector_kernel(AddArgs args, RowVectorAdd rv) {
  using Acc = acc_t<T>;
  const T* matrix = static_cast<const T*>(rv.vector_is_b ? args.a : args.b);
  const T* vector = static_cast<const T*>(rv.vector_is_b ? args.b : args.a);
  T* out = static_cast<T*>(args.out);
  const Acc alpha = static_cast<Acc>(args.alpha);
  const int64_t packs = rv.cols / kVec;
  const int64_t col_blocks = ceil_div(packs, static_cast<int64_t>(blockDim.x));
  const int64_t chunks = ceil_div(rv.rows, kRowVectorChunk);
  for (int64_t task = blockIdx.x; task < col_blocks * chunks; task += gridDim.x) {
    const int64_t pack = (task % col_blocks) * blockDim.x + threadIdx.x;
    if (pack >= packs) continue;
    const int64_t j = pack * kVec;
    const int64_t row_begin = (task / col_blocks) * kRowVectorChunk;
    const int64_t row_end = min(rv.rows, row_begin + kRowVectorChunk);
    Acc vv[kVec];
    load_acc<kVec>(vector + j, vv);
#pragma unroll 4
    for (int64_t row = row_begin; row < row_end; ++row) {
      Acc mv[kVec], vo[kVec];
      load_acc<kVec>(matrix + row * rv.cols + j, mv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) vo[e] = rv.vector_is_b ? mv[e] + alpha * vv[e] : vv[e] + alpha * mv[e];
      store_acc<kVec>(out + row * rv.cols + j, vo);
    }
  }
}

// Whether args is [rows, cols] (+) [cols]: one operand dense over the whole
// output, the other dense along the last dim and broadcast over every other.
inline bool as_row_vector_add(const AddArgs& args, RowVectorAdd& rv) {
  const int inner = args.ndim - 1;
  if (args.ndim < 2) return false;
  auto dense = [&](const int64_t* strides) {
    int64_t expected = 1;
    for (int d = inner; d >= 0; --d) {
      if (args.sizes[d] != 1 && strides[d] != expected) return false;
      expected *= args.sizes[d];
    }
    return true;
  };
  auto row_vector = [&](const int64_t* strides) {
    if (strides[inner] != 1) return false;
    for (int d = 0; d < inner; ++d) {
      if (args.sizes[d] != 1 && strides[d] != 0) return false;
    }
    return true;
  };
  if (dense(args.a_strides) && row_vector(args.b_strides)) {
    rv.vector_is_b = true;
  } else if (dense(args.b_strides) && row_vector(args.a_strides)) {
    rv.vector_is_b = false;
  } else {
    return false;
  }
  rv.cols = args.sizes[inner];
  rv.rows = 1;
  for (int d = 0; d < inner; ++d) rv.rows *= args.sizes[d];
  return rv.rows > 1;
}

template <typename T>
void launch_row_vector_add(const AddArgs& args, const RowVectorAdd& rv, cudaStream_t stream) {
  constexpr int kVec = kVecOf<T>;
  const bool vector = rv.cols % kVec == 0 && is_aligned16(args.a) && is_aligned16(args.b) && is_aligned16(args.out);
  const int64_t packs = vector ? rv.cols / kVec : rv.cols;
  // A block of up to 256 threads across the columns; a narrow row takes one warp.
  const int threads = static_cast<int>(std::min<int64_t>(256, ceil_div(packs, int64_t{32}) * 32));
  const int64_t tasks = ceil_div(packs, static_cast<int64_t>(threads)) * ceil_div(rv.rows, kRowVectorChunk);
  const unsigned grid = static_cast<unsigned>(std::min(tasks, kMaxGridBlocks));
  if (vector) {
    launch_kernel<add_row_vector_kernel<T, kVec>>(grid, threads, 0, stream, args, rv);
  } else {
    launch_kernel<add_row_vector_kernel<T, 1>>(grid, threads, 0, stream, args, rv);
  }
}

template <typename T>
struct AddDense {  // (a, b) -> a + alpha * b, as add_kernel computes it
  acc_t<T> alpha;
  __device__ void operator()(const acc_t<T> (&in)[2], acc_t<T> (&out)[1]) const {
    out[0] = in[0] + alpha * in[1];
  }
};

template <typename T>
void add_typed(const AddArgs& args, cudaStream_t stream) {
  int64_t numel = 1;
  for (int d = 0; d < args.ndim; ++d) numel *= args.sizes[d];
  if (numel <= 0) return;
  if (args.ndim == 1 && args.a_strides[0] == 1 && args.b_strides[0] == 1) {
    // Same shape, both dense: the map kernel, whose vector path takes any length.
    const MapPtrs<T, 2, 1> p{{static_cast<const T*>(args.a), static_cast<const T*>(args.b)},
                             {static_cast<T*>(args.out)}};
    launch_map(p, numel, AddDense<T>{static_cast<acc_t<T>>(args.alpha)}, stream);
    return;
  }
  RowVectorAdd rv{};
  if (as_row_vector_add(args, rv)) {
    launch_row_vector_add<T>(args, rv, stream);
    return;
  }
  constexpr int kThreads = 256;
  constexpr int kVec = kVecOf<T>;
  if (add_can_vectorize<T>(args)) {
    launch_kernel<add_kernel<T, kVec>>(grid_for(numel / kVec, kThreads), kThreads, 0, stream, args,
        numel);
  } else {
    launch_kernel<add_kernel<T, 1>>(grid_for(numel, kThreads), kThreads, 0, stream, args, numel);
  }
}

// ---- reduce_to -----------------------------------------------------------------

// How one ReduceToArgs is computed; the workspace size and the launches both
// come from here, so they cannot disagree.
struct ReducePlan {
  enum Kind { kScale, kZeros, kMiddle, kGeneral } kind;
  int64_t numel = 0;      // elements of grad
  int64_t out_numel = 0;  // elements of out
  // kMiddle: grad is [A, R, C], out is [A, C]; R is summed in `chunks` chunks of
  // `chunk_rows` rows each.
  int64_t A = 1, R = 1, C = 1, chunk_rows = 1, chunks = 1;
};

// A block of kRowSumThreads sums one chunk of kRowChunk elements when C == 1;
// a (32 x 8) block sums kColChunk rows of 32 columns when C > 1.
constexpr int kRowSumThreads = 256;
constexpr int64_t kRowChunk = 16384;
constexpr int64_t kColChunk = 128;

ReducePlan plan_reduce(const ReduceToArgs& args) {
  ReducePlan plan{};
  int reduced_dims = 0, reduced_at = -1;
  plan.numel = 1;
  plan.out_numel = 1;
  for (int d = 0; d < args.ndim; ++d) {
    plan.numel *= args.sizes[d];
    if (args.reduced[d]) {
      ++reduced_dims;
      reduced_at = d;
    } else {
      plan.out_numel *= args.sizes[d];
    }
  }
  if (reduced_dims == 0) {
    plan.kind = ReducePlan::kScale;
  } else if (plan.numel == 0) {
    plan.kind = ReducePlan::kZeros;
  } else if (reduced_dims == 1) {
    plan.kind = ReducePlan::kMiddle;
    for (int d = 0; d < reduced_at; ++d) plan.A *= args.sizes[d];
    plan.R = args.sizes[reduced_at];
    for (int d = reduced_at + 1; d < args.ndim; ++d) plan.C *= args.sizes[d];
    plan.chunk_rows = plan.C == 1 ? kRowChunk : kColChunk;
    plan.chunks = ceil_div(plan.R, plan.chunk_rows);
  } else {
    plan.kind = ReducePlan::kGeneral;
  }
  return plan;
}

template <typename T>
struct Scale {
  acc_t<T> alpha;
  __device__ void operator()(const acc_t<T> (&in)[1], acc_t<T> (&out)[1]) const {
    out[0] = in[0] * alpha;
  }
};

template <typename T>
__global__ void fill_zero_kernel(T* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    store_global(out + i, from_acc<T>(acc_t<T>(0)));
  }
}

// C == 1: partial[a * chunks + k] = sum of grad[a * R + r] over the k-th chunk of r.
template <typename T>
__global__ void chunk_row_sums_kernel(const T* grad, acc_t<T>* partial, int64_t A, int64_t R,
                                      int64_t chunks) {
  using Acc = acc_t<T>;
  for (int64_t b = blockIdx.x; b < A * chunks; b += gridDim.x) {
    const int64_t a = b / chunks;
    const int64_t begin = (b % chunks) * kRowChunk;
    const int64_t end = min(R, begin + kRowChunk);
    Acc s[1] = {Acc(0)};
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) s[0] += to_acc(load_global(grad + a * R + r));
    block_reduce(s, SumOp{});
    if (threadIdx.x == 0) store_global(partial + b, s[0]);
  }
}

// C > 1: partial[(a * chunks + k) * C + c] = sum over the k-th chunk of rows r of
// grad[(a * R + r) * C + c]. A (32 x 8) block: 32 neighbouring columns, each
// thread row takes every 8th row of the chunk, then thread row 0 adds the 8.
template <typename T>
__global__ void chunk_col_sums_kernel(const T* grad, acc_t<T>* partial, int64_t A, int64_t R,
                                      int64_t C, int64_t chunks) {
  using Acc = acc_t<T>;
  __shared__ Acc sums[kPartialRows][kPartialCols];
  const int64_t col_blocks = ceil_div(C, kPartialCols);
  for (int64_t b = blockIdx.x; b < A * chunks * col_blocks; b += gridDim.x) {
    const int64_t a = b / (chunks * col_blocks);
    const int64_t k = (b / col_blocks) % chunks;
    const int64_t c = (b % col_blocks) * kPartialCols + threadIdx.x;
    const int64_t r_end = min(R, (k + 1) * kColChunk);
    Acc s = Acc(0);
    if (c < C) {
      for (int64_t r = k * kColChunk + threadIdx.y; r < r_end; r += kPartialRows) {
        s += to_acc(load_global(grad + (a * R + r) * C + c));
      }
    }
    store_shared(&sums[threadIdx.y][threadIdx.x], s);
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      Acc total = Acc(0);
#pragma unroll
      for (int y = 0; y < kPartialRows; ++y) total += load_shared(&sums[y][threadIdx.x]);
      store_global(partial + (a * chunks + k) * C + c, total);
    }
    __syncthreads();
  }
}

// Any pattern: each output element sums its own sub-space with an odometer over
// the reduced dims (grad is dense with shape args.sizes).
template <typename T>
__global__ void reduce_general_kernel(ReduceToArgs args, const T* grad, T* out, int64_t out_numel) {
  using Acc = acc_t<T>;
  const int nd = args.ndim;
  int64_t strides[kMaxDims];
  int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= args.sizes[d];
  }
  const Acc alpha = static_cast<Acc>(args.alpha);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < out_numel;
       o += step) {
    int64_t rem = o, base = 0;
    for (int d = nd - 1; d >= 0; --d) {
      if (args.reduced[d]) continue;
      base += (rem % args.sizes[d]) * strides[d];
      rem /= args.sizes[d];
    }
    int64_t idx[kMaxDims] = {};
    Acc sum = Acc(0);
    while (true) {
      int64_t off = base;
      for (int d = 0; d < nd; ++d) {
        if (args.reduced[d]) off += idx[d] * strides[d];
      }
      sum += to_acc(load_global(grad + off));
      int d = nd - 1;
      for (; d >= 0; --d) {
        if (!args.reduced[d]) continue;
        if (++idx[d] < args.sizes[d]) break;
        idx[d] = 0;
      }
      if (d < 0) break;
    }
    store_global(out + o, from_acc<T>(sum * alpha));
  }
}

template <typename T>
void reduce_to_typed(const ReduceToArgs& args, void* workspace, cudaStream_t stream) {
  using Acc = acc_t<T>;
  const T* grad = static_cast<const T*>(args.grad);
  T* out = static_cast<T*>(args.out);
  const Acc alpha = static_cast<Acc>(args.alpha);
  const ReducePlan plan = plan_reduce(args);
  constexpr int kThreads = 256;
  switch (plan.kind) {
    case ReducePlan::kScale:
      launch_map(MapPtrs<T, 1, 1>{{grad}, {out}}, plan.numel, Scale<T>{alpha}, stream);
      return;
    case ReducePlan::kZeros:  // summing no elements: the output still exists, as zeros
      if (plan.out_numel > 0) {
        launch_kernel<fill_zero_kernel<T>>(grid_for(plan.out_numel, kThreads), kThreads, 0, stream,
            out, plan.out_numel);
      }
      return;
    case ReducePlan::kMiddle: {
      Acc* partial = static_cast<Acc*>(workspace);
      if (plan.C == 1) {
        launch_kernel<chunk_row_sums_kernel<T>>(grid_for(plan.A * plan.chunks, 1), kRowSumThreads,
            0, stream, grad, partial, plan.A, plan.R, plan.chunks);
      } else {
        const int64_t blocks = plan.A * plan.chunks * ceil_div(plan.C, kPartialCols);
        launch_kernel<chunk_col_sums_kernel<T>>(grid_for(blocks, 1),
            dim3(kPartialCols, kPartialRows), 0, stream, grad, partial, plan.A, plan.R, plan.C,
            plan.chunks);
      }
      launch_sum_partials<T>(partial, out, plan.A, plan.chunks, plan.C, alpha, stream);
      return;
    }
    case ReducePlan::kGeneral:
      launch_kernel<reduce_general_kernel<T>>(grid_for(plan.out_numel, kThreads), kThreads, 0,
          stream, args, grad, out, plan.out_numel);
      return;
  }
}

}  // namespace

void add_forward(DType dtype, const AddArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) { add_typed<typename decltype(tag)::type>(args, stream); });
}

size_t reduce_to_workspace_bytes(DType dtype, const ReduceToArgs& args) {
  const ReducePlan plan = plan_reduce(args);
  if (plan.kind != ReducePlan::kMiddle) return 0;
  const size_t acc_size = dtype == DType::Float64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(plan.A * plan.chunks * plan.C) * acc_size;
}

void reduce_to(DType dtype, const ReduceToArgs& args, void* workspace, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    reduce_to_typed<typename decltype(tag)::type>(args, workspace, stream);
  });
}

}  // namespace op_ext::cuda
