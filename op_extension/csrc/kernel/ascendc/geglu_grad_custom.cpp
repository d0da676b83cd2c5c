// GeGluGradCustom: gradGate = dy * up * gelu'(gate), gradUp = dy * gelu(gate),
// approximate "none" (erf) or "tanh". Kernel: glu_grad_common.h; tiling:
// host/tiling/geglu_grad_custom_tiling.h.
#include "geglu_grad_custom_tiling.h"
#include "glu_grad_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"

extern "C" __global__ __aicore__ void geglu_grad_custom(GM_ADDR dy, GM_ADDR gate, GM_ADDR up, GM_ADDR gradGate,
                                                        GM_ADDR gradUp, GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  op_ext_kernel::DispatchGluGrad(dy, gate, up, gradGate, gradUp, tilingData);
}
