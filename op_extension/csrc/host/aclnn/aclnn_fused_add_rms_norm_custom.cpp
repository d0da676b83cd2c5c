// aclnnFusedAddRmsNormCustom: residualOutOut = input + residual;
// outputOut = rms_norm(residualOutOut) over the trailing normalizedShape dims.
//
// Contract: input, residual, weightOptional (shape normalizedShape, or null),
// outputOut and residualOutOut share the dtype (float16, float32, bfloat16) and
// are contiguous; input, residual and both outputs have one shape. eps is a
// number: the caller resolves eps=None (float32's machine epsilon, as rms_norm).
#include "aclnn_fused_add_rms_norm_custom.h"

#include "aclnn_common.h"
#include "fused_add_rms_norm_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_fused_add_rms_norm_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(fused_add_rms_norm_custom, OP_EXT_GM_ADDR input, OP_EXT_GM_ADDR residual,
                      OP_EXT_GM_ADDR weight, OP_EXT_GM_ADDR output, OP_EXT_GM_ADDR residualOut,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "FusedAddRmsNormCustom";

}  // namespace

extern "C" aclnnStatus aclnnFusedAddRmsNormCustomGetWorkspaceSize(
    const aclTensor* input, const aclTensor* residual, const aclTensor* weightOptional,
    const aclIntArray* normalizedShape, double eps, const aclTensor* outputOut, const aclTensor* residualOutOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc x = DescribeTensor(kOp, "input", input);
    const TensorDesc r = DescribeTensor(kOp, "residual", residual);
    const TensorDesc y = DescribeTensor(kOp, "outputOut", outputOut);
    const TensorDesc z = DescribeTensor(kOp, "residualOutOut", residualOutOut);
    const std::vector<int64_t> shape = NormalizedShape(kOp, x, normalizedShape);
    const uint32_t dtype = KernelDType(kOp, "input", x.dtype, soc);
    CheckSameDType(kOp, "input", x, "residual", r);
    CheckSameShape(kOp, "input", x, "residual", r);
    const RowShape rs = NormRows(kOp, x, shape);
    uint8_t* wd = nullptr;
    if (weightOptional != nullptr) {
      const TensorDesc w = DescribeTensor(kOp, "weightOptional", weightOptional);
      CheckAffine(kOp, "weightOptional", w, x, shape);
      wd = w.data;
    }
    CheckSameDType(kOp, "input", x, "outputOut", y);
    CheckSameDType(kOp, "input", x, "residualOutOut", z);
    CheckSameShape(kOp, "input", x, "outputOut", y);
    CheckSameShape(kOp, "input", x, "residualOutOut", z);
    CheckContiguous(kOp, "input", x);
    CheckContiguous(kOp, "residual", r);
    CheckContiguous(kOp, "outputOut", y);
    CheckContiguous(kOp, "residualOutOut", z);
    LaunchPlan plan;
    // The tiling runs for empty inputs too: its SoC checks apply to every shape.
    const auto tiling =
        op_ext::ascend::ComputeFusedAddRmsNormTiling(rs.rows, rs.cols, dtype, weightOptional != nullptr, eps, soc);
    if (rs.rows == 0 || rs.cols == 0) return plan;
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* xd = x.data;
    uint8_t* rd = r.data;
    uint8_t* yd = y.data;
    uint8_t* zd = z.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(fused_add_rms_norm_custom, blockDim, stream, xd, rd, wd, yd, zd, kernelWorkspace,
                                  tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnFusedAddRmsNormCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                                  aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
