// Rotary position embedding (rotate_half convention) on CUDA, forward and backward,
// one tensor per call (the contract: kernel/cpu/rotary_embedding.h).
//
// A thread owns kVec pairs (i, i + h) of one row: it reads x[i..i+kVec) and
// x[i+h..i+h+kVec) and the same columns of the row's cos and sin, and writes both
// halves, so every element of x is read once and written once.
//
// The rows that share a cos/sin row -- the heads, and the batch when cos has
// batch 1: the leading dims whose cos_row_strides are 0, "broadcast" -- are
// taken together: a thread takes one position (a multi-index over the other
// leading dims, "outer") and up to kRopeHeadsPerThread of its broadcast rows,
// reads its cos and sin packs once into registers and rotates those rows with
// them. So cos and sin are read once per position and 8 heads, not once per
// head; the rows' loads are independent, so a thread has them in flight
// together. (A block-wide copy of the cos/sin row into shared memory would read
// it once per block, but cost a barrier per position, and the harness traps
// every shared access: the tests took minutes.) threadIdx.x walks the pairs of a
// row, threadIdx.y takes (position, head chunk) tasks, and the blocks walk the
// tasks in a grid-stride loop.
// 128-bit accesses when h is a multiple of kVec and every pointer is 16-byte
// aligned (then so is every half row); one element otherwise. The launch shape
// depends on the sizes only, and every output element is one thread's, so the
// bits never depend on block order. Math in acc_t<T>, one rounding per output;
// 64-bit index math throughout.
#include <algorithm>

#include "cuda_common.cuh"
#include "rotary_embedding.cuh"

