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
// Rows (or chunks, slab rows) that are not whole 32-byte blocks move by
// DataCopyPad where the SoC has it (tailMode kTailPad); on Ascend310P
// (kTailOverlap) by whole-block copies: reads rounded up into the next row or the
// allocator's padding, writes as whole blocks plus a last block staged through
// one UB block, rows under one block element by element (the kernels'
// RowCopier, kernel_common.h). Element-wise stores share the scalar unit's data
// cache lines with the neighbouring rows, so a tensor whose rows are under one
// block gets one core there.
// Core c owns rows [c * rowsPerCore + min(c, bigCoreNum), ... + rowsPerCore + (c < bigCoreNum)).
#ifndef OP_EXT_HOST_TILING_ROW_TILING_H_
#define OP_EXT_HOST_TILING_ROW_TILING_H_

#include <cstdint>
#include <functional>

#include "elementwise_tiling.h"
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

// The kernels' RowCopier stage: one block of UB on every SoC.
constexpr uint64_t kRowCopierStageBytes = kBlockBytes;

inline uint32_t RowTailMode(const SocSpec& soc) { return soc.hasDataCopyPad ? kTailPad : kTailOverlap; }

// Cores for `runBytes`-long runs written element-wise below one block (see above).
inline uint32_t CoresForRuns(const SocSpec& soc, uint64_t runBytes) {
  return (!soc.hasDataCopyPad && runBytes < kBlockBytes) ? 1 : soc.vectorCoreNum;
}

// Column blocks of a weight/bias gradient pass, the unit its columns are split over
// cores in: with kTailOverlap a last partial block joins the block before it, so
// that the last core's columns are at least one block (its last block is staged,
// never written element-wise across another core's columns).
inline uint64_t ColumnUnits(const SocSpec& soc, uint64_t cols, uint64_t blockElems) {
  if (!soc.hasDataCopyPad && cols > blockElems) return cols / blockElems;
  return CeilDiv(cols, blockElems);
}

// ubBytesForRows(k, rowStride): UB bytes the kernel needs for k whole rows per
// tile; ubBytesForChunk(c): for chunks of c elements. Both must mirror the
// kernel's InitBuffer calls exactly.
RowPlan PlanRows(const char* op, uint64_t rows, uint64_t cols, uint32_t dtype, const SocSpec& soc,
                 const std::function<uint64_t(uint64_t rowsPerTile, uint64_t rowStride)>& ubBytesForRows,
                 const std::function<uint64_t(uint64_t chunk)>& ubBytesForChunk);

// Elements of the work tensor (sharedTmpBuffer) that ReduceMax and ReduceSum of
// `count` floats both fit in, on every SoC: ReduceMax's first pass writes a
// (value, index) pair per 256-byte repeat even without calIndex (ReduceMax page,
// "sharedTmpBuffer所需空间设置"), twice ReduceSum's one partial per repeat; rounded
// up to 32-byte blocks. Repeats are counted rounded up, a little more than the
// page's count / 64 (its tail repeat reuses the first pair). Sizing ReduceMax with
// ReduceSum's formula overruns the work tensor from 320 floats on.
inline uint64_t ReduceWorkFloats(uint64_t count) {
  const uint64_t repeats = count == 0 ? 1 : CeilDiv(count, 64);
  return RoundUp(2 * repeats, 8);
}

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_ROW_TILING_H_
