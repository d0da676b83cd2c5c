#include "layer_norm_grad_custom_tiling.h"

#include <algorithm>
#include <string>

#include "elementwise_tiling.h"
#include "row_norm_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

uint64_t LayerNormGradUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols) {
  const uint64_t e = DTypeBytes(dtype);
  return 6 * k * stride * e + 4 * stride * (dtype == kDTypeFloat ? 3 : 5) + 4 * ReduceWorkFloats(cols) + 64 +
         4 * RoundUp(kLayerNormGradStatFloats * k, 8) + kRowCopierStageBytes;
}

uint64_t LayerNormGradUbBytesChunk(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = DTypeBytes(dtype);
  return 6 * chunk * e + 4 * chunk * (dtype == kDTypeFloat ? 2 : 5) + 4 * ReduceWorkFloats(chunk) + 64 + 32 + kRowCopierStageBytes;
}

uint64_t LayerNormGradUbBytesColumns(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = DTypeBytes(dtype);
  return 6 * chunk * e + 4 * chunk * (dtype == kDTypeFloat ? 3 : 5) + kRowCopierStageBytes;
}

uint64_t LayerNormGradWorkspaceBytes(const optiling::LayerNormGradCustomTilingData& t) {
  if (!t.hasWeight) return 0;
  return uint64_t(t.usedCoreNum) * t.statTilesPerCore * t.statPitch * sizeof(float);
}

optiling::LayerNormGradCustomTilingData ComputeLayerNormGradTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                                   bool hasWeight, bool hasBias, double eps,
                                                                   const SocSpec& soc) {
  const char* op = "LayerNormGradCustom";
  const RowPlan plan = PlanRows(
      op, rows, cols, dtype, soc,
      [&](uint64_t k, uint64_t stride) { return LayerNormGradUbBytesRows(dtype, k, stride, cols); },
      [&](uint64_t chunk) { return LayerNormGradUbBytesChunk(dtype, chunk); });
  optiling::LayerNormGradCustomTilingData t;
  t.set_pass(0);
  SetRowNormFields(t, plan, cols, dtype, hasWeight, eps, soc);
  t.set_hasBias(hasBias ? 1 : 0);
  const uint64_t maxRowsPerCore = plan.rowsPerCore + (plan.bigCoreNum ? 1 : 0);
  t.set_statRowsPerSlot(plan.splitRow ? 1 : std::max<uint32_t>(1, plan.rowsPerTile));
  t.set_statPitch(uint32_t(RoundUp(uint64_t(kLayerNormGradStatFloats) * t.statRowsPerSlot, 8)));
  t.set_statTilesPerCore(uint32_t(CeilDiv(maxRowsPerCore, t.statRowsPerSlot)));
  if (!(hasWeight || hasBias) || cols == 0) return t;
  // Pass 1: column blocks of gradWeight / gradBias over cores; every core reads all rows.
  const uint64_t e = DTypeBytes(dtype);
  const uint64_t blockElems = kBlockBytes / e;
  const uint64_t colBlocks = ColumnUnits(soc, cols, blockElems);
  const uint64_t minBlocks =
      std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore / kBlockBytes, std::max<uint64_t>(1, rows)));
  const CoreSplit split = SplitOverCores(colBlocks, soc.vectorCoreNum, minBlocks);
  t.set_dwUsedCoreNum(split.usedCoreNum);
  t.set_dwBlocksPerCore(split.unitsPerCore);
  t.set_dwBigCoreNum(split.bigCoreNum);
  if (LayerNormGradUbBytesColumns(dtype, blockElems) > soc.ubSize) {
    throw TilingError(std::string(op) + ": the UB of " + soc.name + " is too small");
  }
  const uint64_t cap = std::min<uint64_t>((split.unitsPerCore + (split.bigCoreNum ? 1 : 0)) * blockElems, 65536);
  uint64_t lo = 1, hi = std::max<uint64_t>(1, cap / blockElems);
  while (lo < hi) {
    const uint64_t mid = (lo + hi + 1) / 2;
    if (LayerNormGradUbBytesColumns(dtype, mid * blockElems) <= soc.ubSize) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  t.set_dwChunkCols(uint32_t(lo * blockElems));
  return t;
}

namespace {

const RegisterTilingInspector kInspectLayerNormGrad("layer_norm_backward", [](const TilingQuery& q,
                                                                              const SocSpec& soc) {
  // shapes: [rows, cols]; attrs: eps, hasWeight, hasBias (both default 1). Returns the
  // pass-0 tiling (with the pass-1 fields) plus _ubBytes of pass 0, _dwUbBytes of
  // pass 1 and _workspaceBytes.
  const auto& s = q.shapes.at(0);
  const double eps = q.attrs.count("eps") ? q.attrs.at("eps") : 1e-5;
  const bool weight = !q.attrs.count("hasWeight") || q.attrs.at("hasWeight") != 0;
  const bool bias = !q.attrs.count("hasBias") || q.attrs.at("hasBias") != 0;
  const auto t = ComputeLayerNormGradTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), q.dtype, weight, bias, eps, soc);
  TilingFields fields = DumpTiling(t);
  const uint64_t ub = t.usedCoreNum == 0 ? 0
                      : t.splitRow       ? LayerNormGradUbBytesChunk(q.dtype, t.chunkLength)
                                         : LayerNormGradUbBytesRows(q.dtype, t.rowsPerTile, t.rowStride, t.cols);
  fields.emplace_back("_ubBytes", double(ub));
  fields.emplace_back("_dwUbBytes",
                      double(t.dwUsedCoreNum ? LayerNormGradUbBytesColumns(q.dtype, t.dwChunkCols) : 0));
  fields.emplace_back("_workspaceBytes", double(LayerNormGradWorkspaceBytes(t)));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
