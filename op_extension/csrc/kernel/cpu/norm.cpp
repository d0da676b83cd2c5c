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
#include <cmath>
#include <type_traits>
#include <utility>
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

// ---- statistics of rows whose squares overflow -------------------------------
//
// A float sum of squares overflows once |x| passes ~1.8e19 (and a dot product
// dy*x near 3e38), although the normalised row is perfectly representable: the
// statistics would come out inf and the row as silent zeros or NaN. The kernels
// keep their single-pass statistics and, only for a row whose statistics are not
// finite while its largest |x| is, recompute them on the row scaled by an exact
// power of two (x * scale is exact and at most 1 in magnitude). The common case
// pays one isfinite test per row.

// max |x| over the row; NaN if the row holds a NaN.
template <typename T>
acc_t<T> row_abs_max(const T* x, int64_t cols) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  AVec m_lo(Acc(0)), m_hi(Acc(0));
  for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
    AVec lo, hi;
    load_slice(x + i, count, lo, hi);  // lanes past count read as zero
    m_lo = at::vec::maximum(m_lo, lo.abs());
    m_hi = at::vec::maximum(m_hi, hi.abs());
  });
  return at::vec::vec_reduce_all<Acc>(
      [](Vectorized<Acc>& a, Vectorized<Acc>& b) { return at::vec::maximum(a, b); },
      at::vec::maximum(m_lo, m_hi));
}

// The power of two that brings the row's max |x| into [0.5, 1), or 0 when no
// scaling can help (the row holds inf or NaN, or is all zeros).
template <typename Acc>
Acc overflow_scale(Acc max_abs) {
  if (!std::isfinite(max_abs) || max_abs == Acc(0)) return Acc(0);
  int exponent = 0;
  std::frexp(max_abs, &exponent);
  return std::ldexp(Acc(1), -exponent);
}

