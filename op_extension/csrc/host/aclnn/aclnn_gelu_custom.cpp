// aclnnGeluCustom: out = gelu(input), approximate "none" (erf) or "tanh".
//
// Contract: input and out have the same shape and dtype (float16, float32,
// bfloat16) and are contiguous.
#include "aclnn_gelu_custom.h"

#include "aclnn_common.h"
#include "gelu_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_gelu_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(gelu_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "GeluCustom";

}  // namespace

extern "C" aclnnStatus aclnnGeluCustomGetWorkspaceSize(const aclTensor* input, char* approximate, const aclTensor* out,
                                                        uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc x = DescribeTensor(kOp, "input", input);
    const TensorDesc y = DescribeTensor(kOp, "out", out);
    const uint32_t dtype = KernelDType(kOp, "input", x.dtype, soc);
    const uint32_t approx = GeluApproximate(kOp, approximate);
    CheckSameDType(kOp, "input", x, "out", y);
    CheckSameShape(kOp, "input", x, "out", y);
    CheckContiguous(kOp, "input", x);
    CheckContiguous(kOp, "out", y);
    LaunchPlan plan;
    if (x.Numel() == 0) return plan;
    const auto tiling = op_ext::ascend::ComputeGeluTiling(x.Numel(), dtype, approx, soc);
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* xd = x.data;
    uint8_t* yd = y.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(gelu_custom, blockDim, stream, xd, yd, kernelWorkspace, tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnGeluCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                       aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
