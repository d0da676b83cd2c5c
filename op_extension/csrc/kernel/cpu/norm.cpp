// Row normalisations: RMSNorm, fused residual-add + RMSNorm, LayerNorm; forward
// and backward.
//
// One task owns whole rows. A row of an LLM ([hidden] = 4096 elements) fits in
// L1/L2, so the kernels make several passes over it (statistics, then output)
// while reading it from memory once. Statistics accumulate in float (double for
// double) with vector lanes summed in a fixed order; the RMSNorm forward sums its
// squares in torch's own order instead, so its statistics are torch's bit for bit.
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
#include "fused_add_rms_norm.h"
#include "layer_norm.h"
#include "rms_norm.h"

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

// The power of two that brings the row's max |x| into [0.5, 1) (below 4 past
// 2^126), or 0 when no scaling can help (the row holds inf or NaN, is all zeros, or is below 1).
template <typename Acc>
Acc overflow_scale(Acc max_abs) {
  if (!std::isfinite(max_abs) || max_abs == Acc(0)) return Acc(0);
  int exponent = 0;
  std::frexp(max_abs, &exponent);
  // Only down: a row below 1 cannot overflow its statistics by its own size,
  // and scaling up a subnormal max (2^129) is inf, which made a row of
  // subnormals with a NaN weight or an inf dy (whose sums are not finite
  // either) give a NaN weight gradient where it is 0.
  if (exponent <= 0) return Acc(0);
  // A normal power of two (2^-126 at least in float), as the CUDA and Ascend
  // kernels take: max |x| * scale is then below 4.
  constexpr int kMaxExponent = 1 - std::numeric_limits<Acc>::min_exponent;
  return std::ldexp(Acc(1), -std::min(exponent, kMaxExponent));
}

// ---- statistics of rows whose squares underflow ------------------------------
//
// The other end: a row of tiny values (|x| below ~1e-19 in float) has squares
// below float's normal range, rounded to 2^-149 absolute, or 0. Where eps does
// not dominate the mean square (eps 0, or an eps itself below float's normal
// range), rstd loses its precision, or is 1 / sqrt(0) = inf and the row NaN,
// where x / rms(x) is finite (torch's own float rms_norm gives inf there). Such
// a row's statistics are taken again on x * scale, the power of two that brings
// max |x| into [0.5, 1): x * scale is exact, its squares normal, and every
// result the scaled row gives is the unscaled one's, as rstd = rstd_s * scale.

// True when mean_square + eps is below min / epsilon (2^-103 in float): only
// there can the squares' rounding to 2^-149 (n * 2^-150 in the sum, 2^-150 in
// the mean) reach float's last bit; above it the statistics stand.
template <typename Acc>
bool statistic_underflows(Acc mean_square, Acc eps) {
  return mean_square + eps < std::numeric_limits<Acc>::min() / std::numeric_limits<Acc>::epsilon();
}

// The power of two that brings max |x| into [0.5, 1) from below, for a row whose
// statistic underflows; 0 when none is needed (an all-zero row, whose eps-0
// statistics are 0 / 0 at any scale, or one holding inf or NaN). At most 2^100
// in float (2^900 in double): eps, below 2^-103 wherever this runs, keeps
// eps * scale^2 below 2^97, finite; and a row that would take more (max |x|
// below 2^-100, every x a multiple of 2^-149) has x * scale a multiple of 2^-49,
// whose squares, multiples of 2^-98, float holds exactly.
template <typename Acc>
constexpr int kMaxUnderflowExponent = sizeof(Acc) == 4 ? 100 : 900;

template <typename Acc>
Acc underflow_scale(Acc max_abs) {
  if (!std::isfinite(max_abs) || max_abs == Acc(0)) return Acc(0);
  int exponent = 0;
  std::frexp(max_abs, &exponent);
  const int up = std::min(-exponent, kMaxUnderflowExponent<Acc>);
  return up > 0 ? std::ldexp(Acc(1), up) : Acc(0);
}

// The scale of a row's rescue, 0 for none: where its statistics are not finite
// (`overflowed`) or its first mean square underflows (statistic_underflows),
// the power of two that brings max |x| into [0.5, 1), down (overflow_scale) or
// up (underflow_scale); max |x| is only read then. A row that underflows has
// max |x| below 2^-35 (mean square below 2^-103 over at most 2^31 elements); one
// whose g * x sum overflowed (an inf dy) with max |x| below 1 is scaled up
// exactly, to the same result. As the CUDA kernels choose.
template <typename T>
acc_t<T> rescue_scale(const T* x, int64_t cols, bool overflowed, acc_t<T> mean_square, acc_t<T> eps) {
  using Acc = acc_t<T>;
  if (!overflowed && !statistic_underflows(mean_square, eps)) return Acc(0);
  const Acc max_abs = row_abs_max(x, cols);
  return max_abs >= Acc(1) ? overflow_scale(max_abs) : underflow_scale(max_abs);
}

