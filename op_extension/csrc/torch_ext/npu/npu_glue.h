// The custom ops on Ascend NPUs (torch_npu's `npu` device, dispatch key
// PrivateUse1): the same input checks as on CPU, then the Ascend custom
// kernels through their aclnn entry points (csrc/host/aclnn/aclnn_*_custom.h).
// Each op's glue is csrc/torch_ext/npu/ops/<op>.cpp, registered under PrivateUse1
// by op_ext_npu_registration.cpp, which the build generates from the prototypes;
// this header holds what every op's glue shares.
//
// What the Ascend kernels do not cover is done here, explicitly:
// - they read dense row-major ND memory: every input goes through dense()
//   (private NPU formats cast to ND, strided views copied);
// - AddCustom adds two tensors of one shape: broadcasting is materialised with
//   expand().contiguous() first;
// - they compute float16, bfloat16 and float32 only: float64 is a TypeError;
// - every op, forward and backward, has an Ascend kernel: training on npu
//   never leaves the device.
// Empty tensors never reach a kernel.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>

#include "../checks.h"
#include "aclnn_call.h"
#include "op_ext_schemas.h"
#include "torch_npu/csrc/core/npu/NPUFormat.h"

namespace op_ext::npu {

namespace gen = op_ext::generated;
using at::IntArrayRef;
using at::Tensor;
using OptTensor = std::optional<Tensor>;

// The Ascend kernels compute in float32 internally and take 16- and 32-bit floats.
constexpr std::array<c10::ScalarType, 3> kNpuDtypes = {at::kHalf, at::kFloat, at::kBFloat16};

// After the CPU dtype check (same message for dtypes no device supports), the
// ones the Ascend kernels lack.
inline void check_npu_dtype(const char* op, const Tensor& t, const char* name) {
  const bool supported =
      std::find(kNpuDtypes.begin(), kNpuDtypes.end(), t.scalar_type()) != kNpuDtypes.end();
  TORCH_CHECK_TYPE(supported, op, ": ", name, " has dtype ", t.scalar_type(),
                   ", which is not supported on npu; supported dtypes on npu: Half, Float, BFloat16");
}

// Formats whose storage is the logical shape in row-major order; torch_npu
// gives plain tensors one of these, depending on their number of dims.
inline bool is_row_major_format(int64_t format) {
  return format == ACL_FORMAT_ND || format == ACL_FORMAT_NCHW || format == ACL_FORMAT_NCL ||
         format == ACL_FORMAT_NCDHW;
}

// The layout the Ascend kernels read: a dense, row-major ND tensor.
inline Tensor dense(const Tensor& t) {
  const Tensor row_major = is_row_major_format(at_npu::native::get_npu_format(t))
                               ? t
                               : at_npu::native::npu_format_cast(t, ACL_FORMAT_ND);
  return row_major.contiguous();
}

inline OptTensor dense(const OptTensor& t) {
  if (!t.has_value() || !t->defined()) return std::nullopt;
  return dense(*t);
}

}  // namespace op_ext::npu
