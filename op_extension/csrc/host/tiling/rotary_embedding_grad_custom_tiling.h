// RotaryEmbeddingGradCustom (rotary_embedding_backward): rotary position embedding (rotate_half convention) of one
// tensor per launch; the TilingData shared with the kernel. Row split, layouts,
// cos row mapping and the kernel's UB plan: rope_tiling.h.
#ifndef OP_EXT_HOST_TILING_ROTARY_EMBEDDING_BACKWARD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_ROTARY_EMBEDDING_BACKWARD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(RotaryEmbeddingGradCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, rows)         // rows of x
TILING_DATA_FIELD_DEF(uint64_t, rowsPerCore)  // rows of a small core
TILING_DATA_FIELD_DEF(uint64_t, batchRows)    // rows of x per batch index (N * S)
TILING_DATA_FIELD_DEF(uint64_t, seqDiv)       // rows of x per step of the sequence index
TILING_DATA_FIELD_DEF(uint64_t, cosRows)      // rows of cos and sin
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)   // the first cores get one row more
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)  // blockDim
TILING_DATA_FIELD_DEF(uint32_t, dim)          // D (even)
TILING_DATA_FIELD_DEF(uint32_t, half)         // D / 2
TILING_DATA_FIELD_DEF(uint32_t, halfStride)   // UB elements between half-rows (half rounded up to a block)
TILING_DATA_FIELD_DEF(uint32_t, rowsPerTile)  // rows per tile
TILING_DATA_FIELD_DEF(uint32_t, seqLen)       // S
TILING_DATA_FIELD_DEF(uint32_t, cosBatched)   // 1: cos has x's batch; 0: batch 1, broadcast
TILING_DATA_FIELD_DEF(uint32_t, dataType)     // KernelDType
TILING_DATA_FIELD_DEF(uint32_t, tailMode)     // TailMode (row_tiling.h)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(RotaryEmbeddingGradCustom, RotaryEmbeddingGradCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "rope_tiling.h"

namespace op_ext::ascend {

optiling::RotaryEmbeddingGradCustomTilingData ComputeRotaryEmbeddingGradTiling(const RopeShape& shape, uint32_t dtype, const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_ROTARY_EMBEDDING_BACKWARD_CUSTOM_TILING_H_
