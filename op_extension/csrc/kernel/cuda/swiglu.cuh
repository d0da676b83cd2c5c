// SwiGlu (swiglu) on CUDA: the launchers (raw device pointers, the stream; no torch,
// so plain nvcc compiles them), defined in activation.cu.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_kernels.h"
#include "../cpu/swiglu.h"

namespace op_ext::cuda {

// activation.cu names them unqualified.
using cpu::GeluApprox;
using cpu::GluArgs;
using cpu::GluBackwardArgs;

void swiglu_forward(DType dtype, const cpu::GluArgs& args, cudaStream_t stream);
void swiglu_backward(DType dtype, const cpu::GluBackwardArgs& args, cudaStream_t stream);

// The launcher the device glue runs for each kernel of ../cpu/swiglu.h.
constexpr Launcher<cpu::GluArgs> launcher(const cpu::SwigluForward&) { return {&swiglu_forward}; }
constexpr Launcher<cpu::GluBackwardArgs> launcher(const cpu::SwigluBackward&) { return {&swiglu_backward}; }

}  // namespace op_ext::cuda
