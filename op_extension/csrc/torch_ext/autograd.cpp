// Autograd for the custom ops, in C++ so that an eager call pays no Python
// wrapper. Each forward redispatches below the Autograd key to the device
// kernel; each backward calls the registered custom::<op>_backward op, so
// tracing (torch.compile, export) sees backward ops too.
//
// Nothing here reads concrete sizes: under torch.compile(dynamic=True) these
// functions run on FakeTensors with symbolic shapes.
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

#include "op_handles.h"
#include "transforms.h"

namespace op_ext {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;


OptTensor saved_optional(const Tensor& t) {
  return t.defined() ? OptTensor(t) : std::nullopt;
}

std::vector<c10::SymInt> saved_sym_ints(AutogradContext* ctx, const char* key) {
  return ctx->saved_data[key].toSymIntVector();
}

// Saves tensors for the backward. A tensor made under torch.inference_mode()
// cannot be saved; torch's composite forms (F.rms_norm, F.silu(g) * u, ...) never
// need to when only a weight or the other operand requires grad, so they run
// with such inputs. Saving a copy, made here outside inference mode, lets our
// ops run in the same cases; other inputs are saved as they are.
void save_for_backward(AutogradContext* ctx, std::initializer_list<Tensor> tensors) {
  variable_list saved;
  saved.reserve(tensors.size());
  for (const Tensor& t : tensors) saved.push_back(t.defined() && t.is_inference() ? t.clone() : t);
  ctx->save_for_backward(std::move(saved));
}

bool requires_grad(const Tensor& t) {
  return t.defined() && t.requires_grad();
}
bool requires_grad(const OptTensor& t) {
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
Tensor param_grad(const Tensor& param, const Tensor& grad) {
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
void check_no_functorch(const char* op) {
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

class AddFunction : public torch::autograd::Function<AddFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& other,
                        double alpha) {
    ctx->saved_data["input_size"] = input.sym_sizes();
    ctx->saved_data["other_size"] = other.sym_sizes();
    ctx->saved_data["alpha"] = alpha;
    at::AutoDispatchBelowADInplaceOrView guard;
    return add_op().call(input, other, alpha);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    const double alpha = ctx->saved_data["alpha"].toDouble();
    // Where no broadcast or scaling happened the gradient passes through, as in
    // aten::add; otherwise our reduction kernel sums over the broadcast dims.
    auto reduce = [&](const char* key, double scale) -> Tensor {
      const auto size = saved_sym_ints(ctx, key);
      if (scale == 1.0 && grad.sym_sizes() == c10::SymIntArrayRef(size)) return grad;
      return add_backward_op().call(grad, size, scale);
    };
    Tensor grad_input = ctx->needs_input_grad(0) ? reduce("input_size", 1.0) : Tensor();
    Tensor grad_other = ctx->needs_input_grad(1) ? reduce("other_size", alpha) : Tensor();
    return {grad_input, grad_other, Tensor()};
  }
};

class GeluFunction : public torch::autograd::Function<GeluFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& input, c10::string_view approximate) {
    save_for_backward(ctx, {input});
    ctx->saved_data["approximate"] = std::string(approximate);
    at::AutoDispatchBelowADInplaceOrView guard;
    return gelu_op().call(input, approximate);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    return {gelu_backward_op().call(grads[0], saved[0], approximate), Tensor()};
  }
};

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up) {
    save_for_backward(ctx, {gate, up});
    at::AutoDispatchBelowADInplaceOrView guard;
    return swiglu_op().call(gate, up);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_gate, grad_up] = swiglu_backward_op().call(grads[0], saved[0], saved[1]);
    return {grad_gate, grad_up};
  }
};

// q and k get their gradients from the backward op. cos and sin usually come
// from a model's rotary buffers and need none; when they do, their gradients are
// the composite sums over what they broadcast over (q and k are kept for it only then).
class RotaryEmbeddingFunction : public torch::autograd::Function<RotaryEmbeddingFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& cos,
                               const Tensor& sin, int64_t unsqueeze_dim) {
    const bool table_grads = cos.requires_grad() || sin.requires_grad();
    if (table_grads) {
      save_for_backward(ctx, {cos, sin, q, k});
    } else {
      save_for_backward(ctx, {cos, sin});
    }
    ctx->saved_data["unsqueeze_dim"] = unsqueeze_dim;
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [q_embed, k_embed] = rotary_embedding_op().call(q, k, cos, sin, unsqueeze_dim);
    return {q_embed, k_embed};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const int64_t dim = ctx->saved_data["unsqueeze_dim"].toInt();
    auto [grad_q, grad_k] = rotary_embedding_backward_op().call(grads[0], grads[1], saved[0], saved[1], dim);
    Tensor grad_cos, grad_sin;
    if (saved.size() == 4 && (ctx->needs_input_grad(2) || ctx->needs_input_grad(3))) {
      const Tensor& cos = saved[0];
      const int64_t wrapped = dim < 0 ? dim + cos.dim() + 1 : dim;
      const std::vector<int64_t> table_shape = cos.unsqueeze(wrapped).sizes().vec();
      auto rotate_half = [](const Tensor& x) {
        const int64_t h = x.size(-1) / 2;
        return at::cat({at::neg(x.narrow(-1, h, h)), x.narrow(-1, 0, h)}, -1);
      };
      auto reduce = [&](const Tensor& t) { return t.sum_to_size(table_shape).squeeze(wrapped); };
      const Tensor &q = saved[2], &k = saved[3];
      if (ctx->needs_input_grad(2)) grad_cos = at::add(reduce(at::mul(grads[0], q)), reduce(at::mul(grads[1], k)));
      if (ctx->needs_input_grad(3)) {
        grad_sin = at::add(reduce(at::mul(grads[0], rotate_half(q))), reduce(at::mul(grads[1], rotate_half(k))));
      }
    }
    return {grad_q, grad_k, grad_cos, grad_sin, Tensor()};
  }
};