// A LayerNorm row rescued by overflow_scale whose scaled variance is 0 is
// constant: every x * scale equals the scaled mean exactly. Its rstd at that
// scale, 1 / (sqrt(eps) * scale), is past Acc's range (eps * scale^2
// underflows), and xhat = 0 * inf gave NaN where the output is the bias and the
// gradient rstd * (g - mean(g)). Its statistics are exact unscaled (mean /
// scale, variance 0): the row is taken back to scale 1, where rstd is
// 1 / sqrt(eps). With eps 0 it is inf, and xhat NaN, as 0 / 0 is. (A constant
// row rescued by underflow_scale has a finite rstd at its scale; it goes back to
// scale 1 all the same.)
template <typename Acc>
bool unscale_constant_row(Acc centred_sq_sum, Acc& scale, Acc& mean, Acc& eps_scaled, Acc eps) {
  if (scale == Acc(1) || centred_sq_sum != Acc(0)) return false;
  mean = mean / scale;  // a power of two: exact
  scale = Acc(1);
  eps_scaled = eps;
  return true;
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

// ---- the sum of squares in torch's order ------------------------------------------
//
// Hugging Face's RMSNorm classes (and torch.nn.RMSNorm on CPU) take the mean of
// squares as x.float().pow(2).mean(-1): every square is rounded to float, then
// torch's CPU sum kernel (aten/src/ATen/native/cpu/SumKernel.cpp, cascade_sum)
// adds the squares in a fixed cascade. Where our float sum differs from it in the
// last bit, about 1e-5 of 16-bit outputs round the other way, and a patched model
// is no longer bit-identical to the model it replaces. So the forward statistics
// follow torch's order exactly:
//   * the row is read as vectors of 32 bytes (8 floats, 4 doubles). That is the
//     AVX2 width, and torch uses it on AVX-512 machines too: SumKernel registers
//     with REGISTER_DISPATCH, which leaves the AVX-512 slot empty so the AVX2
//     kernel runs (measured: 16-float lanes do not reproduce torch.sum);
//   * vector v goes to accumulator v % 4; each accumulator sums its terms in
//     blocks of 2^p (p = max(4, ceil(log2(n / 4)) / 4)), the block sums again in
//     blocks, over four levels (multi_row_sum); the one to three vectors past the
//     last group of four go into accumulator 0; then acc0 += acc1, += acc2, += acc3;
//   * a scalar total takes the elements past the last whole vector, then the
//     accumulator's lanes in order; the result is 0 + total.
//   * A row shorter than one vector is summed the same way over scalars.
// The four accumulators of 32 bytes take 128 contiguous bytes of the row per
// step, whatever our own vector width is: lanes are independent, so the
// additions stay the same however the lanes are held (SquareSlice).
// Cost: as fast as the fused-multiply-add sum it replaced (rms_norm at 16 and 512
// rows of 4096, one thread); fused_add_rms_norm reads its rounded sum once more.
// (One case is not reproduced: a single row of >= 32768 elements, which torch
// splits across threads.)
constexpr int64_t kTorchSumVectorBytes = 32;
constexpr int64_t kTorchSumLevels = 4;

// v, opaque to the optimiser: a product passed through it is rounded on its own.
// GCC contracts a * b + c into one fma across statements in C++ (its default
// -ffp-contract=fast), which would skip the rounding of the square that torch's
// separate pow() makes.
template <typename V>
inline V opaque(const V& value) {
  V v = value;
  asm("" : "+m"(v));
  return v;
}
#if defined(CPU_CAPABILITY_AVX512)
inline Vectorized<float> opaque(Vectorized<float> v) {
  __m512 r = v;
  asm("" : "+v"(r));
  return r;
}
inline Vectorized<double> opaque(Vectorized<double> v) {
  __m512d r = v;
  asm("" : "+v"(r));
  return r;
}
#elif defined(CPU_CAPABILITY_AVX2)
inline Vectorized<float> opaque(Vectorized<float> v) {
  __m256 r = v;
  asm("" : "+x"(r));
  return r;
}
inline Vectorized<double> opaque(Vectorized<double> v) {
  __m256d r = v;
  asm("" : "+x"(r));
  return r;
}
#endif

inline int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x - 1); v != 0; v >>= 1) ++bits;
  return bits;
}

