// RmsNormGradCustom: with y = x * rstd * w, rstd = rsqrt(mean(x^2) + eps) per row,
//   gradInput  = rstd * (dy * w) - x * rstd^3 * mean(dy * w * x)   (+ gradResidualOut)
//   gradWeight = sum over rows of dy * x * rstd
// in float, input viewed as [rows, cols], contiguous.
//
// FusedAddRmsNormGradCustom runs the same kernel with this same TilingData
// (hasGradResidual = 1, input = the forward's residualOut): its gradient is
// RMSNorm's of residualOut plus gradResidualOut passed through, so one kernel
// keeps one copy of the overflow rescue and of the deterministic gradWeight pass.
//
// Two launches of rms_norm_grad_custom, each with its own copy of this struct
// (`pass` differs):
//   pass 0 (rows): rows split over cores exactly like RmsNormCustom (row_tiling.h:
//     whole rows per tile, or rows in chunks); writes gradInput and, when there is
//     a weight, each row's statistics (rstd_s, s) to the kernel workspace;
//   pass 1 (columns, only with a weight): the 32-byte column blocks of gradWeight
//     split over cores (dwBlocksPerCore / dwBigCoreNum / dwUsedCoreNum); a core
//     walks its columns in chunks of dwChunkCols and sums every row into them in
//     row order, reading the rows' statistics back from the workspace. No core ever
//     adds into another core's output, so the result does not depend on the
//     core count and needs no atomics or cross-core sync.
// Workspace: the statistics of row r (pass-0 core c, r the local-th row of c) at float
//   (c * statTilesPerCore + local / statRowsPerSlot) * statPitch + (local % statRowsPerSlot) * 2
//   + {0: rstd_s, 1: s}, so every pass-0 tile writes whole 32-byte blocks. Its rstd is
// rstd_s * s, kept as the two factors: it is past float's range for a rescued row
// whose rms is below 2^-128 (kernel_common.h, rows whose statistics underflow), and
// subnormal for one whose rms is above 2^126.
#ifndef OP_EXT_HOST_TILING_RMS_NORM_GRAD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_RMS_NORM_GRAD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(RmsNormGradCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, rows)
TILING_DATA_FIELD_DEF(uint64_t, rowsPerCore)       // pass 0: rows of a small core
TILING_DATA_FIELD_DEF(uint64_t, dwBlocksPerCore)   // pass 1: column blocks of a small core
TILING_DATA_FIELD_DEF(uint32_t, pass)              // 0: gradInput over rows; 1: gradWeight over columns
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)       // pass 0 blockDim
TILING_DATA_FIELD_DEF(uint32_t, cols)
TILING_DATA_FIELD_DEF(uint32_t, rowStride)         // UB elements between rows (cols rounded up to a block)
TILING_DATA_FIELD_DEF(uint32_t, splitRow)          // 0: whole rows per tile; 1: rows in chunks
TILING_DATA_FIELD_DEF(uint32_t, rowsPerTile)
TILING_DATA_FIELD_DEF(uint32_t, chunkLength)
TILING_DATA_FIELD_DEF(uint32_t, reduceWorkLength)
TILING_DATA_FIELD_DEF(uint32_t, statRowsPerSlot)   // rows whose statistics one workspace slot holds
TILING_DATA_FIELD_DEF(uint32_t, statPitch)         // floats per slot (a block multiple)
TILING_DATA_FIELD_DEF(uint32_t, statTilesPerCore)  // slots per pass-0 core
TILING_DATA_FIELD_DEF(uint32_t, dwBigCoreNum)
TILING_DATA_FIELD_DEF(uint32_t, dwUsedCoreNum)     // pass 1 blockDim
TILING_DATA_FIELD_DEF(uint32_t, dwChunkCols)
TILING_DATA_FIELD_DEF(uint32_t, hasWeight)
TILING_DATA_FIELD_DEF(uint32_t, hasGradResidual)   // 1: gradInput += gradResidualOut (FusedAddRmsNormGradCustom)
TILING_DATA_FIELD_DEF(uint32_t, dataType)
TILING_DATA_FIELD_DEF(uint32_t, tailMode)          // TailMode: how runs that are not whole blocks move (row_tiling.h)
TILING_DATA_FIELD_DEF(float, eps)
TILING_DATA_FIELD_DEF(float, invCols)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(RmsNormGradCustom, RmsNormGradCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "row_tiling.h"

namespace op_ext::ascend {

// Kernel UB plans (rms_norm_grad_custom.cpp), element size e:
//   pass 0, k whole rows of stride P: x, dy, dx (+ gradResidualOut) queues 2*k*P*e each;
//     float rows weight and scratch (+ x and g = dy*w in float for 16-bit types);
//     ReduceMax work (twice ReduceSum's: value, index pairs); two statistic blocks;
//     the tile's statistics (2k rounded up to a block).
//   pass 0, chunks of C: x (also weight chunks), dy, dx (+ gradResidualOut) queues
//     2*C*e each; float scratch (+ x, g, weight for 16-bit); work; two statistic and
//     two accumulator blocks; one statistics block.
//   pass 1, chunks of C columns: x, dy, dw queues 2*C*e each; float accumulator and
//     scratch (+ x and dy in float for 16-bit).
uint64_t RmsNormGradUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols, bool gradResidual);
uint64_t RmsNormGradUbBytesChunk(uint32_t dtype, uint64_t chunk, bool gradResidual);
uint64_t RmsNormGradUbBytesColumns(uint32_t dtype, uint64_t chunk);

// Floats of a row's statistics in the workspace: rstd_s, s.
inline constexpr uint32_t kRmsNormGradStatFloats = 2;

// Bytes of kernel workspace (the rows' statistics) the tiling needs.
uint64_t RmsNormGradWorkspaceBytes(const optiling::RmsNormGradCustomTilingData& t);

// The pass-0 tiling; the pass-1 copy is the same with pass = 1.
optiling::RmsNormGradCustomTilingData ComputeRmsNormGradTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                               bool hasWeight, double eps, const SocSpec& soc);

// FusedAddRmsNormGradCustom's tiling (rows, cols of residualOut): the same plan with
// hasGradResidual set and room for the gradResidualOut queue; errors name that op.
optiling::RmsNormGradCustomTilingData ComputeFusedAddRmsNormGradTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                                       bool hasWeight, bool hasGradResidual,
                                                                       double eps, const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_RMS_NORM_GRAD_CUSTOM_TILING_H_
