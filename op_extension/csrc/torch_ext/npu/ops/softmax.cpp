// custom::softmax and custom::softmax_backward on Ascend NPUs (torch_npu's PrivateUse1 key): the
// CPU op's argument checks (csrc/torch_ext/ops/softmax.h), then the Ascend kernels through their
// aclnn entry points. SoftmaxCustom and SoftmaxGradCustom; a 0-dim tensor as the one-element vector
// it holds. Registered by the generated op_ext_npu_registration.cpp; the steps every op shares (npu
// dtypes, the dense layout, the aclnn call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/softmax.h"
#include "aclnn_softmax_custom.h"
#include "aclnn_softmax_grad_custom.h"

namespace op_ext::npu {

Tensor softmax_npu(const Tensor& input, int64_t dim) {
  constexpr const char* op = "custom::softmax";
  check_dtype(op, input, "input", gen::kSoftmaxDtypes);
  const int64_t wrapped = wrap_dim(op, dim, input.dim());
  check_npu_dtype(op, input, "input");
  const c10::DeviceGuard guard(input.device());
  // A 0-dim tensor is softmaxed as the one-element vector it holds.
  const Tensor x = dense(input.dim() == 0 ? input.reshape({1}) : input);
  Tensor out = at::empty(x.sizes(), x.options());
  if (out.numel() == 0) return out.view(input.sizes());
  call_aclnn(op, "aclnnSoftmaxCustom", x.device(), aclnnSoftmaxCustomGetWorkspaceSize,
             aclnnSoftmaxCustom, x, wrapped, out);
  return out.view(input.sizes());
}

Tensor softmax_backward_npu(const Tensor& grad_output, const Tensor& output, int64_t dim) {
  constexpr const char* op = "custom::softmax_backward";
  glue::check_softmax_backward(op, grad_output, output, dim);
  const int64_t wrapped = wrap_dim(op, dim, output.dim());
  check_npu_dtype(op, output, "output");
  const c10::DeviceGuard guard(output.device());
  // 0-dim tensors as the one-element vectors they hold, as in softmax_npu.
  const Tensor y = dense(output.dim() == 0 ? output.reshape({1}) : output);
  const Tensor dy = dense(grad_output.dim() == 0 ? grad_output.reshape({1}) : grad_output);
  Tensor dx = at::empty(y.sizes(), y.options());
  if (dx.numel() == 0) return dx.view(output.sizes());
  call_aclnn(op, "aclnnSoftmaxGradCustom", y.device(), aclnnSoftmaxGradCustomGetWorkspaceSize,
             aclnnSoftmaxGradCustom, dy, y, wrapped, dx);
  return dx.view(output.sizes());
}

}  // namespace op_ext::npu