class GegluFunction : public torch::autograd::Function<GegluFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up,
                        c10::string_view approximate) {
    save_for_backward(ctx, {gate, up});
    ctx->saved_data["approximate"] = std::string(approximate);
    at::AutoDispatchBelowADInplaceOrView guard;
    return geglu_op().call(gate, up, approximate);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    auto [grad_gate, grad_up] =
        geglu_backward_op().call(grads[0], saved[0], saved[1], approximate);
    return {grad_gate, grad_up, Tensor()};
  }
};

// RMSNorm saves its input, not rstd: the backward recomputes rstd in the same
// pass over the row that it needs anyway, so nothing extra is kept alive.
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& input,
                        c10::SymIntArrayRef normalized_shape, const OptTensor& weight,
                        std::optional<double> eps) {
    save_for_backward(ctx, {input, weight.value_or(Tensor())});
    ctx->saved_data["normalized_shape"] = normalized_shape;
    ctx->saved_data["eps"] = eps;
    at::AutoDispatchBelowADInplaceOrView guard;
    return rms_norm_op().call(input, normalized_shape, weight, eps);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto shape = saved_sym_ints(ctx, "normalized_shape");
    auto [grad_input, grad_weight] = rms_norm_backward_op().call(
        grads[0], saved[0], shape, saved_optional(saved[1]), ctx->saved_data["eps"].toOptional<double>());
    return {grad_input, Tensor(), param_grad(saved[1], grad_weight), Tensor()};
  }
};

class FusedAddRmsNormFunction : public torch::autograd::Function<FusedAddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& residual,
                               c10::SymIntArrayRef normalized_shape, const OptTensor& weight,
                               std::optional<double> eps) {
    ctx->saved_data["normalized_shape"] = normalized_shape;
    ctx->saved_data["eps"] = eps;
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [output, residual_out] =
        fused_add_rms_norm_op().call(input, residual, normalized_shape, weight, eps);
    save_for_backward(ctx, {residual_out, weight.value_or(Tensor())});
    return {output, residual_out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto shape = saved_sym_ints(ctx, "normalized_shape");
    auto [grad_sum, grad_weight] = fused_add_rms_norm_backward_op().call(
        grads[0], saved_optional(grads[1]), saved[0], shape, saved_optional(saved[1]),
        ctx->saved_data["eps"].toOptional<double>());
    // d(input + residual)/d input = d/d residual = identity
    return {grad_sum, grad_sum, Tensor(), param_grad(saved[1], grad_weight), Tensor()};
  }
};

class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& input,
                        c10::SymIntArrayRef normalized_shape, const OptTensor& weight,
                        const OptTensor& bias, double eps) {
    save_for_backward(ctx, {input, weight.value_or(Tensor()), bias.value_or(Tensor())});
    ctx->saved_data["normalized_shape"] = normalized_shape;
    ctx->saved_data["eps"] = eps;
    at::AutoDispatchBelowADInplaceOrView guard;
    return layer_norm_op().call(input, normalized_shape, weight, bias, eps);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto shape = saved_sym_ints(ctx, "normalized_shape");
    auto [grad_input, grad_weight, grad_bias] = layer_norm_backward_op().call(
        grads[0], saved[0], shape, saved_optional(saved[1]), saved_optional(saved[2]),
        ctx->saved_data["eps"].toDouble());
    return {grad_input, Tensor(), param_grad(saved[1], grad_weight),
            param_grad(saved[2], grad_bias), Tensor()};
  }
};

class SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& input, int64_t dim) {
    ctx->saved_data["dim"] = dim;
    at::AutoDispatchBelowADInplaceOrView guard;
    Tensor output = softmax_op().call(input, dim);
    save_for_backward(ctx, {output});
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {softmax_backward_op().call(grads[0], saved[0], ctx->saved_data["dim"].toInt()),
            Tensor()};
  }
};

