#include "add_grad_custom_tiling.h"

#include <algorithm>
#include <string>
#include <utility>

#include "elementwise_tiling.h"
#include "row_tiling.h"
#include "tiling_util.h"

namespace op_ext::ascend {

uint64_t AddGradUbBytesMode0(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = DTypeBytes(dtype);
  return 4 * chunk * e + 4 * chunk * (dtype == kDTypeFloat ? 1 : 2);
}

uint64_t AddGradUbBytesMode1(uint32_t dtype, uint64_t chunk, uint64_t outTile) {
  const uint64_t e = DTypeBytes(dtype);
  return 2 * chunk * e + (dtype == kDTypeFloat ? 0 : 4 * chunk) + 4 * ReduceWorkFloats(chunk) + 64 + 4 * outTile +
         2 * outTile * e;
}

namespace {

// Largest block multiple c in [blockElems, cap] with bytes(c) <= ub, or 0.
template <typename Bytes>
uint64_t LargestChunk(uint64_t blockElems, uint64_t cap, uint64_t ub, const Bytes& bytes) {
  if (bytes(blockElems) > ub) return 0;
  uint64_t lo = 1, hi = std::max<uint64_t>(1, cap / blockElems);
  while (lo < hi) {
    const uint64_t mid = (lo + hi + 1) / 2;
    if (bytes(mid * blockElems) <= ub) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo * blockElems;
}

}  // namespace

optiling::AddGradCustomTilingData ComputeAddGradTiling(const std::vector<int64_t>& gradShape,
                                                       const std::vector<int64_t>& inputSize, uint32_t dtype,
                                                       double alpha, const SocSpec& soc) {
  const char* op = "AddGradCustom";
  // Dims grouped into maximal runs of kept / summed dims (size-1 dims carry nothing).
  const size_t lead = gradShape.size() - inputSize.size();
  std::vector<std::pair<uint64_t, bool>> groups;  // (size, summed)
  for (size_t d = 0; d < gradShape.size(); ++d) {
    const uint64_t size = uint64_t(gradShape[d]);
    if (size == 1) continue;
    const bool summed = d < lead || inputSize[d - lead] == 1;
    if (!groups.empty() && groups.back().second == summed) {
      groups.back().first *= size;
    } else {
      groups.emplace_back(size, summed);
    }
  }
  if (groups.empty()) groups.emplace_back(1, false);
  if (groups.size() > kAddGradMaxGroups) {
    throw TilingError(std::string(op) + ": inputSize alternates between kept and summed dims of gradOutput more than " +
                      std::to_string(kAddGradMaxGroups) + " times");
  }
  optiling::AddGradCustomTilingData t;
  uint64_t* sizes[kAddGradMaxGroups] = {&t.groupSize0, &t.groupSize1, &t.groupSize2, &t.groupSize3,
                                        &t.groupSize4, &t.groupSize5, &t.groupSize6, &t.groupSize7};
  uint64_t kept = 1, summed = 1;
  for (size_t g = 0; g < groups.size(); ++g) {
    *sizes[g] = groups[g].first;
    if (groups[g].second) {
      t.reducedMask |= 1u << g;
      summed *= groups[g].first;
    } else {
      kept *= groups[g].first;
    }
  }
  t.set_groupNum(uint32_t(groups.size()));
  t.set_dataType(dtype);
  t.set_alpha(float(alpha));
  t.set_tailMode(soc.hasDataCopyPad ? kTailPad : kTailOverlap);
  const uint64_t e = DTypeBytes(dtype);
  const uint64_t blockElems = kBlockBytes / e;
  const bool keptInnermost = !groups.back().second;
  if (kept == 0) return t;  // empty output: nothing to launch
  if (keptInnermost) {
    const uint64_t outCols = groups.back().first;
    if (outCols > (uint64_t(1) << 31)) throw TilingError(std::string(op) + ": more than 2^31 output columns");
    t.set_mode(0);
    t.set_outCols(uint32_t(outCols));
    t.set_outRows(kept / outCols);
    t.set_sumCount(summed);
    t.set_colBlocks(uint32_t(CeilDiv(outCols, blockElems)));
    const uint64_t units = t.outRows * t.colBlocks;
    const uint64_t minUnits = std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore / kBlockBytes, std::max<uint64_t>(1, summed)));
    // Rows shorter than one block without DataCopyPad are written element by
    // element (GlobalTensor::SetValue), whose cache lines cores must not share:
    // one core writes them all.
    const bool scalarRows = !soc.hasDataCopyPad && outCols % blockElems != 0 && outCols < blockElems;
    const CoreSplit split = SplitOverCores(units, scalarRows ? 1 : soc.vectorCoreNum, minUnits);
    t.set_usedCoreNum(split.usedCoreNum);
    t.set_unitsPerCore(split.unitsPerCore);
    t.set_bigCoreNum(split.bigCoreNum);
    const uint64_t cap = std::min<uint64_t>(uint64_t(t.colBlocks) * blockElems, 65536);
    const uint64_t chunk = LargestChunk(blockElems, cap, soc.ubSize, [&](uint64_t c) { return AddGradUbBytesMode0(dtype, c); });
    if (chunk == 0) throw TilingError(std::string(op) + ": the UB of " + soc.name + " is too small");
    t.set_chunkLength(uint32_t(chunk));
    return t;
  }
  const uint64_t runLength = groups.back().first;
  if (runLength > (uint64_t(1) << 31)) throw TilingError(std::string(op) + ": summed runs of more than 2^31 elements");
  t.set_mode(1);
  t.set_runLength(uint32_t(runLength));
  t.set_outRows(kept);
  t.set_sumCount(runLength == 0 ? 0 : summed / runLength);
  const uint64_t units = CeilDiv(kept, blockElems);
  const uint64_t unitBytes = blockElems * std::max<uint64_t>(1, t.sumCount * runLength) * e;  // input read per unit
  const CoreSplit split =
      SplitOverCores(units, soc.vectorCoreNum, std::max<uint64_t>(1, CeilDiv(kMinBytesPerCore, unitBytes)));
  t.set_usedCoreNum(split.usedCoreNum);
  t.set_unitsPerCore(split.unitsPerCore);
  t.set_bigCoreNum(split.bigCoreNum);
  const uint64_t maxOut = (split.unitsPerCore + (split.bigCoreNum ? 1 : 0)) * blockElems;
  const uint64_t outTile = std::min<uint64_t>(maxOut, 1024);
  const uint64_t cap = std::min<uint64_t>(RoundUp(std::max<uint64_t>(runLength, 1), blockElems), 65536);
  const uint64_t chunk = LargestChunk(blockElems, cap, soc.ubSize,
                                      [&](uint64_t c) { return AddGradUbBytesMode1(dtype, c, outTile); });
  if (chunk == 0) throw TilingError(std::string(op) + ": the UB of " + soc.name + " is too small");
  t.set_outTile(uint32_t(outTile));
  t.set_chunkLength(uint32_t(chunk));
  t.set_reduceWorkLength(uint32_t(ReduceWorkFloats(chunk)));
  return t;
}

namespace {

const RegisterTilingInspector kInspectAddGrad("add_backward", [](const TilingQuery& q, const SocSpec& soc) {
  // shapes: [gradOutput shape, inputSize]
  const auto t = ComputeAddGradTiling(q.shapes.at(0), q.shapes.at(1), q.dtype,
                                      q.attrs.count("alpha") ? q.attrs.at("alpha") : 1.0, soc);
  TilingFields fields = DumpTiling(t);
  const uint64_t ub = t.usedCoreNum == 0 ? 0
                      : t.mode == 0      ? AddGradUbBytesMode0(q.dtype, t.chunkLength)
                                         : AddGradUbBytesMode1(q.dtype, t.chunkLength, t.outTile);
  fields.emplace_back("_ubBytes", double(ub));
  return std::vector<TilingFields>{fields};
});

}  // namespace

}  // namespace op_ext::ascend
