// Autograd of custom::fused_add_rms_norm, written by hand: op_extension/_cpp_gen.py derives
// the autograd of the ops whose backward prototype names say everything, and
// leaves out those with a file here.
// input and residual get the same gradient (d(input + residual)), which one
// backward output cannot say by name: written by hand.
#include "../autograd_util.h"

namespace op_ext {
namespace {

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

}  // namespace

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  m.impl("fused_add_rms_norm", &fused_add_rms_norm_autograd);
}

}  // namespace op_ext
