// SwiGluGradCustom: gradGate = dy * up * silu'(gate), gradUp = dy * silu(gate),
// same-shape contiguous dy/gate/up, computed in float. Elementwise split: see
// elementwise_tiling.h; UB plan: glu_tiling.h (GluGradUbBytesPerElement).
#ifndef OP_EXT_HOST_TILING_SWIGLU_GRAD_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_SWIGLU_GRAD_CUSTOM_TILING_H_

#include "tiling_def.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(SwiGluGradCustomTilingData)
TILING_DATA_FIELD_DEF(uint64_t, totalLength)    // elements of gate (= up = dy = both grads)
TILING_DATA_FIELD_DEF(uint64_t, blocksPerCore)  // 32-byte blocks of a small core
TILING_DATA_FIELD_DEF(uint32_t, bigCoreNum)     // the first cores get one block more
TILING_DATA_FIELD_DEF(uint32_t, usedCoreNum)    // blockDim
TILING_DATA_FIELD_DEF(uint32_t, tileLength)     // elements per tile (multiple of a block)
TILING_DATA_FIELD_DEF(uint32_t, tailMode)       // TailMode
TILING_DATA_FIELD_DEF(uint32_t, dataType)       // KernelDType
TILING_DATA_FIELD_DEF(uint32_t, activation)     // GluActivation (glu_tiling.h)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(SwiGluGradCustom, SwiGluGradCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
#include "glu_tiling.h"
#include "soc_spec.h"

namespace op_ext::ascend {

optiling::SwiGluGradCustomTilingData ComputeSwiGluGradTiling(uint64_t totalLength, uint32_t dtype,
                                                             const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_SWIGLU_GRAD_CUSTOM_TILING_H_
