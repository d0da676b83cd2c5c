// What every Autograd-key kernel of the custom ops shares: the generated ones
// (build/generated/op_ext_autograd.cpp, derived from the prototypes by
// op_extension/_cpp_gen.py) and the hand-written ones of ops whose derivative
// the prototypes' names cannot say (autograd/<op>.cpp).
//
// Nothing here reads concrete sizes: under torch.compile(dynamic=True) these
// functions run on FakeTensors with symbolic shapes.
#pragma once

#include <ATen/FuncTorchTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "op_ext_handles.h"
#include "transforms.h"

namespace op_ext {

using at::Tensor;
using OptTensor = std::optional<at::Tensor>;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

inline OptTensor saved_optional(const Tensor& t) {
  return t.defined() ? OptTensor(t) : std::nullopt;
}

inline std::vector<c10::SymInt> saved_sym_ints(AutogradContext* ctx, const char* key) {
  return ctx->saved_data[key].toSymIntVector();
}

// Saves tensors for the backward. A tensor made under torch.inference_mode()
// cannot be saved; torch's composite forms (F.rms_norm, F.silu(g) * u, ...) never
// need to when only a weight or the other operand requires grad, so they run
// with such inputs. Saving a copy, made here outside inference mode, lets our
// ops run in the same cases; other inputs are saved as they are.
inline void save_for_backward(AutogradContext* ctx, std::initializer_list<Tensor> tensors) {
  variable_list saved;
  saved.reserve(tensors.size());
  for (const Tensor& t : tensors) saved.push_back(t.defined() && t.is_inference() ? t.clone() : t);
  ctx->save_for_backward(std::move(saved));
}

inline bool requires_grad(const Tensor& t) {
  return t.defined() && t.requires_grad();
}
inline bool requires_grad(const OptTensor& t) {
  return t.has_value() && requires_grad(*t);
}

// Whether autograd has anything to record. When not, the autograd kernels call
// the device kernel directly: building a graph node costs more than a small op.
template <typename... Ts>
bool records_graph(const Ts&... tensors) {
  return at::GradMode::is_enabled() && (requires_grad(tensors) || ...);
}

// The parameter's gradient, or undefined where the op ran without that parameter
// (the backward op then returns an empty placeholder).
inline Tensor param_grad(const Tensor& param, const Tensor& grad) {
  return param.defined() ? grad : Tensor();
}

// These kernels have no forward derivative: an input's forward-mode tangent
// would be dropped, leaving a silent zero tangent on the output. Refused
// instead, first thing; op_extension.ops' fast path catches the TangentError
// and reruns the call on the Python autograd.Function of
// op_extension/_transforms.py, which has a jvp. Inside that Function's
// forward, forward grad mode is off, so its own call of the op passes.
template <typename... Ts>
void check_no_tangent(const char* op, const Ts&... tensors) {
  if (C10_UNLIKELY((has_tangent(tensors) || ...))) {
    throw TangentError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        c10::str("custom::", op,
                 ": an input carries a forward-mode AD tangent (torch.func.jvp, jacfwd or "
                 "torch.autograd.forward_ad), which torch.ops.custom.",
                 op, " cannot propagate; call op_extension.ops.", op,
                 " (or its op_extension.nn module), which supports forward-mode AD and torch.func "
                 "transforms"));
  }
}

// torch refuses a C++ autograd Function under a torch.func transform, in
// Function::apply, with a message that names neither the op nor what to do.
// The same test (functorch's own), with a message that does.
inline void check_no_functorch(const char* op) {
  const auto& functorch_tls = at::functorch::functorchTLSAccessor();
  if (!functorch_tls) return;
  try {
    functorch_tls->checkSupportsCppAutogradFunction();
  } catch (const c10::Error&) {
    TORCH_CHECK(false, "custom::", op,
                ": torch.func transforms (grad, vjp, jacrev, ...) cannot differentiate "
                "torch.ops.custom.",
                op, ", whose autograd is a C++ function; call op_extension.ops.", op,
                " (or its op_extension.nn module), which supports them");
  }
}

}  // namespace op_ext
