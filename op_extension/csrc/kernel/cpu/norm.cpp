// Row normalisations: RMSNorm, fused residual-add + RMSNorm, LayerNorm; forward
// and backward.
//
// One task owns whole rows. A row of an LLM ([hidden] = 4096 elements) fits in
// L1/L2, so the kernels make several passes over it (statistics, then output)
// while reading it from memory once. Statistics accumulate in float (double for
// double) with vector lanes summed in a fixed order.
//
// Weight and bias gradients sum over rows. To make them bit-identical run after
// run whatever the thread count, rows are cut into fixed blocks of
// kRowsPerBlock: each block sums into its own partial row, and the partials are
// then added in block order. The cut depends on the shape only.
#include <vector>

#include "register_kernel.h"
#include "vec_utils.h"

namespace op_ext::cpu {
namespace {

constexpr int64_t kRowsPerBlock = 32;

template <typename Acc>
inline void zero_tail(Vectorized<Acc>& lo, Vectorized<Acc>& hi, int64_t count) {
  using AVec = Vectorized<Acc>;
  const int64_t n = AVec::size();
  lo = AVec::set(AVec(Acc(0)), lo, std::min(count, n));
  hi = AVec::set(AVec(Acc(0)), hi, std::max<int64_t>(count - n, 0));
}

// partial[i, i + count) += (lo, hi)
template <typename Acc>
inline void accumulate(Acc* partial, int64_t count, const Vectorized<Acc>& lo,
                       const Vectorized<Acc>& hi) {
  using AVec = Vectorized<Acc>;
  const int64_t n = AVec::size();
  if (count >= 2 * n) {
    (AVec::loadu(partial) + lo).store(partial);
    (AVec::loadu(partial + n) + hi).store(partial + n);
    return;
  }
  const int64_t c_lo = std::min(count, n);
  (AVec::loadu(partial, c_lo) + lo).store(partial, c_lo);
  if (count > n) {
    (AVec::loadu(partial + n, count - n) + hi).store(partial + n, count - n);
  }
}

// Runs row_fn(row, partial) for every row, where partial is the zeroed
// [num_sums, cols] accumulator of the row's block (nullptr when num_sums is 0),
// then writes outs[s][c] = sum over blocks of partial[s][c], in block order.
template <typename T, typename RowFn>
void rows_with_column_sums(int64_t rows, int64_t cols, int num_sums, T* const* outs,
                           const RowFn& row_fn) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t block_grain = std::max<int64_t>(1, row_grain(cols) / kRowsPerBlock);
  std::vector<Acc> partials(num_sums > 0 ? blocks * num_sums * cols : 0, Acc(0));
  parallel_range(blocks, block_grain, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      Acc* partial = num_sums > 0 ? partials.data() + b * num_sums * cols : nullptr;
      const int64_t r_end = std::min(rows, (b + 1) * kRowsPerBlock);
      for (int64_t r = b * kRowsPerBlock; r < r_end; ++r) row_fn(r, partial);
    }
  });
  if (num_sums == 0) return;
  // Column sums: each task owns a range of columns and walks the blocks in order.
  constexpr int64_t kStep = Vec2<T>::kStep;
  const int64_t col_grain = std::max<int64_t>(kStep, 32768 / std::max<int64_t>(blocks, 1));
  for (int s = 0; s < num_sums; ++s) {
    if (outs[s] == nullptr) continue;
    parallel_range(cols, col_grain, [&](int64_t c_begin, int64_t c_end) {
      for (int64_t c = c_begin; c < c_end; c += kStep) {
        const int64_t count = std::min(kStep, c_end - c);
        const int64_t n = AVec::size();
        AVec lo(Acc(0)), hi(Acc(0));
        for (int64_t b = 0; b < blocks; ++b) {
          const Acc* p = partials.data() + (b * num_sums + s) * cols + c;
          lo = lo + AVec::loadu(p, std::min(count, n));
          if (count > n) hi = hi + AVec::loadu(p + n, count - n);
        }
        store_slice(outs[s] + c, count, lo, hi);
      }
    });
  }
}

