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

// The kernels, as the glue names them: their CPU variants filled in by norm.cpp,
// once per instruction set (register_kernel.h); their CUDA launchers defined in
// ../cuda/norm.cu and bound to them by cuda::launcher (../cuda/rms_norm.cuh).
struct RmsNormForward final : KernelStub<RmsNormArgs> {
  using KernelStub::KernelStub;
};
inline RmsNormForward rms_norm_forward{"rms_norm_forward"};
struct RmsNormBackward final : KernelStub<RmsNormBackwardArgs> {
  using KernelStub::KernelStub;
};
inline RmsNormBackward rms_norm_backward{"rms_norm_backward"};

}  // namespace op_ext::cpu
