// aclnnLayerNormGradCustom: gradInputOut and (with a weight) gradWeightOut and (with a
// bias) gradBiasOut of LayerNormCustom.
//
// Contract: gradOutput and input have the same shape; weightOptional / biasOptional
// (shape normalizedShape, or null) come with gradWeightOut / gradBiasOut (or null);
// every tensor shares the dtype (float16, float32, bfloat16) and is contiguous;
// gradInputOut has input's shape. Launches layer_norm_grad_custom once (rows), then,
// with a weight or a bias, again (columns: see layer_norm_grad_custom_tiling.h); the
// workspace carries the rows' statistics from the first launch to the second.
#include "aclnn_layer_norm_grad_custom.h"

#include "aclnn_common.h"
#include "kernel_launch.h"
#include "layer_norm_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_layer_norm_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(layer_norm_grad_custom, OP_EXT_GM_ADDR gradOutput, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR weight,
                      OP_EXT_GM_ADDR gradInput, OP_EXT_GM_ADDR gradWeight, OP_EXT_GM_ADDR gradBias,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "LayerNormGradCustom";

}  // namespace

extern "C" aclnnStatus aclnnLayerNormGradCustomGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* input, const aclTensor* weightOptional,
    const aclTensor* biasOptional, const aclIntArray* normalizedShape, double eps, const aclTensor* gradInputOut,
    const aclTensor* gradWeightOut, const aclTensor* gradBiasOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc dy = DescribeTensor(kOp, "gradOutput", gradOutput);
    const TensorDesc x = DescribeTensor(kOp, "input", input);
    const TensorDesc dx = DescribeTensor(kOp, "gradInputOut", gradInputOut);
    const std::vector<int64_t> shape = NormalizedShape(kOp, x, normalizedShape);
    const uint32_t dtype = KernelDType(kOp, "input", x.dtype, soc);
    const RowShape rs = NormRows(kOp, x, shape);
    if ((weightOptional == nullptr) != (gradWeightOut == nullptr)) {
      Invalid(kOp, "gradWeightOut must be given exactly when weightOptional is");
    }
    if ((biasOptional == nullptr) != (gradBiasOut == nullptr)) {
      Invalid(kOp, "gradBiasOut must be given exactly when biasOptional is");
    }
    uint8_t* wd = nullptr;
    uint8_t* dwd = nullptr;
    uint8_t* dbd = nullptr;
    if (weightOptional != nullptr) {
      const TensorDesc w = DescribeTensor(kOp, "weightOptional", weightOptional);
      const TensorDesc dw = DescribeTensor(kOp, "gradWeightOut", gradWeightOut);
      CheckAffine(kOp, "weightOptional", w, x, shape);
      CheckAffine(kOp, "gradWeightOut", dw, x, shape);
      wd = w.data;
      dwd = dw.data;
    }
    if (biasOptional != nullptr) {
      const TensorDesc b = DescribeTensor(kOp, "biasOptional", biasOptional);
      const TensorDesc db = DescribeTensor(kOp, "gradBiasOut", gradBiasOut);
      CheckAffine(kOp, "biasOptional", b, x, shape);
      CheckAffine(kOp, "gradBiasOut", db, x, shape);
      dbd = db.data;
    }
    CheckSameDType(kOp, "input", x, "gradOutput", dy);
    CheckSameDType(kOp, "input", x, "gradInputOut", dx);
    CheckSameShape(kOp, "input", x, "gradOutput", dy);
    CheckSameShape(kOp, "input", x, "gradInputOut", dx);
    CheckContiguous(kOp, "gradOutput", dy);
    CheckContiguous(kOp, "input", x);
    CheckContiguous(kOp, "gradInputOut", dx);
    LaunchPlan plan;
    if (rs.cols == 0) return plan;  // every output is empty
    const auto tiling = op_ext::ascend::ComputeLayerNormGradTiling(rs.rows, rs.cols, dtype, wd != nullptr,
                                                                   dbd != nullptr, eps, soc);
    plan.kernelWorkspaceBytes = op_ext::ascend::LayerNormGradWorkspaceBytes(tiling);
    uint8_t* dyd = dy.data;
    uint8_t* xd = x.data;
    uint8_t* dxd = dx.data;
    auto add = [&](const optiling::LayerNormGradCustomTilingData& t, uint32_t blockDim) {
      KernelLaunch launch;
      launch.tiling.resize(t.GetDataSize());
      t.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
      launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
        return OP_EXT_LAUNCH_KERNEL(layer_norm_grad_custom, blockDim, stream, dyd, xd, wd, dxd, dwd, dbd,
                                    kernelWorkspace, tilingDevice);
      };
      plan.launches.push_back(std::move(launch));
    };
    if (tiling.usedCoreNum > 0) add(tiling, tiling.usedCoreNum);
    if (wd != nullptr || dbd != nullptr) {
      auto columns = tiling;
      columns.set_pass(1);
      add(columns, tiling.dwUsedCoreNum);
    }
    return plan;
  });
}

extern "C" aclnnStatus aclnnLayerNormGradCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                                aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
