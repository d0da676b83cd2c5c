// aclnnSoftmaxGradCustom: out = output * (gradOutput - sum(gradOutput * output))
// along dim, output being softmax(x, dim).
//
// Contract: gradOutput, output and out have the same shape and dtype (float16,
// float32, bfloat16) and are contiguous; they have at least one dim (the caller
// views 0-dim tensors as [1]); dim is in [-ndim, ndim). Any dim is handled in
// place, as by SoftmaxCustom: the kernel reads [outer, dimSize, inner]
// (softmax_grad_custom_tiling.h), so the caller transposes nothing.
#include "aclnn_softmax_grad_custom.h"

#include <string>

#include "aclnn_common.h"
#include "kernel_launch.h"
#include "softmax_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_softmax_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(softmax_grad_custom, OP_EXT_GM_ADDR dy, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR dx,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "SoftmaxGradCustom";

}  // namespace

extern "C" aclnnStatus aclnnSoftmaxGradCustomGetWorkspaceSize(const aclTensor* gradOutput, const aclTensor* output,
                                                               int64_t dim, const aclTensor* out,
                                                               uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc dy = DescribeTensor(kOp, "gradOutput", gradOutput);
    const TensorDesc y = DescribeTensor(kOp, "output", output);
    const TensorDesc dx = DescribeTensor(kOp, "out", out);
    const uint32_t dtype = KernelDType(kOp, "output", y.dtype, soc);
    const int64_t ndim = static_cast<int64_t>(y.shape.size());
    if (ndim == 0) Invalid(kOp, "output has no dims (view a 0-dim tensor as [1] first)");
    if (dim < -ndim || dim >= ndim) {
      Invalid(kOp, "dim " + std::to_string(dim) + " is out of range for output " + ShapeString(y.shape) +
                       " (expected [" + std::to_string(-ndim) + ", " + std::to_string(ndim - 1) + "])");
    }
    const size_t d = static_cast<size_t>(dim < 0 ? dim + ndim : dim);
    CheckSameDType(kOp, "output", y, "gradOutput", dy);
    CheckSameDType(kOp, "output", y, "out", dx);
    CheckSameShape(kOp, "output", y, "gradOutput", dy);
    CheckSameShape(kOp, "output", y, "out", dx);
    CheckContiguous(kOp, "gradOutput", dy);
    CheckContiguous(kOp, "output", y);
    CheckContiguous(kOp, "out", dx);
    uint64_t outer = 1;
    uint64_t inner = 1;
    for (size_t i = 0; i < d; ++i) outer *= uint64_t(y.shape[i]);
    for (size_t i = d + 1; i < y.shape.size(); ++i) inner *= uint64_t(y.shape[i]);
    const uint64_t dimSize = uint64_t(y.shape[d]);
    LaunchPlan plan;
    if (y.Numel() == 0) return plan;
    const auto tiling = op_ext::ascend::ComputeSoftmaxGradTiling(outer, dimSize, inner, dtype, soc);
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* dyd = dy.data;
    uint8_t* yd = y.data;
    uint8_t* dxd = dx.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(softmax_grad_custom, blockDim, stream, dyd, yd, dxd, kernelWorkspace,
                                  tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnSoftmaxGradCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                              aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
