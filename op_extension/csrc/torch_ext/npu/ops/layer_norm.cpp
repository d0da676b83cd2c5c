// custom::layer_norm and custom::layer_norm_backward on Ascend NPUs (torch_npu's PrivateUse1 key):
// the CPU op's argument checks (csrc/torch_ext/ops/layer_norm.h), then the Ascend kernels through
// their aclnn entry points. LayerNormCustom and LayerNormGradCustom. Registered by the generated
// op_ext_npu_registration.cpp; the steps every op shares (npu dtypes, the dense layout, the aclnn
// call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/layer_norm.h"
#include "aclnn_layer_norm_custom.h"
#include "aclnn_layer_norm_grad_custom.h"

namespace op_ext::npu {

Tensor layer_norm_npu(const Tensor& input, IntArrayRef normalized_shape, const OptTensor& weight,
                      const OptTensor& bias, double eps) {
  constexpr const char* op = "custom::layer_norm";
  glue::check_layer_norm(op, input, normalized_shape, weight, bias);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const OptTensor w = dense(weight);
  const OptTensor b = dense(bias);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnLayerNormCustom", x.device(), aclnnLayerNormCustomGetWorkspaceSize,
             aclnnLayerNormCustom, x, w, b, normalized_shape, eps, out);
  return out;
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_npu(const Tensor& grad_output, const Tensor& input,
                                                           IntArrayRef normalized_shape, const OptTensor& weight,
                                                           const OptTensor& bias, double eps) {
  constexpr const char* op = "custom::layer_norm_backward";
  glue::check_layer_norm_backward(op, grad_output, input, normalized_shape, weight, bias);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor dy = dense(grad_output);
  const OptTensor w = dense(weight);
  const OptTensor b = dense(bias);
  Tensor dx = at::empty(x.sizes(), x.options());
  // As on CPU: empty placeholders for the parameters the op ran without.
  Tensor dw = glue::param_grad(weight, x);
  Tensor db = glue::param_grad(bias, x);
  if (x.numel() == 0) return {dx, dw.zero_(), db.zero_()};  // sums over no rows
  const OptTensor dw_out = w.has_value() ? OptTensor(dw) : std::nullopt;
  const OptTensor db_out = b.has_value() ? OptTensor(db) : std::nullopt;
  call_aclnn(op, "aclnnLayerNormGradCustom", x.device(), aclnnLayerNormGradCustomGetWorkspaceSize,
             aclnnLayerNormGradCustom, dy, x, w, b, normalized_shape, eps, dx, dw_out, db_out);
  return {dx, dw, db};
}

}  // namespace op_ext::npu