// Sums load(i) for i in [0, size) in torch's four-level cascade. Block is any
// type with + (a vector, a group of vectors, a scalar).
template <typename Block, typename Load>
Block cascade_sum(int64_t size, const Block& zero, const Load& load) {
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(size) / kTorchSumLevels);
  const int64_t level_step = int64_t(1) << level_power;
  const int64_t level_mask = level_step - 1;
  // acc[0] lives in `level0` (a register, not the array the level loop indexes),
  // and is zero at the start of every step: the level loop moves it up.
  Block acc[kTorchSumLevels];
  for (auto& a : acc) a = zero;
  int64_t i = 0;
  while (i + level_step <= size) {
    Block level0 = zero;
    for (int64_t j = 0; j < level_step; ++j, ++i) level0 = level0 + load(i);
    acc[1] = acc[1] + level0;
    for (int64_t level = 2; level < kTorchSumLevels; ++level) {
      if ((i & (level_mask << ((level - 1) * level_power))) != 0) break;
      acc[level] = acc[level] + acc[level - 1];
      acc[level - 1] = zero;
    }
  }
  Block level0 = zero;
  for (; i < size; ++i) level0 = level0 + load(i);
  acc[0] = level0;
  for (int64_t level = 1; level < kTorchSumLevels; ++level) acc[0] = acc[0] + acc[level];
  return acc[0];
}

// One slice (Vec2<T>::kStep elements) of rounded squares, as two of our vectors.
// A cascade step of torch's sum covers 128 bytes of accumulators (four torch
// vectors); that is one slice or more, each of which runs its own cascade (the
// lanes are independent, so the additions are the same). Two named vectors, not
// an array: the compiler keeps them in registers.
template <typename T>
struct SquareSlice {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  AVec lo, hi;

  static SquareSlice zero() { return {AVec(Acc(0)), AVec(Acc(0))}; }
  static SquareSlice squares(const T* p) {
    AVec l, h;
    Vec2<T>::load(p, l, h);
    return {opaque(l * l), opaque(h * h)};
  }
  friend SquareSlice operator+(const SquareSlice& a, const SquareSlice& b) { return {a.lo + b.lo, a.hi + b.hi}; }
};

template <typename T>
inline acc_t<T> rounded_square(T x) {
  const acc_t<T> a = static_cast<acc_t<T>>(x);
  return opaque(a * a);
}

// Four scalar accumulators: torch's row_sum over a row shorter than one vector.
template <typename Acc>
struct FourSums {
  Acc v[4];
  friend FourSums operator+(const FourSums& a, const FourSums& b) {
    return FourSums{{a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2], a.v[3] + b.v[3]}};
  }
};