// Runs body(std::true_type) for a scaled row and body(std::false_type) for the
// common one, so that the common loop carries no extra multiply.
template <typename F>
inline void with_scaling(bool scaled, const F& body) {
  if (scaled) {
    body(std::true_type{});
  } else {
    body(std::false_type{});
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
  const Acc n = static_cast<Acc>(cols);

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
      Acc sum_sq = reduce_add(sum_lo + sum_hi);
      // y = (x * scale) * rstd_scaled; scale is 1 unless the squares overflowed.
      const Acc scale = std::isfinite(sum_sq) ? Acc(0) : overflow_scale(row_abs_max(src, cols));
      const bool scaled = scale != Acc(0);
      if (scaled) {
        const AVec s(scale);
        sum_lo = AVec(Acc(0));
        sum_hi = AVec(Acc(0));
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          AVec lo, hi;
          load_slice(src + i, count, lo, hi);
          lo = lo * s;
          hi = hi * s;
          sum_lo = at::vec::fmadd(lo, lo, sum_lo);
          sum_hi = at::vec::fmadd(hi, hi, sum_hi);
        });
        sum_sq = reduce_add(sum_lo + sum_hi);
      }
      const Acc eps_scaled = scaled ? eps * scale * scale : eps;
      const AVec rstd(Acc(1) / std::sqrt(sum_sq / n + eps_scaled));
      const AVec s(scale);
      const bool prefetch_next = r + 1 < end;
      with_scaling(scaled, [&](auto scaled_tag) {
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          if (prefetch_next) {
            prefetch_bytes(x + cols + i, count * sizeof(T));
            if (residual != nullptr) prefetch_bytes(residual + (r + 1) * cols + i, count * sizeof(T));
          }
          AVec lo, hi;
          load_slice(src + i, count, lo, hi);
          if constexpr (decltype(scaled_tag)::value) {
            lo = lo * s;
            hi = hi * s;
          }
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
  const Acc n = static_cast<Acc>(cols);
  T* outs[1] = {static_cast<T*>(a.grad_weight)};
  const int num_sums = weight != nullptr && a.grad_weight != nullptr ? 1 : 0;

  rows_with_column_sums<T>(a.rows, cols, num_sums, outs, [&](int64_t r, Acc* partial) {
    const T* x = input + r * cols;
    const T* dy = grad_output + r * cols;
    T* dx = grad_input + r * cols;
    // With g = dy * w and xhat = x * rstd (y = w * xhat):
    //   dx = rstd * (g - xhat * mean(g * xhat)),  dw = sum over rows of dy * xhat.
    // Written with xhat rather than rstd^3 * x * mean(g * x), whose rstd^3
    // underflows for rows with |x| past ~1e13 in float.
    // sums(s) accumulates sum((x*s)^2) and sum(g * x*s); s is 1 in the common case.
    AVec ss_lo, ss_hi, dot_lo, dot_hi;
    auto sums = [&](auto scaled_tag, Acc scale) {
      const AVec s(scale);
      ss_lo = ss_hi = dot_lo = dot_hi = AVec(Acc(0));
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec x_lo, x_hi, g_lo, g_hi;
        load_slice(x + i, count, x_lo, x_hi);
        load_slice(dy + i, count, g_lo, g_hi);
        if constexpr (decltype(scaled_tag)::value) {
          x_lo = x_lo * s;
          x_hi = x_hi * s;
        }
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
      return std::make_pair(reduce_add(ss_lo + ss_hi), reduce_add(dot_lo + dot_hi));
    };
    auto [sum_sq, dot] = sums(std::false_type{}, Acc(1));
    const Acc scale = std::isfinite(sum_sq) && std::isfinite(dot)
                          ? Acc(0)
                          : overflow_scale(row_abs_max(x, cols));
    const bool scaled = scale != Acc(0);
    if (scaled) std::tie(sum_sq, dot) = sums(std::true_type{}, scale);
    // rstd of the (scaled) row; the true rstd is rstd_s * scale.
    const Acc rstd_s = Acc(1) / std::sqrt(sum_sq / n + (scaled ? eps * scale * scale : eps));
    const AVec rstd(rstd_s);
    const AVec mean_gxhat(rstd_s * (dot / n));
    const AVec s(scale);
    with_scaling(scaled, [&](auto scaled_tag) {
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec x_lo, x_hi, dy_lo, dy_hi;
        load_slice(x + i, count, x_lo, x_hi);
        load_slice(dy + i, count, dy_lo, dy_hi);
        if constexpr (decltype(scaled_tag)::value) {
          x_lo = x_lo * s;
          x_hi = x_hi * s;
        }
        const AVec xhat_lo = x_lo * rstd, xhat_hi = x_hi * rstd;
        AVec g_lo = dy_lo, g_hi = dy_hi;
        if (weight != nullptr) {
          AVec w_lo, w_hi;
          load_slice(weight + i, count, w_lo, w_hi);
          g_lo = g_lo * w_lo;
          g_hi = g_hi * w_hi;
        }
        AVec dx_lo = rstd * at::vec::fnmadd(xhat_lo, mean_gxhat, g_lo);
        AVec dx_hi = rstd * at::vec::fnmadd(xhat_hi, mean_gxhat, g_hi);
        if constexpr (decltype(scaled_tag)::value) {
          dx_lo = dx_lo * s;
          dx_hi = dx_hi * s;
        }
        if (grad_residual != nullptr) {
          AVec gr_lo, gr_hi;
          load_slice(grad_residual + r * cols + i, count, gr_lo, gr_hi);
          dx_lo = dx_lo + gr_lo;
          dx_hi = dx_hi + gr_hi;
        }
        store_slice(dx + i, count, dx_lo, dx_hi);
        if (partial != nullptr) accumulate(partial + i, count, dy_lo * xhat_lo, dy_hi * xhat_hi);
      });
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
      const bool prefetch_next = r + 1 < end;
      // Two-pass mean and variance of x * s: the row is in cache, and this
      // avoids the cancellation of E[x^2] - E[x]^2 for rows with a large mean.
      auto moments = [&](auto scaled_tag, Acc scale, bool prefetch) {
        const AVec s(scale);
        AVec s_lo(Acc(0)), s_hi(Acc(0));
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          AVec lo, hi;
          load_slice(x + i, count, lo, hi);
          if constexpr (decltype(scaled_tag)::value) {
            lo = lo * s;
            hi = hi * s;
          }
          s_lo = s_lo + lo;
          s_hi = s_hi + hi;
        });
        const Acc mean = reduce_add(s_lo + s_hi) / n;
        const AVec mean_v(mean);
        AVec v_lo(Acc(0)), v_hi(Acc(0));
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          if (prefetch) prefetch_bytes(x + cols + i, count * sizeof(T));
          AVec lo, hi;
          load_slice(x + i, count, lo, hi);
          if constexpr (decltype(scaled_tag)::value) {
            lo = at::vec::fmsub(lo, s, mean_v);
            hi = at::vec::fmsub(hi, s, mean_v);
          } else {
            lo = lo - mean_v;
            hi = hi - mean_v;
          }
          if (count != Vec2<T>::kStep) zero_tail(lo, hi, count);
          v_lo = at::vec::fmadd(lo, lo, v_lo);
          v_hi = at::vec::fmadd(hi, hi, v_hi);
        });
        return std::make_pair(mean, reduce_add(v_lo + v_hi) / n);
      };
      auto [mean_s, var] = moments(std::false_type{}, Acc(1), prefetch_next);
      const Acc scale = std::isfinite(mean_s) && std::isfinite(var)
                            ? Acc(0)
                            : overflow_scale(row_abs_max(x, cols));
      const bool scaled = scale != Acc(0);
      if (scaled) std::tie(mean_s, var) = moments(std::true_type{}, scale, false);
      // xhat = (x * s - mean_s) * rstd_s, the statistics of the scaled row.
      const AVec rstd(Acc(1) / std::sqrt(var + (scaled ? eps * scale * scale : eps)));
      const AVec mean(mean_s);
      const AVec s(scale);
      with_scaling(scaled, [&](auto scaled_tag) {
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          AVec lo, hi;
          load_slice(x + i, count, lo, hi);
          if constexpr (decltype(scaled_tag)::value) {
            lo = at::vec::fmsub(lo, s, mean) * rstd;
            hi = at::vec::fmsub(hi, s, mean) * rstd;
          } else {
            lo = (lo - mean) * rstd;
            hi = (hi - mean) * rstd;
          }
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
    // With g = dy * w, d = x - mean and xhat = d * rstd:
    //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
    // written with xhat rather than rstd^2 * d * mean(g * d), whose rstd^2
    // underflows for rows with a large spread. stats(s) returns, for the row
    // x * s: its mean, mean(d^2), sum(g) and sum(g * d); s is 1 in the common case.
    struct Stats {
      Acc mean, var, g_sum, gd_sum;
    };
    auto stats = [&](auto scaled_tag, Acc scale) {
      const AVec s(scale);
      AVec s_lo(Acc(0)), s_hi(Acc(0));
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec lo, hi;
        load_slice(x + i, count, lo, hi);
        if constexpr (decltype(scaled_tag)::value) {
          lo = lo * s;
          hi = hi * s;
        }
        s_lo = s_lo + lo;
        s_hi = s_hi + hi;
      });
      const Acc mean = reduce_add(s_lo + s_hi) / n;
      const AVec mean_v(mean);
      AVec v_lo(Acc(0)), v_hi(Acc(0)), g_sum_lo(Acc(0)), g_sum_hi(Acc(0)), gd_lo(Acc(0)),
          gd_hi(Acc(0));
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec d_lo, d_hi, g_lo, g_hi;
        load_slice(x + i, count, d_lo, d_hi);
        load_slice(dy + i, count, g_lo, g_hi);
        if constexpr (decltype(scaled_tag)::value) {
          d_lo = at::vec::fmsub(d_lo, s, mean_v);
          d_hi = at::vec::fmsub(d_hi, s, mean_v);
        } else {
          d_lo = d_lo - mean_v;
          d_hi = d_hi - mean_v;
        }
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
      return Stats{mean, reduce_add(v_lo + v_hi) / n, reduce_add(g_sum_lo + g_sum_hi),
                   reduce_add(gd_lo + gd_hi)};
    };
    Stats st = stats(std::false_type{}, Acc(1));
    const Acc scale = std::isfinite(st.mean) && std::isfinite(st.var) && std::isfinite(st.gd_sum)
                          ? Acc(0)
                          : overflow_scale(row_abs_max(x, cols));
    const bool scaled = scale != Acc(0);
    if (scaled) st = stats(std::true_type{}, scale);
    // rstd of the (scaled) row; the true rstd is rstd_s * scale.
    const Acc rstd_s = Acc(1) / std::sqrt(st.var + (scaled ? eps * scale * scale : eps));
    const AVec rstd(rstd_s);
    const AVec mean(st.mean);
    const AVec mean_g(st.g_sum / n);
    const AVec mean_gxhat(rstd_s * (st.gd_sum / n));
    const AVec s(scale);
    with_scaling(scaled, [&](auto scaled_tag) {
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec x_lo, x_hi, dy_lo, dy_hi;
        load_slice(x + i, count, x_lo, x_hi);
        load_slice(dy + i, count, dy_lo, dy_hi);
        AVec xhat_lo, xhat_hi;
        if constexpr (decltype(scaled_tag)::value) {
          xhat_lo = at::vec::fmsub(x_lo, s, mean) * rstd;
          xhat_hi = at::vec::fmsub(x_hi, s, mean) * rstd;
        } else {
          xhat_lo = (x_lo - mean) * rstd;
          xhat_hi = (x_hi - mean) * rstd;
        }
        AVec g_lo = dy_lo, g_hi = dy_hi;
        if (weight != nullptr) {
          AVec w_lo, w_hi;
          load_slice(weight + i, count, w_lo, w_hi);
          g_lo = g_lo * w_lo;
          g_hi = g_hi * w_hi;
        }
        AVec dx_lo = rstd * at::vec::fnmadd(xhat_lo, mean_gxhat, g_lo - mean_g);
        AVec dx_hi = rstd * at::vec::fnmadd(xhat_hi, mean_gxhat, g_hi - mean_g);
        if constexpr (decltype(scaled_tag)::value) {
          dx_lo = dx_lo * s;
          dx_hi = dx_hi * s;
        }
        store_slice(dx + i, count, dx_lo, dx_hi);
        if (partial != nullptr) {
          accumulate(partial + i, count, dy_lo * xhat_lo, dy_hi * xhat_hi);
          accumulate(partial + cols + i, count, dy_lo, dy_hi);
        }
      });
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
