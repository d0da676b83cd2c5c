// GeGlu (geglu) on CUDA: the launchers (raw device pointers, the stream; no torch,
// so plain nvcc compiles them), defined in activation.cu.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_kernels.h"
#include "../cpu/geglu.h"

namespace op_ext::cuda {

// activation.cu names them unqualified.
using cpu::GeluApprox;
using cpu::GluArgs;
using cpu::GluBackwardArgs;

void geglu_forward(DType dtype, const cpu::GluArgs& args, cudaStream_t stream);
void geglu_backward(DType dtype, const cpu::GluBackwardArgs& args, cudaStream_t stream);

// The launcher the device glue runs for each kernel of ../cpu/geglu.h.
constexpr Launcher<cpu::GluArgs> launcher(const cpu::GegluForward&) { return {&geglu_forward}; }
constexpr Launcher<cpu::GluBackwardArgs> launcher(const cpu::GegluBackward&) { return {&geglu_backward}; }

}  // namespace op_ext::cuda
