// The glue of custom::swiglu and custom::swiglu_backward: silu(gate) * up.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/swiglu.h"
#include "../glue_util.h"

namespace op_ext::glue {

// The backward ops' checks (CPU, CUDA and npu glue call these, in this order).
inline void check_swiglu_backward(const char* op, const Tensor& grad_output, const Tensor& gate,
                                  const Tensor& up) {
  check_glu(op, gate, up, gen::kSwigluBackwardDtypes);
  check_same(op, gate, "gate", grad_output, "grad_output");
  check_same_shape(op, gate, "gate", grad_output, "grad_output");
}

template <typename Kernels>
Tensor swiglu(const Tensor& gate, const Tensor& up) {
  constexpr const char* op = "custom::swiglu";
  const Kernels kernels(gate);
  check_glu(op, gate, up, gen::kSwigluDtypes);
  return glu_forward([&](DType d, const cpu::GluArgs& a) { kernels(cpu::swiglu_forward, d, a); }, gate,
                     up, GeluApprox::None);
}

template <typename Kernels>
std::tuple<Tensor, Tensor> swiglu_backward(const Tensor& grad_output, const Tensor& gate,
                                           const Tensor& up) {
  constexpr const char* op = "custom::swiglu_backward";
  const Kernels kernels(gate);
  check_swiglu_backward(op, grad_output, gate, up);
  return glu_backward(
      [&](DType d, const cpu::GluBackwardArgs& a) { kernels(cpu::swiglu_backward, d, a); },
      grad_output, gate, up, GeluApprox::None);
}

}  // namespace op_ext::glue
