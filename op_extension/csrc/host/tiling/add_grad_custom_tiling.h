// AddGradCustom: out = alpha * gradOutput summed over the dims where inputSize
// (right-aligned against gradOutput's shape) is 1 or missing.
//
// The host groups gradOutput's dims into runs that are all kept or all summed
// (size-1 dims dropped): groupSize[0..groupNum), outermost first, with bit g of
// reducedMask set for summed groups. Two kernel modes, by the innermost group:
//   kept innermost (mode 0): out is [outRows, outCols] (outCols = innermost
//     group); a work unit is one 32-byte block of out's columns in one out row,
//     and its value sums `sumCount` input rows -- one per combination of the
//     summed groups' indices, in row-major order;
//   summed innermost (mode 1): out is [outRows] elements; each sums `sumCount`
//     contiguous runs of runLength input elements; units are 32-byte blocks of
//     out elements.
// Units are split over cores (balanced to one unit); a core walks its units in
// chunks of chunkLength columns (mode 0) / runs in chunks of chunkLength and
// outputs in tiles of outTile elements (mode 1).
// Tails (tailMode, as elementwise_tiling.h): with DataCopyPad any length moves.
// Without it (310P) every copy is whole blocks: an output row's (mode 0) or the
// output's (mode 1) unaligned end is written as the last whole block ending there,
// recomputing up to one block of values another unit already wrote (identical
// values); a run chunk that is not whole blocks is read as the whole blocks
// starting at it -- summing only its own elements -- or, at the end of the
// tensor, ending at it with the leading extra elements zeroed.
#ifndef OP_EXT_HOST_TILING_ADD_GRAD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_ADD_GRAD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(AddGradCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, outRows)       // mode 0: out rows; mode 1: out elements
TILING_DATA_FIELD_DEF(uint64_t, sumCount)      // input rows (mode 0) / runs (mode 1) per out value
TILING_DATA_FIELD_DEF(uint64_t, unitsPerCore)  // 32-byte units of out of a small core
TILING_DATA_FIELD_DEF(uint64_t, groupSize0)    // dim groups, outermost first
TILING_DATA_FIELD_DEF(uint64_t, groupSize1)
TILING_DATA_FIELD_DEF(uint64_t, groupSize2)
TILING_DATA_FIELD_DEF(uint64_t, groupSize3)
TILING_DATA_FIELD_DEF(uint64_t, groupSize4)
TILING_DATA_FIELD_DEF(uint64_t, groupSize5)
TILING_DATA_FIELD_DEF(uint64_t, groupSize6)
TILING_DATA_FIELD_DEF(uint64_t, groupSize7)
TILING_DATA_FIELD_DEF(uint32_t, groupNum)
TILING_DATA_FIELD_DEF(uint32_t, reducedMask)   // bit g: group g is summed over
TILING_DATA_FIELD_DEF(uint32_t, mode)          // 0: kept innermost; 1: summed innermost
TILING_DATA_FIELD_DEF(uint32_t, outCols)       // mode 0: out columns (innermost group)
TILING_DATA_FIELD_DEF(uint32_t, runLength)     // mode 1: innermost (summed) group size
TILING_DATA_FIELD_DEF(uint32_t, colBlocks)     // mode 0: 32-byte blocks per out row
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)    // the first cores get one unit more
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)   // blockDim
TILING_DATA_FIELD_DEF(uint32_t, chunkLength)   // columns (mode 0) / run elements (mode 1) per chunk
TILING_DATA_FIELD_DEF(uint32_t, outTile)       // mode 1: out elements per output tile
TILING_DATA_FIELD_DEF(uint32_t, reduceWorkLength)  // mode 1: floats of ReduceSum's work tensor
TILING_DATA_FIELD_DEF(uint32_t, tailMode)      // TailMode
TILING_DATA_FIELD_DEF(uint32_t, dataType)      // KernelDType
TILING_DATA_FIELD_DEF(float, alpha)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(AddGradCustom, AddGradCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include <vector>

#include "soc_spec.h"

namespace op_ext::ascend {

inline constexpr uint32_t kAddGradMaxGroups = 8;

// Kernel UB plan (add_grad_custom.cpp), element size e:
//   mode 0, chunk C: input queue 2*C*e, output queue 2*C*e, float accumulator C
//     (+ the input in float for 16-bit types).
//   mode 1, chunk C, out tile M: input queue 2*C*e (+ float C for 16-bit), ReduceSum
//     work, two statistic blocks, float outputs M, output queue 2*M*e.
uint64_t AddGradUbBytesMode0(uint32_t dtype, uint64_t chunk);
uint64_t AddGradUbBytesMode1(uint32_t dtype, uint64_t chunk, uint64_t outTile);

// gradShape: gradOutput's shape; inputSize: the output shape.
optiling::AddGradCustomTilingData ComputeAddGradTiling(const std::vector<int64_t>& gradShape,
                                                       const std::vector<int64_t>& inputSize, uint32_t dtype,
                                                       double alpha, const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_ADD_GRAD_CUSTOM_TILING_H_