// sum(x[i]^2 for i < cols), bit for bit as torch.sum(x.float().pow(2), -1) on CPU.
// flatten: GCC otherwise leaves Vectorized's operator+ out of line here (a call
// through the PLT per vector add, which made the pass 1.7x slower).
template <typename T>
__attribute__((flatten)) acc_t<T> sum_squares_in_torch_order(const T* x, int64_t cols) {
  using Acc = acc_t<T>;
  constexpr int64_t kLanes = kTorchSumVectorBytes / static_cast<int64_t>(sizeof(Acc));
  // acc[k][lane]: the four accumulators after the cascade.
  alignas(64) Acc acc[4][kLanes];
  int64_t width = kLanes;  // elements per accumulator term
  int64_t terms;           // whole terms in the row
  if (cols < kLanes) {
    width = 1;
    terms = cols;
    const int64_t groups = terms / 4;
    const FourSums<Acc> sum = cascade_sum(groups, FourSums<Acc>{{Acc(0), Acc(0), Acc(0), Acc(0)}}, [&](int64_t g) {
      const T* p = x + 4 * g;
      return FourSums<Acc>{{rounded_square(p[0]), rounded_square(p[1]), rounded_square(p[2]), rounded_square(p[3])}};
    });
    for (int k = 0; k < 4; ++k) acc[k][0] = sum.v[k];
  } else {
    using Slice = SquareSlice<T>;
    constexpr int64_t kStep = Vec2<T>::kStep;
    constexpr int64_t kGroupElems = 4 * kLanes;  // one cascade step: 128 bytes of Acc
    static_assert(kGroupElems % kStep == 0, "a cascade step is whole slices");
    terms = cols / kLanes;
    const int64_t groups = terms / 4;
    for (int64_t s = 0; s < kGroupElems; s += kStep) {
      const Slice sum = cascade_sum(groups, Slice::zero(), [&](int64_t g) { return Slice::squares(x + g * kGroupElems + s); });
      sum.lo.store(&acc[0][0] + s);
      sum.hi.store(&acc[0][0] + s + Slice::AVec::size());
    }
  }
  // The one to three terms past the last group of four go into accumulator 0.
  for (int64_t t = terms / 4 * 4; t < terms; ++t) {
    for (int64_t l = 0; l < width; ++l) acc[0][l] += rounded_square(x[t * width + l]);
  }
  for (int k = 1; k < 4; ++k) {
    for (int64_t l = 0; l < width; ++l) acc[0][l] += acc[k][l];
  }
  if (width == 1) return Acc(0) + acc[0][0];
  Acc total = Acc(0);
  for (int64_t i = terms * kLanes; i < cols; ++i) total += rounded_square(x[i]);
  for (int64_t l = 0; l < kLanes; ++l) total += acc[0][l];
  return Acc(0) + total;
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
  // Large calls stream the output past the caches; never residual_out, which the
  // row's norm reads back at once.
  const bool stream = streams_outputs(a.rows * cols * static_cast<int64_t>(sizeof(T)) * (residual ? 4 : 2));

  parallel_range(a.rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = input + r * cols;
      T* y = output + r * cols;
      const bool stream_row = stream && stream_aligned(y);
      const T* src = x;
      if (residual != nullptr) {
        // residual_out = input + residual, rounded to T as the unfused ops would
        // store it (by the store itself); the norm below reads the rounded values
        // back from z.
        const T* res = residual + r * cols;
        T* z = residual_out + r * cols;
        for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
          AVec x_lo, x_hi, r_lo, r_hi;
          load_slice(x + i, count, x_lo, x_hi);
          load_slice(res + i, count, r_lo, r_hi);
          store_slice(z + i, count, x_lo + r_lo, x_hi + r_hi);
        });
        src = z;
      }
      Acc sum_sq = sum_squares_in_torch_order(src, cols);
      // y = (x * scale) * rstd_scaled; scale is 1 unless the squares overflowed
      // or underflowed.
      const Acc scale = rescue_scale(src, cols, !std::isfinite(sum_sq), sum_sq / n, eps);
      const bool scaled = scale != Acc(0);
      if (scaled) {
        const AVec s(scale);
        AVec sum_lo(Acc(0)), sum_hi(Acc(0));
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
          store_slice(y + i, count, lo, hi, stream_row);
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
  const bool stream =
      streams_outputs(a.rows * cols * static_cast<int64_t>(sizeof(T)) * (grad_residual ? 4 : 3));

  rows_with_column_sums<T>(a.rows, cols, num_sums, outs, [&](int64_t r, Acc* partial) {
    const T* x = input + r * cols;
    const T* dy = grad_output + r * cols;
    T* dx = grad_input + r * cols;
    const bool stream_row = stream && stream_aligned(dx);
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
    const Acc scale = rescue_scale(x, cols, !std::isfinite(sum_sq) || !std::isfinite(dot), sum_sq / n, eps);
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
        store_slice(dx + i, count, dx_lo, dx_hi, stream_row);
        if (partial != nullptr) accumulate(partial + i, count, dy_lo * xhat_lo, dy_hi * xhat_hi);
      });
    });
  });
}

// ---- LayerNorm statistics ----------------------------------------------------------
//
// Mean and variance in two passes over the cached row (no cancellation of
// E[x^2] - E[x]^2 for rows with a large mean), of x * scale where the row's
// statistics overflowed (see overflow_scale).

// sum(x * scale) over the row.
template <typename T, bool kScaled>
acc_t<T> row_sum(const T* x, int64_t cols, acc_t<T> scale) {
  using AVec = Vectorized<acc_t<T>>;
  const AVec s(scale);
  AVec s_lo(0), s_hi(0);
  for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
    AVec lo, hi;
    load_slice(x + i, count, lo, hi);
    if constexpr (kScaled) {
      lo = lo * s;
      hi = hi * s;
    }
    s_lo = s_lo + lo;
    s_hi = s_hi + hi;
  });
  return reduce_add(s_lo + s_hi);
}

