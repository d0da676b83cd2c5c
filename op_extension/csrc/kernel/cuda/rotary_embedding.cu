// Rotary position embedding (rotate_half convention) on CUDA, forward and backward,
// one tensor per call (the contract: kernel/cpu/rotary_embedding.h).
//
// A thread owns kVec pairs (i, i + h) of one row: it reads x[i..i+kVec) and
// x[i+h..i+h+kVec) and the same columns of the row's cos and sin, and writes both
// halves, so every element is read once and written once. A block is tx x ty =
// kRopeThreads threads: threadIdx.x walks a row's pairs, threadIdx.y takes one of
// ty rows, and the blocks walk the rows in a grid-stride loop; the cos/sin row of
// an input row (a sum over its multi-index, divisions included) is worked out
// once per thread and row. 128-bit accesses when h is a multiple of kVec and every
// pointer is 16-byte aligned (then so is every half row); one element otherwise.
// The launcher's block shape and grid size depend on dim and rows only, and
// every output element is one thread's, so the bits never depend on block order.
// Math in acc_t<T>, one rounding per output; 64-bit index math throughout.
#include <algorithm>

#include "cuda_common.cuh"
#include "rotary_embedding.cuh"

namespace op_ext::cuda {
namespace {

using namespace detail;
using cpu::RotaryEmbeddingArgs;

inline constexpr int kRopeThreads = 256;
// Blocks per launch at most: 512K threads, a few waves of a whole H100 or H200
// (132 SMs x 2048 threads); past that the rows loop. Small enough that the
// harness reaches the loop (tests/test_cuda_sim_rope.py).
inline constexpr int64_t kRopeMaxBlocks = 2048;

// The cos/sin row of input row `row`: sum_d r_d * cos_row_strides[d] over its multi-index.
__device__ __forceinline__ int64_t cos_row_of(const RotaryEmbeddingArgs& a, int64_t row) {
  int64_t rem = row, cos_row = 0;
  for (int d = a.ndim - 1; d > 0; --d) {
    const int64_t size = a.sizes[d];
    cos_row += (rem % size) * a.cos_row_strides[d];
    rem /= size;
  }
  return cos_row + rem * a.cos_row_strides[0];
}

// kBackward: out = the gradient of x given the gradient of the forward's output.
// Memory is indexed in packs of kVec elements (kVec divides h: the launcher
// checks), so that nvcc sees every access as one aligned 128-bit access; with
// element pointers it split the store of the second half into scalar stores.
template <typename T, int kVec, bool kBackward>
__global__ void __launch_bounds__(kRopeThreads) rotary_embedding_kernel(RotaryEmbeddingArgs a) {
  using Acc = acc_t<T>;
  using P = Pack<T, kVec>;
  const P* x = static_cast<const P*>(a.input);
  const P* cos_p = static_cast<const P*>(a.cos);
  const P* sin_p = static_cast<const P*>(a.sin);
  P* out = static_cast<P*>(a.output);
  const int64_t row_packs = a.dim / kVec;
  const int64_t pairs = row_packs / 2;  // packs per half row
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; row < a.rows;
       row += row_stride) {
    const int64_t base = row * row_packs;
    const int64_t cbase = cos_row_of(a, row) * row_packs;
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
      Acc x1[kVec], x2[kVec], c1[kVec], c2[kVec], s1[kVec], s2[kVec];
      // Each pack copied whole first: one 128-bit load.
      const P px1 = load_global(x + base + p), px2 = load_global(x + base + pairs + p);
      const P pc1 = load_global(cos_p + cbase + p), pc2 = load_global(cos_p + cbase + pairs + p);
      const P ps1 = load_global(sin_p + cbase + p), ps2 = load_global(sin_p + cbase + pairs + p);
      widen(px1, x1);
      widen(px2, x2);
      widen(pc1, c1);
      widen(pc2, c2);
      widen(ps1, s1);
      widen(ps2, s2);
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
      store_global(out + base + p, o1);
      store_global(out + base + pairs + p, o2);
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
  // threadIdx.x covers a row's pairs (a power of two up to the whole block), the
  // rest of the block takes further rows.
  int tx = 1;
  while (tx < pairs && tx < kRopeThreads) tx *= 2;
  const int ty = kRopeThreads / tx;
  const dim3 block(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  const unsigned grid = static_cast<unsigned>(std::min(ceil_div(a.rows, ty), kRopeMaxBlocks));
  if (vector) {
    launch_kernel<rotary_embedding_kernel<T, kVec, kBackward>>(grid, block, 0, stream, a);
  } else {
    launch_kernel<rotary_embedding_kernel<T, 1, kBackward>>(grid, block, 0, stream, a);
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
