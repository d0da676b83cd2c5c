// The glue of custom::softmax and custom::softmax_backward: softmax along one dim.
// Included by the generated op_ext_glue.h, which registers both ops under every
// device key (see glue_util.h for the Kernels contract).
#pragma once

#include "../../kernel/cpu/softmax.h"
#include "../glue_util.h"

namespace op_ext::glue {

struct SoftmaxShape {
  int64_t outer = 1, dim_size = 1, inner = 1;
};

inline SoftmaxShape softmax_shape(const char* op, const Tensor& t, int64_t dim) {
  SoftmaxShape s;
  if (t.dim() == 0) {
    wrap_dim(op, dim, 0);
    return s;
  }
  const int64_t d = wrap_dim(op, dim, t.dim());
  for (const auto i : c10::irange(d)) s.outer *= t.size(i);
  s.dim_size = t.size(d);
  for (const auto i : c10::irange(d + 1, t.dim())) s.inner *= t.size(i);
  return s;
}

template <typename Kernels>
Tensor softmax(const Tensor& input, int64_t dim) {
  constexpr const char* op = "custom::softmax";
  const Kernels kernels(input);
  check_dtype(op, input, "input", gen::kSoftmaxDtypes);
  const SoftmaxShape s = softmax_shape(op, input, dim);
  const Tensor x = input.contiguous();
  Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  kernels(cpu::softmax_forward, kernel_dtype(x.scalar_type()), {x.const_data_ptr(), out.mutable_data_ptr(),
                                                          s.outer, s.dim_size, s.inner});
  return out;
}

inline SoftmaxShape check_softmax_backward(const char* op, const Tensor& grad_output,
                                           const Tensor& output, int64_t dim) {
  check_dtype(op, output, "output", gen::kSoftmaxBackwardDtypes);
  check_same(op, output, "output", grad_output, "grad_output");
  check_same_shape(op, output, "output", grad_output, "grad_output");
  return softmax_shape(op, output, dim);
}

template <typename Kernels>
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  constexpr const char* op = "custom::softmax_backward";
  const Kernels kernels(output);
  const SoftmaxShape s = check_softmax_backward(op, grad_output, output, dim);
  const Tensor y = output.contiguous();
  const Tensor dy = grad_output.contiguous();
  Tensor dx = at::empty(y.sizes(), y.options());
  if (y.numel() == 0) return dx;
  kernels(cpu::softmax_backward, kernel_dtype(y.scalar_type()),
                           {dy.const_data_ptr(), y.const_data_ptr(), dx.mutable_data_ptr(), s.outer,
                            s.dim_size, s.inner});
  return dx;
}

}  // namespace op_ext::glue