namespace op_ext::cuda {
namespace {

using namespace detail;
using cpu::kMaxDims;
using cpu::RotaryEmbeddingArgs;

inline constexpr int kRopeThreads = 256;
// Blocks per launch at most: 512K threads, a few waves of a whole H100 or H200
// (132 SMs x 2048 threads); past that the tasks loop. Small enough that the
// harness reaches the loop (tests/test_cuda_sim_rope.py).
inline constexpr int64_t kRopeMaxBlocks = 2048;
// Broadcast rows (heads) a thread rotates with one read of its cos/sin packs.
inline constexpr int kRopeHeadsPerThread = 8;

// The input's leading dims split into the broadcast ones (cos_row_strides 0) and
// the others, size-1 dims dropped, each with its step in input rows (the input is
// a dense [rows, dim] block in the order of `sizes`).
struct RopeSplit {
  int n_outer = 0, n_bcast = 0;
  int64_t outer_size[kMaxDims], outer_rows[kMaxDims], outer_cos[kMaxDims];
  int64_t bcast_size[kMaxDims], bcast_rows[kMaxDims];
  int64_t outer = 1, bcast = 1;  // the products of the sizes
};

RopeSplit split_dims(const RotaryEmbeddingArgs& a) {
  RopeSplit sp;
  int64_t step = 1;  // input rows per index of dim d: the product of the later sizes
  for (int d = a.ndim - 1; d >= 0; --d) {
    const int64_t size = a.sizes[d];
    if (size != 1) {
      if (a.cos_row_strides[d] == 0) {
        sp.bcast_size[sp.n_bcast] = size;
        sp.bcast_rows[sp.n_bcast++] = step;
        sp.bcast *= size;
      } else {
        sp.outer_size[sp.n_outer] = size;
        sp.outer_rows[sp.n_outer] = step;
        sp.outer_cos[sp.n_outer++] = a.cos_row_strides[d];
        sp.outer *= size;
      }
    }
    step *= size;
  }
  return sp;
}

// kBackward: out = the gradient of x given the gradient of the forward's output.
// Memory is indexed in packs of kVec elements (kVec divides h: the launcher
// checks), so that nvcc sees every access as one aligned 128-bit access; with
// element pointers it split the store of the second half into scalar stores.
// A task is (position o, chunk of kRopeHeadsPerThread broadcast rows).
template <typename T, int kVec, bool kBackward>
__global__ void __launch_bounds__(kRopeThreads)
    rotary_embedding_kernel(RotaryEmbeddingArgs a, RopeSplit sp, int64_t chunks) {
  using Acc = acc_t<T>;
  using P = Pack<T, kVec>;
  const P* x = static_cast<const P*>(a.input);
  const P* cos_p = static_cast<const P*>(a.cos);
  const P* sin_p = static_cast<const P*>(a.sin);
  P* out = static_cast<P*>(a.output);
  const int64_t row_packs = a.dim / kVec;
  const int64_t pairs = row_packs / 2;  // packs per half row
  const int64_t tasks = sp.outer * chunks;
  const int64_t task_stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t task = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; task < tasks;
       task += task_stride) {
    const int64_t o = task / chunks;
    const int64_t b0 = (task % chunks) * kRopeHeadsPerThread;
    const int heads = static_cast<int>(min(int64_t{kRopeHeadsPerThread}, sp.bcast - b0));
    // The position's first input row and its cos row.
    int64_t base = 0, cos_row = 0, rem = o;
    for (int d = 0; d < sp.n_outer; ++d) {
      const int64_t idx = rem % sp.outer_size[d];
      rem /= sp.outer_size[d];
      base += idx * sp.outer_rows[d];
      cos_row += idx * sp.outer_cos[d];
    }
    // The input row of each of the chunk's broadcast rows.
    int64_t rows[kRopeHeadsPerThread];
#pragma unroll
    for (int i = 0; i < kRopeHeadsPerThread; ++i) {
      int64_t row = base, r = b0 + i;
      for (int d = 0; d < sp.n_bcast; ++d) {
        row += (r % sp.bcast_size[d]) * sp.bcast_rows[d];
        r /= sp.bcast_size[d];
      }
      rows[i] = row * row_packs;
    }
    const P* c_row = cos_p + cos_row * row_packs;
    const P* s_row = sin_p + cos_row * row_packs;
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
      Acc c1[kVec], c2[kVec], s1[kVec], s2[kVec];
      // Each pack copied whole first: one 128-bit load.
      widen(load_global(c_row + p), c1);
      widen(load_global(c_row + pairs + p), c2);
      widen(load_global(s_row + p), s1);
      widen(load_global(s_row + pairs + p), s2);
#pragma unroll
      for (int i = 0; i < kRopeHeadsPerThread; ++i) {
        if (i >= heads) break;
        const int64_t xbase = rows[i];
        Acc x1[kVec], x2[kVec];
        widen(load_global(x + xbase + p), x1);
        widen(load_global(x + xbase + pairs + p), x2);
        P o1, o2;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          if constexpr (kBackward) {
            // dx[i] = g[i] c[i] + g[i + h] s[i + h];  dx[i + h] = g[i + h] c[i + h] - g[i] s[i]
            o1.v[e] = from_acc<T>(x1[e] * c1[e] + x2[e] * s2[e]);
            o2.v[e] = from_acc<T>(x2[e] * c2[e] - x1[e] * s1[e]);
          } else {
            // out[i] = x[i] c[i] - x[i + h] s[i];  out[i + h] = x[i + h] c[i + h] + x[i] s[i + h]
            o1.v[e] = from_acc<T>(x1[e] * c1[e] - x2[e] * s1[e]);
            o2.v[e] = from_acc<T>(x2[e] * c2[e] + x1[e] * s2[e]);
          }
        }
        store_global(out + xbase + p, o1);
        store_global(out + xbase + pairs + p, o2);
      }
    }
  }
}

template <typename T, bool kBackward>
void launch_rotary_embedding(const RotaryEmbeddingArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.dim <= 0) return;
  constexpr int kVec = kVecOf<T>;
  const int64_t h = a.dim / 2;
  const bool vector = h % kVec == 0 && is_aligned16(a.input) && is_aligned16(a.cos) &&
                      is_aligned16(a.sin) && is_aligned16(a.output);
  const int64_t pairs = vector ? h / kVec : h;
  const RopeSplit sp = split_dims(a);
  const int64_t chunks = ceil_div(sp.bcast, int64_t{kRopeHeadsPerThread});
  // threadIdx.x covers a row's pairs (a power of two up to the whole block), the
  // rest of the block takes further tasks.
  int tx = 1;
  while (tx < pairs && tx < kRopeThreads) tx *= 2;
  const int ty = kRopeThreads / tx;
  const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  const unsigned grid = static_cast<unsigned>(std::min(ceil_div(sp.outer * chunks, int64_t{ty}), kRopeMaxBlocks));
  if (vector) {
    launch_kernel<rotary_embedding_kernel<T, kVec, kBackward>>(grid, block, 0, stream, a, sp, chunks);
  } else {
    launch_kernel<rotary_embedding_kernel<T, 1, kBackward>>(grid, block, 0, stream, a, sp, chunks);
  }
}

