// GeGlu (geglu): the torch-free contract of its kernels, shared by the CPU kernels
// (activation.cpp) and the CUDA launchers (../cuda/geglu.cuh). Its args are those of
// every gated linear unit (glu.h).
#pragma once

#include "cpu_kernels.h"
#include "glu.h"

namespace op_ext::cpu {

// The kernels, as the glue names them: their CPU variants filled in by activation.cpp,
// once per instruction set (register_kernel.h); their CUDA launchers defined in
// ../cuda/activation.cu and bound to them by cuda::launcher (../cuda/geglu.cuh).
struct GegluForward final : KernelStub<GluArgs> {
  using KernelStub::KernelStub;
};
inline GegluForward geglu_forward{"geglu_forward"};
struct GegluBackward final : KernelStub<GluBackwardArgs> {
  using KernelStub::KernelStub;
};
inline GegluBackward geglu_backward{"geglu_backward"};

}  // namespace op_ext::cpu
