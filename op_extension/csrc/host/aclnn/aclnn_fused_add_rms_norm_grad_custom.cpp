// aclnnFusedAddRmsNormGradCustom: gradInputOut and (with a weight) gradWeightOut of
// FusedAddRmsNormCustom, whose output is rms_norm(residualOut) and whose residualOut
// = input + residual:
//   gradInputOut  = RMSNorm's input gradient at residualOut (+ gradResidualOutOptional)
//   gradWeightOut = RMSNorm's weight gradient at residualOut
// (the same value is the gradient of both input and residual).
//
// Contract: gradOutput, residualOut and gradResidualOutOptional (or null) have one
// shape; weightOptional (shape normalizedShape) and gradWeightOut are both given or
// both null; every tensor shares the dtype (float16, float32, bfloat16) and is
// contiguous. eps is a number (the caller resolves eps=None).
//
// Runs RmsNormGradCustom's kernel, rms_norm_grad_custom, with hasGradResidual in
// its TilingData (rms_norm_grad_custom_tiling.h): the arithmetic is RMSNorm's
// backward plus one Add before gradInput's rounding, so a kernel of its own would
// duplicate the overflow rescue and the deterministic gradWeight pass.
#include "aclnn_fused_add_rms_norm_grad_custom.h"

#include "aclnn_common.h"
#include "kernel_launch.h"
#include "rms_norm_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_rms_norm_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(rms_norm_grad_custom, OP_EXT_GM_ADDR gradOutput, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR weight,
                      OP_EXT_GM_ADDR gradResidual, OP_EXT_GM_ADDR gradInput, OP_EXT_GM_ADDR gradWeight,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "FusedAddRmsNormGradCustom";

}  // namespace

extern "C" aclnnStatus aclnnFusedAddRmsNormGradCustomGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* gradResidualOutOptional, const aclTensor* residualOut,
    const aclTensor* weightOptional, const aclIntArray* normalizedShape, double eps, const aclTensor* gradInputOut,
    const aclTensor* gradWeightOut, uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc dy = DescribeTensor(kOp, "gradOutput", gradOutput);
    const TensorDesc z = DescribeTensor(kOp, "residualOut", residualOut);
    const TensorDesc dx = DescribeTensor(kOp, "gradInputOut", gradInputOut);
    const std::vector<int64_t> shape = NormalizedShape(kOp, z, normalizedShape);
    const uint32_t dtype = KernelDType(kOp, "residualOut", z.dtype, soc);
    const RowShape rs = NormRows(kOp, z, shape);
    if ((weightOptional == nullptr) != (gradWeightOut == nullptr)) {
      Invalid(kOp, "gradWeightOut must be given exactly when weightOptional is");
    }
    uint8_t* wd = nullptr;
    uint8_t* dwd = nullptr;
    if (weightOptional != nullptr) {
      const TensorDesc w = DescribeTensor(kOp, "weightOptional", weightOptional);
      const TensorDesc dw = DescribeTensor(kOp, "gradWeightOut", gradWeightOut);
      CheckAffine(kOp, "weightOptional", w, z, shape);
      CheckAffine(kOp, "gradWeightOut", dw, z, shape);
      wd = w.data;
      dwd = dw.data;
    }
    uint8_t* grd = nullptr;
    if (gradResidualOutOptional != nullptr) {
      const TensorDesc gr = DescribeTensor(kOp, "gradResidualOutOptional", gradResidualOutOptional);
      CheckSameDType(kOp, "residualOut", z, "gradResidualOutOptional", gr);
      CheckSameShape(kOp, "residualOut", z, "gradResidualOutOptional", gr);
      CheckContiguous(kOp, "gradResidualOutOptional", gr);
      grd = gr.data;
    }
    CheckSameDType(kOp, "residualOut", z, "gradOutput", dy);
    CheckSameDType(kOp, "residualOut", z, "gradInputOut", dx);
    CheckSameShape(kOp, "residualOut", z, "gradOutput", dy);
    CheckSameShape(kOp, "residualOut", z, "gradInputOut", dx);
    CheckContiguous(kOp, "gradOutput", dy);
    CheckContiguous(kOp, "residualOut", z);
    CheckContiguous(kOp, "gradInputOut", dx);
    LaunchPlan plan;
    if (rs.cols == 0) return plan;  // every output is empty
    const auto tiling = op_ext::ascend::ComputeFusedAddRmsNormGradTiling(
        rs.rows, rs.cols, dtype, weightOptional != nullptr, grd != nullptr, eps, soc);
    plan.kernelWorkspaceBytes = op_ext::ascend::RmsNormGradWorkspaceBytes(tiling);
    uint8_t* dyd = dy.data;
    uint8_t* zd = z.data;
    uint8_t* dxd = dx.data;
    auto add = [&](const optiling::RmsNormGradCustomTilingData& t, uint32_t blockDim) {
      KernelLaunch launch;
      launch.tiling.resize(t.GetDataSize());
      t.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
      launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
        return OP_EXT_LAUNCH_KERNEL(rms_norm_grad_custom, blockDim, stream, dyd, zd, wd, grd, dxd, dwd,
                                    kernelWorkspace, tilingDevice);
      };
      plan.launches.push_back(std::move(launch));
    };
    if (tiling.usedCoreNum > 0) add(tiling, tiling.usedCoreNum);
    if (weightOptional != nullptr) {
      auto columns = tiling;
      columns.set_pass(1);
      add(columns, tiling.dwUsedCoreNum);
    }
    return plan;
  });
}

extern "C" aclnnStatus aclnnFusedAddRmsNormGradCustom(void* workspace, uint64_t workspaceSize,
                                                      aclOpExecutor* executor, aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
