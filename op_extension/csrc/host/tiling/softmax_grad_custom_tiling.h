// SoftmaxGradCustom: gradInput = y * (dy - sum(dy * y)) along `dim` of contiguous
// gradOutput (dy) and output (y) viewed as [outer, dimSize, inner], computed in
// float. The same two modes as SoftmaxCustom (softmax_custom_tiling.h):
//
//   rows (inner == 1): the row split of row_tiling.h with rows = outer,
//     cols = dimSize; a whole row's sum(dy * y) by ReduceSum; a row that does not
//     fit in the UB is walked in chunks twice (the sum, then the output).
//   columns (inner > 1): slabs [dimSize, innerTile] of one outer index
//     (slab_tiling.h); the sum is a row of innerTile floats built with Mul / Add
//     across the slab's rows; when dim does not fit, it is walked in chunks of
//     chunkLength rows twice.
#ifndef OP_EXT_HOST_TILING_SOFTMAX_GRAD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_SOFTMAX_GRAD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(SoftmaxGradCustomTilingData)
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
TILING_DATA_FIELD_DEF(uint32_t, reduceWorkLength)  // rows: floats of ReduceSum's work tensor
TILING_DATA_FIELD_DEF(uint32_t, stridedCopyPad)    // columns: move a slab with one strided DataCopyPad (else row by row)
TILING_DATA_FIELD_DEF(uint32_t, dataType)          // KernelDType
TILING_DATA_FIELD_DEF(uint32_t, tailMode)          // TailMode: how runs that are not whole blocks move (row_tiling.h)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(SoftmaxGradCustom, SoftmaxGradCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "row_tiling.h"

namespace op_ext::ascend {

// The kernel's UB plan (softmax_grad_custom.cpp), element size e:
//   rows, k whole rows of stride P: dy, y and dx queues 2 * k * P * e each; for
//     16-bit types two float rows of P (dy and y of the row in float); ReduceSum
//     work; one block.
//   rows, chunks of C: dy, y and dx queues 2 * C * e each; for 16-bit two float
//     chunks; work; one block.
//   columns, slabs of D rows x W: dy, y and dx queues 2 * D * W * e each; for
//     16-bit 2 * D * W floats (dy and y of the slab in float); the sum row of W floats.
// dy * y needs no buffer of its own: float kernels form it in the dx tile (or,
// in a chunked sum pass, in dy's), 16-bit ones in dy's float row, cast again
// from the still-queued input afterwards.
inline uint64_t SoftmaxGradUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 6 * k * stride * e + (dtype == 0 ? 0 : 8 * stride) + 4 * ReduceWorkFloats(cols) + 32 + kRowCopierStageBytes;
}
inline uint64_t SoftmaxGradUbBytesChunk(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 6 * chunk * e + (dtype == 0 ? 0 : 8 * chunk) + 4 * ReduceWorkFloats(chunk) + 32 + kRowCopierStageBytes;
}
inline uint64_t SoftmaxGradUbBytesSlab(uint32_t dtype, uint64_t rows, uint64_t width) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 6 * rows * width * e + (dtype == 0 ? 0 : 8 * rows * width) + 4 * width + kRowCopierStageBytes;
}

// gradOutput and output viewed as [outer, dimSize, inner].
optiling::SoftmaxGradCustomTilingData ComputeSoftmaxGradTiling(uint64_t outer, uint64_t dimSize, uint64_t inner,
                                                               uint32_t dtype, const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_SOFTMAX_GRAD_CUSTOM_TILING_H_
