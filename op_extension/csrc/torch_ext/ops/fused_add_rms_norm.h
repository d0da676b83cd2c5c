// The glue of custom::fused_add_rms_norm and custom::fused_add_rms_norm_backward: RMSNorm of input + residual, which it returns too.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/fused_add_rms_norm.h"
#include "../glue_util.h"

namespace op_ext::glue {

inline RowShape check_fused_add_rms_norm(const char* op, const Tensor& input,
                                         const Tensor& residual, IntArrayRef normalized_shape,
                                         const std::optional<Tensor>& weight) {
  check_dtype(op, input, "input", gen::kFusedAddRmsNormDtypes);
  check_same(op, input, "input", residual, "residual");
  check_same_shape(op, input, "input", residual, "residual");
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  return rs;
}

template <typename Kernels>
std::tuple<Tensor, Tensor> fused_add_rms_norm(const Tensor& input, const Tensor& residual,
                                              IntArrayRef normalized_shape,
                                              const std::optional<Tensor>& weight,
                                              std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm";
  const Kernels kernels(input);
  const RowShape rs = check_fused_add_rms_norm(op, input, residual, normalized_shape, weight);
  const Tensor x = input.contiguous();
  const Tensor r = residual.contiguous();
  Tensor w_holder;
  Tensor out = at::empty(x.sizes(), x.options());
  Tensor residual_out = at::empty(x.sizes(), x.options());
  cpu::RmsNormArgs args{x.const_data_ptr(), r.const_data_ptr(), optional_data(weight, w_holder),
                        out.mutable_data_ptr(), residual_out.mutable_data_ptr(), rs.rows, rs.cols,
                        rms_norm_eps(input, eps)};
  kernels(cpu::rms_norm_forward, kernel_dtype(x.scalar_type()), args);
  return {out, residual_out};
}

inline RowShape check_fused_add_rms_norm_backward(const char* op, const Tensor& grad_output,
                                                  const std::optional<Tensor>& grad_residual_out,
                                                  const Tensor& residual_out,
                                                  IntArrayRef normalized_shape,
                                                  const std::optional<Tensor>& weight) {
  check_dtype(op, residual_out, "residual_out", gen::kFusedAddRmsNormBackwardDtypes);
  check_same(op, residual_out, "residual_out", grad_output, "grad_output");
  check_same_shape(op, residual_out, "residual_out", grad_output, "grad_output");
  if (grad_residual_out.has_value() && grad_residual_out->defined()) {
    check_same(op, residual_out, "residual_out", *grad_residual_out, "grad_residual_out");
    check_same_shape(op, residual_out, "residual_out", *grad_residual_out, "grad_residual_out");
  }
  const RowShape rs = check_normalized_shape(op, residual_out, normalized_shape);
  check_affine(op, weight, "weight", residual_out, normalized_shape);
  return rs;
}

template <typename Kernels>
std::tuple<Tensor, Tensor> fused_add_rms_norm_backward(
    const Tensor& grad_output, const std::optional<Tensor>& grad_residual_out,
    const Tensor& residual_out, IntArrayRef normalized_shape, const std::optional<Tensor>& weight,
    std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm_backward";
  const Kernels kernels(residual_out);
  const RowShape rs = check_fused_add_rms_norm_backward(op, grad_output, grad_residual_out,
                                                        residual_out, normalized_shape, weight);
  const Tensor z = residual_out.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor w_holder, gr_holder;
  Tensor dx = at::empty(z.sizes(), z.options());
  Tensor dw = param_grad(weight, z);
  cpu::RmsNormBackwardArgs args{dy.const_data_ptr(), optional_data(grad_residual_out, gr_holder),
                                z.const_data_ptr(), optional_data(weight, w_holder),
                                dx.mutable_data_ptr(), param_grad_data(weight, dw), rs.rows, rs.cols,
                                rms_norm_eps(residual_out, eps)};
  kernels(cpu::rms_norm_backward, kernel_dtype(z.scalar_type()), args);
  return {dx, dw};
}

}  // namespace op_ext::glue
