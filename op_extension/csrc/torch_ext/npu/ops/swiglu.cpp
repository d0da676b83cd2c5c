// custom::swiglu and custom::swiglu_backward on Ascend NPUs (torch_npu's PrivateUse1 key): the CPU
// op's argument checks (csrc/torch_ext/ops/swiglu.h), then the Ascend kernels through their aclnn
// entry points. SwiGluCustom and SwiGluGradCustom. Registered by the generated
// op_ext_npu_registration.cpp; the steps every op shares (npu dtypes, the dense layout, the aclnn
// call) are in ../npu_glue.h.
#include "../npu_glue.h"
#include "../../ops/swiglu.h"
#include "aclnn_swiglu_custom.h"
#include "aclnn_swiglu_grad_custom.h"

namespace op_ext::npu {

Tensor swiglu_npu(const Tensor& gate, const Tensor& up) {
  constexpr const char* op = "custom::swiglu";
  glue::check_glu(op, gate, up, gen::kSwigluDtypes);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor out = at::empty(g.sizes(), g.options());
  if (out.numel() == 0) return out;
  call_aclnn(op, "aclnnSwiGluCustom", g.device(), aclnnSwiGluCustomGetWorkspaceSize,
             aclnnSwiGluCustom, g, u, out);
  return glue::keeps_layout(gate, up) ? glue::in_layout_of(gate, out) : out;
}

std::tuple<Tensor, Tensor> swiglu_backward_npu(const Tensor& grad_output, const Tensor& gate,
                                               const Tensor& up) {
  constexpr const char* op = "custom::swiglu_backward";
  glue::check_swiglu_backward(op, grad_output, gate, up);
  check_npu_dtype(op, gate, "gate");
  const c10::DeviceGuard guard(gate.device());
  const Tensor dy = dense(grad_output);
  const Tensor g = dense(gate);
  const Tensor u = dense(up);
  Tensor grad_gate = at::empty(g.sizes(), g.options());
  Tensor grad_up = at::empty(g.sizes(), g.options());
  if (g.numel() == 0) return {grad_gate, grad_up};
  call_aclnn(op, "aclnnSwiGluGradCustom", g.device(), aclnnSwiGluGradCustomGetWorkspaceSize,
             aclnnSwiGluGradCustom, dy, g, u, grad_gate, grad_up);
  if (glue::keeps_layout(gate, up, grad_output)) {
    return {glue::in_layout_of(gate, grad_gate), glue::in_layout_of(gate, grad_up)};
  }
  return {grad_gate, grad_up};
}

}  // namespace op_ext::npu
