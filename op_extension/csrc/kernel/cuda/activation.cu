// Elementwise activations on CUDA: GELU (erf and tanh forms), SwiGLU and GEGLU,
// forward and backward. One map kernel over dense memory (cuda_common.cuh):
// 128-bit loads and stores when every pointer is 16-byte aligned, one element
// per access otherwise. The formulas, and the order of their operations, are
// those of the CPU kernels (kernel/cpu/activation.cpp), so special values
// (+-inf, NaN) come out the same on both devices.
#include "cuda_common.cuh"
#include "gelu.cuh"
#include "geglu.cuh"
#include "swiglu.cuh"

namespace op_ext::cuda {
namespace {

using namespace detail;

template <typename Acc>
struct GeluMath {
  static constexpr Acc kSqrt1_2 = Acc(0.70710678118654752440);      // 1/sqrt(2)
  static constexpr Acc kInvSqrt2Pi = Acc(0.39894228040143267794);   // 1/sqrt(2*pi)
  static constexpr Acc kSqrt2OverPi = Acc(0.79788456080286535588);  // sqrt(2/pi)
  static constexpr Acc kTanhCoeff = Acc(0.044715);

  // The tanh form's 0.5 * (1 + tanh(u)) is computed as sigmoid(2u) =
  // 1 / (1 + exp(-2u)), as on the CPU: 1 + tanh(u) cancels for negative u
  // (2e-4 relative off at x = -5), the sigmoid keeps the tail's relative accuracy.
  static __device__ __forceinline__ Acc tanh_form_cdf(Acc x, Acc x2) {
    const Acc minus_two_u = Acc(-2) * kSqrt2OverPi * (x + kTanhCoeff * x2 * x);
    return Acc(1) / (Acc(1) + dev_exp(minus_two_u));
  }

  // The exact form's Phi(x) = 0.5 * (1 + erf(x / sqrt 2)) = 0.5 * erfc(-x / sqrt 2):
  // 1 + erf cancels for negative x (all digits lost below x = -5.5 in float),
  // erfc keeps the tail's relative accuracy, and Phi(+inf) = 1, Phi(-inf) = 0.
  static __device__ __forceinline__ Acc erf_form_cdf(Acc x) {
    return Acc(0.5) * dev_erfc(-x * kSqrt1_2);
  }

  static __device__ __forceinline__ Acc forward(Acc x, GeluApprox approx) {
    if (approx == GeluApprox::Tanh) return x * tanh_form_cdf(x, x * x);
    return x * erf_form_cdf(x);
  }

