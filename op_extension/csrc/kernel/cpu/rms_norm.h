// RmsNorm (rms_norm): the torch-free contract of its kernels, shared by the CPU
// kernels (norm.cpp) and the CUDA launchers (../cuda/rms_norm.cuh). The same
// kernels run fused_add_rms_norm (fused_add_rms_norm.h): with `residual` set.
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace op_ext::cpu {

// Row-wise: the input is seen as [rows, cols] (cols = prod(normalized_shape)).
struct RmsNormArgs {
  const void* input;     // [rows, cols]
  const void* residual;  // [rows, cols] or nullptr: fused add + RMSNorm when set
  const void* weight;    // [cols] or nullptr
  void* output;          // [rows, cols]
  void* residual_out;    // [rows, cols], required when residual is set
  int64_t rows;
  int64_t cols;
  double eps;
};

struct RmsNormBackwardArgs {
  const void* grad_output;        // [rows, cols]
  const void* grad_residual_out;  // [rows, cols] or nullptr: added to grad_input
  const void* input;              // [rows, cols]: the normalised tensor
  const void* weight;             // [cols] or nullptr
  void* grad_input;               // [rows, cols]
  void* grad_weight;              // [cols], only when weight is set
  int64_t rows;
  int64_t cols;
  double eps;
};

// The kernels, as the glue names them: filled by norm.cpp, once per
// instruction set (register_kernel.h), and by ../cuda/norm.cu with its
// CUDA launchers (OP_EXT_REGISTER_CUDA_KERNEL_WITH_WORKSPACE for the backward).
inline KernelStub<RmsNormArgs> rms_norm_forward{"rms_norm_forward"};
inline KernelStub<RmsNormBackwardArgs> rms_norm_backward{"rms_norm_backward"};

}  // namespace op_ext::cpu
