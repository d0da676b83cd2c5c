// The glue of custom::layer_norm and custom::layer_norm_backward: LayerNorm over the trailing normalized_shape dims.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/layer_norm.h"
#include "../glue_util.h"

namespace op_ext::glue {

inline RowShape check_layer_norm(const char* op, const Tensor& input, IntArrayRef normalized_shape,
                                 const std::optional<Tensor>& weight,
                                 const std::optional<Tensor>& bias) {
  check_dtype(op, input, "input", gen::kLayerNormDtypes);
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  check_affine(op, bias, "bias", input, normalized_shape);
  return rs;
}

template <typename Kernels>
Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps) {
  constexpr const char* op = "custom::layer_norm";
  const Kernels kernels(input);
  const RowShape rs = check_layer_norm(op, input, normalized_shape, weight, bias);
  const Tensor x = input.contiguous();
  Tensor w_holder, b_holder;
  Tensor out = at::empty(x.sizes(), x.options());
  cpu::LayerNormArgs args{x.const_data_ptr(), optional_data(weight, w_holder),
                          optional_data(bias, b_holder), out.mutable_data_ptr(), rs.rows, rs.cols,
                          eps};
  kernels(cpu::layer_norm_forward, kernel_dtype(x.scalar_type()), args);
  return out;
}

inline RowShape check_layer_norm_backward(const char* op, const Tensor& grad_output,
                                          const Tensor& input, IntArrayRef normalized_shape,
                                          const std::optional<Tensor>& weight,
                                          const std::optional<Tensor>& bias) {
  check_dtype(op, input, "input", gen::kLayerNormBackwardDtypes);
  check_same(op, input, "input", grad_output, "grad_output");
  check_same_shape(op, input, "input", grad_output, "grad_output");
  const RowShape rs = check_normalized_shape(op, input, normalized_shape);
  check_affine(op, weight, "weight", input, normalized_shape);
  check_affine(op, bias, "bias", input, normalized_shape);
  return rs;
}

template <typename Kernels>
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output,
                                                       const Tensor& input,
                                                       IntArrayRef normalized_shape,
                                                       const std::optional<Tensor>& weight,
                                                       const std::optional<Tensor>& bias,
                                                       double eps) {
  constexpr const char* op = "custom::layer_norm_backward";
  const Kernels kernels(input);
  const RowShape rs = check_layer_norm_backward(op, grad_output, input, normalized_shape, weight, bias);
  const Tensor x = input.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor w_holder;
  Tensor dx = at::empty(x.sizes(), x.options());
  Tensor dw = param_grad(weight, x);
  Tensor db = param_grad(bias, x);
  cpu::LayerNormBackwardArgs args{dy.const_data_ptr(), x.const_data_ptr(),
                                  optional_data(weight, w_holder), dx.mutable_data_ptr(),
                                  param_grad_data(weight, dw), param_grad_data(bias, db),
                                  rs.rows, rs.cols, eps};
  kernels(cpu::layer_norm_backward, kernel_dtype(x.scalar_type()), args);
  return {dx, dw, db};
}

}  // namespace op_ext::glue
