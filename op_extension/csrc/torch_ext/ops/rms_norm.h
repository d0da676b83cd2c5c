// The glue of custom::rms_norm and custom::rms_norm_backward: RMSNorm over the trailing normalized_shape dims.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/rms_norm.h"
#include "../glue_util.h"

namespace op_ext::glue {

inline RowShape check_rms_norm(const char* op, const Tensor& input, IntArrayRef normalized_shape,
                               const std::optional<Tensor>& weight) {
  check_dtype(op, input, "input", gen::kRmsNormDtypes);
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  return rs;
}

inline RowShape check_rms_norm_backward(const char* op, const Tensor& grad_output,
                                        const Tensor& input, IntArrayRef normalized_shape,
                                        const std::optional<Tensor>& weight) {
  check_dtype(op, input, "input", gen::kRmsNormBackwardDtypes);
  check_same(op, input, "input", grad_output, "grad_output");
  check_same_shape(op, input, "input", grad_output, "grad_output");
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  return rs;
}

template <typename Kernels>
Tensor rms_norm(const Tensor& input, IntArrayRef normalized_shape,
                const std::optional<Tensor>& weight, std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm";
  const Kernels kernels(input);
  const RowShape rs = check_rms_norm(op, input, normalized_shape, weight);
  const Tensor x = input.contiguous();
  Tensor w_holder;
  Tensor out = at::empty(x.sizes(), x.options());
  cpu::RmsNormArgs args{x.const_data_ptr(), nullptr, optional_data(weight, w_holder),
                        out.mutable_data_ptr(), nullptr, rs.rows, rs.cols,
                        rms_norm_eps(input, eps)};
  kernels(cpu::rms_norm_forward, kernel_dtype(x.scalar_type()), args);
  // The kernel needs row-major rows; the output takes the input's memory format, as F.rms_norm's.
  return in_memory_format_of(input, out);
}

template <typename Kernels>
std::tuple<Tensor, Tensor> rms_norm_backward(const Tensor& grad_output, const Tensor& input,
                                             IntArrayRef normalized_shape,
                                             const std::optional<Tensor>& weight,
                                             std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm_backward";
  const Kernels kernels(input);
  const RowShape rs = check_rms_norm_backward(op, grad_output, input, normalized_shape, weight);
  const Tensor x = input.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor w_holder;
  Tensor dx = at::empty(x.sizes(), x.options());
  Tensor dw = param_grad(weight, x);
  cpu::RmsNormBackwardArgs args{dy.const_data_ptr(), nullptr, x.const_data_ptr(),
                                optional_data(weight, w_holder), dx.mutable_data_ptr(),
                                param_grad_data(weight, dw), rs.rows, rs.cols,
                                rms_norm_eps(input, eps)};
  kernels(cpu::rms_norm_backward, kernel_dtype(x.scalar_type()), args);
  return {dx, dw};
}

}  // namespace op_ext::glue
