#include "checks.h"

#include <c10/util/irange.h>

#include <limits>

namespace op_ext {

void check_same(const char* op, const Tensor& ref, const char* ref_name, const Tensor& t,
                const char* name) {
  TORCH_CHECK(t.device() == ref.device(), op, ": ", name, " is on ", t.device(), " but ",
              ref_name, " is on ", ref.device(), "; all tensors must be on the same device");
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " has dtype ",
                   t.scalar_type(), " but ", ref_name, " has dtype ", ref.scalar_type(),
                   "; all tensors must have the same dtype");
}

void check_same_shape(const char* op, const Tensor& ref, const char* ref_name, const Tensor& t,
                      const char* name) {
  TORCH_CHECK_VALUE(t.sizes() == ref.sizes(), op, ": ", name, " has shape ", t.sizes(), " but ",
                    ref_name, " has shape ", ref.sizes(), "; they must be equal");
}

RowShape check_normalized_shape(const char* op, const Tensor& input, IntArrayRef normalized_shape) {
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK_VALUE(nd >= 1, op, ": normalized_shape must have at least one dim, got ",
                    normalized_shape);
  TORCH_CHECK_VALUE(input.dim() >= nd, op, ": normalized_shape ", normalized_shape,
                    " has more dims than the input of shape ", input.sizes());
  const int64_t lead = input.dim() - nd;
  int64_t cols = 1;
  for (const auto i : c10::irange(nd)) {
    TORCH_CHECK_VALUE(normalized_shape[i] >= 0, op, ": normalized_shape ", normalized_shape,
                      " has a negative size");
    TORCH_CHECK_VALUE(input.size(lead + i) == normalized_shape[i], op, ": normalized_shape ",
                      normalized_shape, " does not match the trailing dims of the input of shape ",
                      input.sizes());
    cols *= normalized_shape[i];
  }
  int64_t rows = 1;
  for (const auto i : c10::irange(lead)) rows *= input.size(i);
  return {rows, cols};
}

void check_affine(const char* op, const std::optional<Tensor>& param, const char* name,
                  const Tensor& input, IntArrayRef normalized_shape) {
  if (!param.has_value() || !param->defined()) return;
  check_same(op, input, "input", *param, name);
  TORCH_CHECK_VALUE(param->sizes() == normalized_shape, op, ": ", name, " has shape ",
                    param->sizes(), " but normalized_shape is ", normalized_shape);
}

void check_add_backward_size(const char* op, const Tensor& grad_output, IntArrayRef input_size) {
  const int64_t offset = grad_output.dim() - static_cast<int64_t>(input_size.size());
  TORCH_CHECK_VALUE(offset >= 0, op, ": input_size ", input_size,
                    " has more dims than grad_output of shape ", grad_output.sizes());
  for (const auto i : c10::irange(input_size.size())) {
    const int64_t g = grad_output.size(i + offset);
    TORCH_CHECK_VALUE(input_size[i] == g || input_size[i] == 1, op, ": input_size ", input_size,
                      " does not broadcast to grad_output of shape ", grad_output.sizes());
  }
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);  // a 0-dim tensor has one valid dim
  TORCH_CHECK_INDEX(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ",
                    ndim, " dims (expected a dim in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

cpu::GeluApprox parse_gelu_approximate(const char* op, c10::string_view approximate) {
  if (approximate == "none") return cpu::GeluApprox::None;
  if (approximate == "tanh") return cpu::GeluApprox::Tanh;
  TORCH_CHECK_VALUE(false, op, ": approximate must be 'none' or 'tanh', got '",
                    std::string(approximate), "'");
}

cpu::DType kernel_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return cpu::DType::Float32;
    case at::kDouble:
      return cpu::DType::Float64;
    case at::kHalf:
      return cpu::DType::Float16;
    case at::kBFloat16:
      return cpu::DType::BFloat16;
    default:
      TORCH_CHECK_TYPE(false, "op_extension: no kernel for dtype ", dtype);
  }
}

double rms_norm_eps(const Tensor& input, std::optional<double> eps) {
  if (eps.has_value()) return *eps;
  // The machine epsilon of the type the norm is computed in: float for the
  // 16-bit types, which is what F.rms_norm uses too.
  if (input.scalar_type() == at::kDouble) return std::numeric_limits<double>::epsilon();
  return static_cast<double>(std::numeric_limits<float>::epsilon());
}

const void* optional_data(const std::optional<Tensor>& t, Tensor& holder) {
  if (!t.has_value() || !t->defined()) return nullptr;
  holder = t->contiguous();
  return holder.const_data_ptr();
}

}  // namespace op_ext
