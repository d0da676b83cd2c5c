#include "layer_norm_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

namespace {

constexpr RowNormUbPlan kLayerNormUb{LayerNormUbBytesRows, LayerNormUbBytesChunk};

}  // namespace

optiling::LayerNormCustomTilingData ComputeLayerNormTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                           bool hasWeight, bool hasBias, double eps,
                                                           const SocSpec& soc) {
  auto t = ComputeRowNormTiling<optiling::LayerNormCustomTilingData>("LayerNormCustom", rows, cols, dtype, hasWeight,
                                                                     eps, soc, kLayerNormUb);
  t.set_hasBias(hasBias ? 1 : 0);
  return t;
}

namespace {

const RegisterTilingInspector kInspectLayerNorm("layer_norm", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [rows, cols]; attrs: eps, hasWeight, hasBias.
  const auto& s = q.shapes.at(0);
  const auto t = ComputeLayerNormTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), q.dtype, InspectFlag(q, "hasWeight"),
                                        InspectFlag(q, "hasBias"), InspectEps(q, 1e-5), soc);
  return InspectRowNorm(t, q.dtype, kLayerNormUb);
});

}  // namespace

}  // namespace op_ext::ascend
