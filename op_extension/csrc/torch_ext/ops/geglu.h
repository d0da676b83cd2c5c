// The glue of custom::geglu and custom::geglu_backward: gelu(gate) * up.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/geglu.h"
#include "../glue_util.h"

namespace op_ext::glue {

inline GeluApprox check_geglu(const char* op, const Tensor& gate, const Tensor& up,
                              c10::string_view approximate) {
  check_glu(op, gate, up, gen::kGegluDtypes);
  return parse_gelu_approximate(op, approximate);
}

inline GeluApprox check_geglu_backward(const char* op, const Tensor& grad_output,
                                       const Tensor& gate, const Tensor& up,
                                       c10::string_view approximate) {
  check_glu(op, gate, up, gen::kGegluBackwardDtypes);
  const auto approx = parse_gelu_approximate(op, approximate);
  check_same(op, gate, "gate", grad_output, "grad_output");
  check_same_shape(op, gate, "gate", grad_output, "grad_output");
  return approx;
}

template <typename Kernels>
Tensor geglu(const Tensor& gate, const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu";
  const Kernels kernels(gate);
  const auto approx = check_geglu(op, gate, up, approximate);
  return glu_forward([&](DType d, const cpu::GluArgs& a) { kernels(cpu::geglu_forward, d, a); }, gate,
                     up, approx);
}

template <typename Kernels>
std::tuple<Tensor, Tensor> geglu_backward(const Tensor& grad_output, const Tensor& gate,
                                          const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu_backward";
  const Kernels kernels(gate);
  const auto approx = check_geglu_backward(op, grad_output, gate, up, approximate);
  return glu_backward(
      [&](DType d, const cpu::GluBackwardArgs& a) { kernels(cpu::geglu_backward, d, a); },
      grad_output, gate, up, approx);
}

}  // namespace op_ext::glue
