// Input validation shared by the CPU (and later CUDA/NPU) glue. Every message
// starts with the op's qualified name, and every check runs before a kernel.
// The fake kernels in op_extension/_fake.py apply the same rules to FakeTensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "../kernel/cpu/cpu_kernels.h"
#include "../kernel/cpu/gelu_approx.h"

namespace op_ext {

using at::IntArrayRef;
using at::Tensor;

template <size_t N>
void check_dtype(const char* op, const Tensor& t, const char* name,
                 const std::array<c10::ScalarType, N>& allowed) {
  for (auto dtype : allowed) {
    if (t.scalar_type() == dtype) return;
  }
  std::string names;
  for (auto dtype : allowed) {
    names += (names.empty() ? "" : ", ") + std::string(c10::toString(dtype));
  }
  TORCH_CHECK_TYPE(false, op, ": ", name, " has dtype ", t.scalar_type(),
                   ", which is not supported; supported dtypes: ", names);
}

// `t` must share the dtype and device of `ref`.
void check_same(const char* op, const Tensor& ref, const char* ref_name, const Tensor& t,
                const char* name);

void check_same_shape(const char* op, const Tensor& ref, const char* ref_name, const Tensor& t,
                      const char* name);

// The [rows, cols] view of `input` normalised over its trailing `normalized_shape`.
struct RowShape {
  int64_t rows;
  int64_t cols;
};
RowShape check_normalized_shape(const char* op, const Tensor& input, IntArrayRef normalized_shape);

// weight/bias: absent, or of shape normalized_shape with the input's dtype and device.
void check_affine(const char* op, const std::optional<Tensor>& param, const char* name,
                  const Tensor& input, IntArrayRef normalized_shape);

// add_backward: `input_size` must broadcast to grad_output's shape (the sizes
// the gradient is summed back to).
void check_add_backward_size(const char* op, const Tensor& grad_output, IntArrayRef input_size);

// Wraps a possibly negative dim; IndexError when out of range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

cpu::GeluApprox parse_gelu_approximate(const char* op, c10::string_view approximate);

cpu::DType kernel_dtype(c10::ScalarType dtype);

// eps=None means the machine epsilon of the computation dtype (float for
// float16/bfloat16, else the input dtype), as in F.rms_norm.
double rms_norm_eps(const Tensor& input, std::optional<double> eps);

// Optional tensor -> data pointer of its contiguous copy kept alive by `holder`.
const void* optional_data(const std::optional<Tensor>& t, Tensor& holder);

}  // namespace op_ext
