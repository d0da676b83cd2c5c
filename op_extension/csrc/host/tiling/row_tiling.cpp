#include "row_tiling.h"

#include <algorithm>
#include <string>

#include "elementwise_tiling.h"

namespace op_ext::ascend {

RowPlan PlanRows(const char* op, uint64_t rows, uint64_t cols, uint32_t dtype, const SocSpec& soc,
                 const std::function<uint64_t(uint64_t rowsPerTile, uint64_t rowStride)>& ubBytesForRows,
                 const std::function<uint64_t(uint64_t chunk)>& ubBytesForChunk) {
  RowPlan plan;
  const uint32_t elemBytes = DTypeBytes(dtype);
  const uint32_t blockElems = kBlockBytes / elemBytes;
  if (cols > (uint64_t(1) << 31)) throw TilingError(std::string(op) + ": rows of more than 2^31 elements");
  plan.rows = rows;
  plan.cols = uint32_t(cols);
  plan.rowStride = uint32_t(RoundUp(cols, blockElems));
  if (cols == 0) return plan;
  if (rows == 0) return plan;
  const uint64_t minRows = std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore, cols * elemBytes));
  const CoreSplit split = SplitOverCores(rows, CoresForRuns(soc, cols * elemBytes), minRows);
  plan.usedCoreNum = split.usedCoreNum;
  plan.rowsPerCore = split.unitsPerCore;
  plan.bigCoreNum = split.bigCoreNum;
  const uint64_t maxRowsPerCore = split.unitsPerCore + (split.bigCoreNum > 0 ? 1 : 0);
  if (ubBytesForRows(1, plan.rowStride) <= soc.ubSize) {
    // As many whole rows per tile as fit (DataCopyPad moves at most 4095 rows at once).
    uint64_t k = 1;
    const uint64_t limit = std::min<uint64_t>(maxRowsPerCore, kMaxBlockCount);
    while (k < limit && ubBytesForRows(k + 1, plan.rowStride) <= soc.ubSize) ++k;
    plan.rowsPerTile = uint32_t(k);
    plan.ubBytes = ubBytesForRows(k, plan.rowStride);
    return plan;
  }
  plan.splitRow = 1;
  // The largest block multiple whose chunk buffers fit (bytes grow with the chunk).
  if (ubBytesForChunk(blockElems) > soc.ubSize) {
    throw TilingError(std::string(op) + ": not even one 32-byte block per chunk fits in the " +
                      std::to_string(soc.ubSize) + "-byte UB of " + soc.name);
  }
  uint64_t lo = 1, hi = plan.rowStride / blockElems;
  while (lo < hi) {
    const uint64_t mid = (lo + hi + 1) / 2;
    if (ubBytesForChunk(mid * blockElems) <= soc.ubSize) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const uint64_t chunk = lo * blockElems;
  plan.chunkLength = uint32_t(chunk);
  plan.ubBytes = ubBytesForChunk(chunk);
  return plan;
}

}  // namespace op_ext::ascend
