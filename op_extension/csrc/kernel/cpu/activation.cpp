// Elementwise activations: GELU (erf and tanh forms), SwiGLU and GEGLU,
// forward and backward. Each output element depends on the same element of the
// inputs only, so every kernel is one vectorised, parallel pass over dense memory.
#include <array>
#include <type_traits>

#include "register_kernel.h"
#include "vec_utils.h"

namespace op_ext::cpu {
namespace {

template <typename Acc>
struct GeluMath {
  using AVec = Vectorized<Acc>;
  static constexpr Acc kSqrt1_2 = Acc(0.70710678118654752440);   // 1/sqrt(2)
  static constexpr Acc kInvSqrt2Pi = Acc(0.39894228040143267794);  // 1/sqrt(2*pi)
  static constexpr Acc kSqrt2OverPi = Acc(0.79788456080286535588);  // sqrt(2/pi)
  static constexpr Acc kTanhCoeff = Acc(0.044715);
  static constexpr Acc kDerivClamp = std::is_same_v<Acc, float> ? Acc(1e18) : Acc(1e150);

  // The tanh form uses 0.5 * (1 + tanh(u)) == sigmoid(2u) == 1 / (1 + exp(-2u)):
  // one exp and one division instead of a vectorised tanh, which costs about
  // twice as much and made GELU-tanh compute-bound. Infinities and NaN come out
  // as in the tanh form (gelu(-inf) is NaN there too: -inf * 0).
  static AVec tanh_form_cdf(const AVec& x, const AVec& x2) {
    const AVec one(Acc(1));
    const AVec minus_two_u = AVec(Acc(-2) * kSqrt2OverPi) * (x + AVec(kTanhCoeff) * x2 * x);
    return one / (one + minus_two_u.exp());
  }

  // The exact form's Phi(x) = 0.5 * (1 + erf(x / sqrt 2)) = 0.5 * erfc(-x / sqrt 2).
  // 1 + erf cancels for negative x (ATen's float GELU, which sums it, is up to
  // 2e-4 relative off in [-3, 0) and loses every digit below x = -5.5); erfc
  // keeps the tail's relative accuracy, and Phi(+inf) = 1, Phi(-inf) = 0.
  static AVec erf_form_cdf(const AVec& x) {
    return AVec(Acc(0.5)) * (x * AVec(-kSqrt1_2)).erfc();
  }

  static AVec forward(const AVec& x, GeluApprox approx) {
    if (approx == GeluApprox::Tanh) {
      return x * tanh_form_cdf(x, x * x);
    }
    return x * erf_form_cdf(x);
  }

  // gelu(x) and d gelu(x) / dx from one evaluation of the transcendental part.
  static void forward_and_derivative(const AVec& x, GeluApprox approx, AVec& y, AVec& dy) {
    const AVec one(Acc(1));
    const AVec x2 = x * x;
    if (approx == GeluApprox::Tanh) {
      // d/dx [x * s(2u)] = s + x * 2 s (1 - s) * u',  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
      // u' is taken at x clamped to +-kDerivClamp, where x^2 cannot overflow: past
      // it s is exactly 0 or 1, so the term is 0 either way, where an overflowed
      // u' made it inf * 0 = NaN.
      const AVec s = tanh_form_cdf(x, x2);
      const AVec xc = at::vec::clamp(x, AVec(-kDerivClamp), AVec(kDerivClamp));
      const AVec du = AVec(Acc(2) * kSqrt2OverPi) * (one + AVec(Acc(3) * kTanhCoeff) * xc * xc);
      y = x * s;
      dy = s + y * (one - s) * du;
      return;
    }
    const AVec cdf = erf_form_cdf(x);
    const AVec pdf = (AVec(Acc(-0.5)) * x2).exp() * AVec(kInvSqrt2Pi);
    y = x * cdf;
    dy = cdf + x * pdf;
  }

