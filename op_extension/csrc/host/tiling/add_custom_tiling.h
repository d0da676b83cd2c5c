// AddCustom: out = input + alpha * other, same shape, contiguous (the caller
// materialises broadcasts). Elementwise split: see elementwise_tiling.h.
#ifndef OP_EXT_HOST_TILING_ADD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_ADD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(AddCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, totalLength)    // elements of input / other / out
TILING_DATA_FIELD_DEF(uint64_t, blocksPerCore)  // 32-byte blocks of a small core
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)     // the first cores get one block more
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)    // blockDim
TILING_DATA_FIELD_DEF(uint32_t, tileLength)     // elements per tile (multiple of a block)
TILING_DATA_FIELD_DEF(uint32_t, tailMode)       // TailMode
TILING_DATA_FIELD_DEF(uint32_t, dataType)       // KernelDType
TILING_DATA_FIELD_DEF(float, alpha)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(AddCustom, AddCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "soc_spec.h"

namespace op_ext::ascend {

// UB bytes per tile element, shared with the kernel's buffer plan: x, y and z
// queues (double buffered) in the element type, plus two float scratch rows
// when the element type is bfloat16 (no bfloat16 arithmetic: cast, add, cast).
inline uint32_t AddUbBytesPerElement(uint32_t dtype) {
  const uint32_t e = dtype == 0 ? 4 : 2;
  return 3 * 2 * e + (dtype == 2 ? 2 * 4 : 0);
}

optiling::AddCustomTilingData ComputeAddTiling(uint64_t totalLength, uint32_t dtype, double alpha, const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_ADD_CUSTOM_TILING_H_
