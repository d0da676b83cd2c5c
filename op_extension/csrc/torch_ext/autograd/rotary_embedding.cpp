// Autograd of custom::rotary_embedding, written by hand: op_extension/_cpp_gen.py derives
// the autograd of the ops whose backward prototype names say everything, and
// leaves out those with a file here.
#include "../autograd_util.h"
#include "../ops/rotary_embedding.h"

namespace op_ext {
namespace {

using TableBackwardSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                          const Tensor&, int64_t, bool, bool);

inline const c10::TypedOperatorHandle<TableBackwardSignature>& rotary_table_backward_op() {
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("custom::rotary_embedding_table_backward", "")
                                 .typed<TableBackwardSignature>();
  return handle;
}

// q and k get their gradients from the backward op. cos and sin usually come
// from a model's rotary buffers and need none; when they do, their gradients are
// the sums over what they broadcast over, from custom::rotary_embedding_table_backward
// (q and k are kept for it only then).
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
    const bool cos_grad = ctx->needs_input_grad(2), sin_grad = ctx->needs_input_grad(3);
    if (saved.size() == 4 && (cos_grad || sin_grad)) {
      // One op, so that CUDA reads q, k and their gradients once (a kernel) and
      // tracing sees one node; only the tables asked for are computed.
      auto [gc, gs] = rotary_table_backward_op().call(grads[0], grads[1], saved[2], saved[3], saved[0], dim, cos_grad,
                                                      sin_grad);
      if (cos_grad) grad_cos = gc;
      if (sin_grad) grad_sin = gs;
    }
    return {grad_q, grad_k, grad_cos, grad_sin, Tensor()};
  }
};

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

// custom::rotary_embedding_table_backward, which has no prototype (see
// ops/rotary_embedding.h): its schema, its composite for every device without a
// kernel of its own (CPU, NPU; CUDA registers its kernel in
// torch_ext/cuda/rotary_embedding_table.cpp) and no double backward.
TORCH_LIBRARY_FRAGMENT(custom, m) {
  m.def(glue::kRotaryTableBackwardSchema);
}

TORCH_LIBRARY_IMPL(custom, CompositeExplicitAutograd, m) {
  m.impl(glue::kRotaryTableBackward, &glue::rotary_table_composite);
}

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  m.impl("rotary_embedding", &rotary_embedding_autograd);
  m.impl(glue::kRotaryTableBackward, torch::autograd::autogradNotImplementedFallback());
}

}  // namespace op_ext
