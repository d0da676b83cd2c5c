// custom::rms_norm and custom::rms_norm_backward on Ascend NPUs (torch_npu's PrivateUse1 key): the
// CPU op's argument checks (csrc/torch_ext/ops/rms_norm.h), then the Ascend kernels through their
// aclnn entry points. RmsNormCustom and RmsNormGradCustom; eps=None resolved as on CPU. Registered
// by the generated op_ext_npu_registration.cpp; the steps every op shares (npu dtypes, the dense
// layout, the aclnn call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/rms_norm.h"
#include "aclnn_rms_norm_custom.h"
#include "aclnn_rms_norm_grad_custom.h"

namespace op_ext::npu {

Tensor rms_norm_npu(const Tensor& input, IntArrayRef normalized_shape, const OptTensor& weight,
                    std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm";
  glue::check_rms_norm(op, input, normalized_shape, weight);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const OptTensor w = dense(weight);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnRmsNormCustom", x.device(), aclnnRmsNormCustomGetWorkspaceSize,
             aclnnRmsNormCustom, x, w, normalized_shape, rms_norm_eps(input, eps), out);
  return glue::in_memory_format_of(input, out);
}

std::tuple<Tensor, Tensor> rms_norm_backward_npu(const Tensor& grad_output, const Tensor& input,
                                                 IntArrayRef normalized_shape,
                                                 const OptTensor& weight,
                                                 std::optional<double> eps) {
  constexpr const char* op = "custom::rms_norm_backward";
  glue::check_rms_norm_backward(op, grad_output, input, normalized_shape, weight);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor dy = dense(grad_output);
  const OptTensor w = dense(weight);
  Tensor dx = at::empty(x.sizes(), x.options());
  // As on CPU: an empty placeholder when the op ran without a weight.
  Tensor dw = glue::param_grad(weight, x);
  if (x.numel() == 0) return {dx, dw.zero_()};  // no rows: the weight gradient is a sum of nothing
  const OptTensor dw_out = w.has_value() ? OptTensor(dw) : std::nullopt;
  call_aclnn(op, "aclnnRmsNormGradCustom", x.device(), aclnnRmsNormGradCustomGetWorkspaceSize,
             aclnnRmsNormGradCustom, dy, x, w, normalized_shape, rms_norm_eps(input, eps), dx,
             dw_out);
  return {dx, dw};
}

}  // namespace op_ext::npu
