// LayerNorm (layer_norm) on CUDA: the launchers (raw device pointers, the stream;
// no torch, so plain nvcc compiles them), defined in norm.cu. The backward sums
// over rows in two passes through a caller-allocated workspace of
// layer_norm_backward_workspace_bytes bytes (may be 0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda_kernels.h"
#include "../cpu/layer_norm.h"

namespace op_ext::cuda {

// norm.cu names them unqualified.
using cpu::LayerNormArgs;
using cpu::LayerNormBackwardArgs;

void layer_norm_forward(DType dtype, const cpu::LayerNormArgs& args, cudaStream_t stream);
size_t layer_norm_backward_workspace_bytes(DType dtype, const cpu::LayerNormBackwardArgs& args);
void layer_norm_backward(DType dtype, const cpu::LayerNormBackwardArgs& args, void* workspace,
                         cudaStream_t stream);

// The launcher the device glue runs for each kernel of ../cpu/layer_norm.h.
constexpr Launcher<cpu::LayerNormArgs> launcher(const cpu::LayerNormForward&) {
  return {&layer_norm_forward};
}
constexpr Launcher<cpu::LayerNormBackwardArgs> launcher(const cpu::LayerNormBackward&) {
  return {&layer_norm_backward, &layer_norm_backward_workspace_bytes};
}

}  // namespace op_ext::cuda
