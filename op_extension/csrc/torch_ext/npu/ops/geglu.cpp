// custom::geglu and custom::geglu_backward on Ascend NPUs (torch_npu's PrivateUse1 key): the CPU
// op's argument checks (csrc/torch_ext/ops/geglu.h), then the Ascend kernels through their aclnn
// entry points. GeGluCustom and GeGluGradCustom. Registered by the generated
// op_ext_npu_registration.cpp; the steps every op shares (npu dtypes, the dense layout, the aclnn
// call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/geglu.h"
#include "aclnn_geglu_custom.h"
#include "aclnn_geglu_grad_custom.h"

namespace op_ext::npu {

Tensor geglu_npu(const Tensor& gate, const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu";
  glue::check_geglu(op, gate, up, approximate);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor out = at::empty(g.sizes(), g.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnGeGluCustom", g.device(), aclnnGeGluCustomGetWorkspaceSize, aclnnGeGluCustom,
             g, u, approximate, out);
  return glue::keeps_layout(gate, up) ? glue::in_layout_of(gate, out) : out;
}

std::tuple<Tensor, Tensor> geglu_backward_npu(const Tensor& grad_output, const Tensor& gate,
                                              const Tensor& up, c10::string_view approximate) {
  constexpr const char* op = "custom::geglu_backward";
  glue::check_geglu_backward(op, grad_output, gate, up, approximate);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor dy = dense(grad_output);
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor grad_gate = at::empty(g.sizes(), g.options());
  Tensor grad_up = at::empty(g.sizes(), g.options());
  if (g.numel() == 0) return {grad_gate, grad_up};
  call_aclnn(op, "aclnnGeGluGradCustom", g.device(), aclnnGeGluGradCustomGetWorkspaceSize,
             aclnnGeGluGradCustom, dy, g, u, approximate, grad_gate, grad_up);
  if (glue::keeps_layout(gate, up, grad_output)) {
    return {glue::in_layout_of(gate, grad_gate), glue::in_layout_of(gate, grad_up)};
  }
  return {grad_gate, grad_up};
}

}  // namespace op_ext::npu
