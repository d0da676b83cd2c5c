// RotaryEmbeddingGradCustom (rotary_embedding_backward): the tiling (rope_tiling.h).
#include "rotary_embedding_grad_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

optiling::RotaryEmbeddingGradCustomTilingData ComputeRotaryEmbeddingGradTiling(const RopeShape& shape, uint32_t dtype, const SocSpec& soc) {
  return PlanRope<optiling::RotaryEmbeddingGradCustomTilingData>("RotaryEmbeddingGradCustom", shape, dtype, soc);
}

namespace {

const RegisterTilingInspector kInspect("rotary_embedding_backward", [](const TilingQuery& q, const SocSpec& soc) {
  return InspectRope(q, soc, ComputeRotaryEmbeddingGradTiling);
});

}  // namespace

}  // namespace op_ext::ascend
