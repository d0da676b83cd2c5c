// SwiGluGradCustom: gradGate = dy * up * silu'(gate), gradUp = dy * silu(gate).
// Kernel: glu_grad_common.h; tiling: host/tiling/swiglu_grad_custom_tiling.h.
#include "glu_grad_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "swiglu_grad_custom_tiling.h"

extern "C" __global__ __aicore__ void swiglu_grad_custom(GM_ADDR dy, GM_ADDR gate, GM_ADDR up, GM_ADDR gradGate,
                                                         GM_ADDR gradUp, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  op_ext_kernel::DispatchGluGrad(dy, gate, up, gradGate, gradUp, tilingData);
}
