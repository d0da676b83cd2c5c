// FusedAddRmsNormCustom: residualOut = input + residual (stored in the input
// dtype), output = residualOut * rsqrt(mean(residualOut^2 over the normalized
// dims) + eps) * weight, computed in float from the stored residualOut; inputs
// viewed as [rows, cols], contiguous. Row split: see row_tiling.h.
#ifndef OP_EXT_HOST_TILING_FUSED_ADD_RMS_NORM_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_FUSED_ADD_RMS_NORM_CUSTOM_TILING_H_

#include "row_norm_tiling.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(FusedAddRmsNormCustomTilingData)
OP_EXT_ROW_NORM_TILING_FIELDS  // row_norm_tiling.h: the row split, eps, invCols, hasWeight
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(FusedAddRmsNormCustom, FusedAddRmsNormCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
namespace op_ext::ascend {

// The kernel's UB plan (fused_add_rms_norm_custom.cpp), element size e:
//   whole rows, k rows of stride P: input, residual, output and residualOut queues
//     2 * k * P * e each; float rows weight, square (and for 16-bit types the sum
//     in float) of P; ReduceSum work; one 32-byte block for the row's statistic.
//   chunks of C: input (also carrying weight chunks), residual, output and
//     residualOut queues 2 * C * e each; float rows square (and for 16-bit: sum,
//     weight) of C; work; one block.
inline uint64_t FusedAddRmsNormUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 8 * k * stride * e + 4 * stride * (dtype == 0 ? 2 : 3) + 4 * ReduceWorkFloats(cols) + 32 + kRowCopierStageBytes;
}
inline uint64_t FusedAddRmsNormUbBytesChunk(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 8 * chunk * e + 4 * chunk * (dtype == 0 ? 1 : 3) + 4 * ReduceWorkFloats(chunk) + 32 + kRowCopierStageBytes;
}

optiling::FusedAddRmsNormCustomTilingData ComputeFusedAddRmsNormTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                                       bool hasWeight, double eps, const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_FUSED_ADD_RMS_NORM_CUSTOM_TILING_H_