  // d gelu(x) / dx
  static __device__ __forceinline__ Acc derivative(Acc x, GeluApprox approx) {
    const Acc x2 = x * x;
    if (approx == GeluApprox::Tanh) {
      // d/dx [x * s(2u)] = s + x * 2 s (1 - s) * u',  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
      // u' is taken at x clamped to +-kDerivClamp, where x^2 cannot overflow: past
      // it s is exactly 0 or 1, so the term is 0 either way, where an overflowed
      // u' made it inf * 0 = NaN.
      constexpr Acc kDerivClamp = sizeof(Acc) == 4 ? Acc(1e18) : Acc(1e150);
      const Acc s = tanh_form_cdf(x, x2);
      const Acc xc = x < -kDerivClamp ? -kDerivClamp : (x > kDerivClamp ? kDerivClamp : x);
      const Acc du = Acc(2) * kSqrt2OverPi * (Acc(1) + Acc(3) * kTanhCoeff * xc * xc);
      return s + x * s * (Acc(1) - s) * du;
    }
    const Acc pdf = dev_exp(Acc(-0.5) * x2) * kInvSqrt2Pi;
    return erf_form_cdf(x) + x * pdf;
  }
};

// silu(x) = x / (1 + exp(-x)): the form ATen uses, so infinities behave alike.
template <typename Acc>
__device__ __forceinline__ Acc silu(Acc x) {
  return x / (Acc(1) + dev_exp(-x));
}

// ---- per-element functions for map_kernel: (inputs) -> (outputs) -----------------------

template <typename Acc>
struct GeluForward {
  GeluApprox approx;
  __device__ void operator()(const Acc (&in)[1], Acc (&out)[1]) const {
    out[0] = GeluMath<Acc>::forward(in[0], approx);
  }
};

template <typename Acc>
struct GeluBackward {  // (dy, x) -> dx
  GeluApprox approx;
  __device__ void operator()(const Acc (&in)[2], Acc (&out)[1]) const {
    out[0] = in[0] * GeluMath<Acc>::derivative(in[1], approx);
  }
};

template <typename Acc>
struct SwigluForward {  // (gate, up) -> out
  __device__ void operator()(const Acc (&in)[2], Acc (&out)[1]) const {
    out[0] = silu(in[0]) * in[1];
  }
};

template <typename Acc>
struct SwigluBackward {  // (dy, gate, up) -> (dgate, dup)
  __device__ void operator()(const Acc (&in)[3], Acc (&out)[2]) const {
    const Acc dy = in[0], gate = in[1], up = in[2];
    const Acc sig = Acc(1) / (Acc(1) + dev_exp(-gate));
    // d silu / d gate = sig * (1 + gate * (1 - sig))
    out[0] = dy * up * sig * (Acc(1) + gate * (Acc(1) - sig));
    out[1] = dy * gate * sig;
  }
};

template <typename Acc>
struct GegluForward {  // (gate, up) -> out
  GeluApprox approx;
  __device__ void operator()(const Acc (&in)[2], Acc (&out)[1]) const {
    out[0] = GeluMath<Acc>::forward(in[0], approx) * in[1];
  }
};

template <typename Acc>
struct GegluBackward {  // (dy, gate, up) -> (dgate, dup)
  GeluApprox approx;
  __device__ void operator()(const Acc (&in)[3], Acc (&out)[2]) const {
    out[0] = in[0] * in[2] * GeluMath<Acc>::derivative(in[1], approx);
    out[1] = in[0] * GeluMath<Acc>::forward(in[1], approx);
  }
};

}  // namespace

void gelu_forward(DType dtype, const GeluArgs& a, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapPtrs<T, 1, 1> p{{static_cast<const T*>(a.input)}, {static_cast<T*>(a.output)}};
    launch_map(p, a.n, GeluForward<acc_t<T>>{a.approximate}, stream);
  });
}

void gelu_backward(DType dtype, const GeluBackwardArgs& a, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapPtrs<T, 2, 1> p{
        {static_cast<const T*>(a.grad_output), static_cast<const T*>(a.input)},
        {static_cast<T*>(a.grad_input)}};
    launch_map(p, a.n, GeluBackward<acc_t<T>>{a.approximate}, stream);
  });
}

void swiglu_forward(DType dtype, const GluArgs& a, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapPtrs<T, 2, 1> p{{static_cast<const T*>(a.gate), static_cast<const T*>(a.up)},
                             {static_cast<T*>(a.output)}};
    launch_map(p, a.n, SwigluForward<acc_t<T>>{}, stream);
  });
}

void swiglu_backward(DType dtype, const GluBackwardArgs& a, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapPtrs<T, 3, 2> p{{static_cast<const T*>(a.grad_output), static_cast<const T*>(a.gate),
                              static_cast<const T*>(a.up)},
                             {static_cast<T*>(a.grad_gate), static_cast<T*>(a.grad_up)}};
    launch_map(p, a.n, SwigluBackward<acc_t<T>>{}, stream);
  });
}

void geglu_forward(DType dtype, const GluArgs& a, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapPtrs<T, 2, 1> p{{static_cast<const T*>(a.gate), static_cast<const T*>(a.up)},
                             {static_cast<T*>(a.output)}};
    launch_map(p, a.n, GegluForward<acc_t<T>>{a.approximate}, stream);
  });
}

void geglu_backward(DType dtype, const GluBackwardArgs& a, cudaStream_t stream) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapPtrs<T, 3, 2> p{{static_cast<const T*>(a.grad_output), static_cast<const T*>(a.gate),
                              static_cast<const T*>(a.up)},
                             {static_cast<T*>(a.grad_gate), static_cast<T*>(a.grad_up)}};
    launch_map(p, a.n, GegluBackward<acc_t<T>>{a.approximate}, stream);
  });
}

}  // namespace op_ext::cuda
