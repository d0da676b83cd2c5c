// Calls that need what the C++ autograd kernels cannot give: a forward
// derivative, or support by torch.func transforms (functorch refuses C++
// torch::autograd::Functions). The Autograd kernels refuse them (a direct
// torch.ops.custom.<op> call gets an error naming op_extension.ops.<op>); the
// eager fast path sends them to the Python autograd.Functions of
// op_extension/_transforms.py instead.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

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

// What an Autograd kernel throws for an input that carries a tangent, before
// doing anything: Python sees a RuntimeError, the eager fast path catches it
// and reruns the call on the Python path. (Catching it, rather than testing
// the tensors a second time before entering the dispatcher, leaves the fast
// path one test per tensor, in the kernel, which must make it anyway.)
class TangentError : public c10::Error {
 public:
  using c10::Error::Error;
};

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