Tensor add_autograd(const Tensor& input, const Tensor& other, double alpha) {
  check_no_tangent("add", input, other);
  if (!records_graph(input, other)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return add_op().call(input, other, alpha);
  }
  check_no_functorch("add");
  return AddFunction::apply(input, other, alpha);
}
Tensor gelu_autograd(const Tensor& input, c10::string_view approximate) {
  check_no_tangent("gelu", input);
  if (!records_graph(input)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return gelu_op().call(input, approximate);
  }
  check_no_functorch("gelu");
  return GeluFunction::apply(input, approximate);
}
Tensor swiglu_autograd(const Tensor& gate, const Tensor& up) {
  check_no_tangent("swiglu", gate, up);
  if (!records_graph(gate, up)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return swiglu_op().call(gate, up);
  }
  check_no_functorch("swiglu");
  return SwigluFunction::apply(gate, up);
}
Tensor geglu_autograd(const Tensor& gate, const Tensor& up, c10::string_view approximate) {
  check_no_tangent("geglu", gate, up);
  if (!records_graph(gate, up)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return geglu_op().call(gate, up, approximate);
  }
  check_no_functorch("geglu");
  return GegluFunction::apply(gate, up, approximate);
}
Tensor rms_norm_autograd(const Tensor& input, c10::SymIntArrayRef normalized_shape,
                         const OptTensor& weight, std::optional<double> eps) {
  check_no_tangent("rms_norm", input, weight);
  if (!records_graph(input, weight)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return rms_norm_op().call(input, normalized_shape, weight, eps);
  }
  check_no_functorch("rms_norm");
  return RmsNormFunction::apply(input, normalized_shape, weight, eps);
}
std::tuple<Tensor, Tensor> fused_add_rms_norm_autograd(const Tensor& input, const Tensor& residual,
                                                       c10::SymIntArrayRef normalized_shape,
                                                       const OptTensor& weight,
                                                       std::optional<double> eps) {
  check_no_tangent("fused_add_rms_norm", input, residual, weight);
  if (!records_graph(input, residual, weight)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return fused_add_rms_norm_op().call(input, residual, normalized_shape, weight, eps);
  }
  check_no_functorch("fused_add_rms_norm");
  auto outs = FusedAddRmsNormFunction::apply(input, residual, normalized_shape, weight, eps);
  return {outs[0], outs[1]};
}
Tensor layer_norm_autograd(const Tensor& input, c10::SymIntArrayRef normalized_shape,
                           const OptTensor& weight, const OptTensor& bias, double eps) {
  check_no_tangent("layer_norm", input, weight, bias);
  if (!records_graph(input, weight, bias)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return layer_norm_op().call(input, normalized_shape, weight, bias, eps);
  }
  check_no_functorch("layer_norm");
  return LayerNormFunction::apply(input, normalized_shape, weight, bias, eps);
}
Tensor softmax_autograd(const Tensor& input, int64_t dim) {
  check_no_tangent("softmax", input);
  if (!records_graph(input)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return softmax_op().call(input, dim);
  }
  check_no_functorch("softmax");
  return SoftmaxFunction::apply(input, dim);
}

std::tuple<Tensor, Tensor> rotary_embedding_autograd(const Tensor& q, const Tensor& k, const Tensor& cos,
                                                     const Tensor& sin, int64_t unsqueeze_dim) {
  check_no_tangent("rotary_embedding", q, k, cos, sin);
  if (!records_graph(q, k, cos, sin)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return rotary_embedding_op().call(q, k, cos, sin, unsqueeze_dim);
  }
  check_no_functorch("rotary_embedding");
  auto outs = RotaryEmbeddingFunction::apply(q, k, cos, sin, unsqueeze_dim);
  return {outs[0], outs[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  m.impl("add", &add_autograd);
  m.impl("gelu", &gelu_autograd);
  m.impl("swiglu", &swiglu_autograd);
  m.impl("geglu", &geglu_autograd);
  m.impl("rms_norm", &rms_norm_autograd);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm_autograd);
  m.impl("layer_norm", &layer_norm_autograd);
  m.impl("softmax", &softmax_autograd);
  m.impl("rotary_embedding", &rotary_embedding_autograd);
  // The backward ops are not differentiable (no double backward): say so
  // clearly instead of silently dropping the graph.
  for (const char* name :
       {"add_backward", "gelu_backward", "swiglu_backward", "geglu_backward", "rms_norm_backward",
        "fused_add_rms_norm_backward", "layer_norm_backward", "softmax_backward",
        "rotary_embedding_backward"}) {
    m.impl(name, torch::autograd::autogradNotImplementedFallback());
  }
}

}  // namespace op_ext
