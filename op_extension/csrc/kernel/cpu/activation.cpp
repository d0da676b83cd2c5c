// Elementwise activations: GELU (erf and tanh forms), SwiGLU and GEGLU,
// forward and backward. Each output element depends on the same element of the
// inputs only, so every kernel is one vectorised, parallel pass over dense memory.
#include <array>
#include <type_traits>

#include "register_kernel.h"
#include "vec_utils.h"
#include "gelu.h"
#include "geglu.h"
#include "swiglu.h"

namespace op_ext::cpu {
namespace {

// 1 + exp(-x), the denominator of sigmoid and silu. In float it uses exp_fast
// (vec_utils.h: within 4.0e-7 relative on AVX-512 and AVX2; the portable
// variant's exp_u20 within 20 ulp: sigmoid's relative error stays ~2e-6 and
// shrinks with 1 - sigmoid, where silu is large), a third of the cost of
// Sleef's exp, which kept SwiGLU compute-bound. For NaN it gives a number, not
// NaN: every caller multiplies the sigmoid by x (or a term in x), which brings
// the NaN back (tests/test_ops.py, the activations' special values, forward and
// backward, on every variant). On AVX-512 and AVX2 exp_fast keeps the
// infinities too, and takes every lane as it comes: the test of each vector for
// them, and its branch, cost SwiGLU bfloat16 1.19-1.27x. The portable
// variant's exp_u20 saturates instead, so there vectors holding an infinity or
// NaN take the exact exp.
template <typename Acc>
inline Vectorized<Acc> one_plus_exp_neg(const Vectorized<Acc>& x) {
  using AVec = Vectorized<Acc>;
  const AVec one(Acc(1));
  if constexpr (std::is_same_v<Acc, float>) {
    if constexpr (kExpFastKeepsInfinities) {
      return one + exp_fast(x.neg());
    }
    constexpr int kAllLanes = (1 << AVec::size()) - 1;
    if ((x - x).zero_mask() == kAllLanes) {  // x - x is NaN for +-inf and NaN lanes
      return one + exp_fast(x.neg());
    }
  }
  return one + x.neg().exp();
}

// kFloatOutput: the result is stored as float (not float16/bfloat16), so the
// exact form's float path keeps its last bits (see erf_form_cdf_float).
template <typename Acc, bool kFloatOutput = true>
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
  // as in the tanh form (gelu(-inf) is NaN there too: -inf * 0). For
  // float16/bfloat16 outputs the exp is exp_fast (one_plus_exp_neg): a few
  // 1e-6 relative, far below their rounding;
  // for float32 outputs exp_precise (vec_utils.h: within 1 ulp for every float,
  // inline, where Sleef's exp was a call per vector and most of the kernel's time).
  static AVec tanh_form_cdf(const AVec& x, const AVec& x2) {
    const AVec one(Acc(1));
    if constexpr (!kFloatOutput) {
      return one / one_plus_exp_neg(AVec(Acc(2) * kSqrt2OverPi) * (x + AVec(kTanhCoeff) * x2 * x));
    }
    const AVec minus_two_u = AVec(Acc(-2) * kSqrt2OverPi) * (x + AVec(kTanhCoeff) * x2 * x);
    return one / (one + exp_float_output(minus_two_u));
  }

  // e^v for float outputs: exp_precise in float, Sleef's exp in double.
  static AVec exp_float_output(const AVec& v) {
    if constexpr (std::is_same_v<Acc, float>) {
      return exp_precise(v);
    } else {
      return v.exp();
    }
  }

  // The exact form's Phi(x) = 0.5 * (1 + erf(x / sqrt 2)) = 0.5 * erfc(-x / sqrt 2),
  // and the density's exp(-x^2 / 2) (for the derivative) when `gauss` is given.
  // 1 + erf cancels for negative x: ATen's float GELU, which sums it, is up to
  // 2e-4 relative off in [-3, 0) and loses every digit below x = -5.5. Phi is
  // computed from erfc(|x| / sqrt 2) instead, which keeps the tail's relative
  // accuracy; Phi(+inf) = 1 and Phi(-inf) = 0 as the erf form.
  static AVec erf_form_cdf(const AVec& x, AVec* gauss = nullptr) {
    if constexpr (std::is_same_v<Acc, float>) {
      return erf_form_cdf_float(x, gauss);
    } else {
      if (gauss != nullptr) *gauss = (AVec(Acc(-0.5)) * x * x).exp();
      return AVec(Acc(0.5)) * (x * AVec(-kSqrt1_2)).erfc();
    }
  }

