// Shared UB plan of the gated-unit kernels SwiGluCustom and GeGluCustom
// (kernel/ascendc/glu_common.h): out = act(gate) * up over same-shape
// contiguous tensors, an elementwise split (elementwise_tiling.h) of the
// flattened tensors -- the rows of gate/up are contiguous, so a flat split is a
// row split with no row boundaries to respect.
#ifndef OP_EXT_HOST_TILING_GLU_TILING_H_
#define OP_EXT_HOST_TILING_GLU_TILING_H_

#include <cstdint>

namespace op_ext::ascend {

// The activation a GLU kernel applies to gate (GluCustomTilingData::activation).
enum GluActivation : uint32_t { kGluSilu = 0, kGluGeluErf = 1, kGluGeluTanh = 2 };

// Float scratch rows of a tile: SiLU needs one (exp(-g)); GELU four (gelu_common.h's
// s0..s3). 16-bit types add gate and up in float (the activation is computed in
// place in the gate row).
inline uint32_t GluScratchRows(uint32_t activation, uint32_t dtype) {
  const uint32_t math = activation == kGluSilu ? 1 : 4;
  return math + (dtype == 0 ? 0 : 2);
}

// gate, up and out queues, double buffered, plus the scratch rows.
inline uint32_t GluUbBytesPerElement(uint32_t activation, uint32_t dtype) {
  const uint32_t e = dtype == 0 ? 4 : 2;
  return 3 * 2 * e + 4 * GluScratchRows(activation, dtype);
}

// The backward kernels SwiGluGradCustom and GeGluGradCustom
// (kernel/ascendc/glu_grad_common.h): gradGate and gradUp from dy, gate and up,
// the same elementwise split. Float scratch rows: the math (SiLU two, s and
// 1 + g (1 - s); GELU four, gelu_common.h's s0..s3) and, for 16-bit types, dy,
// gate and up in float (the results are computed in place in the up and gate rows).
inline uint32_t GluGradScratchRows(uint32_t activation, uint32_t dtype) {
  const uint32_t math = activation == kGluSilu ? 2 : 4;
  return math + (dtype == 0 ? 0 : 3);
}

// dy, gate, up, gradGate and gradUp queues, double buffered, plus the scratch rows.
inline uint32_t GluGradUbBytesPerElement(uint32_t activation, uint32_t dtype) {
  const uint32_t e = dtype == 0 ? 4 : 2;
  return 5 * 2 * e + 4 * GluGradScratchRows(activation, dtype);
}

}  // namespace op_ext::ascend

#endif  // OP_EXT_HOST_TILING_GLU_TILING_H_
