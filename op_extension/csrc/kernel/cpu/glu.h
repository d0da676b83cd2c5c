// The gated linear units' args, shared by SwiGLU (swiglu.h) and GEGLU (geglu.h):
// one struct for both, so that their kernels (activation.cpp, ../cuda/activation.cu)
// and their glue (torch_ext/glue_util.h: glu_forward, glu_backward) are one code.
#pragma once

#include <cstdint>

#include "gelu_approx.h"

namespace op_ext::cpu {

// Gated linear units: output = act(gate) * up. `approximate` is used by GEGLU only.
struct GluArgs {
  const void* gate;
  const void* up;
  void* output;
  int64_t n;
  GeluApprox approximate;
};

struct GluBackwardArgs {
  const void* grad_output;
  const void* gate;
  const void* up;
  void* grad_gate;
  void* grad_up;
  int64_t n;
  GeluApprox approximate;
};

}  // namespace op_ext::cpu
