// Tiling of row kernels (RMSNorm and its gradient; later LayerNorm, softmax,
// the GLUs): the input is [rows, cols] (cols = the normalized size), rows are
// split over cores -- balanced to within one row, at least kMinBytesPerCore of
// input per core -- and each core walks its rows in one of two ways:
//   * whole rows (splitRow 0): rowsPerTile rows per tile, as many as the UB
//     holds. In the UB every row starts on a 32-byte block: rowStride elements
//     apart (cols rounded up to a block), which is where DataCopyPad puts the
//     rows of a multi-row copy;
//   * split rows (splitRow 1), when one row does not fit: each row is walked in
//     chunks of chunkLength elements (a block multiple), twice -- statistics,
//     then output.
// Core c owns rows [c * rowsPerCore + min(c, bigCoreNum), ... + rowsPerCore + (c < bigCoreNum)).
#ifndef OP_EXT_HOST_TILING_ROW_TILING_H_
#define OP_EXT_HOST_TILING_ROW_TILING_H_

#include <cstdint>
#include <functional>

#include "soc_spec.h"
#include "tiling_util.h"

namespace op_ext::ascend {

struct RowPlan {
  uint64_t rows = 0;
  uint32_t cols = 0;
  uint32_t rowStride = 0;  // UB elements between row starts
  uint32_t usedCoreNum = 0;
  uint64_t rowsPerCore = 0;
  uint32_t bigCoreNum = 0;
  uint32_t splitRow = 0;
  uint32_t rowsPerTile = 0;   // whole rows: rows per tile
  uint32_t chunkLength = 0;   // split rows: elements per chunk
  uint64_t ubBytes = 0;       // what the kernel allocates with this plan
};

// ubBytesForRows(k, rowStride): UB bytes the kernel needs for k whole rows per
// tile; ubBytesForChunk(c): for chunks of c elements. Both must mirror the
// kernel's InitBuffer calls exactly.
RowPlan PlanRows(const char* op, uint64_t rows, uint64_t cols, uint32_t dtype, const SocSpec& soc,
                 const std::function<uint64_t(uint64_t rowsPerTile, uint64_t rowStride)>& ubBytesForRows,
                 const std::function<uint64_t(uint64_t chunk)>& ubBytesForChunk);

// Elements of the work tensor ReduceSum needs for `count` floats (CANN 8
// ReduceSum page: one partial per 256-byte repeat, rounded up to whole blocks).
inline uint64_t ReduceWorkFloats(uint64_t count) {
  const uint64_t repeats = count == 0 ? 1 : CeilDiv(count, 64);
  return RoundUp(repeats, 8);
}

// ReduceMax's work tensor holds (value, index) pairs: twice ReduceSum's.
inline uint64_t ReduceMaxWorkFloats(uint64_t count) { return 2 * ReduceWorkFloats(count); }

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_ROW_TILING_H_
