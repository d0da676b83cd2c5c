// Softmax over one dim of a dense [outer, dim_size, inner] view, forward and
// backward.
//
// inner == 1 (softmax over the last dim, the attention case): one task owns whole
// rows; max, then exp and sum, then scale, vectorised along the row.
// inner > 1: the vector lanes run along `inner`, so each lane is an independent
// softmax and no horizontal reduction is needed.
#include <limits>
#include <type_traits>
#include <vector>

#include "register_kernel.h"
#include "vec_utils.h"
#include "softmax.h"

namespace op_ext::cpu {
namespace {

// max that propagates NaN, as torch.max does
template <typename Acc>
inline Acc nan_max(Acc a, Acc b) {
  return (std::isnan(a) || a > b) ? a : b;
}

// exp(x - max) for a row whose max is finite, so every argument is <= 0 or -inf.
// For float accumulation this uses exp_fast (vec_utils.h: within 4.0e-7
// relative on AVX-512 and AVX2; the portable variant's exp_u20 within 20 ulp,
// ~2.4e-6 relative: far below what a softmax output in float32 is compared
// with), two to three times the
// throughput of Sleef's 1-ulp exp that dominated the row's cost. exp_u20 does
// not propagate NaN, which is why rows with a NaN or infinite max take the
// exact exp instead.
template <typename Acc>
inline Vectorized<Acc> exp_of_shifted(const Vectorized<Acc>& v, bool fast) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (fast) return exp_fast(v);
  }
  return v.exp();
}

template <typename T>
void softmax_last_dim(const T* input, T* output, int64_t rows, int64_t cols) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  using V = Vec2<T>;
  constexpr int64_t kStep = V::kStep;
  // exp(x - max) is kept in Acc precision between the two passes so that the
  // 16-bit types are rounded once, at the end; when T is Acc the output row
  // itself holds it (no scratch, one fewer stream through the cache).
  constexpr bool kScratchInOutput = std::is_same_v<T, Acc>;
  // Large calls stream the output rows of the 16-bit types past the caches. A
  // float row is its own scratch: already in cache when the last pass writes it.
  const bool stream = !kScratchInOutput && streams_outputs(rows * cols * static_cast<int64_t>(sizeof(T)) * 2);
  parallel_range(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    std::vector<Acc> scratch(kScratchInOutput ? 0 : cols);
    for (int64_t r = begin; r < end; ++r) {
      const T* x = input + r * cols;
      T* y = output + r * cols;
      Acc* exps = kScratchInOutput ? reinterpret_cast<Acc*>(y) : scratch.data();
      const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
      AVec m_lo(neg_inf), m_hi(neg_inf);
      int64_t i = 0;
      for (; i + kStep <= cols; i += kStep) {
        AVec lo, hi;
        V::load(x + i, lo, hi);
        m_lo = at::vec::maximum(m_lo, lo);
        m_hi = at::vec::maximum(m_hi, hi);
      }
      Acc row_max = at::vec::vec_reduce_all<Acc>(
          [](AVec& a, AVec& b) { return at::vec::maximum(a, b); }, at::vec::maximum(m_lo, m_hi));
      for (; i < cols; ++i) row_max = nan_max(row_max, static_cast<Acc>(x[i]));
      const bool fast_exp = std::isfinite(row_max);

      const AVec max_v(row_max);
      AVec s_lo(Acc(0)), s_hi(Acc(0));
      const bool prefetch_next = r + 1 < end;
      for (i = 0; i + kStep <= cols; i += kStep) {
        if (prefetch_next) prefetch_bytes(x + cols + i, kStep * sizeof(T));
        AVec lo, hi;
        V::load(x + i, lo, hi);
        lo = exp_of_shifted(lo - max_v, fast_exp);
        hi = exp_of_shifted(hi - max_v, fast_exp);
        lo.store(exps + i);
        hi.store(exps + i + AVec::size());
        s_lo = s_lo + lo;
        s_hi = s_hi + hi;
      }
      Acc sum = reduce_add(s_lo + s_hi);
      for (; i < cols; ++i) {
        exps[i] = std::exp(static_cast<Acc>(x[i]) - row_max);
        sum += exps[i];
      }
      const Acc inv = Acc(1) / sum;
      const AVec inv_v(inv);
      const bool stream_row = stream && stream_aligned(y);
      for (i = 0; i + kStep <= cols; i += kStep) {
        store_slice(y + i, kStep, AVec::loadu(exps + i) * inv_v, AVec::loadu(exps + i + AVec::size()) * inv_v,
                    stream_row);
      }
      for (; i < cols; ++i) y[i] = static_cast<T>(exps[i] * inv);
    }
  });
}

// Runs f(o, j, count) over every [outer, inner-slice] pair, in parallel.
template <typename T, typename F>
void for_each_inner_slice(int64_t outer, int64_t dim_size, int64_t inner, const F& f) {
  constexpr int64_t kStep = Vec2<T>::kStep;
  const int64_t slices = (inner + kStep - 1) / kStep;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(dim_size * kStep, 1));
  parallel_range(outer * slices, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / slices;
      const int64_t j = (t % slices) * kStep;
      f(o, j, std::min(kStep, inner - j));
    }
  });
}

