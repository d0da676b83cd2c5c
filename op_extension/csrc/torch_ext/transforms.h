// Whether a call needs what the C++ autograd kernels cannot give: a forward
// derivative, or support by torch.func transforms (functorch refuses C++
// torch::autograd::Functions). The eager fast path sends such calls to the
// Python autograd.Functions of op_extension/_transforms.py; the Autograd
// kernels refuse them when torch.ops.custom.<op> is called directly.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>

namespace op_ext {

// Forward-mode AD has one level at a time (torch refuses nested dual levels,
// and torch.func.jvp uses that same level), so a tangent, if any, is at 0.
inline bool has_tangent(const at::Tensor& t) {
  // Only a tensor with autograd metadata can hold a tangent: testing that
  // first keeps plain tensors off the virtual _fw_grad call.
  return t.defined() && t.unsafeGetTensorImpl()->autograd_meta() != nullptr &&
         t._fw_grad(/*level=*/0).defined();
}
inline bool has_tangent(const std::optional<at::Tensor>& t) {
  return t.has_value() && has_tangent(*t);
}

// A torch.func transform (grad, vjp, jacrev, jacfwd, jvp, vmap, ...) is being
// applied: the test torch.autograd.Function.apply makes to decide whether
// functorch must handle it (torch._C._are_functorch_transforms_active), one
// thread-local read.
inline bool functorch_active() {
  const auto included = c10::impl::tls_local_dispatch_key_set().included_;
  return included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) ||
         included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode);
}

}  // namespace op_ext
