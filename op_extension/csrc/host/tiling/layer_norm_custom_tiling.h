// LayerNormCustom: out = (input - mean) * rsqrt(var + eps) * weight + bias over
// the normalized dims (biased variance, as F.layer_norm), computed in float;
// weight and bias optional; input viewed as [rows, cols], contiguous. Row
// split: see row_tiling.h (split rows are read three times: mean, variance of
// the centred values, output -- the two-pass variance, which does not lose the
// spread of rows with a large mean as E[x^2] - E[x]^2 would).
#ifndef OP_EXT_HOST_TILING_LAYER_NORM_CUSTOM_TILING_H_
#define OP_EXT_HOST_TILING_LAYER_NORM_CUSTOM_TILING_H_

#include "row_norm_tiling.h"

namespace optiling {

BEGIN_TILING_DATA_DEF(LayerNormCustomTilingData)
OP_EXT_ROW_NORM_TILING_FIELDS  // row_norm_tiling.h: the row split, eps, invCols, hasWeight
TILING_DATA_FIELD_DEF(uint32_t, hasBias)
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(LayerNormCustom, LayerNormCustomTilingData)

}  // namespace optiling

#if !defined(__CCE_AICORE__) && !defined(__CCE_KT_TEST__)
namespace op_ext::ascend {

// The kernel's UB plan (layer_norm_custom.cpp), element size e:
//   whole rows, k rows of stride P: x and y queues 2 * k * P * e each; float rows
//     weight, bias, square (and for 16-bit types the input in float) of P;
//     ReduceSum work; one 32-byte block for the row's statistic.
//   chunks of C: x, weight/bias and y queues 2 * C * e each; float rows square
//     (and for 16-bit: input, weight-or-bias) of C; work; one block.
inline uint64_t LayerNormUbBytesRows(uint32_t dtype, uint64_t k, uint64_t stride, uint64_t cols) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 4 * k * stride * e + 4 * stride * (dtype == 0 ? 3 : 4) + 4 * ReduceWorkFloats(cols) + 32 + kRowCopierStageBytes;
}
inline uint64_t LayerNormUbBytesChunk(uint32_t dtype, uint64_t chunk) {
  const uint64_t e = dtype == 0 ? 4 : 2;
  return 6 * chunk * e + 4 * chunk * (dtype == 0 ? 1 : 3) + 4 * ReduceWorkFloats(chunk) + 32 + kRowCopierStageBytes;
}

optiling::LayerNormCustomTilingData ComputeLayerNormTiling(uint64_t rows, uint64_t cols, uint32_t dtype,
                                                           bool hasWeight, bool hasBias, double eps,
                                                           const SocSpec& soc);

}  // namespace op_ext::ascend
#endif

#endif  // OP_EXT_HOST_TILING_LAYER_NORM_CUSTOM_TILING_H_