template <typename T>
void rms_norm_forward_typed(const RmsNormArgs& a) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const T* input = static_cast<const T*>(a.input);
  const T* residual = static_cast<const T*>(a.residual);
  const T* weight = static_cast<const T*>(a.weight);
  T* output = static_cast<T*>(a.output);
  T* residual_out = static_cast<T*>(a.residual_out);
  const int64_t cols = a.cols;
  const Acc eps = static_cast<Acc>(a.eps);

  parallel_range(a.rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = input + r * cols;
      T* y = output + r * cols;
      AVec sum_lo(Acc(0)), sum_hi(Acc(0));
      const T* src = x;
      if (residual != nullptr) {
        // residual_out = input + residual, rounded to T as the unfused ops would
        // store it; the norm below reads the rounded values.
        const T* res = residual + r * cols;
        T* z = residual_out + r * cols;
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          AVec x_lo, x_hi, r_lo, r_hi;
          load_slice(x + i, count, x_lo, x_hi);
          load_slice(res + i, count, r_lo, r_hi);
          AVec z_lo = x_lo + r_lo, z_hi = x_hi + r_hi;
          Vec2<T>::round_to_storage(z_lo, z_hi);
          store_slice(z + i, count, z_lo, z_hi);
          sum_lo = at::vec::fmadd(z_lo, z_lo, sum_lo);
          sum_hi = at::vec::fmadd(z_hi, z_hi, sum_hi);
        });
        src = z;
      } else {
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          AVec lo, hi;
          load_slice(x + i, count, lo, hi);
          sum_lo = at::vec::fmadd(lo, lo, sum_lo);
          sum_hi = at::vec::fmadd(hi, hi, sum_hi);
        });
      }
      const Acc mean_sq = reduce_add(sum_lo + sum_hi) / static_cast<Acc>(cols);
      const AVec rstd(Acc(1) / std::sqrt(mean_sq + eps));
      const bool prefetch_next = r + 1 < end;
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        if (prefetch_next) {
          prefetch_bytes(x + cols + i, count * sizeof(T));
          if (residual != nullptr) prefetch_bytes(residual + (r + 1) * cols + i, count * sizeof(T));
        }
        AVec lo, hi;
        load_slice(src + i, count, lo, hi);
        lo = lo * rstd;
        hi = hi * rstd;
        if (weight != nullptr) {
          AVec w_lo, w_hi;
          load_slice(weight + i, count, w_lo, w_hi);
          lo = lo * w_lo;
          hi = hi * w_hi;
        }
        store_slice(y + i, count, lo, hi);
      });
    }
  });
}

template <typename T>
void rms_norm_backward_typed(const RmsNormBackwardArgs& a) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const T* grad_output = static_cast<const T*>(a.grad_output);
  const T* grad_residual = static_cast<const T*>(a.grad_residual_out);
  const T* input = static_cast<const T*>(a.input);
  const T* weight = static_cast<const T*>(a.weight);
  T* grad_input = static_cast<T*>(a.grad_input);
  const int64_t cols = a.cols;
  const Acc eps = static_cast<Acc>(a.eps);
  T* outs[1] = {static_cast<T*>(a.grad_weight)};
  const int num_sums = weight != nullptr && a.grad_weight != nullptr ? 1 : 0;

  rows_with_column_sums<T>(a.rows, cols, num_sums, outs, [&](int64_t r, Acc* partial) {
    const T* x = input + r * cols;
    const T* dy = grad_output + r * cols;
    T* dx = grad_input + r * cols;
    // With y = w * x * rstd: dx = rstd * (dy*w) - x * rstd^3 * mean(dy*w*x).
    AVec ss_lo(Acc(0)), ss_hi(Acc(0)), dot_lo(Acc(0)), dot_hi(Acc(0));
    for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
      AVec x_lo, x_hi, g_lo, g_hi;
      load_slice(x + i, count, x_lo, x_hi);
      load_slice(dy + i, count, g_lo, g_hi);
      if (weight != nullptr) {
        AVec w_lo, w_hi;
        load_slice(weight + i, count, w_lo, w_hi);
        g_lo = g_lo * w_lo;
        g_hi = g_hi * w_hi;
      }
      ss_lo = at::vec::fmadd(x_lo, x_lo, ss_lo);
      ss_hi = at::vec::fmadd(x_hi, x_hi, ss_hi);
      dot_lo = at::vec::fmadd(g_lo, x_lo, dot_lo);
      dot_hi = at::vec::fmadd(g_hi, x_hi, dot_hi);
    });
    const Acc n = static_cast<Acc>(cols);
    const Acc rstd_s = Acc(1) / std::sqrt(reduce_add(ss_lo + ss_hi) / n + eps);
    const AVec rstd(rstd_s);
    const AVec coeff(rstd_s * rstd_s * rstd_s * reduce_add(dot_lo + dot_hi) / n);
    for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
      AVec x_lo, x_hi, dy_lo, dy_hi;
      load_slice(x + i, count, x_lo, x_hi);
      load_slice(dy + i, count, dy_lo, dy_hi);
      AVec g_lo = dy_lo, g_hi = dy_hi;
      if (weight != nullptr) {
        AVec w_lo, w_hi;
        load_slice(weight + i, count, w_lo, w_hi);
        g_lo = g_lo * w_lo;
        g_hi = g_hi * w_hi;
      }
      AVec dx_lo = rstd * g_lo - coeff * x_lo;
      AVec dx_hi = rstd * g_hi - coeff * x_hi;
      if (grad_residual != nullptr) {
        AVec gr_lo, gr_hi;
        load_slice(grad_residual + r * cols + i, count, gr_lo, gr_hi);
        dx_lo = dx_lo + gr_lo;
        dx_hi = dx_hi + gr_hi;
      }
      store_slice(dx + i, count, dx_lo, dx_hi);
      if (partial != nullptr) {
        accumulate(partial + i, count, dy_lo * x_lo * rstd, dy_hi * x_hi * rstd);
      }
    });
  });
}

