// LayerNormGradCustom: with xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) per row,
// y = xhat * w + b, and g = dy * w (dy without a weight):
//   gradInput  = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   gradWeight = sum over rows of dy * xhat      (with a weight)
//   gradBias   = sum over rows of dy             (with a bias)
// in float, input viewed as [rows, cols], contiguous. The row statistics are the
// forward's (layer_norm_custom.cpp): centred variance, power-of-two rescue of rows
// whose statistics overflow, mean refined when |mean| * rstd > 16.
//
// Two launches of layer_norm_grad_custom, each with its own copy of this struct
// (`pass` differs):
//   pass 0 (rows): rows split over cores as LayerNormCustom's (row_tiling.h: whole
//     rows per tile, or rows in chunks); writes gradInput and, with a weight, each
//     row's statistics (mean_s, rstd_s, s: xhat = (x * s - mean_s) * rstd_s) to the
//     kernel workspace;
//   pass 1 (columns, with a weight or a bias): the 32-byte column blocks of
//     gradWeight / gradBias split over cores (dwBlocksPerCore / dwBigCoreNum /
//     dwUsedCoreNum); a core walks its columns in chunks of dwChunkCols and adds
//     every row into them in row order. No core adds into another core's output,
//     so the sums are the same bits for any core count, with no atomics or
//     cross-core sync (as RmsNormGradCustom).
// Workspace: the statistics of row r (pass-0 core c, r the local-th row of c) at float
//   (c * statTilesPerCore + local / statRowsPerSlot) * statPitch + (local % statRowsPerSlot) * 4
//   + {0: mean_s, 1: rstd_s, 2: s}, so every pass-0 tile writes whole 32-byte blocks.
#ifndef OP_EXT_HOST_TILING_LAYER_NORM_GRAD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_LAYER_NORM_GRAD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(LayerNormGradCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, rows)
TILING_DATA_FIELD_DEF(uint64_t, rowsPerCore)       // pass 0: rows of a small core
TILING_DATA_FIELD_DEF(uint64_t, dwBlocksPerCore)   // pass 1: column blocks of a small core
TILING_DATA_FIELD_DEF(uint32_t, pass)              // 0: gradInput over rows; 1: gradWeight/gradBias over columns
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)       // pass 0 blockDim
TILING_DATA_FIELD_DEF(uint32_t, cols)
TILING_DATA_FIELD_DEF(uint32_t, rowStride)         // UB elements between rows (cols rounded up to a block)
TILING_DATA_FIELD_DEF(uint32_t, splitRow)          // 0: whole rows per tile; 1: rows in chunks
TILING_DATA_FIELD_DEF(uint32_t, rowsPerTile)
TILING_DATA_FIELD_DEF(uint32_t, chunkLength)
TILING_DATA_FIELD_DEF(uint32_t, reduceWorkLength)  // floats: ReduceMax's work (ReduceSum needs half)
TILING_DATA_FIELD_DEF(uint32_t, statRowsPerSlot)   // rows whose statistics one workspace slot holds
TILING_DATA_FIELD_DEF(uint32_t, statPitch)         // floats per slot (a block multiple)
TILING_DATA_FIELD_DEF(uint32_t, statTilesPerCore)  // slots per pass-0 core
TILING_DATA_FIELD_DEF(uint32_t, dwBigCoreNum)
TILING_DATA_FIELD_DEF(uint32_t, dwUsedCoreNum)     // pass 1 blockDim
TILING_DATA_FIELD_DEF(uint32_t, dwChunkCols)
TILING_DATA_FIELD_DEF(uint32_t, hasWeight)
TILING_DATA_FIELD_DEF(uint32_t, hasBias)
TILING_DATA_FIELD_DEF(uint32_t, dataType)
TILING_DATA_FIELD_DEF(uint32_t, tailMode)          // TailMode: how runs that are not whole blocks move (row_tiling.h)
TILING_DATA_FIELD_DEF(float, eps)
TILING_DATA_FIELD_DEF(float, invCols)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(LayerNormGradCustom, LayerNormGradCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "row_tiling.h"

namespace op_ext::ascend {

// Floats of one row's statistics in the workspace (mean_s, rstd_s, s, unused).
inline constexpr uint32_t kLayerNormGradStatFloats = 4;

// Kernel UB plans (layer_norm_grad_custom.cpp), element size e:
//   pass 0, k whole rows of stride P: x, dy, dx queues 2*k*P*e each; float rows
//     weight, centred row and scratch (+ x and g = dy*w in float for 16-bit types);
//     ReduceMax work; two statistic blocks; the tile's statistics (4k floats rounded
//     up to a block).
//   pass 0, chunks of C: x (also weight chunks), dy, dx queues 2*C*e each; float
//     centred chunk and scratch (+ x, g, weight in float for 16-bit); work; two
//     statistic blocks; one statistics block.
//   pass 1, chunks of C columns: x, dy, output (gradWeight and gradBias) queues
//     2*C*e each; float accumulators for gradWeight and gradBias and scratch (+ x
//     and dy in float for 16-bit).
uint64_t LayerNormGradUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols);
uint64_t LayerNormGradUbBytesChunk(uint32_t dtype, uint64_t chunk);
uint64_t LayerNormGradUbBytesColumns(uint32_t dtype, uint64_t chunk);

// Bytes of kernel workspace (the rows' statistics) the tiling needs.
uint64_t LayerNormGradWorkspaceBytes(const optiling::LayerNormGradCustomTilingData& t);

// The pass-0 tiling; the pass-1 copy is the same with pass = 1.
optiling::LayerNormGradCustomTilingData ComputeLayerNormGradTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                                   bool hasWeight, bool hasBias, double eps,
                                                                   const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_LAYER_NORM_GRAD_CUSTOM_TILING_H_