template <typename T>
void softmax_strided(const SoftmaxArgs& a) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const T* input = static_cast<const T*>(a.input);
  T* output = static_cast<T*>(a.output);
  const int64_t dim_size = a.dim_size, inner = a.inner;
  for_each_inner_slice<T>(a.outer, dim_size, inner, [&](int64_t o, int64_t j, int64_t count) {
    const T* x = input + o * dim_size * inner + j;
    T* y = output + o * dim_size * inner + j;
    const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
    AVec m_lo(neg_inf), m_hi(neg_inf);
    for (int64_t d = 0; d < dim_size; ++d) {
      AVec lo, hi;
      load_slice(x + d * inner, count, lo, hi);
      m_lo = at::vec::maximum(m_lo, lo);
      m_hi = at::vec::maximum(m_hi, hi);
    }
    AVec s_lo(Acc(0)), s_hi(Acc(0));
    for (int64_t d = 0; d < dim_size; ++d) {
      AVec lo, hi;
      load_slice(x + d * inner, count, lo, hi);
      s_lo = s_lo + (lo - m_lo).exp();
      s_hi = s_hi + (hi - m_hi).exp();
    }
    const AVec one(Acc(1));
    const AVec inv_lo = one / s_lo, inv_hi = one / s_hi;
    for (int64_t d = 0; d < dim_size; ++d) {
      AVec lo, hi;
      load_slice(x + d * inner, count, lo, hi);
      store_slice(y + d * inner, count, (lo - m_lo).exp() * inv_lo, (hi - m_hi).exp() * inv_hi);
    }
  });
}

template <typename T>
void softmax_backward_typed(const SoftmaxBackwardArgs& a) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const T* grad_output = static_cast<const T*>(a.grad_output);
  const T* output = static_cast<const T*>(a.output);
  T* grad_input = static_cast<T*>(a.grad_input);
  const int64_t dim_size = a.dim_size, inner = a.inner;
  // dx = y * (dy - sum(dy * y)) along the softmax dim
  if (inner == 1) {
    const bool stream = streams_outputs(a.outer * dim_size * static_cast<int64_t>(sizeof(T)) * 3);
    parallel_range(a.outer, row_grain(dim_size), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* dy = grad_output + r * dim_size;
        const T* y = output + r * dim_size;
        T* dx = grad_input + r * dim_size;
        const bool stream_row = stream && stream_aligned(dx);
        AVec s_lo(Acc(0)), s_hi(Acc(0));
        int64_t i = 0;
        constexpr int64_t kStep = Vec2<T>::kStep;
        for (; i < dim_size; i += kStep) {
          const int64_t count = std::min(kStep, dim_size - i);
          AVec g_lo, g_hi, y_lo, y_hi;
          load_slice(dy + i, count, g_lo, g_hi);
          load_slice(y + i, count, y_lo, y_hi);
          s_lo = at::vec::fmadd(g_lo, y_lo, s_lo);
          s_hi = at::vec::fmadd(g_hi, y_hi, s_hi);
        }
        const AVec dot(reduce_add(s_lo + s_hi));
        for (i = 0; i < dim_size; i += kStep) {
          const int64_t count = std::min(kStep, dim_size - i);
          AVec g_lo, g_hi, y_lo, y_hi;
          load_slice(dy + i, count, g_lo, g_hi);
          load_slice(y + i, count, y_lo, y_hi);
          store_slice(dx + i, count, y_lo * (g_lo - dot), y_hi * (g_hi - dot), stream_row);
        }
      }
    });
    return;
  }
  for_each_inner_slice<T>(a.outer, dim_size, inner, [&](int64_t o, int64_t j, int64_t count) {
    const int64_t base = o * dim_size * inner + j;
    AVec s_lo(Acc(0)), s_hi(Acc(0));
    for (int64_t d = 0; d < dim_size; ++d) {
      AVec g_lo, g_hi, y_lo, y_hi;
      load_slice(grad_output + base + d * inner, count, g_lo, g_hi);
      load_slice(output + base + d * inner, count, y_lo, y_hi);
      s_lo = at::vec::fmadd(g_lo, y_lo, s_lo);
      s_hi = at::vec::fmadd(g_hi, y_hi, s_hi);
    }
    for (int64_t d = 0; d < dim_size; ++d) {
      AVec g_lo, g_hi, y_lo, y_hi;
      load_slice(grad_output + base + d * inner, count, g_lo, g_hi);
      load_slice(output + base + d * inner, count, y_lo, y_hi);
      store_slice(grad_input + base + d * inner, count, y_lo * (g_lo - s_lo), y_hi * (g_hi - s_hi));
    }
  });
}

void softmax_forward_impl(DType dtype, const SoftmaxArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.inner == 1) {
      softmax_last_dim<T>(static_cast<const T*>(a.input), static_cast<T*>(a.output), a.outer,
                          a.dim_size);
    } else {
      softmax_strided<T>(a);
    }
  });
}

void softmax_backward_impl(DType dtype, const SoftmaxBackwardArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) { softmax_backward_typed<typename decltype(tag)::type>(a); });
}

}  // namespace

OP_EXT_REGISTER_KERNEL(softmax_forward, softmax_forward_impl);
OP_EXT_REGISTER_KERNEL(softmax_backward, softmax_backward_impl);

}  // namespace op_ext::cpu
