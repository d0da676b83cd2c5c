#include "softmax_custom_tiling.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "slab_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

namespace {

constexpr const char* kOp = "SoftmaxCustom";

void FillRows(optiling::SoftmaxCustomTilingData& t, uint64_t outer, uint64_t dimSize, uint32_t dtype,
              const SocSpec& soc) {
  const RowPlan plan = PlanRows(
      kOp, outer, dimSize, dtype, soc,
      [&](uint64_t k, uint64_t stride) { return SoftmaxUbBytesRows(dtype, k, stride, dimSize); },
      [&](uint64_t chunk) { return SoftmaxUbBytesChunk(dtype, chunk); });
  t.set_unitsPerCore(plan.rowsPerCore);
  t.set_bigCoreNum(plan.bigCoreNum);
  t.set_usedCoreNum(plan.usedCoreNum);
  t.set_split(plan.splitRow);
  t.set_rowStride(plan.rowStride);
  t.set_rowsPerTile(plan.rowsPerTile);
  t.set_chunkLength(plan.chunkLength);
  t.set_reduceWorkLength(uint32_t(ReduceWorkFloats(plan.splitRow ? plan.chunkLength : dimSize)));
}

void FillColumns(optiling::SoftmaxCustomTilingData& t, uint64_t outer, uint64_t dimSize, uint64_t inner,
                 uint32_t dtype, const SocSpec& soc) {
  const SlabPlan plan = PlanSlabs(kOp, outer, dimSize, inner, dtype, soc, [&](uint64_t rows, uint64_t width) {
    return SoftmaxUbBytesSlab(dtype, rows, width);
  });
  FillSlabFields(t, plan);
}

}  // namespace

optiling::SoftmaxCustomTilingData ComputeSoftmaxTiling(uint64_t outer, uint64_t dimSize, uint64_t inner,
                                                       uint32_t dtype, const SocSpec& soc) {
  if (dimSize > (uint64_t(1) << 31) || inner > (uint64_t(1) << 31)) {
    throw TilingError(std::string(kOp) + ": dims of more than 2^31 elements");
  }
  optiling::SoftmaxCustomTilingData t;
  t.set_outer(outer);
  t.set_inner(inner);
  t.set_dimSize(uint32_t(dimSize));
  t.set_columns(inner > 1 ? 1 : 0);
  t.set_dataType(dtype);
  t.set_tailMode(RowTailMode(soc));
  if (outer == 0 || dimSize == 0 || inner == 0) return t;
  if (inner == 1) {
    FillRows(t, outer, dimSize, dtype, soc);
  } else {
    FillColumns(t, outer, dimSize, inner, dtype, soc);
  }
  return t;
}

namespace {

const RegisterTilingInspector kInspectSoftmax("softmax", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [outer, dimSize, inner].
  const auto& s = q.shapes.at(0);
  const auto t = ComputeSoftmaxTiling(uint64_t(s.at(0)), uint64_t(s.at(1)), uint64_t(s.at(2)), q.dtype, soc);
  TilingFields fields = DumpTiling(t);
  uint64_t ub = 0;
  if (t.usedCoreNum == 0) {
    ub = 0;
  } else if (t.columns) {
    ub = SoftmaxUbBytesSlab(q.dtype, t.chunkLength, t.innerTile);
  } else {
    ub = t.split ? SoftmaxUbBytesChunk(q.dtype, t.chunkLength)
                 : SoftmaxUbBytesRows(q.dtype, t.rowsPerTile, t.rowStride, t.dimSize);
  }
  fields.emplace_back("_ubBytes", double(ub));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
