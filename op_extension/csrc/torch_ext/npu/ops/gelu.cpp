// custom::gelu and custom::gelu_backward on Ascend NPUs (torch_npu's PrivateUse1 key): the CPU op's
// argument checks (csrc/torch_ext/ops/gelu.h), then the Ascend kernels through their aclnn entry
// points. GeluCustom and GeluGradCustom, in the input's layout where the CPU op keeps it.
// Registered by the generated op_ext_npu_registration.cpp; the steps every op shares (npu dtypes,
// the dense layout, the aclnn call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/gelu.h"
#include "aclnn_gelu_custom.h"
#include "aclnn_gelu_grad_custom.h"

namespace op_ext::npu {

Tensor gelu_npu(const Tensor& input, c10::string_view approximate) {
  constexpr const char* op = "custom::gelu";
  glue::check_gelu(op, input, approximate);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnGeluCustom", x.device(), aclnnGeluCustomGetWorkspaceSize, aclnnGeluCustom, x,
             approximate, out);
  return glue::keeps_layout(input) ? glue::in_layout_of(input, out) : out;
}

Tensor gelu_backward_npu(const Tensor& grad_output, const Tensor& input,
                         c10::string_view approximate) {
  constexpr const char* op = "custom::gelu_backward";
  glue::check_gelu_backward(op, grad_output, input, approximate);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  const Tensor x = dense(input);
  const Tensor dy = dense(grad_output);
  Tensor dx = at::empty(x.sizes(), x.options());
  if (dx.numel() == 0) return dx;
  call_aclnn(op, "aclnnGeluGradCustom", x.device(), aclnnGeluGradCustomGetWorkspaceSize,
             aclnnGeluGradCustom, dy, x, approximate, dx);
  return glue::keeps_layout(input, grad_output) ? glue::in_layout_of(input, dx) : dx;
}

}  // namespace op_ext::npu
