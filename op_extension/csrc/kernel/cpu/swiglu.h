// SwiGlu (swiglu): the torch-free contract of its kernels, shared by the CPU kernels
// (activation.cpp) and the CUDA launchers (../cuda/swiglu.cuh). Its args are those of
// every gated linear unit (glu.h).
#pragma once

#include "cpu_kernels.h"
#include "glu.h"

namespace op_ext::cpu {

// The kernels, as the glue names them: filled by activation.cpp, once per
// instruction set (register_kernel.h), and by ../cuda/activation.cu with its
// CUDA launchers (OP_EXT_REGISTER_CUDA_KERNEL).
inline KernelStub<GluArgs> swiglu_forward{"swiglu_forward"};
inline KernelStub<GluBackwardArgs> swiglu_backward{"swiglu_backward"};

}  // namespace op_ext::cpu
