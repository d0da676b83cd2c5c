// Autograd of custom::add, written by hand: op_extension/_cpp_gen.py derives
// the autograd of the ops whose backward prototype names say everything, and
// leaves out those with a file here.
// add's backward is a sum over the broadcast dims, which its backward op takes as
// the input's size: not a forward argument, so this is written by hand.
#include "../autograd_util.h"

namespace op_ext {
namespace {

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

Tensor add_autograd(const Tensor& input, const Tensor& other, double alpha) {
  check_no_tangent("add", input, other);
  if (!records_graph(input, other)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return add_op().call(input, other, alpha);
  }
  check_no_functorch("add");
  return AddFunction::apply(input, other, alpha);
}

}  // namespace

TORCH_LIBRARY_IMPL(custom, Autograd, m) {
  m.impl("add", &add_autograd);
}

}  // namespace op_ext
