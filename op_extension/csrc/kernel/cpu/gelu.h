// Gelu (gelu): the torch-free contract of its kernels, shared by the CPU kernels
// (activation.cpp) and the CUDA launchers (../cuda/gelu.cuh).
#pragma once

#include <cstdint>

#include "cpu_kernels.h"
#include "gelu_approx.h"

namespace op_ext::cpu {

// Elementwise over n dense elements.
struct GeluArgs {
  const void* input;
  void* output;
  int64_t n;
  GeluApprox approximate;
};

struct GeluBackwardArgs {
  const void* grad_output;
  const void* input;
  void* grad_input;
  int64_t n;
  GeluApprox approximate;
};

// The kernels, as the glue names them: their CPU variants filled in by activation.cpp,
// once per instruction set (register_kernel.h); their CUDA launchers defined in
// ../cuda/activation.cu and bound to them by cuda::launcher (../cuda/gelu.cuh).
struct GeluForward final : KernelStub<GeluArgs> {
  using KernelStub::KernelStub;
};
inline GeluForward gelu_forward{"gelu_forward"};
struct GeluBackward final : KernelStub<GeluBackwardArgs> {
  using KernelStub::KernelStub;
};
inline GeluBackward gelu_backward{"gelu_backward"};

}  // namespace op_ext::cpu