// d = x * scale - mean over the row: (sum(d) if kWithSum, else 0; sum(d^2)).
// Prefetches next_row (if not null) while the row is read from cache.
template <typename T, bool kScaled, bool kWithSum>
std::pair<acc_t<T>, acc_t<T>> centered_sums(const T* x, int64_t cols, acc_t<T> scale, acc_t<T> mean,
                                            const T* next_row) {
  using Acc = acc_t<T>;
  using AVec = Vectorized<Acc>;
  const AVec s(scale), m(mean);
  AVec d_lo(0), d_hi(0), v_lo(0), v_hi(0);
  for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
    if (next_row != nullptr) prefetch_bytes(next_row + i, count * sizeof(T));
    AVec lo, hi;
    load_slice(x + i, count, lo, hi);
    if constexpr (kScaled) {
      lo = at::vec::fmsub(lo, s, m);
      hi = at::vec::fmsub(hi, s, m);
    } else {
      lo = lo - m;
      hi = hi - m;
    }
    if (count != Vec2<T>::kStep) zero_tail(lo, hi, count);
    if constexpr (kWithSum) {
      d_lo = d_lo + lo;
      d_hi = d_hi + hi;
    }
    v_lo = at::vec::fmadd(lo, lo, v_lo);
    v_hi = at::vec::fmadd(hi, hi, v_hi);
  });
  return {kWithSum ? reduce_add(d_lo + d_hi) : Acc(0), reduce_add(v_lo + v_hi)};
}

// The float mean of a row is off by a few ulp of |mean|, and every centred
// value carries that error into the output, scaled by rstd. Where
// |mean| * rstd > kMeanRefineRatio this is more than a few ulp of the result:
// a constant row with eps = 0 gave +-1 instead of 0 * inf = NaN. Such rows
// correct their mean by mean(x - mean), which makes a constant row's mean exact,
// and recompute the variance; other rows pay one comparison.
constexpr int kMeanRefineRatio = 16;

template <typename Acc>
bool mean_needs_refining(Acc mean, Acc var, Acc eps) {
  return mean * mean > Acc(kMeanRefineRatio * kMeanRefineRatio) * (var + eps);
}

// The statistics of one LayerNorm row: xhat = (x * scale - mean) * rstd, where
// mean and rstd are those of x * scale; scaled is false (scale 1) unless the
// row's statistics overflowed or underflowed. The true rstd is rstd * scale.
template <typename Acc>
struct LayerNormRow {
  Acc scale, mean, var, eps;
  bool scaled;
};

