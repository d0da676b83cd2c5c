// RotaryEmbeddingGradCustom (rotary_embedding_backward): the gradient of one
// tensor (q or k) per launch, the inverse rotation of its output's gradient; the
// kernel class is rotary_embedding_common.h's.
// Tiling: host/tiling/rotary_embedding_grad_custom_tiling.h and rope_tiling.h.
#include "kernel_common.h"
#include "kernel_operator.h"
#include "kernel_tiling.h"
#include "rotary_embedding_grad_custom_tiling.h"
#include "rotary_embedding_common.h"

extern "C" __global__ __aicore__ void rotary_embedding_grad_custom(GM_ADDR gradY, GM_ADDR cos, GM_ADDR sin,
                                                                       GM_ADDR gradX, GM_ADDR workspace,
                                                                       GM_ADDR tiling) {
  (void)workspace;
  GET_TILING_DATA(tilingData, tiling);
  op_ext_kernel::DispatchRope<optiling::RotaryEmbeddingGradCustomTilingData, true>(gradY, cos, sin, gradX,
                                                                                      tilingData);
}
