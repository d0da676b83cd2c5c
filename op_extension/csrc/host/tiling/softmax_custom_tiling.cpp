#include "softmax_custom_tiling.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "elementwise_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

namespace {

constexpr const char* kOp = "SoftmaxCustom";
// Slab width when dim is walked in chunks: wide enough for whole 256-byte
// vector repeats, narrow enough to leave the UB to dim rows.
constexpr uint64_t kSplitSlabBytes = 256;

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
  const uint64_t elemBytes = DTypeBytes(dtype);
  const uint64_t blockElems = kBlockBytes / elemBytes;
  if (!soc.hasDataCopyPad && (inner * elemBytes) % kBlockBytes != 0) {
    throw TilingError(std::string(kOp) + ": on " + soc.name + " the dims after `dim` must span a multiple of 32 "
                      "bytes (" + std::to_string(blockElems) + " " + DTypeName(dtype) + " elements), got " +
                      std::to_string(inner) + "; this SoC has no DataCopyPad to move unaligned rows");
  }
  if (inner * elemBytes > UINT32_MAX) {
    // DataCopyPad's GM stride between slab rows is a 32-bit byte count.
    throw TilingError(std::string(kOp) + ": the dims after `dim` span more than 4 GiB");
  }
  const uint64_t fullWidth = RoundUp(inner, blockElems);
  const auto fits = [&](uint64_t rows, uint64_t width) { return SoftmaxUbBytesSlab(dtype, rows, width) <= soc.ubSize; };
  uint64_t width = 0;
  uint64_t rows = dimSize;
  if (dimSize <= kMaxBlockCount && fits(dimSize, blockElems)) {
    // All of dim in one slab: the widest slab that fits, but no wider than
    // needed to give every core a unit when outer alone cannot.
    uint64_t blocks = fullWidth / blockElems;
    while (blocks > 1 && !fits(dimSize, blocks * blockElems)) blocks = std::max<uint64_t>(1, blocks * 3 / 4);
    while (fits(dimSize, (blocks + 1) * blockElems) && (blocks + 1) * blockElems <= fullWidth) ++blocks;
    if (outer < soc.vectorCoreNum) {
      // Narrower slabs for more cores, but each still at least kMinBytesPerCore.
      const uint64_t wantTiles = CeilDiv(soc.vectorCoreNum, outer);
      const uint64_t coreBlocks = CeilDiv(CeilDiv(inner, wantTiles), blockElems);
      const uint64_t minBlocks = CeilDiv(kMinBytesPerCore, dimSize * kBlockBytes);
      blocks = std::min(blocks, std::max<uint64_t>({1, coreBlocks, minBlocks}));
    }
    width = blocks * blockElems;
  } else {
    // dim in chunks of `rows` rows.
    t.set_split(1);
    width = std::min(fullWidth, RoundUp(kSplitSlabBytes / elemBytes, blockElems));
    if (!fits(1, width)) width = blockElems;
    if (!fits(1, width)) {
      throw TilingError(std::string(kOp) + ": not even one 32-byte block per slab row fits in the " +
                        std::to_string(soc.ubSize) + "-byte UB of " + soc.name);
    }
    rows = 1;
    const uint64_t limit = std::min<uint64_t>(dimSize, kMaxBlockCount);
    while (rows < limit && fits(rows + 1, width)) ++rows;
  }
  const uint64_t innerTiles = CeilDiv(inner, width);
  const uint64_t units = outer * innerTiles;
  const uint64_t unitBytes = dimSize * std::min(width, inner) * elemBytes;
  const CoreSplit split = SplitOverCores(units, soc.vectorCoreNum, std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore, unitBytes)));
  t.set_unitsPerCore(split.unitsPerCore);
  t.set_bigCoreNum(split.bigCoreNum);
  t.set_usedCoreNum(split.usedCoreNum);
  t.set_chunkLength(uint32_t(rows));
  t.set_innerTile(uint32_t(width));
  t.set_innerTiles(uint32_t(innerTiles));
  t.set_stridedCopyPad(soc.hasDataCopyPad ? 1 : 0);
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
