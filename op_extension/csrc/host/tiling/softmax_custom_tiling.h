// SoftmaxCustom: out = exp(x - max) / sum(exp(x - max)) along `dim` of a
// contiguous input viewed as [outer, dimSize, inner] (outer: the dims before
// `dim`, inner: the dims after it), computed in float. Two modes:
//
//   rows (inner == 1, softmax over the last dim): the row split of row_tiling.h
//     with rows = outer, cols = dimSize; a whole row is reduced with
//     ReduceMax / ReduceSum; a row that does not fit in the UB is walked in
//     chunks three times (max, sum of exp, output).
//   columns (inner > 1): the unit of work is a slab [dimSize, innerTile] of one
//     outer index -- dimSize rows of innerTile neighbouring elements, inner apart
//     in GM -- and the reduction along dim is elementwise across the slab's rows
//     (Max / Add of rows), so the vector unit works along inner, where the data
//     is contiguous. Units (outer * innerTiles of them) are split over cores,
//     balanced to within one. When dimSize rows of one 32-byte block do not fit
//     (or dimSize exceeds DataCopyPad's 4095 rows), dim is walked in chunks of
//     dimChunk rows, three times (max, sum of exp, output).
//
// Softmax is not moved to the last dim by a transpose: the kernel reads the
// layout the caller has, so no extra pass over memory (and the torch_npu glue
// passes its contiguous input and `dim` straight through).
#ifndef OP_EXT_HOST_TILING_SOFTMAX_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_SOFTMAX_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(SoftmaxCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, outer)             // product of the dims before `dim`
TILING_DATA_FIELD_DEF(uint64_t, inner)             // product of the dims after `dim`
TILING_DATA_FIELD_DEF(uint64_t, unitsPerCore)      // rows (rows mode) or slabs (columns mode) of a small core
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)        // the first cores get one unit more
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)       // blockDim
TILING_DATA_FIELD_DEF(uint32_t, dimSize)           // the softmax length
TILING_DATA_FIELD_DEF(uint32_t, columns)           // 0: rows mode; 1: columns mode
TILING_DATA_FIELD_DEF(uint32_t, split)             // rows: row in chunks; columns: dim in chunks
TILING_DATA_FIELD_DEF(uint32_t, rowStride)         // rows: UB elements between rows (dimSize rounded up to a block)
TILING_DATA_FIELD_DEF(uint32_t, rowsPerTile)       // rows, whole rows: rows per tile
TILING_DATA_FIELD_DEF(uint32_t, chunkLength)       // rows, split: elements per chunk; columns: dim rows per chunk
TILING_DATA_FIELD_DEF(uint32_t, innerTile)         // columns: elements of a slab row (a block multiple)
TILING_DATA_FIELD_DEF(uint32_t, innerTiles)        // columns: slabs per outer index
TILING_DATA_FIELD_DEF(uint32_t, reduceWorkLength)  // rows: floats of ReduceMax / ReduceSum's work tensor
TILING_DATA_FIELD_DEF(uint32_t, stridedCopyPad)    // columns: move a slab with one strided DataCopyPad (else row by row)
TILING_DATA_FIELD_DEF(uint32_t, dataType)          // KernelDType
TILING_DATA_FIELD_DEF(uint32_t, tailMode)          // TailMode: how runs that are not whole blocks move (row_tiling.h)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(SoftmaxCustom, SoftmaxCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "row_tiling.h"

namespace op_ext::ascend {

// The kernel's UB plan (softmax_custom.cpp), element size e:
//   rows, k whole rows of stride P: x and y queues 2 * k * P * e each; for 16-bit
//     types one float row of P (the row in float); ReduceMax/ReduceSum work; one block.
//   rows, chunks of C: x and y queues 2 * C * e each; for 16-bit one float chunk; work; one block.
//   columns, slabs of D rows x W: x and y queues 2 * D * W * e each; for 16-bit
//     D * W floats (the slab in float); max and sum rows of W floats.
inline uint64_t SoftmaxUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 4 * k * stride * e + (dtype == 0 ? 0 : 4 * stride) + 4 * ReduceWorkFloats(cols) + 32 + kRowCopierStageBytes;
}
inline uint64_t SoftmaxUbBytesChunk(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 4 * chunk * e + (dtype == 0 ? 0 : 4 * chunk) + 4 * ReduceWorkFloats(chunk) + 32 + kRowCopierStageBytes;
}
inline uint64_t SoftmaxUbBytesSlab(uint32_t dtype, uint64_t rows, uint64_t width) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 4 * rows * width * e + (dtype == 0 ? 0 : 4 * rows * width) + 8 * width + kRowCopierStageBytes;
}

// input viewed as [outer, dimSize, inner].
optiling::SoftmaxCustomTilingData ComputeSoftmaxTiling(uint64_t outer, uint64_t dimSize, uint64_t inner,
                                                       uint32_t dtype, const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_SOFTMAX_CUSTOM_TILING_H_
