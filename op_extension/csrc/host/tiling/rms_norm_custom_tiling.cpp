#include "rms_norm_custom_tiling.h"

#include "tiling_util.h"

namespace op_ext::ascend {

optiling::RmsNormCustomTilingData ComputeRmsNormTiling(uint64_t rows, uint64_t cols, uint32_t dtype, bool hasWeight,
                                                       double eps, const SocSpec& soc) {
  const RowPlan plan = PlanRows(
      "RmsNormCustom", rows, cols, dtype, soc,
      [&](uint64_t k, uint64_t stride) { return RmsNormUbBytesRows(dtype, k, stride, cols); },
      [&](uint64_t chunk) { return RmsNormUbBytesChunk(dtype, chunk); });
  optiling::RmsNormCustomTilingData t;
  t.set_rows(plan.rows);
  t.set_rowsPerCore(plan.rowsPerCore);
  t.set_bigCoreNum(plan.bigCoreNum);
  t.set_usedCoreNum(plan.usedCoreNum);
  t.set_cols(plan.cols);
  t.set_rowStride(plan.rowStride);
  t.set_splitRow(plan.splitRow);
  t.set_rowsPerTile(plan.rowsPerTile);
  t.set_chunkLength(plan.chunkLength);
  t.set_reduceWorkLength(uint32_t(ReduceWorkFloats(plan.splitRow ? plan.chunkLength : cols)));
  t.set_hasWeight(hasWeight ? 1 : 0);
  t.set_dataType(dtype);
  t.set_tailMode(RowTailMode(soc));
  t.set_eps(float(eps));
  t.set_invCols(cols == 0 ? 0.0f : float(1.0 / double(cols)));
  return t;
}

namespace {

const RegisterTilingInspector kInspectRmsNorm("rms_norm", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [rows, cols]; attrs: eps, hasWeight.
  const auto& s = q.shapes.at(0);
  const double eps = q.attrs.count("eps") ? q.attrs.at("eps") : 1e-6;
  const bool weight = !q.attrs.count("hasWeight") || q.attrs.at("hasWeight") != 0;
  const auto t = ComputeRmsNormTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), q.dtype, weight, eps, soc);
  TilingFields fields = DumpTiling(t);
  const uint64_t ub = t.splitRow ? RmsNormUbBytesChunk(q.dtype, t.chunkLength)
                                 : RmsNormUbBytesRows(q.dtype, t.rowsPerTile, t.rowStride, t.cols);
  fields.emplace_back("_ubBytes", double(t.rows == 0 || t.cols == 0 ? 0 : ub));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
