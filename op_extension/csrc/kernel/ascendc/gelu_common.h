// GELU math on float rows of the Unified Buffer, built from basic vector
// instructions only (Ascend C's own Gelu is the tanh form; the exact form needs
// erf, which is not a basic instruction). Shared by gelu_custom.cpp,
// gelu_grad_custom.cpp and the GEGLU kernels (glu_common.h, glu_grad_common.h).
// Every function computes `n` elements; the scratch rows must not alias the inputs.
#ifndef OP_EXT_KERNEL_ASCENDC_GELU_COMMON_H_
#define OP_EXT_KERNEL_ASCENDC_GELU_COMMON_H_

#include "kernel_operator.h"

namespace op_ext_kernel {

constexpr float kSqrtHalf = 0.70710678118654752f;       // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;     // 1/sqrt(2*pi)
constexpr float kTanhScale = 0.79788456080286536f;      // sqrt(2/pi)
constexpr float kTanhCubic = 0.044715f;

// erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0, with P of degree 9:
// the Chebyshev-fitted form of Numerical Recipes (Press et al., "Numerical
// Recipes in C", 2nd ed., section 6.2, erfcc), fractional error below 1.2e-7 for
// every z >= 0 (1.05e-7 measured against float64 erfc on [0, 12]). A relative
// bound is what the tails need: Phi(x) for x << 0 is erfc of a large argument,
// and Abramowitz & Stegun 7.1.26 (used before) only bounds the absolute error.
constexpr float kErfcP0 = -1.26551223f;
constexpr float kErfcP1 = 1.00002368f;
constexpr float kErfcP2 = 0.37409196f;
constexpr float kErfcP3 = 0.09678418f;
constexpr float kErfcP4 = -0.18628806f;
constexpr float kErfcP5 = 0.27886807f;
constexpr float kErfcP6 = -1.13520398f;
constexpr float kErfcP7 = 1.48851587f;
constexpr float kErfcP8 = -0.82215223f;
constexpr float kErfcP9 = 0.17087277f;
// |x| is clamped here before the exponentials: erfc(16/sqrt2) and exp(-16^2/2) are
// far below float's smallest subnormal, and the clamp keeps the split below exact.
constexpr float kGeluClamp = 16.0f;
// Veltkamp's splitter for float (24-bit significand): hi = c - (c - a), c = a * (2^12 + 1),
// keeps the upper 12 bits of a, so hi * hi is exact.
constexpr float kSplitter = 4097.0f;
// x * kSignScale, clamped to [0, 1], is 1 for every positive normal x, 0 for x <= 0.
constexpr float kSignScale = 1.2676506e30f;  // 2^100

// p = (p + c) * t.
__aicore__ inline void HornerStep(const AscendC::LocalTensor<float>& p, const AscendC::LocalTensor<float>& t, float c,
                                  int32_t n) {
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Adds(p, p, c, n);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Mul(p, p, t, n);
}

// The pieces of erfc(|x| / sqrt2) for a = min(|x|, kGeluClamp):
//   e1 = exp(-hi^2 / 2) and q = lo * (hi + lo / 2), so that exp(-a^2 / 2) = e1 * exp(-q)
//   exactly in real arithmetic (a = hi + lo, hi^2 / 2 exact in float);
//   ec = t * exp(P(t) - q) * e1 = erfc(a / sqrt2).
// Computing a^2 / 2 in one float product would round it by up to 2^-24 * 50 at
// |x| = 10: a relative error of 3e-6 in the result, more than the whole budget.
// Scratch: t. ec, e1, q, t must be distinct rows; x is only read.
__aicore__ inline void ErfcParts(const AscendC::LocalTensor<float>& ec, const AscendC::LocalTensor<float>& e1,
                                 const AscendC::LocalTensor<float>& q, const AscendC::LocalTensor<float>& t,
                                 const AscendC::LocalTensor<float>& x, int32_t n) {
  using namespace AscendC;
  const LocalTensor<float>& a = ec;  // ec holds a until P(t) replaces it
  AscendC::PipeBarrier<PIPE_V>();
  Abs(a, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mins(a, a, kGeluClamp, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(t, a, kSplitter, n);
  AscendC::PipeBarrier<PIPE_V>();
  Sub(e1, t, a, n);
  AscendC::PipeBarrier<PIPE_V>();
  Sub(t, t, e1, n);          // hi
  AscendC::PipeBarrier<PIPE_V>();
  Sub(e1, a, t, n);          // lo
  AscendC::PipeBarrier<PIPE_V>();
  Muls(q, e1, 0.5f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Add(q, q, t, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(q, q, e1, n);          // q = lo * (hi + lo / 2)
  AscendC::PipeBarrier<PIPE_V>();
  Mul(e1, t, t, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(e1, e1, -0.5f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Exp(e1, e1, n);            // e1 = exp(-hi^2 / 2)
  AscendC::PipeBarrier<PIPE_V>();
  Muls(t, a, 0.5f * kSqrtHalf, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(t, t, 1.0f, n);
  // a is free from here. t = 1 / (1 + z / 2), z = a / sqrt2, by Div: Reciprocal
  // misses a relative 1e-4 in float (its API page), erfc needs 1e-7.
  Duplicate(a, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Div(t, a, t, n);
  // P(t) by Horner.
  AscendC::PipeBarrier<PIPE_V>();
  Muls(a, t, kErfcP9, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP8, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP7, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP6, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP5, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP4, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP3, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP2, n);
  AscendC::PipeBarrier<PIPE_V>();
  HornerStep(a, t, kErfcP1, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(a, a, kErfcP0, n);
  AscendC::PipeBarrier<PIPE_V>();
  Sub(a, a, q, n);
  AscendC::PipeBarrier<PIPE_V>();
  Exp(a, a, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(a, a, t, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(ec, a, e1, n);         // e1 last: no intermediate below the result (no early subnormal)
}

// phi = Phi(x) = ind + (0.5 - ind) * ec, ind = [x > 0], ec = erfc(|x| / sqrt2):
// 0.5 * ec for x <= 0 (no cancellation: the tail keeps its relative accuracy) and
// 1 - 0.5 * ec for x > 0. ind comes from Maxs / Mins (no Select needed); a NaN x
// gives NaN. Scratch: s. phi, ec and s are distinct rows.
__aicore__ inline void NormalCdfFromErfc(const AscendC::LocalTensor<float>& phi,
                                         const AscendC::LocalTensor<float>& x,
                                         const AscendC::LocalTensor<float>& ec,
                                         const AscendC::LocalTensor<float>& s, int32_t n) {
  using namespace AscendC;
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s, x, kSignScale, n);
  AscendC::PipeBarrier<PIPE_V>();
  Maxs(s, s, 0.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mins(s, s, 1.0f, n);      // ind
  AscendC::PipeBarrier<PIPE_V>();
  Muls(phi, s, -1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(phi, phi, 0.5f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(phi, phi, ec, n);
  AscendC::PipeBarrier<PIPE_V>();
  Add(phi, phi, s, n);
}

// y = x * Phi(x). Scratch: s0..s3. y may be x (x is read last).
// Infinities and NaN as torch: gelu(+inf) = +inf, gelu(-inf) = -inf * 0 = NaN.
__aicore__ inline void GeluErf(const AscendC::LocalTensor<float>& y, const AscendC::LocalTensor<float>& x,
                               const AscendC::LocalTensor<float>& s0, const AscendC::LocalTensor<float>& s1,
                               const AscendC::LocalTensor<float>& s2, const AscendC::LocalTensor<float>& s3,
                               int32_t n) {
  AscendC::PipeBarrier<PIPE_V>();
  ErfcParts(s0, s1, s2, s3, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  NormalCdfFromErfc(s1, x, s0, s2, n);
  AscendC::PipeBarrier<PIPE_V>();
  AscendC::Mul(y, s1, x, n);
}

// y = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Scratch: s0.
__aicore__ inline void GeluTanh(const AscendC::LocalTensor<float>& y, const AscendC::LocalTensor<float>& x,
                                const AscendC::LocalTensor<float>& s0, int32_t n) {
  using namespace AscendC;
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s0, x, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, kTanhCubic, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s0, s0, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s0, s0, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, -2.0f * kTanhScale, n);
  AscendC::PipeBarrier<PIPE_V>();
  Exp(s0, s0, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s0, s0, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Div(y, x, s0, n);
}

// dx = dy * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) from the same
// exact split as ErfcParts. At +-inf the x * phi term is inf * 0 = NaN, as torch.
// Scratch: s0..s3. dx may be dy (dy is read last).
__aicore__ inline void GeluErfGrad(const AscendC::LocalTensor<float>& dx, const AscendC::LocalTensor<float>& dy,
                                   const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& s0,
                                   const AscendC::LocalTensor<float>& s1, const AscendC::LocalTensor<float>& s2,
                                   const AscendC::LocalTensor<float>& s3, int32_t n) {
  using namespace AscendC;
  AscendC::PipeBarrier<PIPE_V>();
  ErfcParts(s0, s1, s2, s3, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s3, s2, -1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Exp(s3, s3, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s1, s1, s3, n);           // exp(-a^2 / 2)
  NormalCdfFromErfc(s2, x, s0, s3, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s0, s1, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, kInvSqrt2Pi, n);  // x * phi(x)
  AscendC::PipeBarrier<PIPE_V>();
  Add(s2, s2, s0, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(dx, s2, dy, n);
}

// With s = sigmoid(2u): gelu_tanh'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2);
// dx = dy * gelu_tanh'(x). Scratch: s0..s2.
__aicore__ inline void GeluTanhGrad(const AscendC::LocalTensor<float>& dx, const AscendC::LocalTensor<float>& dy,
                                    const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& s0,
                                    const AscendC::LocalTensor<float>& s1, const AscendC::LocalTensor<float>& s2,
                                    int32_t n) {
  using namespace AscendC;
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s0, x, x, n);  // x^2
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s1, s0, kTanhCubic, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s1, s1, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s1, s1, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s1, s1, -2.0f * kTanhScale, n);
  AscendC::PipeBarrier<PIPE_V>();
  Exp(s1, s1, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s1, s1, 1.0f, n);
  Duplicate(s2, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Div(s1, s2, s1, n);     // s (Div, not Reciprocal: see ErfcParts)
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s2, s1, -1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s2, s2, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s2, s2, s1, n);     // s (1 - s)
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s2, s2, x, n);
  // x^2 <= 1e36 in u' so that it cannot overflow: past |x| = 1e18, s (1 - s) is
  // exactly 0 and the term is 0 either way, where inf * 0 gave NaN.
  AscendC::PipeBarrier<PIPE_V>();
  Mins(s0, s0, 1e36f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, 3.0f * kTanhCubic, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s0, s0, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, 2.0f * kTanhScale, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s2, s2, s0, n);
  AscendC::PipeBarrier<PIPE_V>();
  Add(s1, s1, s2, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(dx, s1, dy, n);
}

// gelu(x) and gelu'(x) from one evaluation of the transcendental part, for
// GEGLU's backward (which needs both): on return s0 = gelu'(x), s1 = gelu(x),
// with the formulas (and so the infinities and NaN) of GeluErf / GeluErfGrad.
// Scratch: s2, s3. x is only read; s0..s3 are distinct rows, none of them x.
__aicore__ inline void GeluErfValueAndGrad(const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& s0,
                                           const AscendC::LocalTensor<float>& s1, const AscendC::LocalTensor<float>& s2,
                                           const AscendC::LocalTensor<float>& s3, int32_t n) {
  using namespace AscendC;
  AscendC::PipeBarrier<PIPE_V>();
  ErfcParts(s0, s1, s2, s3, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s3, s2, -1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Exp(s3, s3, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s1, s1, s3, n);            // exp(-a^2 / 2)
  NormalCdfFromErfc(s2, x, s0, s3, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s0, s1, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, kInvSqrt2Pi, n);  // x * phi(x)
  AscendC::PipeBarrier<PIPE_V>();
  Add(s0, s2, s0, n);            // Phi(x) + x * phi(x)
  Mul(s1, x, s2, n);             // x * Phi(x)
}

// The tanh form of the same: on return s0 = gelu_tanh'(x), s1 = gelu_tanh(x), as the
// CPU kernel computes them: s = sigmoid(2u), y = x s, y' = s + y (1 - s) u' with
// u' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2), x^2 clamped at 1e36 as in GeluTanhGrad.
// Scratch: s2, s3. x is only read; s0..s3 are distinct rows, none of them x.
__aicore__ inline void GeluTanhValueAndGrad(const AscendC::LocalTensor<float>& x, const AscendC::LocalTensor<float>& s0,
                                            const AscendC::LocalTensor<float>& s1, const AscendC::LocalTensor<float>& s2,
                                            const AscendC::LocalTensor<float>& s3, int32_t n) {
  using namespace AscendC;
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s0, x, x, n);  // x^2
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s2, s0, kTanhCubic, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s2, s2, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s2, s2, x, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s2, s2, -2.0f * kTanhScale, n);
  AscendC::PipeBarrier<PIPE_V>();
  Exp(s2, s2, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s2, s2, 1.0f, n);
  Duplicate(s3, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Div(s2, s3, s2, n);     // s (Div, not Reciprocal: see ErfcParts)
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s1, x, s2, n);      // y = x s
  AscendC::PipeBarrier<PIPE_V>();
  Mins(s0, s0, 1e36f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, 3.0f * kTanhCubic, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s0, s0, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s0, s0, 2.0f * kTanhScale, n);  // u'
  AscendC::PipeBarrier<PIPE_V>();
  Muls(s3, s2, -1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Adds(s3, s3, 1.0f, n);
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s3, s1, s3, n);     // y (1 - s)
  AscendC::PipeBarrier<PIPE_V>();
  Mul(s3, s3, s0, n);
  AscendC::PipeBarrier<PIPE_V>();
  Add(s0, s2, s3, n);
}

}  // namespace op_ext_kernel

#endif  // OP_EXT_KERNEL_ASCENDC_GELU_COMMON_H_
