// Softmax (softmax) on CUDA: the launchers (raw device pointers, the stream; no
// torch, so plain nvcc compiles them), defined in softmax.cu.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_kernels.h"
#include "../cpu/softmax.h"

namespace op_ext::cuda {

// softmax.cu names them unqualified.
using cpu::SoftmaxArgs;
using cpu::SoftmaxBackwardArgs;

void softmax_forward(DType dtype, const cpu::SoftmaxArgs& args, cudaStream_t stream);
void softmax_backward(DType dtype, const cpu::SoftmaxBackwardArgs& args, cudaStream_t stream);

// The launcher the device glue runs for each kernel of ../cpu/softmax.h.
constexpr Launcher<cpu::SoftmaxArgs> launcher(const cpu::SoftmaxForward&) { return {&softmax_forward}; }
constexpr Launcher<cpu::SoftmaxBackwardArgs> launcher(const cpu::SoftmaxBackward&) {
  return {&softmax_backward};
}

}  // namespace op_ext::cuda
