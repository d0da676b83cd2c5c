// Typed handles of the custom ops, for C++ code that calls them through the
// dispatcher (autograd, the eager fast path). Looking an op up by name costs a
// hash-map probe; each handle is looked up once per process.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace op_ext {

using OptTensor = std::optional<at::Tensor>;
using at::Tensor;

template <typename Signature>
inline c10::TypedOperatorHandle<Signature> custom_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// Looked up once: the dispatcher's handles are stable for the process.
#define OP_EXT_TYPED_OP(fn, qualname, ...)                       \
  inline const c10::TypedOperatorHandle<__VA_ARGS__>& fn() {            \
    static const auto handle = custom_op<__VA_ARGS__>(qualname); \
    return handle;                                               \
  }

OP_EXT_TYPED_OP(add_op, "custom::add", Tensor(const Tensor&, const Tensor&, double))
OP_EXT_TYPED_OP(rotary_embedding_op, "custom::rotary_embedding",
                std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t))
OP_EXT_TYPED_OP(rotary_embedding_backward_op, "custom::rotary_embedding_backward",
                std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t))
OP_EXT_TYPED_OP(add_backward_op, "custom::add_backward",
                Tensor(const Tensor&, c10::SymIntArrayRef, double))
OP_EXT_TYPED_OP(gelu_op, "custom::gelu", Tensor(const Tensor&, c10::string_view))
OP_EXT_TYPED_OP(gelu_backward_op, "custom::gelu_backward",
                Tensor(const Tensor&, const Tensor&, c10::string_view))
OP_EXT_TYPED_OP(swiglu_op, "custom::swiglu", Tensor(const Tensor&, const Tensor&))
OP_EXT_TYPED_OP(swiglu_backward_op, "custom::swiglu_backward",
                std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&))
OP_EXT_TYPED_OP(geglu_op, "custom::geglu",
                Tensor(const Tensor&, const Tensor&, c10::string_view))
OP_EXT_TYPED_OP(geglu_backward_op, "custom::geglu_backward",
                std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                           c10::string_view))
OP_EXT_TYPED_OP(rms_norm_op, "custom::rms_norm",
                Tensor(const Tensor&, c10::SymIntArrayRef, const OptTensor&, std::optional<double>))
OP_EXT_TYPED_OP(rms_norm_backward_op, "custom::rms_norm_backward",
                std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, c10::SymIntArrayRef,
                                           const OptTensor&, std::optional<double>))
OP_EXT_TYPED_OP(fused_add_rms_norm_op, "custom::fused_add_rms_norm",
                std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, c10::SymIntArrayRef,
                                           const OptTensor&, std::optional<double>))
OP_EXT_TYPED_OP(fused_add_rms_norm_backward_op, "custom::fused_add_rms_norm_backward",
                std::tuple<Tensor, Tensor>(const Tensor&, const OptTensor&, const Tensor&,
                                           c10::SymIntArrayRef, const OptTensor&,
                                           std::optional<double>))
OP_EXT_TYPED_OP(layer_norm_op, "custom::layer_norm",
                Tensor(const Tensor&, c10::SymIntArrayRef, const OptTensor&, const OptTensor&,
                       double))
OP_EXT_TYPED_OP(layer_norm_backward_op, "custom::layer_norm_backward",
                std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                   c10::SymIntArrayRef, const OptTensor&,
                                                   const OptTensor&, double))
OP_EXT_TYPED_OP(softmax_op, "custom::softmax", Tensor(const Tensor&, int64_t))
OP_EXT_TYPED_OP(softmax_backward_op, "custom::softmax_backward",
                Tensor(const Tensor&, const Tensor&, int64_t))

#undef OP_EXT_TYPED_OP

}  // namespace op_ext
