// custom::add and custom::add_backward on Ascend NPUs (torch_npu's PrivateUse1 key): the CPU op's
// argument checks (csrc/torch_ext/ops/add.h), then the Ascend kernels through their aclnn entry
// points. AddCustom takes operands of the output's shape: a broadcast is materialised first.
// Registered by the generated op_ext_npu_registration.cpp; the steps every op shares (npu dtypes,
// the dense layout, the aclnn call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/add.h"
#include "aclnn_add_custom.h"
#include "aclnn_add_grad_custom.h"

namespace op_ext::npu {

Tensor add_npu(const Tensor& input, const Tensor& other, double alpha) {
  constexpr const char* op = "custom::add";
  const auto shape = glue::check_add(op, input, other);
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  Tensor out = at::empty(shape, input.options());
  if (out.numel() == 0) return out;
  // AddCustom takes operands of the output's shape: broadcast dims are
  // materialised (one extra read and write of the broadcast operand).
  const Tensor a = dense(input.sizes() == IntArrayRef(shape) ? input : input.expand(shape));
  const Tensor b = dense(other.sizes() == IntArrayRef(shape) ? other : other.expand(shape));
  call_aclnn(op, "aclnnAddCustom", input.device(), aclnnAddCustomGetWorkspaceSize, aclnnAddCustom,
             a, b, alpha, out);
  return glue::keeps_layout(input, other) ? glue::in_layout_of(input, out) : out;
}

Tensor add_backward_npu(const Tensor& grad_output, IntArrayRef input_size, double alpha) {
  constexpr const char* op = "custom::add_backward";
  glue::check_add_backward(op, grad_output, input_size);
  check_npu_dtype(op, grad_output, "grad_output");
  const c10::DeviceGuard guard(grad_output.device());
  // A sum over no elements is zero.
  if (grad_output.numel() == 0) return at::zeros(input_size, grad_output.options());
  const Tensor grad = dense(grad_output);
  Tensor out = at::empty(input_size, grad_output.options());
  call_aclnn(op, "aclnnAddGradCustom", grad.device(), aclnnAddGradCustomGetWorkspaceSize,
             aclnnAddGradCustom, grad, input_size, alpha, out);
  return out;
}

}  // namespace op_ext::npu
