// aclnnSwiGluGradCustom: gradGateOut = gradOutput * up * silu'(gate),
// gradUpOut = gradOutput * silu(gate).
//
// Contract: gradOutput, gate, up, gradGateOut and gradUpOut have the same shape
// and dtype (float16, float32, bfloat16) and are contiguous.
#include "aclnn_swiglu_grad_custom.h"

#include <utility>

#include "aclnn_common.h"
#include "kernel_launch.h"
#include "swiglu_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_swiglu_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(swiglu_grad_custom, OP_EXT_GM_ADDR dy, OP_EXT_GM_ADDR gate, OP_EXT_GM_ADDR up,
                      OP_EXT_GM_ADDR gradGate, OP_EXT_GM_ADDR gradUp, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "SwiGluGradCustom";

}  // namespace

extern "C" aclnnStatus aclnnSwiGluGradCustomGetWorkspaceSize(const aclTensor* gradOutput, const aclTensor* gate,
                                                             const aclTensor* up, const aclTensor* gradGateOut,
                                                             const aclTensor* gradUpOut, uint64_t* workspaceSize,
                                                             aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc dy = DescribeTensor(kOp, "gradOutput", gradOutput);
    const TensorDesc g = DescribeTensor(kOp, "gate", gate);
    const TensorDesc u = DescribeTensor(kOp, "up", up);
    const TensorDesc dg = DescribeTensor(kOp, "gradGateOut", gradGateOut);
    const TensorDesc du = DescribeTensor(kOp, "gradUpOut", gradUpOut);
    const uint32_t dtype = KernelDType(kOp, "gate", g.dtype, soc);
    for (const auto& [name, t] : {std::pair<const char*, const TensorDesc*>{"gradOutput", &dy}, {"up", &u},
                                  {"gradGateOut", &dg}, {"gradUpOut", &du}}) {
      CheckSameDType(kOp, "gate", g, name, *t);
      CheckSameShape(kOp, "gate", g, name, *t);
    }
    for (const auto& [name, t] : {std::pair<const char*, const TensorDesc*>{"gradOutput", &dy}, {"gate", &g},
                                  {"up", &u}, {"gradGateOut", &dg}, {"gradUpOut", &du}}) {
      CheckContiguous(kOp, name, *t);
    }
    LaunchPlan plan;
    if (g.Numel() == 0) return plan;
    const auto tiling = op_ext::ascend::ComputeSwiGluGradTiling(g.Numel(), dtype, soc);
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* dyd = dy.data;
    uint8_t* gd = g.data;
    uint8_t* ud = u.data;
    uint8_t* dgd = dg.data;
    uint8_t* dud = du.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(swiglu_grad_custom, blockDim, stream, dyd, gd, ud, dgd, dud, kernelWorkspace,
                                  tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnSwiGluGradCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                             aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