template <typename T>
void layer_norm_forward_typed(const LayerNormArgs& a) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const T* input = static_cast<const T*>(a.input);
  const T* weight = static_cast<const T*>(a.weight);
  const T* bias = static_cast<const T*>(a.bias);
  T* output = static_cast<T*>(a.output);
  const int64_t cols = a.cols;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);

  parallel_range(a.rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = input + r * cols;
      T* y = output + r * cols;
      // Two-pass mean and variance: the row is in cache, and this avoids the
      // cancellation of E[x^2] - E[x]^2 for rows with a large mean.
      AVec s_lo(Acc(0)), s_hi(Acc(0));
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec lo, hi;
        load_slice(x + i, count, lo, hi);
        s_lo = s_lo + lo;
        s_hi = s_hi + hi;
      });
      const AVec mean(reduce_add(s_lo + s_hi) / n);
      AVec v_lo(Acc(0)), v_hi(Acc(0));
      const bool prefetch_next = r + 1 < end;
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        if (prefetch_next) prefetch_bytes(x + cols + i, count * sizeof(T));
        AVec lo, hi;
        load_slice(x + i, count, lo, hi);
        lo = lo - mean;
        hi = hi - mean;
        if (count != Vec2<T>::kStep) zero_tail(lo, hi, count);
        v_lo = at::vec::fmadd(lo, lo, v_lo);
        v_hi = at::vec::fmadd(hi, hi, v_hi);
      });
      const AVec rstd(Acc(1) / std::sqrt(reduce_add(v_lo + v_hi) / n + eps));
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec lo, hi;
        load_slice(x + i, count, lo, hi);
        lo = (lo - mean) * rstd;
        hi = (hi - mean) * rstd;
        if (weight != nullptr) {
          AVec w_lo, w_hi;
          load_slice(weight + i, count, w_lo, w_hi);
          lo = lo * w_lo;
          hi = hi * w_hi;
        }
        if (bias != nullptr) {
          AVec b_lo, b_hi;
          load_slice(bias + i, count, b_lo, b_hi);
          lo = lo + b_lo;
          hi = hi + b_hi;
        }
        store_slice(y + i, count, lo, hi);
      });
    }
  });
}

