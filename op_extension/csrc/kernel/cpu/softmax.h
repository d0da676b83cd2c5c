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

// The kernels, as the glue names them: their CPU variants filled in by softmax.cpp,
// once per instruction set (register_kernel.h); their CUDA launchers defined in
// ../cuda/softmax.cu and bound to them by cuda::launcher (../cuda/softmax.cuh).
struct SoftmaxForward final : KernelStub<SoftmaxArgs> {
  using KernelStub::KernelStub;
};
inline SoftmaxForward softmax_forward{"softmax_forward"};
struct SoftmaxBackward final : KernelStub<SoftmaxBackwardArgs> {
  using KernelStub::KernelStub;
};
inline SoftmaxBackward softmax_backward{"softmax_backward"};

}  // namespace op_ext::cpu
