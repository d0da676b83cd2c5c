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

}  // namespace op_ext::cuda
