// RotaryEmbeddingCustom (rotary_embedding): the tiling (rope_tiling.h).
#include "rotary_embedding_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

optiling::RotaryEmbeddingCustomTilingData ComputeRotaryEmbeddingTiling(const RopeShape& shape, uint32_t dtype, const SocSpec& soc) {
  return PlanRope<optiling::RotaryEmbeddingCustomTilingData>("RotaryEmbeddingCustom", shape, dtype, soc);
}

namespace {

const RegisterTilingInspector kInspect("rotary_embedding", [](const TilingQuery& q, const SocSpec& soc) {
  return InspectRope(q, soc, ComputeRotaryEmbeddingTiling);
});

}  // namespace

}  // namespace op_ext::ascend