  // Float: erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P of degree 9,
  // the Chebyshev fit of Numerical Recipes (Press et al., 2nd ed., section 6.2,
  // "erfcc"): relative error below 1.2e-7 for every z >= 0. With z = |x| / sqrt 2,
  // z^2 = x^2 / 2 is split exactly (x^2 = hi + lo by an FMA), because a rounded
  // z or z^2 alone costs 2 z^2 * 2^-24 relative (~1e-5 at x = -12). Measured:
  // 4.4e-7 max relative error for x in [-12, 12] against float64 (the same
  // with Sleef's exp and with exp_precise, which replaced it: 1.4x faster),
  // three times faster than Sleef's erfcf (ATen's Vectorized::erfc) then. |x| is
  // clamped at 16, where erfc and the density are 0 in
  // float, so that infinities give 0 * inf nowhere inside. For float16/bfloat16
  // outputs z^2 is not split and the exp is the faster exp_fast (one exp of
  // the two, and the cheaper one): its error, a few 1e-6 relative, is far below
  // their rounding (5e-4, 4e-3).
  static AVec erf_form_cdf_float(const AVec& x, AVec* gauss) {
    static constexpr float kP[10] = {-1.26551223f, 1.00002368f, 0.37409196f, 0.09678418f,
                                     -0.18628806f, 0.27886807f, -1.13520398f, 1.48851587f,
                                     -0.82215223f, 0.17087277f};
    const AVec one(1.0f);
    const AVec ax = at::vec::minimum(x.abs(), AVec(16.0f));
    const AVec t = one / at::vec::fmadd(ax, AVec(0.5f * float(kSqrt1_2)), one);
    AVec p(kP[9]);
    for (int i = 8; i >= 0; --i) p = at::vec::fmadd(p, t, AVec(kP[i]));
    const AVec sq_hi = ax * ax;
    AVec half_erfc;
    if constexpr (kFloatOutput) {
      const AVec sq_lo = at::vec::fmsub(ax, ax, sq_hi);  // ax^2 - sq_hi, exactly
      const AVec e_hi = exp_precise(sq_hi * AVec(-0.5f));  // exp(-x^2 / 2) = e_hi * exp(-sq_lo / 2)
      if (gauss != nullptr) *gauss = at::vec::fnmadd(e_hi * AVec(0.5f), sq_lo, e_hi);
      half_erfc = AVec(0.5f) * t * e_hi * exp_precise(at::vec::fmadd(sq_lo, AVec(-0.5f), p));
    } else {
      // exp_fast (vec_utils.h; ATen's exp_u20 in the portable variant) instead of
      // Sleef's exp; both return 0 or next to it below ln(FLT_MIN), where
      // Phi(x) < 1e-38 anyway.
      if (gauss != nullptr) *gauss = exp_fast(sq_hi * AVec(-0.5f));
      half_erfc = AVec(0.5f) * t * exp_fast(at::vec::fmadd(sq_hi, AVec(-0.5f), p));
    }
    // x <= 0: Phi = erfc / 2; x > 0: 1 - erfc / 2. NaN stays NaN through ax.
    return AVec::blendv(one - half_erfc, half_erfc, x <= AVec(0.0f));
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
    AVec gauss;
    const AVec cdf = erf_form_cdf(x, &gauss);
    y = x * cdf;
    dy = cdf + x * (gauss * AVec(kInvSqrt2Pi));
  }

  static AVec derivative(const AVec& x, GeluApprox approx) {
    AVec y, dy;
    forward_and_derivative(x, approx, y, dy);
    return dy;
  }
};

// silu(x) = x / (1 + exp(-x)): the form ATen uses, so infinities behave alike.
template <typename Acc>
inline Vectorized<Acc> silu(const Vectorized<Acc>& x) {
  return x / one_plus_exp_neg(x);
}

void gelu_forward_impl(DType dtype, const GeluArgs& a) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using AVec = Vectorized<acc_t<T>>;
    vec_map<T, 1, 1>(a.n, {static_cast<const T*>(a.input)}, {static_cast<T*>(a.output)},
                     [&](const std::array<AVec, 1>& x, std::array<AVec, 1>& y) {
                       y[0] = GeluMath<acc_t<T>, !kIsReduced<T>>::forward(x[0], a.approximate);
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
          dx[0] = v[0] * GeluMath<acc_t<T>, !kIsReduced<T>>::derivative(v[1], a.approximate);
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
                       y[0] = GeluMath<acc_t<T>, !kIsReduced<T>>::forward(v[0], a.approximate) * v[1];
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
          GeluMath<acc_t<T>, !kIsReduced<T>>::forward_and_derivative(v[1], a.approximate, gelu, dgelu);
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