// ---- the gradients of cos and sin ------------------------------------------------------
//
// grad_cos and grad_sin (kernel/cpu/rotary_embedding.h) in one launch that reads
// q, k and their output gradients once each and writes each wanted table row
// once. A warp owns one table row at a time (the warps walk the rows in a
// grid-stride loop). Its lanes split into kVec-pack columns (lx: the row's pairs,
// as in the rotation) and lane rows (ly) that split the rows summed into the
// table row -- the heads, and the batch when cos has batch 1: row b goes to lane
// row b % lane_rows, which adds its rows in increasing b, q's before k's. The
// lane rows' sums then meet by __shfl_down_sync in a fixed tree, and lane row 0
// writes the table row. So every sum's order depends on the sizes only (no
// atomics, no shared memory, no block barrier), and the bits never change with
// timing or block order. A head dim of more than 32 packs per half leaves one
// lane row, which walks the row 32 packs at a time.
// A warp per table row keeps thousands of warps in flight at training sizes
// (4096 tokens: 4096 warps, each reading 2 x 40 rows of q, k and their gradients
// at 32 + 8 heads); the table rows' loads are independent.
// The leading dims are read by their strides (the glue passes q and k as they
// are: attention's [batch, heads, seq, dim] views of [batch, seq, heads, dim]
// memory included), so no copy is made; each of the four tensors' rows is
// contiguous. 128-bit accesses when every row start is 16-byte aligned.

inline constexpr int kTableThreads = 256;
inline constexpr int kTableWarps = kTableThreads / 32;
// Blocks per launch at most: 4096 warps, more than an H100 holds at once (at up to
// 80 registers a thread, 3 blocks per SM: 396); past that the table rows loop.
// Small enough that the harness reaches the loop (tests/test_rotary_embedding_tables.py).
inline constexpr int64_t kTableMaxBlocks = 512;

using cpu::RotaryTableGradArgs;
using cpu::RotaryTableSource;

// One of q, k as the kernel walks it: its leading dims split into those cos spans
// ("outer": they pick the table row) and those it broadcasts over ("bcast": the
// rows summed into one table row), size-1 dims dropped; strides in elements.
// The bcast dims by increasing stride of x, so that consecutive rows of a lane
// row's loop are near in memory (the heads of one position, in attention's layout).
struct TableSplit {
  const void* x = nullptr;
  const void* grad = nullptr;
  int n_outer = 0, n_bcast = 0;
  int64_t outer_size[kMaxDims], outer_cos[kMaxDims], outer_x[kMaxDims], outer_g[kMaxDims];
  int64_t bcast_size[kMaxDims], bcast_x[kMaxDims], bcast_g[kMaxDims];
  int64_t bcast = 1;  // rows per table row: the product of bcast_size
};

TableSplit split_table_source(const RotaryTableSource& s) {
  TableSplit sp;
  sp.x = s.x;
  sp.grad = s.grad;
  int bcast_dims[kMaxDims];
  for (int d = 0; d < s.ndim; ++d) {
    if (s.sizes[d] == 1) continue;
    if (s.cos_row_strides[d] != 0) {
      sp.outer_size[sp.n_outer] = s.sizes[d];
      sp.outer_cos[sp.n_outer] = s.cos_row_strides[d];
      sp.outer_x[sp.n_outer] = s.x_strides[d];
      sp.outer_g[sp.n_outer++] = s.grad_strides[d];
    } else {
      bcast_dims[sp.n_bcast++] = d;
      sp.bcast *= s.sizes[d];
    }
  }
  std::stable_sort(bcast_dims, bcast_dims + sp.n_bcast,
                   [&](int i, int j) { return s.x_strides[i] < s.x_strides[j]; });
  for (int i = 0; i < sp.n_bcast; ++i) {
    const int d = bcast_dims[i];
    sp.bcast_size[i] = s.sizes[d];
    sp.bcast_x[i] = s.x_strides[d];
    sp.bcast_g[i] = s.grad_strides[d];
  }
  return sp;
}

