#include "fused_add_rms_norm_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

namespace {

constexpr RowNormUbPlan kFusedAddRmsNormUb{FusedAddRmsNormUbBytesRows, FusedAddRmsNormUbBytesChunk};

}  // namespace

optiling::FusedAddRmsNormCustomTilingData ComputeFusedAddRmsNormTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                                       bool hasWeight, double eps, const SocSpec& soc) {
  return ComputeRowNormTiling<optiling::FusedAddRmsNormCustomTilingData>("FusedAddRmsNormCustom", rows, cols, dtype,
                                                                         hasWeight, eps, soc, kFusedAddRmsNormUb);
}

namespace {

const RegisterTilingInspector kInspectFusedAddRmsNorm("fused_add_rms_norm", [](const TilingQuery& q,
                                                                              const SocSpec& soc) {
  // shapes: [rows, cols]; attrs: eps, hasWeight.
  const auto& s = q.shapes.at(0);
  const auto t = ComputeFusedAddRmsNormTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), q.dtype,
                                              InspectFlag(q, "hasWeight"), InspectEps(q, 1e-6), soc);
  return InspectRowNorm(t, q.dtype, kFusedAddRmsNormUb);
});

}  // namespace

}  // namespace op_ext::ascend
