#include "rms_norm_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

namespace {

constexpr RowNormUbPlan kRmsNormUb{RmsNormUbBytesRows, RmsNormUbBytesChunk};

}  // namespace

optiling::RmsNormCustomTilingData ComputeRmsNormTiling(uint64_t rows, uint64_t cols, uint32_t dtype, bool hasWeight,
                                                       double eps, const SocSpec& soc) {
  return ComputeRowNormTiling<optiling::RmsNormCustomTilingData>("RmsNormCustom", rows, cols, dtype, hasWeight, eps,
                                                                 soc, kRmsNormUb);
}

namespace {

const RegisterTilingInspector kInspectRmsNorm("rms_norm", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [rows, cols]; attrs: eps, hasWeight.
  const auto& s = q.shapes.at(0);
  const auto t = ComputeRmsNormTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), q.dtype, InspectFlag(q, "hasWeight"),
                                      InspectEps(q, 1e-6), soc);
  return InspectRowNorm(t, q.dtype, kRmsNormUb);
});

}  // namespace

}  // namespace op_ext::ascend
