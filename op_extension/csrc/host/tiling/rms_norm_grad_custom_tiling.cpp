#include "rms_norm_grad_custom_tiling.h"

#include <algorithm>
#include <string>

#include "elementwise_tiling.h"
#include "row_norm_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

uint64_t RmsNormGradUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols, bool gradResidual) {
  const uint64_t e = DTypeBytes(dtype);
  return (gradResidual ? 8 : 6) * k * stride * e + 4 * stride * (dtype == kDTypeFloat ? 2 : 4) +
         4 * ReduceWorkFloats(cols) + 64 + 4 * RoundUp(kRmsNormGradStatFloats * k, 8) + kRowCopierStageBytes;
}

uint64_t RmsNormGradUbBytesChunk(uint32_t dtype, uint64_t chunk, bool gradResidual) {
  const uint64_t e = DTypeBytes(dtype);
  return (gradResidual ? 8 : 6) * chunk * e + 4 * chunk * (dtype == kDTypeFloat ? 1 : 4) +
         4 * ReduceWorkFloats(chunk) + 160 + kRowCopierStageBytes;
}

uint64_t RmsNormGradUbBytesColumns(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = DTypeBytes(dtype);
  return 6 * chunk * e + 4 * chunk * (dtype == kDTypeFloat ? 2 : 4) + kRowCopierStageBytes;
}

uint64_t RmsNormGradWorkspaceBytes(const optiling::RmsNormGradCustomTilingData& t) {
  if (!t.hasWeight) return 0;
  return uint64_t(t.usedCoreNum) * t.statTilesPerCore * t.statPitch * sizeof(float);
}

namespace {

optiling::RmsNormGradCustomTilingData PlanRmsNormGrad(const char* op, uint64_t rows, uint64_t cols, uint32_t dtype,
                                                      bool hasWeight, bool gradResidual, double eps,
                                                      const SocSpec& soc) {
  const RowPlan plan = PlanRows(
      op, rows, cols, dtype, soc,
      [&](uint64_t k, uint64_t stride) { return RmsNormGradUbBytesRows(dtype, k, stride, cols, gradResidual); },
      [&](uint64_t chunk) { return RmsNormGradUbBytesChunk(dtype, chunk, gradResidual); });
  optiling::RmsNormGradCustomTilingData t;
  t.set_pass(0);
  SetRowNormFields(t, plan, cols, dtype, hasWeight, eps, soc);
  t.set_hasGradResidual(gradResidual ? 1 : 0);
  const uint64_t maxRowsPerCore = plan.rowsPerCore + (plan.bigCoreNum ? 1 : 0);
  t.set_statRowsPerSlot(plan.splitRow ? 1 : std::max<uint32_t>(1, plan.rowsPerTile));
  t.set_statPitch(uint32_t(RoundUp(uint64_t(kRmsNormGradStatFloats) * t.statRowsPerSlot, 8)));
  t.set_statTilesPerCore(uint32_t(CeilDiv(maxRowsPerCore, t.statRowsPerSlot)));
  if (!hasWeight || cols == 0) return t;
  // Pass 1: column blocks of gradWeight over cores; every core reads all rows.
  const uint64_t e = DTypeBytes(dtype);
  const uint64_t blockElems = kBlockBytes / e;
  const uint64_t colBlocks = ColumnUnits(soc, cols, blockElems);
  const uint64_t minBlocks = std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore / kBlockBytes, std::max<uint64_t>(1, rows)));
  const CoreSplit split = SplitOverCores(colBlocks, soc.vectorCoreNum, minBlocks);
  t.set_dwUsedCoreNum(split.usedCoreNum);
  t.set_dwBlocksPerCore(split.unitsPerCore);
  t.set_dwBigCoreNum(split.bigCoreNum);
  const uint64_t cap = std::min<uint64_t>((split.unitsPerCore + (split.bigCoreNum ? 1 : 0)) * blockElems, 65536);
  if (RmsNormGradUbBytesColumns(dtype, blockElems) > soc.ubSize) {
    throw TilingError(std::string(op) + ": the UB of " + soc.name + " is too small");
  }
  uint64_t lo = 1, hi = std::max<uint64_t>(1, cap / blockElems);
  while (lo < hi) {
    const uint64_t mid = (lo + hi + 1) / 2;
    if (RmsNormGradUbBytesColumns(dtype, mid * blockElems) <= soc.ubSize) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  t.set_dwChunkCols(uint32_t(lo * blockElems));
  return t;
}

}  // namespace

optiling::RmsNormGradCustomTilingData ComputeRmsNormGradTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                               bool hasWeight, double eps, const SocSpec& soc) {
  return PlanRmsNormGrad("RmsNormGradCustom", rows, cols, dtype, hasWeight, false, eps, soc);
}

optiling::RmsNormGradCustomTilingData ComputeFusedAddRmsNormGradTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                                       bool hasWeight, bool hasGradResidual,
                                                                       double eps, const SocSpec& soc) {
  return PlanRmsNormGrad("FusedAddRmsNormGradCustom", rows, cols, dtype, hasWeight, hasGradResidual, eps, soc);
}

namespace {

TilingFields InspectRmsNormGrad(const optiling::RmsNormGradCustomTilingData& t, uint32_t dtype) {
  TilingFields fields = DumpTiling(t);
  const bool gr = t.hasGradResidual != 0;
  const uint64_t ub = t.usedCoreNum == 0 ? 0
                      : t.splitRow       ? RmsNormGradUbBytesChunk(dtype, t.chunkLength, gr)
                                         : RmsNormGradUbBytesRows(dtype, t.rowsPerTile, t.rowStride, t.cols, gr);
  fields.emplace_back("_ubBytes", double(ub));
  fields.emplace_back("_dwUbBytes", double(t.dwUsedCoreNum ? RmsNormGradUbBytesColumns(dtype, t.dwChunkCols) : 0));
  fields.emplace_back("_workspaceBytes", double(RmsNormGradWorkspaceBytes(t)));
  return fields;
}

const RegisterTilingInspector kInspectRmsNormGrad("rms_norm_backward", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [rows, cols]; attrs: eps, hasWeight. Returns the pass-0 tiling (with
  // the pass-1 fields) plus _ubBytes of pass 0, _dwUbBytes of pass 1 and _workspaceBytes.
  const auto& s = q.shapes.at(0);
  const double eps = q.attrs.count("eps") ? q.attrs.at("eps") : 1e-6;
  const bool weight = !q.attrs.count("hasWeight") || q.attrs.at("hasWeight") != 0;
  const auto t = ComputeRmsNormGradTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), q.dtype, weight, eps, soc);
  return std::vector<TilingFields>{InspectRmsNormGrad(t, q.dtype)};
});

const RegisterTilingInspector kInspectFusedAddRmsNormGrad(
    "fused_add_rms_norm_backward", [](const TilingQuery& q, const SocSpec& soc) {
      // shapes: [rows, cols]; attrs: eps, hasWeight, hasGradResidual (both default 1). As rms_norm_backward.
      const auto& s = q.shapes.at(0);
      const double eps = q.attrs.count("eps") ? q.attrs.at("eps") : 1e-6;
      const bool weight = !q.attrs.count("hasWeight") || q.attrs.at("hasWeight") != 0;
      const bool gr = !q.attrs.count("hasGradResidual") || q.attrs.at("hasGradResidual") != 0;
      const auto t =
          ComputeFusedAddRmsNormGradTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), q.dtype, weight, gr, eps, soc);
      return std::vector<TilingFields>{InspectRmsNormGrad(t, q.dtype)};
    });

}  // namespace

}  // namespace op_ext::ascend
