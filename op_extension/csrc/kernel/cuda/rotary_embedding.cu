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

}  // namespace op_ext::cuda