// Adds source `sp`'s rows b = ly, ly + lane_rows, ... of table row o to the
// lane's sums of pack p: c1/c2 the first and second halves of grad_cos, s1/s2
// of grad_sin.
template <typename T, int kVec>
__device__ __forceinline__ void add_table_rows(const TableSplit& sp, int64_t o, int64_t p, int64_t pairs, int ly,
                                               int lane_rows, acc_t<T> (&c1)[kVec], acc_t<T> (&c2)[kVec],
                                               acc_t<T> (&s1)[kVec], acc_t<T> (&s2)[kVec]) {
  using Acc = acc_t<T>;
  using P = Pack<T, kVec>;
  // The row's first element in x and in grad: o's digits are its index on each
  // outer dim (the dense cos is row-major over them).
  int64_t x0 = 0, g0 = 0;
  for (int d = 0; d < sp.n_outer; ++d) {
    const int64_t idx = (o / sp.outer_cos[d]) % sp.outer_size[d];
    x0 += idx * sp.outer_x[d];
    g0 += idx * sp.outer_g[d];
  }
  const T* x = static_cast<const T*>(sp.x);
  const T* g = static_cast<const T*>(sp.grad);
  for (int64_t b = ly; b < sp.bcast; b += lane_rows) {
    int64_t xo = x0, go = g0, r = b;
    for (int d = 0; d < sp.n_bcast; ++d) {
      const int64_t idx = r % sp.bcast_size[d];
      r /= sp.bcast_size[d];
      xo += idx * sp.bcast_x[d];
      go += idx * sp.bcast_g[d];
    }
    const P* xr = reinterpret_cast<const P*>(x + xo);
    const P* gr = reinterpret_cast<const P*>(g + go);
    Acc x1[kVec], x2[kVec], g1[kVec], g2[kVec];
    widen(load_global(xr + p), x1);
    widen(load_global(xr + pairs + p), x2);
    widen(load_global(gr + p), g1);
    widen(load_global(gr + pairs + p), g2);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      c1[e] += g1[e] * x1[e];
      c2[e] += g2[e] * x2[e];
      s1[e] -= g1[e] * x2[e];
      s2[e] += g2[e] * x1[e];
    }
  }
}

// Lane l gets the sum of v over lanes l, l + tx, l + 2 tx, ... of its warp
// (correct in lane row 0), in a tree fixed by tx.
template <typename Acc, int kVec>
__device__ __forceinline__ void sum_lane_rows(Acc (&v)[kVec], int tx) {
  for (int offset = 16; offset >= tx; offset >>= 1) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[e] += __shfl_down_sync(0xffffffffu, v[e], offset);
  }
}

template <typename T, int kVec>
__device__ __forceinline__ void store_table_half_rows(T* row, int64_t p, int64_t pairs, const acc_t<T> (&lo)[kVec],
                                                      const acc_t<T> (&hi)[kVec]) {
  using P = Pack<T, kVec>;
  P a, b;
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    a.v[e] = from_acc<T>(lo[e]);
    b.v[e] = from_acc<T>(hi[e]);
  }
  store_global(reinterpret_cast<P*>(row) + p, a);
  store_global(reinterpret_cast<P*>(row) + pairs + p, b);
}

