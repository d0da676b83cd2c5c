// The argument checks and launch plan shared by aclnnRotaryEmbeddingCustom and
// aclnnRotaryEmbeddingGradCustom: two tensors (q and k, or their output
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

struct RopeTensors {
  const char* names[6];  // the two inputs, cos, sin, the two outputs
  const aclTensor* tensors[6];
};

// Checks the arguments (ArgError naming `op`) and returns the two RopeShapes and
// the dtype code; a and b are the input descriptions, out the output ones.
struct RopeArgs {
  TensorDesc in[2], cos, sin, out[2];
  ascend::RopeShape shape[2];
  uint32_t dtype = 0;
};

inline RopeArgs ReadRopeArgs(const char* op, const RopeTensors& r, int64_t unsqueezeDim,
                             const ascend::SocSpec& soc) {
  RopeArgs a;
  a.in[0] = DescribeTensor(op, r.names[0], r.tensors[0]);
  a.in[1] = DescribeTensor(op, r.names[1], r.tensors[1]);
  a.cos = DescribeTensor(op, r.names[2], r.tensors[2]);
  a.sin = DescribeTensor(op, r.names[3], r.tensors[3]);
  a.out[0] = DescribeTensor(op, r.names[4], r.tensors[4]);
  a.out[1] = DescribeTensor(op, r.names[5], r.tensors[5]);
  a.dtype = KernelDType(op, r.names[0], a.in[0].dtype, soc);
  CheckSameDType(op, r.names[0], a.in[0], r.names[1], a.in[1]);
  CheckSameDType(op, r.names[0], a.in[0], r.names[2], a.cos);
  CheckSameDType(op, r.names[0], a.in[0], r.names[3], a.sin);
  CheckSameDType(op, r.names[0], a.in[0], r.names[4], a.out[0]);
  CheckSameDType(op, r.names[0], a.in[0], r.names[5], a.out[1]);
  const int64_t dim = unsqueezeDim < 0 ? unsqueezeDim + 4 : unsqueezeDim;
  if (dim != 1 && dim != 2) {
    Invalid(op, "unsqueeze_dim " + std::to_string(unsqueezeDim) +
                    " is not supported (the Ascend kernel takes 1: q/k [B, N, S, D], or 2: q/k [B, S, N, D])");
  }
  if (a.cos.shape.size() != 3) {
    Invalid(op, std::string(r.names[2]) + " has shape " + ShapeString(a.cos.shape) +
                    " (the Ascend kernel takes cos and sin of shape [B or 1, S, D])");
  }
  CheckSameShape(op, r.names[2], a.cos, r.names[3], a.sin);
  for (int i = 0; i < 2; ++i) {
    const TensorDesc& x = a.in[i];
    const char* name = r.names[i];
    const char* layout = dim == 1 ? "[B, N, S, D]" : "[B, S, N, D]";
    if (x.shape.size() != 4) {
      Invalid(op, std::string(name) + " has shape " + ShapeString(x.shape) + " (the Ascend kernel takes a 4-D " +
                      layout + " tensor with unsqueeze_dim " + std::to_string(unsqueezeDim) + ")");
    }
    const int64_t b = x.shape[0], s = x.shape[dim == 1 ? 2 : 1], d = x.shape[3];
    if (a.cos.shape[1] != s || a.cos.shape[2] != d || (a.cos.shape[0] != 1 && a.cos.shape[0] != b)) {
      Invalid(op, std::string(r.names[2]) + " has shape " + ShapeString(a.cos.shape) + " but " + name + " " +
                      layout + " has shape " + ShapeString(x.shape) + " (cos and sin must be [" +
                      std::to_string(b) + " or 1, " + std::to_string(s) + ", " + std::to_string(d) + "])");
    }
    if (d % 2 != 0) Invalid(op, std::string(name) + "'s last dim " + std::to_string(d) + " is odd (it must be even)");
    CheckSameShape(op, name, x, r.names[4 + i], a.out[i]);
    CheckContiguous(op, name, x);
    CheckContiguous(op, r.names[4 + i], a.out[i]);
    a.shape[i] = ascend::RopeShapeOf(x.shape, a.cos.shape[0], dim);
  }
  if (a.in[0].shape[0] != a.in[1].shape[0] || a.in[0].shape[3] != a.in[1].shape[3]) {
    Invalid(op, std::string(r.names[1]) + " has shape " + ShapeString(a.in[1].shape) + " but " + r.names[0] +
                    " has " + ShapeString(a.in[0].shape) + " (batch and last dim must match)");
  }
  CheckContiguous(op, r.names[2], a.cos);
  CheckContiguous(op, r.names[3], a.sin);
  return a;
}

// One launch of `launchKernel(blockDim, x, y, tilingDevice, workspace, stream)` per
// non-empty tensor, with its TilingData from `tile(shape)`; tiling runs for empty
// tensors too (its checks apply to every shape).
template <typename TileFn, typename LaunchFn>
LaunchPlan PlanRopeLaunches(const RopeArgs& a, TileFn tile, LaunchFn launchKernel) {
  LaunchPlan plan;
  for (int i = 0; i < 2; ++i) {
    const auto tiling = tile(a.shape[i]);
    if (a.shape[i].rows == 0 || a.shape[i].dim == 0) continue;
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* xd = a.in[i].data;
    uint8_t* yd = a.out[i].data;
    uint8_t* cd = a.cos.data;
    uint8_t* sd = a.sin.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return launchKernel(blockDim, stream, xd, cd, sd, yd, kernelWorkspace, tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
  }
  return plan;
}

}  // namespace op_ext::aclnn

#endif  // OP_EXT_ACLNN_ACLNN_ROPE_COMMON_H_
