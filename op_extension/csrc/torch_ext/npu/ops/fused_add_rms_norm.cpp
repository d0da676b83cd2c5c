// custom::fused_add_rms_norm and custom::fused_add_rms_norm_backward on Ascend NPUs (torch_npu's
// PrivateUse1 key): the CPU op's argument checks (csrc/torch_ext/ops/fused_add_rms_norm.h), then
// the Ascend kernels through their aclnn entry points. FusedAddRmsNormCustom and
// FusedAddRmsNormGradCustom. Registered by the generated op_ext_npu_registration.cpp; the steps
// every op shares (npu dtypes, the dense layout, the aclnn call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/fused_add_rms_norm.h"
#include "aclnn_fused_add_rms_norm_custom.h"
#include "aclnn_fused_add_rms_norm_grad_custom.h"

namespace op_ext::npu {

std::tuple<Tensor, Tensor> fused_add_rms_norm_npu(const Tensor& input, const Tensor& residual,
                                                  IntArrayRef normalized_shape,
                                                  const OptTensor& weight,
                                                  std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm";
  glue::check_fused_add_rms_norm(op, input, residual, normalized_shape, weight);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor r = dense(residual);
  const OptTensor w = dense(weight);
  Tensor out = at::empty(x.sizes(), x.options());
  Tensor residual_out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return {out, residual_out};
  call_aclnn(op, "aclnnFusedAddRmsNormCustom", x.device(),
             aclnnFusedAddRmsNormCustomGetWorkspaceSize, aclnnFusedAddRmsNormCustom, x, r, w,
             normalized_shape, rms_norm_eps(input, eps), out, residual_out);
  return {out, residual_out};
}

std::tuple<Tensor, Tensor> fused_add_rms_norm_backward_npu(const Tensor& grad_output,
                                                           const OptTensor& grad_residual_out,
                                                           const Tensor& residual_out,
                                                           IntArrayRef normalized_shape, const OptTensor& weight,
                                                           std::optional<double> eps) {
  constexpr const char* op = "custom::fused_add_rms_norm_backward";
  glue::check_fused_add_rms_norm_backward(op, grad_output, grad_residual_out, residual_out, normalized_shape,
                                          weight);
  check_npu_dtype(op, residual_out, "residual_out");
  const c10::DeviceGuard guard(residual_out.device());
  const Tensor z = dense(residual_out);
  const Tensor dy = dense(grad_output);
  const OptTensor gr = dense(grad_residual_out);
  const OptTensor w = dense(weight);
  Tensor dx = at::empty(z.sizes(), z.options());
  Tensor dw = glue::param_grad(weight, z);
  if (z.numel() == 0) return {dx, dw.zero_()};  // no rows: the weight gradient is a sum of nothing
  const OptTensor dw_out = w.has_value() ? OptTensor(dw) : std::nullopt;
  call_aclnn(op, "aclnnFusedAddRmsNormGradCustom", z.device(), aclnnFusedAddRmsNormGradCustomGetWorkspaceSize,
             aclnnFusedAddRmsNormGradCustom, dy, gr, z, w, normalized_shape, rms_norm_eps(residual_out, eps), dx,
             dw_out);
  return {dx, dw};
}

}  // namespace op_ext::npu