template <typename T>
LayerNormRow<acc_t<T>> layer_norm_row(const T* x, int64_t cols, acc_t<T> eps, const T* next_row) {
  using Acc = acc_t<T>;
  const Acc n = static_cast<Acc>(cols);
  LayerNormRow<Acc> row{Acc(1), row_sum<T, false>(x, cols, Acc(1)) / n, Acc(0), eps, false};
  row.var = centered_sums<T, false, false>(x, cols, Acc(1), row.mean, next_row).second / n;
  {
    const Acc scale = rescue_scale(x, cols, !std::isfinite(row.mean) || !std::isfinite(row.var), row.var, eps);
    if (scale != Acc(0)) {
      row = {scale, row_sum<T, true>(x, cols, scale) / n, Acc(0), eps * scale * scale, true};
      row.var = centered_sums<T, true, false>(x, cols, scale, row.mean, nullptr).second / n;
    }
  }
  if (mean_needs_refining(row.mean, row.var, row.eps)) {
    with_scaling(row.scaled, [&](auto scaled_tag) {
      constexpr bool kScaled = decltype(scaled_tag)::value;
      row.mean += centered_sums<T, kScaled, true>(x, cols, row.scale, row.mean, nullptr).first / n;
      row.var = centered_sums<T, kScaled, false>(x, cols, row.scale, row.mean, nullptr).second / n;
    });
  }
  // After the refining: a constant row's rounded mean left its variance +-tiny.
  if (unscale_constant_row(row.var, row.scale, row.mean, row.eps, eps)) row.scaled = false;
  return row;
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
  const bool stream = streams_outputs(a.rows * cols * static_cast<int64_t>(sizeof(T)) * 2);

  parallel_range(a.rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = input + r * cols;
      T* y = output + r * cols;
      const bool stream_row = stream && stream_aligned(y);
      const LayerNormRow<Acc> row = layer_norm_row(x, cols, eps, r + 1 < end ? x + cols : nullptr);
      const AVec rstd(Acc(1) / std::sqrt(row.var + row.eps));
      const AVec mean(row.mean);
      const AVec s(row.scale);
      with_scaling(row.scaled, [&](auto scaled_tag) {
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
          store_slice(y + i, count, lo, hi, stream_row);
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
  const bool stream = streams_outputs(a.rows * cols * static_cast<int64_t>(sizeof(T)) * 3);

  rows_with_column_sums<T>(a.rows, cols, num_sums, outs, [&](int64_t r, Acc* partial) {
    const T* x = input + r * cols;
    const T* dy = grad_output + r * cols;
    T* dx = grad_input + r * cols;
    const bool stream_row = stream && stream_aligned(dx);
    // With g = dy * w, d = x - mean and xhat = d * rstd:
    //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
    // written with xhat rather than rstd^2 * d * mean(g * d), whose rstd^2
    // underflows for rows with a large spread. The statistics follow
    // layer_norm_row (the forward's), with the gradient sums taken in the
    // variance pass: stats(s, mean) returns, for d = x * s - mean, sum(d^2),
    // sum(g) and sum(g * d).
    struct Stats {
      Acc sq_sum, g_sum, gd_sum;
    };
    auto stats = [&](auto scaled_tag, Acc scale, Acc mean) {
      const AVec s(scale), m(mean);
      AVec v_lo(0), v_hi(0), g_sum_lo(0), g_sum_hi(0), gd_lo(0), gd_hi(0);
      for_each_slice<T>(cols, [&](int64_t i, int64_t count) {
        AVec d_lo, d_hi, g_lo, g_hi;
        load_slice(x + i, count, d_lo, d_hi);
        load_slice(dy + i, count, g_lo, g_hi);
        if constexpr (decltype(scaled_tag)::value) {
          d_lo = at::vec::fmsub(d_lo, s, m);
          d_hi = at::vec::fmsub(d_hi, s, m);
        } else {
          d_lo = d_lo - m;
          d_hi = d_hi - m;
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
      return Stats{reduce_add(v_lo + v_hi), reduce_add(g_sum_lo + g_sum_hi), reduce_add(gd_lo + gd_hi)};
    };
    Acc scale = Acc(1), eps_row = eps, mean = row_sum<T, false>(x, cols, Acc(1)) / n;
    Stats st = stats(std::false_type{}, scale, mean);
    bool scaled = false;
    // Rescued on x * s where x's own sums overflowed; a g * d sum that is not
    // finite because g is not (an inf dy, a NaN weight) is not x's to rescue,
    // and the rescue's eps * s^2 underflows: a constant row gave 0 * inf.
    {
      const bool overflowed = !std::isfinite(mean) || !std::isfinite(st.sq_sum) ||
                              (!std::isfinite(st.gd_sum) && std::isfinite(st.g_sum));
      const Acc s = rescue_scale(x, cols, overflowed, st.sq_sum / n, eps);
      if (s != Acc(0)) {
        scaled = true;
        scale = s;
        eps_row = eps * s * s;
        mean = row_sum<T, true>(x, cols, scale) / n;
        st = stats(std::true_type{}, scale, mean);
      }
    }
    if (mean_needs_refining(mean, st.sq_sum / n, eps_row)) {
      with_scaling(scaled, [&](auto scaled_tag) {
        constexpr bool kScaled = decltype(scaled_tag)::value;
        mean += centered_sums<T, kScaled, true>(x, cols, scale, mean, nullptr).first / n;
        st = stats(scaled_tag, scale, mean);
      });
    }
    // After the refining (a constant row's rounded mean left its variance
    // +-tiny); its centred values are 0 at either scale: the sums stand.
    if (unscale_constant_row(st.sq_sum, scale, mean, eps_row, eps)) scaled = false;
    // rstd of the (scaled) row; the true rstd is rstd * scale.
    const Acc rstd_s = Acc(1) / std::sqrt(st.sq_sum / n + eps_row);
    const AVec rstd(rstd_s);
    const AVec mean_v(mean);
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
          xhat_lo = at::vec::fmsub(x_lo, s, mean_v) * rstd;
          xhat_hi = at::vec::fmsub(x_hi, s, mean_v) * rstd;
        } else {
          xhat_lo = (x_lo - mean_v) * rstd;
          xhat_hi = (x_hi - mean_v) * rstd;
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
        store_slice(dx + i, count, dx_lo, dx_hi, stream_row);
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