template <typename T>
void layer_norm_backward_typed(const LayerNormBackwardArgs& a) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const T* grad_output = static_cast<const T*>(a.grad_output);
  const T* input = static_cast<const T*>(a.input);
  const T* weight = static_cast<const T*>(a.weight);
  T* grad_input = static_cast<T*>(a.grad_input);
  const int64_t cols = a.cols;
  const Acc eps = static_cast<Acc>(a.eps);
  const Acc n = static_cast<Acc>(cols);
  // partial[0] accumulates grad_weight, partial[1] grad_bias.
  T* outs[2] = {static_cast<T*>(a.grad_weight), static_cast<T*>(a.grad_bias)};
  const int num_sums = (a.grad_weight != nullptr || a.grad_bias != nullptr) ? 2 : 0;

  rows_with_column_sums<T>(a.rows, cols, num_sums, outs, [&](int64_t r, Acc* partial) {
    const T* x = input + r * cols;
    const T* dy = grad_output + r * cols;
    T* dx = grad_input + r * cols;
    AVec s_lo(Acc(0)), s_hi(Acc(0));
    for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
      AVec lo, hi;
      load_slice(x + i, count, lo, hi);
      s_lo = s_lo + lo;
      s_hi = s_hi + hi;
    });
    const AVec mean(reduce_add(s_lo + s_hi) / n);
    // g = dy * w, d = x - mean: var = mean(d^2), and the two sums of the
    // input gradient, sum(g) and sum(g * d).
    AVec v_lo(Acc(0)), v_hi(Acc(0)), g_sum_lo(Acc(0)), g_sum_hi(Acc(0)), gd_lo(Acc(0)),
        gd_hi(Acc(0));
    for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
      AVec d_lo, d_hi, g_lo, g_hi;
      load_slice(x + i, count, d_lo, d_hi);
      load_slice(dy + i, count, g_lo, g_hi);
      d_lo = d_lo - mean;
      d_hi = d_hi - mean;
      if (count != Vec2<T>::kStep) zero_tail(d_lo, d_hi, count);
      if (weight != nullptr) {
        AVec w_lo, w_hi;
        load_slice(weight + i, count, w_lo, w_hi);
        g_lo = g_lo * w_lo;
        g_hi = g_hi * w_hi;
      }
      v_lo = at::vec::fmadd(d_lo, d_lo, v_lo);
      v_hi = at::vec::fmadd(d_hi, d_hi, v_hi);
      g_sum_lo = g_sum_lo + g_lo;
      g_sum_hi = g_sum_hi + g_hi;
      gd_lo = at::vec::fmadd(g_lo, d_lo, gd_lo);
      gd_hi = at::vec::fmadd(g_hi, d_hi, gd_hi);
    });
    const Acc rstd_s = Acc(1) / std::sqrt(reduce_add(v_lo + v_hi) / n + eps);
    const AVec rstd(rstd_s);
    const AVec mean_g(reduce_add(g_sum_lo + g_sum_hi) / n);
    // mean(g * xhat) * rstd, with xhat = d * rstd
    const AVec coeff(rstd_s * rstd_s * reduce_add(gd_lo + gd_hi) / n);
    for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
      AVec x_lo, x_hi, dy_lo, dy_hi;
      load_slice(x + i, count, x_lo, x_hi);
      load_slice(dy + i, count, dy_lo, dy_hi);
      const AVec d_lo = x_lo - mean, d_hi = x_hi - mean;
      AVec g_lo = dy_lo, g_hi = dy_hi;
      if (weight != nullptr) {
        AVec w_lo, w_hi;
        load_slice(weight + i, count, w_lo, w_hi);
        g_lo = g_lo * w_lo;
        g_hi = g_hi * w_hi;
      }
      store_slice(dx + i, count, rstd * (g_lo - mean_g - d_lo * coeff),
                  rstd * (g_hi - mean_g - d_hi * coeff));
      if (partial != nullptr) {
        accumulate(partial + i, count, dy_lo * d_lo * rstd, dy_hi * d_hi * rstd);
        accumulate(partial + cols + i, count, dy_lo, dy_hi);
      }
    });
  });
}

void rms_norm_forward_impl(DType dtype, const RmsNormArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) { rms_norm_forward_typed<typename decltype(tag)::type>(a); });
}

void rms_norm_backward_impl(DType dtype, const RmsNormBackwardArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) { rms_norm_backward_typed<typename decltype(tag)::type>(a); });
}

void layer_norm_forward_impl(DType dtype, const LayerNormArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) { layer_norm_forward_typed<typename decltype(tag)::type>(a); });
}

void layer_norm_backward_impl(DType dtype, const LayerNormBackwardArgs& a) {
  dispatch_dtype(dtype,
                 [&](auto tag) { layer_norm_backward_typed<typename decltype(tag)::type>(a); });
}

}  // namespace

OP_EXT_REGISTER_KERNEL(rms_norm_forward, rms_norm_forward_impl);
OP_EXT_REGISTER_KERNEL(rms_norm_backward, rms_norm_backward_impl);
OP_EXT_REGISTER_KERNEL(layer_norm_forward, layer_norm_forward_impl);
OP_EXT_REGISTER_KERNEL(layer_norm_backward, layer_norm_backward_impl);

}  // namespace op_ext::cpu
