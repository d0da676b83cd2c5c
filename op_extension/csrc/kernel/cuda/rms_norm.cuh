// RmsNorm (rms_norm) on CUDA: the launchers (raw device pointers, the stream; no
// torch, so plain nvcc compiles them), defined in norm.cu; fused_add_rms_norm
// runs them too. The backward sums over rows in two passes through a
// caller-allocated workspace of rms_norm_backward_workspace_bytes bytes (may be 0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda_kernels.h"
#include "../cpu/rms_norm.h"

namespace op_ext::cuda {

// norm.cu names them unqualified.
using cpu::RmsNormArgs;
using cpu::RmsNormBackwardArgs;

void rms_norm_forward(DType dtype, const cpu::RmsNormArgs& args, cudaStream_t stream);
size_t rms_norm_backward_workspace_bytes(DType dtype, const cpu::RmsNormBackwardArgs& args);
void rms_norm_backward(DType dtype, const cpu::RmsNormBackwardArgs& args, void* workspace,
                       cudaStream_t stream);

// The launcher the device glue runs for each kernel of ../cpu/rms_norm.h.
constexpr Launcher<cpu::RmsNormArgs> launcher(const cpu::RmsNormForward&) { return {&rms_norm_forward}; }
constexpr Launcher<cpu::RmsNormBackwardArgs> launcher(const cpu::RmsNormBackward&) {
  return {&rms_norm_backward, &rms_norm_backward_workspace_bytes};
}

}  // namespace op_ext::cuda
