// aclnnAddCustom: out = input + alpha * other.
//
// Contract (what the caller provides): input, other and out have the same
// shape and dtype (float16, float32, bfloat16) and are contiguous. Broadcasting
// is the caller's job (materialise `other` expanded to the output shape), so the
// kernel reads three dense runs of memory.
#include "aclnn_add_custom.h"

#include "aclnn_common.h"
#include "kernel_launch.h"
#include "add_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_add_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(add_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR z, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "AddCustom";

}  // namespace

extern "C" aclnnStatus aclnnAddCustomGetWorkspaceSize(const aclTensor* input, const aclTensor* other, double alpha,
                                                       const aclTensor* out, uint64_t* workspaceSize,
                                                       aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc x = DescribeTensor(kOp, "input", input);
    const TensorDesc y = DescribeTensor(kOp, "other", other);
    const TensorDesc z = DescribeTensor(kOp, "out", out);
    const uint32_t dtype = KernelDType(kOp, "input", x.dtype, soc);
    CheckSameDType(kOp, "input", x, "other", y);
    CheckSameDType(kOp, "input", x, "out", z);
    CheckSameShape(kOp, "input", x, "other", y);
    CheckSameShape(kOp, "input", x, "out", z);
    CheckContiguous(kOp, "input", x);
    CheckContiguous(kOp, "other", y);
    CheckContiguous(kOp, "out", z);
    LaunchPlan plan;
    if (x.Numel() == 0) return plan;
    const auto tiling = op_ext::ascend::ComputeAddTiling(x.Numel(), dtype, alpha, soc);
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* xd = x.data;
    uint8_t* yd = y.data;
    uint8_t* zd = z.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(add_custom, blockDim, stream, xd, yd, zd, kernelWorkspace, tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnAddCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                      aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
