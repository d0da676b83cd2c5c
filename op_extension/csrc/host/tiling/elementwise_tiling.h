// Tiling of elementwise kernels (add, gelu, gelu_grad, ...): the tensor is a
// flat run of `totalLength` elements cut into 32-byte blocks; the blocks are
// split over cores (balanced to within one block, at least kMinBlocksPerCore
// each so tiny tensors do not wake every core), and each core walks its range in
// tiles of tileLength elements -- a multiple of the block, as large as the
// kernel's double-buffered queues and scratch buffers allow in the UB.
//
// Core c owns elements [start, end):
//   start = (c * blocksPerCore + min(c, bigCoreNum)) * blockElems
//   end   = min(totalLength, start + (blocksPerCore + (c < bigCoreNum)) * blockElems)
// Only the last core's range can end in a partial block (the tail). With
// tailMode kTailPad the tail is moved with DataCopyPad; with kTailOverlap (SoCs
// without DataCopyPad) the last core moves the aligned part of its range and
// then one whole block ending at totalLength, recomputing up to one block of
// elements it (or the previous core) already wrote -- with identical values.
#ifndef OP_EXT_HOST_TILING_ELEMENTWISE_TILING_H_
#define OP_EXT_HOST_TILING_ELEMENTWISE_TILING_H_

#include <cstdint>

#include "soc_spec.h"
#include "tiling_util.h"

namespace op_ext::ascend {

enum TailMode : uint32_t { kTailPad = 0, kTailOverlap = 1 };

inline constexpr uint64_t kMinBytesPerCore = 1024;

struct ElementwisePlan {
  uint64_t totalLength = 0;
  uint32_t usedCoreNum = 0;
  uint64_t blocksPerCore = 0;
  uint32_t bigCoreNum = 0;
  uint32_t tileLength = 0;
  uint32_t tailMode = kTailPad;
};

// `ubBytesPerElement`: UB bytes the kernel allocates per element of tileLength
// (all queues with their double buffers, plus scratch); `ubFixedBytes`: bytes
// it allocates independently of the tile.
ElementwisePlan PlanElementwise(const char* op, uint64_t totalLength, uint32_t dtype, uint32_t ubBytesPerElement,
                                uint32_t ubFixedBytes, const SocSpec& soc);

// Copies a plan into the same-named fields of an elementwise TilingData.
template <typename TilingData>
void FillElementwiseFields(TilingData& t, const ElementwisePlan& plan, uint32_t dtype) {
  t.set_totalLength(plan.totalLength);
  t.set_blocksPerCore(plan.blocksPerCore);
  t.set_bigCoreNum(plan.bigCoreNum);
  t.set_usedCoreNum(plan.usedCoreNum);
  t.set_tileLength(plan.tileLength);
  t.set_tailMode(plan.tailMode);
  t.set_dataType(dtype);
}

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_ELEMENTWISE_TILING_H_