  static AVec derivative(const AVec& x, GeluApprox approx) {
    AVec y, dy;
    forward_and_derivative(x, approx, y, dy);
    return dy;
  }
};

// 1 + exp(-x), the denominator of sigmoid and silu. In float, vectors whose lanes
// are all finite use ATen's polynomial exp_u20 (within 20 ulp: sigmoid's relative
// error stays ~2e-6 and shrinks with 1 - sigmoid, where silu is large), which
// keeps SwiGLU memory-bound. exp_u20 saturates instead of returning inf/NaN, so
// vectors holding an infinity or NaN take the exact exp.
template <typename Acc>
inline Vectorized<Acc> one_plus_exp_neg(const Vectorized<Acc>& x) {
  using AVec = Vectorized<Acc>;
  const AVec one(Acc(1));
  if constexpr (std::is_same_v<Acc, float>) {
    constexpr int kAllLanes = (1 << AVec::size()) - 1;
    if ((x - x).zero_mask() == kAllLanes) {  // x - x is NaN for +-inf and NaN lanes
      return one + x.neg().exp_u20();
    }
  }
  return one + x.neg().exp();
}

// silu(x) = x / (1 + exp(-x)): the form ATen uses, so infinities behave alike.
template <typename Acc>
inline Vectorized<Acc> silu(const Vectorized<Acc>& x) {
  return x / one_plus_exp_neg(x);
}

// Applies f to every kStep-wide slice of the inputs. f takes the input vectors
// and fills the output vectors, once for the low and once for the high half.
template <typename T, size_t kIn, size_t kOut, typename F>
void vec_map(int64_t n, const std::array<const T*, kIn>& in, const std::array<T*, kOut>& out,
             const F& f) {
  using V = Vec2<T>;
  using AVec = typename V::AVec;
  parallel_range(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    std::array<AVec, kIn> lo, hi;
    std::array<AVec, kOut> out_lo, out_hi;
    int64_t i = begin;
    for (; i + V::kStep <= end; i += V::kStep) {
      for (size_t k = 0; k < kIn; ++k) V::load(in[k] + i, lo[k], hi[k]);
      f(lo, out_lo);
      f(hi, out_hi);
      for (size_t k = 0; k < kOut; ++k) V::store(out[k] + i, out_lo[k], out_hi[k]);
    }
    if (i < end) {
      const int64_t count = end - i;
      for (size_t k = 0; k < kIn; ++k) V::load_partial(in[k] + i, count, lo[k], hi[k]);
      f(lo, out_lo);
      f(hi, out_hi);
      for (size_t k = 0; k < kOut; ++k) V::store_partial(out[k] + i, count, out_lo[k], out_hi[k]);
    }
  });
}

void gelu_forward_impl(DType dtype, const GeluArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using AVec = Vectorized<acc_t<T>>;
    vec_map<T, 1, 1>(a.n, {static_cast<const T*>(a.input)}, {static_cast<T*>(a.output)},
                     [&](const std::array<AVec, 1>& x, std::array<AVec, 1>& y) {
                       y[0] = GeluMath<acc_t<T>>::forward(x[0], a.approximate);
                     });
  });
}

void gelu_backward_impl(DType dtype, const GeluBackwardArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using AVec = Vectorized<acc_t<T>>;
    vec_map<T, 2, 1>(
        a.n, {static_cast<const T*>(a.grad_output), static_cast<const T*>(a.input)},
        {static_cast<T*>(a.grad_input)},
        [&](const std::array<AVec, 2>& v, std::array<AVec, 1>& dx) {
          dx[0] = v[0] * GeluMath<acc_t<T>>::derivative(v[1], a.approximate);
        });
  });
}

void swiglu_forward_impl(DType dtype, const GluArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using AVec = Vectorized<acc_t<T>>;
    vec_map<T, 2, 1>(a.n, {static_cast<const T*>(a.gate), static_cast<const T*>(a.up)},
                     {static_cast<T*>(a.output)},
                     [](const std::array<AVec, 2>& v, std::array<AVec, 1>& y) {
                       y[0] = silu(v[0]) * v[1];
                     });
  });
}

void swiglu_backward_impl(DType dtype, const GluBackwardArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_t<T>;
    using AVec = Vectorized<Acc>;
    vec_map<T, 3, 2>(
        a.n,
        {static_cast<const T*>(a.grad_output), static_cast<const T*>(a.gate),
         static_cast<const T*>(a.up)},
        {static_cast<T*>(a.grad_gate), static_cast<T*>(a.grad_up)},
        [](const std::array<AVec, 3>& v, std::array<AVec, 2>& g) {
          const AVec& dy = v[0];
          const AVec& gate = v[1];
          const AVec one(Acc(1));
          const AVec sig = one / one_plus_exp_neg(gate);
          // d silu / d gate = sig * (1 + gate * (1 - sig))
          g[0] = dy * v[2] * sig * (one + gate * (one - sig));
          g[1] = dy * gate * sig;
        });
  });
}

void geglu_forward_impl(DType dtype, const GluArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using AVec = Vectorized<acc_t<T>>;
    vec_map<T, 2, 1>(a.n, {static_cast<const T*>(a.gate), static_cast<const T*>(a.up)},
                     {static_cast<T*>(a.output)},
                     [&](const std::array<AVec, 2>& v, std::array<AVec, 1>& y) {
                       y[0] = GeluMath<acc_t<T>>::forward(v[0], a.approximate) * v[1];
                     });
  });
}

void geglu_backward_impl(DType dtype, const GluBackwardArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using AVec = Vectorized<acc_t<T>>;
    vec_map<T, 3, 2>(
        a.n,
        {static_cast<const T*>(a.grad_output), static_cast<const T*>(a.gate),
         static_cast<const T*>(a.up)},
        {static_cast<T*>(a.grad_gate), static_cast<T*>(a.grad_up)},
        [&](const std::array<AVec, 3>& v, std::array<AVec, 2>& g) {
          AVec gelu, dgelu;
          GeluMath<acc_t<T>>::forward_and_derivative(v[1], a.approximate, gelu, dgelu);
          g[0] = v[0] * v[2] * dgelu;
          g[1] = v[0] * gelu;
        });
  });
}

}  // namespace

OP_EXT_REGISTER_KERNEL(gelu_forward, gelu_forward_impl);
OP_EXT_REGISTER_KERNEL(gelu_backward, gelu_backward_impl);
OP_EXT_REGISTER_KERNEL(swiglu_forward, swiglu_forward_impl);
OP_EXT_REGISTER_KERNEL(swiglu_backward, swiglu_backward_impl);
OP_EXT_REGISTER_KERNEL(geglu_forward, geglu_forward_impl);
OP_EXT_REGISTER_KERNEL(geglu_backward, geglu_backward_impl);

}  // namespace op_ext::cpu
