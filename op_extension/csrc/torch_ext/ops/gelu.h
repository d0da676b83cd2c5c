// The glue of custom::gelu and custom::gelu_backward: GELU, exact or tanh-approximated.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/gelu.h"
#include "../glue_util.h"

namespace op_ext::glue {

inline GeluApprox check_gelu(const char* op, const Tensor& input, c10::string_view approximate) {
  check_dtype(op, input, "input", gen::kGeluDtypes);
  return parse_gelu_approximate(op, approximate);
}

inline GeluApprox check_gelu_backward(const char* op, const Tensor& grad_output,
                                      const Tensor& input, c10::string_view approximate) {
  check_dtype(op, input, "input", gen::kGeluBackwardDtypes);
  check_same(op, input, "input", grad_output, "grad_output");
  check_same_shape(op, input, "input", grad_output, "grad_output");
  return parse_gelu_approximate(op, approximate);
}

template <typename Kernels>
Tensor gelu(const Tensor& input, c10::string_view approximate) {
  constexpr const char* op = "custom::gelu";
  const Kernels kernels(input);
  const auto approx = check_gelu(op, input, approximate);
  // Elementwise: a dense layout other than row-major is walked as it lies.
  const bool keep = keeps_layout(input);
  const Tensor x = keep ? input : input.contiguous();
  Tensor out = keep ? at::empty_like(x) : at::empty(x.sizes(), x.options());
  kernels(cpu::gelu_forward, kernel_dtype(x.scalar_type()),
                       {x.const_data_ptr(), out.mutable_data_ptr(), x.numel(), approx});
  return out;
}

template <typename Kernels>
Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, c10::string_view approximate) {
  constexpr const char* op = "custom::gelu_backward";
  const Kernels kernels(input);
  const auto approx = check_gelu_backward(op, grad_output, input, approximate);
  const bool keep = keeps_layout(input, grad_output);
  const Tensor x = keep ? input : input.contiguous();
  const Tensor dy = keep ? grad_output : grad_output.contiguous();
  Tensor dx = keep ? at::empty_like(x) : at::empty(x.sizes(), x.options());
  kernels(cpu::gelu_backward, kernel_dtype(x.scalar_type()), {dy.const_data_ptr(), x.const_data_ptr(),
                                                        dx.mutable_data_ptr(), x.numel(), approx});
  return dx;
}

}  // namespace op_ext::glue