// blockDim (32, kTableWarps): threadIdx.y is the warp. tx: the lanes per lane
// row (a power of two, at least the pairs or 32).
template <typename T, int kVec>
__global__ void __launch_bounds__(kTableThreads)
    rotary_embedding_table_backward_kernel(TableSplit q, TableSplit k, T* grad_cos, T* grad_sin,
                                           int64_t table_rows, int64_t dim, int tx) {
  using Acc = acc_t<T>;
  const int64_t pairs = dim / 2 / kVec;  // packs per half row
  const int lane = static_cast<int>(threadIdx.x);
  const int lx = lane % tx, ly = lane / tx, lane_rows = 32 / tx;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; o < table_rows; o += warp_stride) {
    // One pass when pairs <= 32; lanes past the row hold zeros through the sums.
    for (int64_t p0 = 0; p0 < pairs; p0 += tx) {
      const int64_t p = p0 + lx;
      Acc c1[kVec], c2[kVec], s1[kVec], s2[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) c1[e] = c2[e] = s1[e] = s2[e] = Acc(0);
      if (p < pairs) {
        add_table_rows<T, kVec>(q, o, p, pairs, ly, lane_rows, c1, c2, s1, s2);
        add_table_rows<T, kVec>(k, o, p, pairs, ly, lane_rows, c1, c2, s1, s2);
      }
      // Every lane of the warp takes part (warp-uniform loop bounds).
      if (grad_cos != nullptr) {
        sum_lane_rows(c1, tx);
        sum_lane_rows(c2, tx);
      }
      if (grad_sin != nullptr) {
        sum_lane_rows(s1, tx);
        sum_lane_rows(s2, tx);
      }
      if (ly == 0 && p < pairs) {
        if (grad_cos != nullptr) store_table_half_rows<T, kVec>(grad_cos + o * dim, p, pairs, c1, c2);
        if (grad_sin != nullptr) store_table_half_rows<T, kVec>(grad_sin + o * dim, p, pairs, s1, s2);
      }
    }
  }
}

template <typename T>
void launch_rotary_table_backward(const RotaryTableGradArgs& a, cudaStream_t stream) {
  if (a.table_rows <= 0 || a.dim <= 0 || (a.grad_cos == nullptr && a.grad_sin == nullptr)) return;
  constexpr int kVec = kVecOf<T>;
  const int64_t h = a.dim / 2;
  bool vector = h % kVec == 0 && (a.grad_cos == nullptr || is_aligned16(a.grad_cos)) &&
                (a.grad_sin == nullptr || is_aligned16(a.grad_sin));
  for (const RotaryTableSource& s : a.source) {
    vector = vector && is_aligned16(s.x) && is_aligned16(s.grad);
    for (int d = 0; d < s.ndim; ++d) {
      vector = vector && (s.sizes[d] == 1 || (s.x_strides[d] % kVec == 0 && s.grad_strides[d] % kVec == 0));
    }
  }
  const int64_t pairs = vector ? h / kVec : h;
  int tx = 1;
  while (tx < pairs && tx < 32) tx *= 2;
  const dim3 block(32, kTableWarps);
  const unsigned grid = static_cast<unsigned>(std::min(ceil_div(a.table_rows, int64_t{kTableWarps}), kTableMaxBlocks));
  const TableSplit q = split_table_source(a.source[0]);
  const TableSplit k = split_table_source(a.source[1]);
  T* const gc = static_cast<T*>(a.grad_cos);
  T* const gs = static_cast<T*>(a.grad_sin);
  if (vector) {
    launch_kernel<rotary_embedding_table_backward_kernel<T, kVec>>(grid, block, 0, stream, q, k, gc, gs, a.table_rows,
                                                                   a.dim, tx);
  } else {
    launch_kernel<rotary_embedding_table_backward_kernel<T, 1>>(grid, block, 0, stream, q, k, gc, gs, a.table_rows,
                                                                a.dim, tx);
  }
}

}  // namespace

void rotary_embedding_forward(DType dtype, const cpu::RotaryEmbeddingArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    launch_rotary_embedding<typename decltype(tag)::type, false>(args, stream);
  });
}

void rotary_embedding_backward(DType dtype, const cpu::RotaryEmbeddingArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    launch_rotary_embedding<typename decltype(tag)::type, true>(args, stream);
  });
}

void rotary_embedding_table_backward(DType dtype, const cpu::RotaryTableGradArgs& args, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) { launch_rotary_table_backward<typename decltype(tag)::type>(args, stream); });
}

}  // namespace op_ext::cuda
