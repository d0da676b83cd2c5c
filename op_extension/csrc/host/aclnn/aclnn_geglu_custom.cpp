// aclnnGeGluCustom: out = gelu(gate, approximate) * up, approximate "none"
// (erf) or "tanh".
//
// Contract: gate, up and out have the same shape and dtype (float16, float32,
// bfloat16) and are contiguous.
#include "aclnn_geglu_custom.h"

#include "aclnn_common.h"
#include "geglu_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_geglu_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(geglu_custom, OP_EXT_GM_ADDR gate, OP_EXT_GM_ADDR up, OP_EXT_GM_ADDR out,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "GeGluCustom";

}  // namespace

extern "C" aclnnStatus aclnnGeGluCustomGetWorkspaceSize(const aclTensor* gate, const aclTensor* up,
                                                         char* approximate, const aclTensor* out,
                                                         uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc g = DescribeTensor(kOp, "gate", gate);
    const TensorDesc u = DescribeTensor(kOp, "up", up);
    const TensorDesc y = DescribeTensor(kOp, "out", out);
    const uint32_t dtype = KernelDType(kOp, "gate", g.dtype, soc);
    const uint32_t approx = GeluApproximate(kOp, approximate);
    CheckSameDType(kOp, "gate", g, "up", u);
    CheckSameDType(kOp, "gate", g, "out", y);
    CheckSameShape(kOp, "gate", g, "up", u);
    CheckSameShape(kOp, "gate", g, "out", y);
    CheckContiguous(kOp, "gate", g);
    CheckContiguous(kOp, "up", u);
    CheckContiguous(kOp, "out", y);
    LaunchPlan plan;
    if (g.Numel() == 0) return plan;
    const auto tiling = op_ext::ascend::ComputeGeGluTiling(g.Numel(), dtype, approx, soc);
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* gd = g.data;
    uint8_t* ud = u.data;
    uint8_t* yd = y.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(geglu_custom, blockDim, stream, gd, ud, yd, kernelWorkspace, tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnGeGluCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                        aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
