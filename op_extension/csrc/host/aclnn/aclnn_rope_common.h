// The shape checks and launch plan shared by PlanRotaryEmbeddingCustom and
// PlanRotaryEmbeddingGradCustom: two tensors (q and k, or their output
// gradients) rotated by the same cos / sin, one kernel launch per tensor.
//
// Contract: every tensor contiguous, one dtype (float16, float32, bfloat16 where
// the SoC has it); cos and sin of shape [B or 1, S, D]; the two inputs 4-D,
//   unsqueeze_dim 1: [B, N, S, D] (cos.unsqueeze(1) broadcasts over the heads N),
//   unsqueeze_dim 2: [B, S, N, D] (cos.unsqueeze(2));
// negative unsqueeze_dim counts from the end of the 4-D result (-3 is 1, -2 is 2).
// The two inputs may have different N; D even; outputs shaped as their inputs.
#ifndef OP_EXT_ACLNN_ACLNN_ROPE_COMMON_H_
#define OP_EXT_ACLNN_ACLNN_ROPE_COMMON_H_

#include <string>
#include <utility>

#include "aclnn_common.h"
#include "rope_tiling.h"

namespace op_ext::aclnn {

// The arguments of either op, as its generated entry has read and checked them
// (one dtype, contiguity, each output shaped as its input): the two inputs, cos,
// sin, the two outputs, and the inputs' names for the messages.
struct RopeArgs {
  const char* names[2];
  TensorDesc in[2], cos, sin, out[2];
  uint32_t dtype = 0;
  ascend::RopeShape shape[2];  // set by CheckRopeShapes
};

// Checks unsqueezeDim and the shapes of the contract above (ArgError naming `op`)
// and sets the two RopeShapes.
inline void CheckRopeShapes(const char* op, RopeArgs& a, int64_t unsqueezeDim) {
  const int64_t dim = unsqueezeDim < 0 ? unsqueezeDim + 4 : unsqueezeDim;
  if (dim != 1 && dim != 2) {
    Invalid(op, "unsqueeze_dim " + std::to_string(unsqueezeDim) +
                    " is not supported (the Ascend kernel takes 1: q/k [B, N, S, D], or 2: q/k [B, S, N, D])");
  }
  if (a.cos.shape.size() != 3) {
    Invalid(op, "cos has shape " + ShapeString(a.cos.shape) +
                    " (the Ascend kernel takes cos and sin of shape [B or 1, S, D])");
  }
  CheckSameShape(op, "cos", a.cos, "sin", a.sin);
  for (int i = 0; i < 2; ++i) {
    const TensorDesc& x = a.in[i];
    const char* name = a.names[i];
    const char* layout = dim == 1 ? "[B, N, S, D]" : "[B, S, N, D]";
    if (x.shape.size() != 4) {
      Invalid(op, std::string(name) + " has shape " + ShapeString(x.shape) + " (the Ascend kernel takes a 4-D " +
                      layout + " tensor with unsqueeze_dim " + std::to_string(unsqueezeDim) + ")");
    }
    const int64_t b = x.shape[0], s = x.shape[dim == 1 ? 2 : 1], d = x.shape[3];
    if (a.cos.shape[1] != s || a.cos.shape[2] != d || (a.cos.shape[0] != 1 && a.cos.shape[0] != b)) {
      Invalid(op, "cos has shape " + ShapeString(a.cos.shape) + " but " + name + " " + layout + " has shape " +
                      ShapeString(x.shape) + " (cos and sin must be [" + std::to_string(b) + " or 1, " +
                      std::to_string(s) + ", " + std::to_string(d) + "])");
    }
    if (d % 2 != 0) Invalid(op, std::string(name) + "'s last dim " + std::to_string(d) + " is odd (it must be even)");
    a.shape[i] = ascend::RopeShapeOf(x.shape, a.cos.shape[0], dim);
  }
  if (a.in[0].shape[0] != a.in[1].shape[0] || a.in[0].shape[3] != a.in[1].shape[3]) {
    Invalid(op, std::string(a.names[1]) + " has shape " + ShapeString(a.in[1].shape) + " but " + a.names[0] +
                    " has " + ShapeString(a.in[0].shape) + " (batch and last dim must match)");
  }
}

// One launch of `launchKernel(blockDim, stream, x, cos, sin, y, workspace, tiling)` per
// non-empty tensor, with its TilingData from `tile(shape)`; tiling runs for empty
// tensors too (its checks apply to every shape).
template <typename TileFn, typename LaunchFn>
LaunchPlan PlanRopeLaunches(const RopeArgs& a, TileFn tile, LaunchFn launchKernel) {
  LaunchPlan plan;
  for (int i = 0; i < 2; ++i) {
    const auto tiling = tile(a.shape[i]);
    if (a.shape[i].rows == 0 || a.shape[i].dim == 0) continue;
    uint8_t* xd = a.in[i].data;
    uint8_t* yd = a.out[i].data;
    uint8_t* cd = a.cos.data;
    uint8_t* sd = a.sin.data;
    AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
      return launchKernel(blockDim, stream, xd, cd, sd, yd, ws, td);
    });
  }
  return plan;
}

}  // namespace op_ext::aclnn

#endif  // OP_EXT_ACLNN_ACLNN_ROPE_COMMON_H_
