// aclnnSoftmaxCustom: out = softmax(input) along dim.
//
// Contract: input and out have the same shape and dtype (float16, float32,
// bfloat16) and are contiguous; input has at least one dim (the caller views a
// 0-dim tensor as [1]); dim is in [-ndim, ndim). Any dim is handled in place --
// the kernel reads input as [outer, dimSize, inner] (softmax_custom_tiling.h),
// so the caller transposes nothing.
#include "aclnn_softmax_custom.h"

#include <string>

#include "aclnn_common.h"
#include "kernel_launch.h"
#include "softmax_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_softmax_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(softmax_custom, OP_EXT_GM_ADDR x, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR workspace,
                      OP_EXT_GM_ADDR tiling);

namespace {

constexpr const char* kOp = "SoftmaxCustom";

}  // namespace

extern "C" aclnnStatus aclnnSoftmaxCustomGetWorkspaceSize(const aclTensor* input, int64_t dim, const aclTensor* out,
                                                           uint64_t* workspaceSize, aclOpExecutor** executor) {
  using namespace op_ext::aclnn;
  return PrepareLaunch(kOp, workspaceSize, executor, [&]() {
    const auto soc = op_ext::ascend::CurrentSocSpec();
    const TensorDesc x = DescribeTensor(kOp, "input", input);
    const TensorDesc y = DescribeTensor(kOp, "out", out);
    const uint32_t dtype = KernelDType(kOp, "input", x.dtype, soc);
    const int64_t ndim = static_cast<int64_t>(x.shape.size());
    if (ndim == 0) Invalid(kOp, "input has no dims (view a 0-dim tensor as [1] first)");
    if (dim < -ndim || dim >= ndim) {
      Invalid(kOp, "dim " + std::to_string(dim) + " is out of range for input " + ShapeString(x.shape) +
                       " (expected [" + std::to_string(-ndim) + ", " + std::to_string(ndim - 1) + "])");
    }
    const size_t d = static_cast<size_t>(dim < 0 ? dim + ndim : dim);
    CheckSameDType(kOp, "input", x, "out", y);
    CheckSameShape(kOp, "input", x, "out", y);
    CheckContiguous(kOp, "input", x);
    CheckContiguous(kOp, "out", y);
    uint64_t outer = 1;
    uint64_t inner = 1;
    for (size_t i = 0; i < d; ++i) outer *= uint64_t(x.shape[i]);
    for (size_t i = d + 1; i < x.shape.size(); ++i) inner *= uint64_t(x.shape[i]);
    const uint64_t dimSize = uint64_t(x.shape[d]);
    LaunchPlan plan;
    if (x.Numel() == 0) return plan;
    const auto tiling = op_ext::ascend::ComputeSoftmaxTiling(outer, dimSize, inner, dtype, soc);
    KernelLaunch launch;
    launch.tiling.resize(tiling.GetDataSize());
    tiling.SaveToBuffer(launch.tiling.data(), launch.tiling.size());
    uint8_t* xd = x.data;
    uint8_t* yd = y.data;
    const uint32_t blockDim = tiling.usedCoreNum;
    launch.launch = [=](uint8_t* tilingDevice, uint8_t* kernelWorkspace, aclrtStream stream) {
      return OP_EXT_LAUNCH_KERNEL(softmax_custom, blockDim, stream, xd, yd, kernelWorkspace, tilingDevice);
    };
    plan.launches.push_back(std::move(launch));
    return plan;
  });
}

extern "C" aclnnStatus aclnnSoftmaxCustom(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                          aclrtStream stream) {
  return op_ext::aclnn::RunLaunch(kOp, workspace, workspaceSize, executor, stream);
}
