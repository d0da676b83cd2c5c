// GeGluCustom: out = gelu(gate, approximate) * up. Kernel: glu_common.h;
// tiling: host/tiling/geglu_custom_tiling.h.
#include "glu_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "geglu_custom_tiling.h"

extern "C" __global__ __aicore__ void geglu_custom(GM_ADDR gate, GM_ADDR up, GM_ADDR out, GM_ADDR workspace,
                                                   GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  op_ext_kernel::DispatchGlu(gate, up, out, tilingData);
}
