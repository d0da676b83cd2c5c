// RotaryEmbeddingBackwardCustom (rotary_embedding_backward): the tiling (rope_tiling.h).
#include "rotary_embedding_backward_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

optiling::RotaryEmbeddingBackwardCustomTilingData ComputeRotaryEmbeddingBackwardTiling(const RopeShape& shape, uint32_t dtype, const SocSpec& soc) {
  return PlanRope<optiling::RotaryEmbeddingBackwardCustomTilingData>("RotaryEmbeddingBackwardCustom", shape, dtype, soc);
}

namespace {

const RegisterTilingInspector kInspect("rotary_embedding_backward", [](const TilingQuery& q, const SocSpec& soc) {
  return InspectRope(q, soc, ComputeRotaryEmbeddingBackwardTiling);
});

}  // namespace

}  // namespace op_ext::ascend
