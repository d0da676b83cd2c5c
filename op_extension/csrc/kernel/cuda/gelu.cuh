// Gelu (gelu) on CUDA: the launchers (raw device pointers, the stream; no torch,
// so plain nvcc compiles them), defined in activation.cu.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_kernels.h"
#include "../cpu/gelu.h"

namespace op_ext::cuda {

// activation.cu names them unqualified.
using cpu::GeluApprox;
using cpu::GeluArgs;
using cpu::GeluBackwardArgs;

void gelu_forward(DType dtype, const cpu::GeluArgs& args, cudaStream_t stream);
void gelu_backward(DType dtype, const cpu::GeluBackwardArgs& args, cudaStream_t stream);

// The launcher the device glue runs for each kernel of ../cpu/gelu.h.
constexpr Launcher<cpu::GeluArgs> launcher(const cpu::GeluForward&) { return {&gelu_forward}; }
constexpr Launcher<cpu::GeluBackwardArgs> launcher(const cpu::GeluBackward&) { return {&gelu_backward}; }

}  // namespace op_ext::cuda
