// Autograd of custom::rotary_embedding, written by hand: op_extension/_cpp_gen.py derives
// the autograd of the ops whose backward prototype names say everything, and
// leaves out those with a file here.
#include <ATen/OpMathType.h>

#include "../autograd_util.h"

namespace op_ext {
namespace {

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
      // The products and their sums over heads (and batch) in float for 16-bit
      // tables, rounded once, as the kernels round q_embed and k_embed: in
      // float16 the sum of 32 heads' products would lose ~1e-3 relative.
      const c10::ScalarType table_dtype = cos.scalar_type();
      const c10::ScalarType opmath = at::toOpMathType(table_dtype);
      auto wide = [&](const Tensor& t) { return t.to(opmath); };
      auto reduce = [&](const Tensor& t) { return t.sum_to_size(table_shape).squeeze(wrapped); };
      const Tensor q = wide(saved[2]), k = wide(saved[3]), dq = wide(grads[0]), dk = wide(grads[1]);
      if (ctx->needs_input_grad(2)) {
        grad_cos = at::add(reduce(at::mul(dq, q)), reduce(at::mul(dk, k))).to(table_dtype);
      }
      if (ctx->needs_input_grad(3)) {
        grad_sin = at::add(reduce(at::mul(dq, rotate_half(q))), reduce(at::mul(dk, rotate_half(k)))).to(table_dtype);
      }
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

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  m.impl("rotary_embedding", &rotary_embedding_autograd);
}

}  // namespace op_ext
