// aclnnAddGradCustom: out = alpha * gradOutput summed down to inputSize (the
// gradient of one operand of a broadcasting add, scaled by its alpha).
//
// Contract: inputSize broadcasts to gradOutput's shape (right-aligned, each dim
// equal or 1); out has shape inputSize; gradOutput and out share the dtype
// (float16, float32, bfloat16) and are contiguous.
#include "aclnn_add_grad_custom.h"

#include "aclnn_common.h"
#include "add_grad_custom_tiling.h"
#include "kernel_launch.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_add_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(add_grad_custom, OP_EXT_GM_ADDR gradOutput, OP_EXT_GM_ADDR out, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "AddGradCustom";

}  // namespace

extern "C" aclnnStatus aclnnAddGradCustomGetWorkspaceSize(const aclTensor* gradOutput, const aclIntArray* inputSize,
                                                           double alpha, const aclTensor* out,
                                                           uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc g = DescribeTensor(kOp, "gradOutput", gradOutput);
    const TensorDesc o = DescribeTensor(kOp, "out", out);
    const std::vector<int64_t> size = InputSizeFromOut(kOp, inputSize, o);
    const uint32_t dtype = KernelDType(kOp, "gradOutput", g.dtype, soc);
    if (size.size() > g.shape.size()) {
      Invalid(kOp, "inputSize " + ShapeString(size) + " has more dims than gradOutput " + ShapeString(g.shape));
    }
    const size_t lead = g.shape.size() - size.size();
    for (size_t i = 0; i < size.size(); ++i) {
      if (size[i] != g.shape[lead + i] && size[i] != 1) {
        Invalid(kOp, "inputSize " + ShapeString(size) + " does not broadcast to gradOutput " + ShapeString(g.shape));
      }
    }
    if (o.shape != size) Invalid(kOp, "out has shape " + ShapeString(o.shape) + " but inputSize is " + ShapeString(size));
    CheckSameDType(kOp, "gradOutput", g, "out", o);
    CheckContiguous(kOp, "gradOutput", g);
    CheckContiguous(kOp, "out", o);
    LaunchPlan plan;
    if (o.Numel() == 0) return plan;
    const auto tiling = op_ext::ascend::ComputeAddGradTiling(g.shape, size, dtype, alpha, soc);
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* gd = g.data;
    uint8_t* od = o.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(add_grad_custom, blockDim, stream, gd, od, kernelWorkspace, tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnAddGradCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                          aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
