// Softmax (softmax): the torch-free contract of its kernels, shared by the CPU
// kernels (softmax.cpp) and the CUDA launchers (../cuda/softmax.cuh).
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace op_ext::cpu {

// Softmax over the middle dim of a dense [outer, dim_size, inner] view.
struct SoftmaxArgs {
  const void* input;
  void* output;
  int64_t outer;
  int64_t dim_size;
  int64_t inner;
};

struct SoftmaxBackwardArgs {
  const void* grad_output;
  const void* output;
  void* grad_input;
  int64_t outer;
  int64_t dim_size;
  int64_t inner;
};

// The kernels, as the glue names them: filled by softmax.cpp, once per
// instruction set (register_kernel.h), and by ../cuda/softmax.cu with its
// CUDA launchers (OP_EXT_REGISTER_CUDA_KERNEL).
inline KernelStub<SoftmaxArgs> softmax_forward{"softmax_forward"};
inline KernelStub<SoftmaxBackwardArgs> softmax_backward{"softmax_backward"};

}  // namespace op_ext::cpu
