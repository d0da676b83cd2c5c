#include "elementwise_tiling.h"

#include <algorithm>
#include <string>

namespace op_ext::ascend {

ElementwisePlan PlanElementwise(const char* op, uint64_t totalLength, uint32_t dtype, uint32_t ubBytesPerElement,
                                uint32_t ubFixedBytes, const SocSpec& soc) {
  ElementwisePlan plan;
  plan.totalLength = totalLength;
  plan.tailMode = soc.hasDataCopyPad ? kTailPad : kTailOverlap;
  if (totalLength == 0) return plan;
  const uint32_t blockElems = kBlockBytes / DTypeBytes(dtype);
  const uint64_t totalBlocks = CeilDiv(totalLength, blockElems);
  const CoreSplit split = SplitOverCores(totalBlocks, soc.vectorCoreNum, kMinBytesPerCore / kBlockBytes);
  plan.usedCoreNum = split.usedCoreNum;
  plan.blocksPerCore = split.unitsPerCore;
  plan.bigCoreNum = split.bigCoreNum;
  if (soc.ubSize <= ubFixedBytes) throw TilingError(std::string(op) + ": the UB of " + soc.name + " is too small");
  const uint64_t fitting = RoundDown((soc.ubSize - ubFixedBytes) / ubBytesPerElement, blockElems);
  if (fitting < blockElems) {
    throw TilingError(std::string(op) + ": one 32-byte block of tiles does not fit in the " +
                      std::to_string(soc.ubSize) + "-byte UB of " + soc.name);
  }
  const uint64_t maxCoreElems = (split.unitsPerCore + (split.bigCoreNum > 0 ? 1 : 0)) * blockElems;
  // Tiles above 65535 elements are no faster and keep counts in 32 bits comfortably.
  plan.tileLength = uint32_t(std::min<uint64_t>({fitting, maxCoreElems, RoundDown(65535, blockElems)}));
  return plan;
}

}  // namespace op_ext::ascend
