// aclnnLayerNormCustom: out = (input - mean) * rsqrt(var + eps) * weight + bias,
// mean and (biased) variance over the trailing normalizedShape dims.
//
// Contract: input, weightOptional, biasOptional (each of shape normalizedShape,
// or null) and out share the dtype (float16, float32, bfloat16) and are
// contiguous; out has input's shape.
#include "aclnn_layer_norm_custom.h"

#include "aclnn_common.h"
#include "kernel_launch.h"
#include "layer_norm_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_layer_norm_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(layer_norm_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR weight, OP_EXT_GM_ADDR bias,
                      OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "LayerNormCustom";

}  // namespace

extern "C" aclnnStatus aclnnLayerNormCustomGetWorkspaceSize(const aclTensor* input, const aclTensor* weightOptional,
                                                             const aclTensor* biasOptional,
                                                             const aclIntArray* normalizedShape, double eps,
                                                             const aclTensor* out, uint64_t* workspaceSize,
                                                             aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc x = DescribeTensor(kOp, "input", input);
    const TensorDesc y = DescribeTensor(kOp, "out", out);
    const std::vector<int64_t> shape = NormalizedShape(kOp, x, normalizedShape);
    const uint32_t dtype = KernelDType(kOp, "input", x.dtype, soc);
    const RowShape rs = NormRows(kOp, x, shape);
    uint8_t* wd = nullptr;
    uint8_t* bd = nullptr;
    if (weightOptional != nullptr) {
      const TensorDesc w = DescribeTensor(kOp, "weightOptional", weightOptional);
      CheckAffine(kOp, "weightOptional", w, x, shape);
      wd = w.data;
    }
    if (biasOptional != nullptr) {
      const TensorDesc b = DescribeTensor(kOp, "biasOptional", biasOptional);
      CheckAffine(kOp, "biasOptional", b, x, shape);
      bd = b.data;
    }
    CheckSameDType(kOp, "input", x, "out", y);
    CheckSameShape(kOp, "input", x, "out", y);
    CheckContiguous(kOp, "input", x);
    CheckContiguous(kOp, "out", y);
    LaunchPlan plan;
    // The tiling runs for empty inputs too: its SoC checks apply to every shape.
    const auto tiling = op_ext::ascend::ComputeLayerNormTiling(rs.rows, rs.cols, dtype, weightOptional != nullptr,
                                                               biasOptional != nullptr, eps, soc);
    if (rs.rows == 0 || rs.cols == 0) return plan;
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* xd = x.data;
    uint8_t* yd = y.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(layer_norm_custom, blockDim, stream, xd, wd, bd, yd, kernelWorkspace, tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnLayerNormCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
