// PlanSoftmaxGradCustom: out = output * (gradOutput - sum(gradOutput * output))
// along dim, output being softmax(x, dim).
//
// The generated entry has checked one dtype, contiguity and out's shape.
// Beyond the prototype: gradOutput has output's shape; they have at least one
// dim (the caller views 0-dim tensors as [1]); dim is in [-ndim, ndim). Any dim
// is handled in place, as by SoftmaxCustom: the kernel reads [outer, dimSize,
// inner] (softmax_grad_custom_tiling.h), so the caller transposes nothing.
#include "aclnn_softmax_grad_custom_args.h"

#include "kernel_launch.h"
#include "softmax_grad_custom_tiling.h"

#ifndef OP_EXT_ASCEND_SIM
#include "aclrtlaunch_softmax_grad_custom.h"
#endif

OP_EXT_DECLARE_KERNEL(softmax_grad_custom, OP_EXT_GM_ADDR dy, OP_EXT_GM_ADDR y, OP_EXT_GM_ADDR dx,
                      OP_EXT_GM_ADDR workspace, OP_EXT_GM_ADDR tiling);

namespace op_ext::aclnn {

LaunchPlan PlanSoftmaxGradCustom(const SoftmaxGradCustomArgs& args) {
  const SoftmaxDims dims = SoftmaxDimsOf(args.kOp, "output", args.output, args.dim);
  CheckSameShape(args.kOp, "output", args.output, "gradOutput", args.gradOutput);
  LaunchPlan plan;
  if (args.output.Numel() == 0) return plan;
  const auto tiling = ascend::ComputeSoftmaxGradTiling(dims.outer, dims.dimSize, dims.inner, args.dtype, args.soc);
  uint8_t* dyd = args.gradOutput.data;
  uint8_t* yd = args.output.data;
  uint8_t* dxd = args.out.data;
  AddLaunch(plan, tiling, tiling.usedCoreNum, [=](uint32_t blockDim, aclrtStream stream, uint8_t* ws, uint8_t* td) {
    return OP_EXT_LAUNCH_KERNEL(softmax_grad_custom, blockDim, stream, dyd, yd, dxd, ws, td);
  });
  return plan;
}

}  // namespace op_ext::aclnn
