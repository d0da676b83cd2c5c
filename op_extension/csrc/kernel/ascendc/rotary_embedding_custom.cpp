// RotaryEmbeddingCustom (rotary_embedding): the forward rotation of one tensor (q
// or k) per launch; the kernel class is rotary_embedding_common.h's.
// Tiling: host/tiling/rotary_embedding_custom_tiling.h and rope_tiling.h.
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "rotary_embedding_common.h"
#include "rotary_embedding_custom_tiling.h"

extern "C" __global__ __aicore__ void rotary_embedding_custom(GM_ADDR x, GM_ADDR cos, GM_ADDR sin, GM_ADDR y,
                                                              GM_ADDR workspace, GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  op_ext_kernel::DispatchRope<optiling::RotaryEmbeddingCustomTilingData, false>(x, cos, sin, y, tilingData);
}
