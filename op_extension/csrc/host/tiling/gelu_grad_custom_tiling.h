// GeluGradCustom: out = gradOutput * gelu'(input); same shape, contiguous.
// Elementwise split: see elementwise_tiling.h.
#ifndef OP_EXT_HOST_TILING_GELU_GRAD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_GELU_GRAD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(GeluGradCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, totalLength)    // elements
TILING_DATA_FIELD_DEF(uint64_t, blocksPerCore)  // 32-byte blocks of a small core
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)     // the first cores get one block more
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)    // blockDim
TILING_DATA_FIELD_DEF(uint32_t, tileLength)     // elements per tile (multiple of a block)
TILING_DATA_FIELD_DEF(uint32_t, tailMode)       // TailMode
TILING_DATA_FIELD_DEF(uint32_t, dataType)       // KernelDType
TILING_DATA_FIELD_DEF(uint32_t, approximate)    // 0: erf, 1: tanh
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(GeluGradCustom, GeluGradCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "soc_spec.h"

namespace op_ext::ascend {

// Float scratch rows: four for the math, two (x and dy in float) for 16-bit types.
inline uint32_t GeluGradScratchRows(uint32_t dtype) { return 4 + (dtype == 0 ? 0 : 2); }

// dy, x and dx queues, double buffered, plus the scratch rows.
inline uint32_t GeluGradUbBytesPerElement(uint32_t dtype) {
  const uint32_t e = dtype == 0 ? 4 : 2;
  return 3 * 2 * e + 4 * GeluGradScratchRows(dtype);
}

optiling::GeluGradCustomTilingData ComputeGeluGradTiling(uint64_t totalLength, uint32_t dtype, uint32_t approximate,
                                                         const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_GELU_GRAD_CUSTOM_TILING_H_
