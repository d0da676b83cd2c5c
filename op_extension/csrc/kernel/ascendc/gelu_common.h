// GELU math on float rows of the Unified Buffer, built from basic vector
// instructions only (Ascend C's own Gelu is the tanh form; the exact form needs
// erf, which is not a basic instruction). Shared by gelu_custom.cpp and
// gelu_grad_custom.cpp. Every function computes `n` elements; the scratch rows
// must not alias the inputs.
#ifndef OP_EXT_KERNEL_ASCENDC_GELU_COMMON_H_
#define OP_EXT_KERNEL_ASCENDC_GELU_COMMON_H_

#include "kernel_operator.h"

namespace op_ext_kernel {

constexpr float kSqrtHalf = 0.70710678118654752f;       // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;     // 1/sqrt(2*pi)
constexpr float kTanhScale = 0.79788456080286536f;      // sqrt(2/pi)
constexpr float kTanhCubic = 0.044715f;
// Keeps x / (|x| + kTiny) finite at x = 0 while leaving every other x's sign ratio at +-1.
constexpr float kTiny = 1e-30f;
// erfc(z) ~ t * (a1 + t * (a2 + t * (a3 + t * (a4 + t * a5)))) * exp(-z^2),
// t = 1 / (1 + p z), z >= 0: Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7.
constexpr float kErfP = 0.3275911f;
constexpr float kErfA1 = 0.254829592f;
constexpr float kErfA2 = -0.284496736f;
constexpr float kErfA3 = 1.421413741f;
constexpr float kErfA4 = -1.453152027f;
constexpr float kErfA5 = 1.061405429f;

// phi = Phi(x), the standard normal CDF: 0.5 + 0.5 * sign(x) * erf(|x| / sqrt(2)).
// Scratch: a, t, e.
__aicore__ inline void NormalCdf(const AscendC::LocalTensor<float>& phi, const AscendC::LocalTensor<float>& x,
                                 const AscendC::LocalTensor<float>& a, const AscendC::LocalTensor<float>& t,
                                 const AscendC::LocalTensor<float>& e, int32_t n) {
  using namespace AscendC;
  Abs(a, x, n);
  Muls(a, a, kSqrtHalf, n);  // z = |x| / sqrt(2)
  Mul(e, a, a, n);
  Muls(e, e, -1.0f, n);
  Exp(e, e, n);              // exp(-z^2)
  Muls(t, a, kErfP, n);
  Adds(t, t, 1.0f, n);
  Reciprocal(t, t, n);       // t = 1 / (1 + p z)
  Muls(phi, t, kErfA5, n);
  Adds(phi, phi, kErfA4, n);
  Mul(phi, phi, t, n);
  Adds(phi, phi, kErfA3, n);
  Mul(phi, phi, t, n);
  Adds(phi, phi, kErfA2, n);
  Mul(phi, phi, t, n);
  Adds(phi, phi, kErfA1, n);
  Mul(phi, phi, t, n);
  Mul(phi, phi, e, n);       // erfc(z)
  Muls(phi, phi, -0.5f, n);
  Adds(phi, phi, 0.5f, n);   // 0.5 * erf(z)
  Abs(a, x, n);
  Adds(a, a, kTiny, n);
  Div(phi, phi, a, n);
  Mul(phi, phi, x, n);       // 0.5 * sign(x) * erf(z)
  Adds(phi, phi, 0.5f, n);
}

// y = x * Phi(x). Scratch: s0..s3 (s0 may be y only if y is not x).
__aicore__ inline void GeluErf(const AscendC::LocalTensor<float>& y, const AscendC::LocalTensor<float>& x,
                               const AscendC::LocalTensor<float>& s0, const AscendC::LocalTensor<float>& s1,
                               const AscendC::LocalTensor<float>& s2, const AscendC::LocalTensor<float>& s3,
                               int32_t n) {
  NormalCdf(s3, x, s0, s1, s2, n);
  AscendC::Mul(y, s3, x, n);
}

// y = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Scratch: s0.
__aicore__ inline void GeluTanh(const AscendC::LocalTensor<float>& y, const AscendC::LocalTensor<float>& x,
                                const AscendC::LocalTensor<float>& s0, int32_t n) {
  using namespace AscendC;
  Mul(s0, x, x, n);
  Muls(s0, s0, kTanhCubic, n);
  Adds(s0, s0, 1.0f, n);
  Mul(s0, s0, x, n);
  Muls(s0, s0, -2.0f * kTanhScale, n);
  Exp(s0, s0, n);
  Adds(s0, s0, 1.0f, n);
  Div(y, x, s0, n);
}

// dx = dy * (Phi(x) + x * phi(x)), phi the normal density. Scratch: s0..s3.
__aicore__ inline void GeluErfGrad(const AscendC::LocalTensor<float>& dx, const AscendC::LocalTensor<float>& dy,
                                   const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& s0,
                                   const AscendC::LocalTensor<float>& s1, const AscendC::LocalTensor<float>& s2,
                                   const AscendC::LocalTensor<float>& s3, int32_t n) {
  using namespace AscendC;
  NormalCdf(s3, x, s0, s1, s2, n);
  Mul(s0, x, x, n);
  Muls(s0, s0, -0.5f, n);
  Exp(s0, s0, n);
  Muls(s0, s0, kInvSqrt2Pi, n);
  Mul(s0, s0, x, n);  // x * phi(x)
  Add(s3, s3, s0, n);
  Mul(dx, s3, dy, n);
}

// With s = sigmoid(2u): gelu_tanh'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2);
// dx = dy * gelu_tanh'(x). Scratch: s0..s2.
__aicore__ inline void GeluTanhGrad(const AscendC::LocalTensor<float>& dx, const AscendC::LocalTensor<float>& dy,
                                    const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& s0,
                                    const AscendC::LocalTensor<float>& s1, const AscendC::LocalTensor<float>& s2,
                                    int32_t n) {
  using namespace AscendC;
  Mul(s0, x, x, n);  // x^2
  Muls(s1, s0, kTanhCubic, n);
  Adds(s1, s1, 1.0f, n);
  Mul(s1, s1, x, n);
  Muls(s1, s1, -2.0f * kTanhScale, n);
  Exp(s1, s1, n);
  Adds(s1, s1, 1.0f, n);
  Reciprocal(s1, s1, n);  // s
  Muls(s2, s1, -1.0f, n);
  Adds(s2, s2, 1.0f, n);
  Mul(s2, s2, s1, n);     // s (1 - s)
  Mul(s2, s2, x, n);
  Muls(s0, s0, 3.0f * kTanhCubic, n);
  Adds(s0, s0, 1.0f, n);
  Muls(s0, s0, 2.0f * kTanhScale, n);
  Mul(s2, s2, s0, n);
  Add(s1, s1, s2, n);
  Mul(dx, s1, dy, n);
}

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_GELU_COMMON_H_
