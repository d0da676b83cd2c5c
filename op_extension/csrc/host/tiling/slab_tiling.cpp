#include "slab_tiling.h"

#include <algorithm>
#include <string>

#include "elementwise_tiling.h"
#include "row_tiling.h"

namespace op_ext::ascend {

namespace {

// Slab width when dim is walked in chunks: wide enough for whole 256-byte
// vector repeats, narrow enough to leave the UB to dim rows.
constexpr uint64_t kSplitSlabBytes = 256;

}  // namespace

SlabPlan PlanSlabs(const char* op, uint64_t outer, uint64_t dimSize, uint64_t inner, uint32_t dtype,
                   const SocSpec& soc, const std::function<uint64_t(uint64_t rows, uint64_t width)>& ubBytesForSlab) {
  const uint64_t elemBytes = DTypeBytes(dtype);
  const uint64_t blockElems = kBlockBytes / elemBytes;
  if (inner * elemBytes > UINT32_MAX) {
    // DataCopyPad's GM stride between slab rows is a 32-bit byte count.
    throw TilingError(std::string(op) + ": the dims after `dim` span more than 4 GiB");
  }
  SlabPlan plan;
  const uint64_t fullWidth = RoundUp(inner, blockElems);
  const auto fits = [&](uint64_t rows, uint64_t width) { return ubBytesForSlab(rows, width) <= soc.ubSize; };
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
    plan.split = 1;
    width = std::min(fullWidth, RoundUp(kSplitSlabBytes / elemBytes, blockElems));
    if (!fits(1, width)) width = blockElems;
    if (!fits(1, width)) {
      throw TilingError(std::string(op) + ": not even one 32-byte block per slab row fits in the " +
                        std::to_string(soc.ubSize) + "-byte UB of " + soc.name);
    }
    rows = 1;
    const uint64_t limit = std::min<uint64_t>(dimSize, kMaxBlockCount);
    while (rows < limit && fits(rows + 1, width)) ++rows;
  }
  const uint64_t innerTiles = CeilDiv(inner, width);
  const uint64_t units = outer * innerTiles;
  const uint64_t unitBytes = dimSize * std::min(width, inner) * elemBytes;
  const CoreSplit split =
      SplitOverCores(units, CoresForRuns(soc, inner * elemBytes), std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore, unitBytes)));
  plan.unitsPerCore = split.unitsPerCore;
  plan.bigCoreNum = split.bigCoreNum;
  plan.usedCoreNum = split.usedCoreNum;
  plan.chunkRows = uint32_t(rows);
  plan.innerTile = uint32_t(width);
  plan.innerTiles = uint32_t(innerTiles);
  plan.stridedCopyPad = soc.hasDataCopyPad ? 1 : 0;
  return plan;
}

}  // namespace op_ext::ascend
